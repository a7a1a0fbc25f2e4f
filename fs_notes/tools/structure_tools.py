"""notes_tags and notes_links: the tools over the tags and links the index keeps (issue 14).

What a tag and a link are is in fs_notes/notes/tags.py and links.py, how a link resolves in
link_resolution.py; how the index is kept current and every result re-checked through the filesystem
layer, in indexed.py. These tools only ask it and render the answer (every id and tag shown goes
through `fs_notes.render`).
"""

from __future__ import annotations

from typing import Any

from ..notes.tags import MAX_TAG_CHARS, valid_tag
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import isolated, shown, shown_id
from ..search.index import stem_of
from .context import NotesEnv, ToolFailure, guarded
from .indexed import current
from .link_resolution import MAX_CANDIDATES, MAX_LISTED, Resolver
from .registry import NOTE_ID, WORKSPACE_URI, ToolSpec

MAX_TAGS_LISTED = 500


class NotesTags:
    """notes_tags: the workspace's tags with their notes, or the notes of one tag."""

    def __init__(self, env: NotesEnv) -> None:
        self.env = env

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_tags",
            title="Tags",
            description="The tags of the workspace's notes (front-matter tags and inline #tags) "
            "with how many notes carry each; given a tag, the notes that carry it (a parent tag "
            "includes its nested ones: #project finds #project/alpha).",
            properties={
                "workspaceUri": WORKSPACE_URI,
                "tag": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TAG_CHARS + 1,
                    "description": "Only the notes with this tag (with or without the #)",
                },
            },
            required=(),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        ws = env.open(call, args.get("workspaceUri"), "read")
        wanted = args.get("tag")
        if wanted is not None and valid_tag(wanted) is None:
            raise ToolFailure("not a tag: letters, digits, _, - and / (and not only digits)")
        indexed = current(env, ws)
        index = indexed.index
        checked: set[str] = set()
        refused: set[str] = set()
        with indexed.answering():
            if wanted is not None:
                tag = str(wanted).lstrip("#").strip("/")
                notes = [{"id": note_id, "title": title}
                         for note_id, key, title in index.tagged(tag, MAX_TAGS_LISTED)
                         if indexed.recheck(note_id, key)]  # fmt: skip
                lines = [f"- {isolated(shown_id(n['id']))}: {isolated(shown(n['title']))}"
                         for n in notes] or ["(no notes with that tag)"]  # fmt: skip
                structured: dict[str, Any] = {"tag": tag, "notes": notes}
            else:
                counts: dict[str, list[Any]] = {}  # folded -> [as first met, notes]
                for note_id, key, folded, shown_as in index.tag_rows():
                    if note_id in checked or (
                        note_id not in refused and indexed.recheck(note_id, key)
                    ):
                        checked.add(note_id)
                        counts.setdefault(folded, [shown_as, 0])[1] += 1
                    else:
                        refused.add(note_id)
                top = sorted(counts.items(), key=lambda kv: (-kv[1][1], kv[0]))[:MAX_TAGS_LISTED]
                tags_out: list[dict[str, Any]] = [{"tag": t, "count": n} for _, (t, n) in top]
                lines = [
                    f"- #{isolated(shown(str(t['tag'])))} ({t['count']})" for t in tags_out
                ] or ["(no tags)"]
                structured = {"tags": tags_out}
        return CallToolResult(
            content=[TextContent(text="\n".join(lines))], structured_content=structured
        ).wire()


class NotesLinks:
    """notes_links: a note's outgoing links, resolved, and its backlinks."""

    def __init__(self, env: NotesEnv) -> None:
        self.env = env

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_links",
            title="Links and backlinks",
            description="A note's outgoing links (wikilinks, embeds and markdown links to notes), "
            "each resolved to a note id or left unresolved, and its backlinks: the notes that "
            "link to it.",
            properties={"workspaceUri": WORKSPACE_URI, "id": NOTE_ID},
            required=("id",),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        ws = env.open(call, args.get("workspaceUri"), "read")
        note_id = env.note_id(args["id"])
        indexed = current(env, ws)
        index = indexed.index
        with indexed.answering():
            key = index.key_of(note_id)
            if key is None or not indexed.recheck(note_id, key):
                raise ToolFailure(f"note not found: {shown_id(note_id, 300)}")
            resolver = Resolver(index)
            outgoing: list[dict[str, Any]] = [
                {"target": link.target, "heading": link.heading, "embed": link.embed,
                 "id": indexed.resolved(resolver.resolve(note_id, link.target))}
                for link in index.links_from(note_id)[:MAX_LISTED]
            ]  # fmt: skip
            backlinks: list[str] = []
            candidates = index.links_named(stem_of(note_id), MAX_CANDIDATES)
            for source, source_key, target in candidates:
                if source == note_id or (backlinks and backlinks[-1] == source):
                    continue
                if resolver.resolve(source, target) == note_id and indexed.recheck(
                    source, source_key
                ):
                    backlinks.append(source)
                    if len(backlinks) >= MAX_LISTED:
                        break
        lines = [f"links from {isolated(shown_id(note_id))}:"]
        lines += [
            f"- {isolated(shown(str(o['target'])))} -> "
            + (isolated(shown_id(str(o["id"]))) if o["id"] else "(no such note)")
            for o in outgoing
        ] or ["- (none)"]
        lines.append("backlinks:")
        lines += [f"- {isolated(shown_id(b))}" for b in backlinks] or ["- (none)"]
        return CallToolResult(
            content=[TextContent(text="\n".join(lines))],
            structured_content={"id": note_id, "links": outgoing, "backlinks": backlinks},
        ).wire()
