"""Tags, as the vault tools have them: `tags:` in front matter and inline `#tags` (issue 14).

A note's tags are the front-matter `tags` (or `tag`) key, a YAML list or a string of names
separated by commas or spaces, with any leading `#` dropped, and every inline `#tag` in the body
outside code (fenced blocks, indented blocks and `inline code`) and not part of a word, a URL
fragment or a heading marker. A tag is letters, digits, `_`, `-` and `/` (nesting: `#a/b`), with at
least one character that is not a digit (`#2024` is not a tag). Tags compare case-insensitively
and are shown as first met.

`notes_tags` lists them with counts, or, given a tag, the notes that carry it (a nested tag's
parent counts its children: `#project` finds `#project/alpha`). Tags are kept in the workspace's
index (fs_notes/search/index.py), brought up to date from the same listing and the same
filesystem layer as `notes_list` and `notes_read` first (tools/indexed.py); each note listed for a
tag is re-checked through the filesystem layer.

Guarantees: work is bounded (at most `MAX_TAGS_PER_NOTE` per note, `MAX_TAG_CHARS` each; the front
matter is composed, never constructed). Does not: read tags from notes over their workspace's
read limit.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import isolated, shown, shown_id
from .context import NotesEnv, ToolFailure, guarded
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
    if "#" not in body:
        return out
    fence: str | None = None
    fences = "```" in body or "~~~" in body
    for line in body.splitlines():
        if fences and ("`" in line or "~" in line):
            marker = line.lstrip()[:3]
            if marker in ("```", "~~~"):
                fence = None if fence == marker else (fence or marker)
                continue
        if fence is not None or "#" not in line or line.startswith(("    ", "\t")):
            continue
        if "`" in line:
            line = _INLINE_CODE.sub(" ", line)
        for m in _TAG.finditer(line):
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


def build(env: NotesEnv) -> list[ToolSpec]:
    from .indexed import current

    @guarded
    def notes_tags(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        ws = env.open(call, args["workspaceUri"], "read")
        wanted = args.get("tag")
        if wanted is not None and _valid(wanted) is None:
            raise ToolFailure("not a tag: letters, digits, _, - and / (and not only digits)")
        indexed = current(env, ws)
        index = indexed.index
        checked: set[str] = set()
        refused: set[str] = set()
        with indexed.answering():
            if wanted is not None:
                tag = str(wanted).lstrip("#").strip("/")
                notes = [{"id": note_id, "title": title}
                         for note_id, key, title in index.tagged(tag, MAX_LISTED)
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
                top = sorted(counts.items(), key=lambda kv: (-kv[1][1], kv[0]))[:MAX_LISTED]
                tags_out: list[dict[str, Any]] = [{"tag": t, "count": n} for _, (t, n) in top]
                lines = [
                    f"- #{isolated(shown(str(t['tag'])))} ({t['count']})" for t in tags_out
                ] or ["(no tags)"]
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
