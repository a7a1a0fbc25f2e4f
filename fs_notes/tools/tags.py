"""Tags, as the vault tools have them: `tags:` in front matter and inline `#tags` (issue 14).

A note's tags are the front-matter `tags` (or `tag`) key, a YAML list or a string of names
separated by commas or spaces, with any leading `#` dropped, and every inline `#tag` in the body
outside code (fenced blocks, indented blocks and `inline code`) and not part of a word, a URL
fragment or a heading marker. A tag is letters, digits, `_`, `-` and `/` (nesting: `#a/b`), with at
least one character that is not a digit (`#2024` is not a tag). Tags compare case-insensitively
and are shown as first met.

`notes_tags` lists them with counts, or, given a tag, the notes that carry it (a nested tag's
parent counts its children: `#project` finds `#project/alpha`). Everything is read through the
same listing and the same filesystem layer as `notes_list` and `notes_read`.

Guarantees: work is bounded (at most `MAX_TAGS_PER_NOTE` per note, `MAX_TAG_CHARS` each; the front
matter is composed, never constructed). Does not: index tags for ranking (search does not yet
use them), or read tags from notes over their workspace's read limit.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import yaml

from ..fs import FsError
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import isolated, shown, shown_id
from .context import NotesEnv, ToolFailure, fs_message, guarded
from .registry import WORKSPACE_URI, ToolSpec
from .titles import front_matter_block, front_matter_node

MAX_TAGS_PER_NOTE = 200
MAX_TAG_CHARS = 128
MAX_LISTED = 500
_TAG = re.compile(r"(?<![\w&/#\\])#([\w/-]{1,128})", re.UNICODE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_SEPARATORS = re.compile(r"[,\s]+")


def _valid(tag: str) -> str | None:
    tag = tag.strip().lstrip("#").strip("/")
    if not tag or len(tag) > MAX_TAG_CHARS or tag.isdigit():
        return None
    if not re.fullmatch(r"[\w/-]+", tag) or all(c.isdigit() or c in "/-_" for c in tag):
        return None
    return tag


def _front_matter_tags(text: str) -> list[str]:
    node = front_matter_node(text)
    if node is None:
        return []
    out: list[str] = []
    for key, value in node.value:
        if not (isinstance(key, yaml.ScalarNode) and key.value in ("tags", "tag")):
            continue
        if isinstance(value, yaml.SequenceNode):
            names = [v.value for v in value.value if isinstance(v, yaml.ScalarNode)]
        elif isinstance(value, yaml.ScalarNode):
            names = _SEPARATORS.split(value.value)
        else:
            names = []
        out += [t for t in (_valid(str(n)) for n in names) if t is not None]
    return out


def _inline_tags(body: str) -> list[str]:
    out: list[str] = []
    fence: str | None = None
    for line in body.splitlines():
        stripped = line.lstrip()
        marker = stripped[:3]
        if marker in ("```", "~~~"):
            fence = None if fence == marker else (fence or marker)
            continue
        if fence is not None or line.startswith(("    ", "\t")):
            continue
        for m in _TAG.finditer(_INLINE_CODE.sub(" ", line)):
            tag = _valid(m.group(1))
            if tag is not None:
                out.append(tag)
    return out


def tags_of(text: str) -> list[str]:
    """The note's tags, each once (case-insensitively), front matter first."""
    _, body = front_matter_block(text)
    seen: dict[str, str] = {}
    for tag in _front_matter_tags(text) + _inline_tags(body):
        seen.setdefault(tag.casefold(), tag)
        if len(seen) >= MAX_TAGS_PER_NOTE:
            break
    return list(seen.values())


def _carries(tags: list[str], wanted: str) -> bool:
    want = wanted.casefold()
    return any(t.casefold() == want or t.casefold().startswith(want + "/") for t in tags)


def build(env: NotesEnv) -> list[ToolSpec]:
    from .read_tools import load_note

    @guarded
    def notes_tags(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        ws = env.open(call, args["workspaceUri"], "read")
        wanted = args.get("tag")
        if wanted is not None and _valid(wanted) is None:
            raise ToolFailure("not a tag: letters, digits, _, - and / (and not only digits)")
        counts: Counter[str] = Counter()
        shown_as: dict[str, str] = {}
        notes: list[dict[str, str]] = []
        try:
            for note_id, st in env.notes(ws):
                try:
                    note = load_note(env, ws, note_id, st)
                except FsError:
                    continue
                if note.text is None:
                    continue  # over the read limit: its tags are not read
                tags = tags_of(note.text)
                if wanted is not None:
                    if _carries(tags, str(wanted).lstrip("#")) and len(notes) < MAX_LISTED:
                        notes.append({"id": note_id, "title": note.title})
                    continue
                for tag in tags:
                    counts[tag.casefold()] += 1
                    shown_as.setdefault(tag.casefold(), tag)
        except FsError as exc:
            raise ToolFailure(fs_message(exc, "(workspace root)")) from None
        if wanted is not None:
            lines = [f"- {isolated(shown_id(n['id']))}: {isolated(shown(n['title']))}"
                     for n in notes] or ["(no notes with that tag)"]  # fmt: skip
            structured: dict[str, Any] = {"tag": str(wanted).lstrip("#"), "notes": notes}
        else:
            top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_LISTED]
            tags_out: list[dict[str, Any]] = [{"tag": shown_as[k], "count": n} for k, n in top]
            lines = [f"- #{isolated(shown(str(t['tag'])))} ({t['count']})" for t in tags_out] or [
                "(no tags)"
            ]
            structured = {"tags": tags_out}
        return CallToolResult(
            content=[TextContent(text="\n".join(lines))], structured_content=structured
        ).wire()

    return [
        ToolSpec(
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
            required=("workspaceUri",),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=notes_tags,
        )
    ]
