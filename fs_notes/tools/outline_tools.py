"""notes_outline, and notes_read's `section`: a note read by its structure (issue 31 item 1).

The outline (fs_notes/notes/outline.py) is taken from the note's bytes as read through the root
handle (layer 2), so its offsets are the file's and its version is the note's; a note above the
workspace's read limit is outlined from its first read-limit bytes (`complete` False). A section
is read from the same bytes, whole UTF-8 characters, marked as note text (tools/provenance.py)
like every read.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ..fs import FsError, TooLarge
from ..fs.version import note_version
from ..notes.outline import SEPARATOR, Heading, SectionNotFound, find_section, outline_of
from ..notes.properties import properties_of
from ..notes.titles import title_of
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import shown, shown_id
from .context import NotesEnv, Opened, ToolFailure, fs_message, guarded
from .registry import NOTE_ID, WORKSPACE_URI, ToolSpec

__all__ = ["SECTION_ARG", "NotesOutline", "read_section"]

SECTION_ARG: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 1000,
    "description": "Read one section: a heading's text, or a path of headings joined by / "
    "('Plan/Week 1'), as notes_outline lists them. The section is the heading and everything "
    "under it up to the next heading of the same or a higher level.",
}


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _note_bytes(ws: Opened, note_id: str) -> tuple[bytes, str | None, int, bool]:
    """(the bytes outlined, their version if whole, the note's size, whether whole)."""
    limit = ws.workspace.read_limit
    try:
        data, ident = ws.root.read_note(note_id, max_bytes=limit)
        return data, note_version(ident, data), len(data), True
    except TooLarge:
        try:
            data, ident = ws.root.read_part(note_id, 0, limit)
        except FsError as exc:
            raise ToolFailure(fs_message(exc, note_id)) from None
        return data, None, ident.size, False
    except FsError as exc:
        raise ToolFailure(fs_message(exc, note_id)) from None


def _sized(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


class NotesOutline:
    """notes_outline: a note's headings with their sections' places and sizes."""

    def __init__(self, env: NotesEnv) -> None:
        self.env = env

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_outline",
            title="Outline of a note",
            description="A note's headings (level, path, byte offset, section size and an "
            "estimate of its tokens) and its front-matter keys, without its text: read it "
            "first for a long note, then notes_read one section.",
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
        data, version, size, whole = _note_bytes(ws, note_id)
        text = _text(data)
        outline = outline_of(text)
        headings = [h.to_json() for h in outline.headings]
        complete = outline.complete and whole
        structured: dict[str, Any] = {
            "id": note_id,
            "title": title_of(text, posixpath.basename(note_id)),
            "size": size,
            "headings": headings,
            "properties": list(properties_of(text)) if whole else [],
            "complete": complete,
        }
        if version is not None:
            structured["version"] = version
        lines = [f"{shown_id(note_id, 300)}: {len(headings)} headings, {_sized(size)}"]
        lines += [
            f"{'  ' * (h.level - 1)}{'#' * h.level} {shown(h.text, 200)}  "
            f"({_sized(h.size)}, ~{h.tokens} tokens, at byte {h.offset})"
            for h in outline.headings
        ]
        if structured["properties"]:
            keys = ", ".join(shown(k, 80) for k in structured["properties"][:50])
            lines.append(f"front matter: {keys}")
        if not complete:
            lines.append("(outline of the first part only: the note is longer than can be read "
                         "whole here, or has more headings than are listed)")  # fmt: skip
        return CallToolResult(
            content=[TextContent(text="\n".join(lines))], structured_content=structured
        ).wire()


def read_section(ws: Opened, note_id: str, name: str) -> tuple[dict[str, Any], str]:
    """(the structured content of notes_read's `section`, the section's text)."""
    data, version, size, whole = _note_bytes(ws, note_id)
    text = _text(data)
    try:
        heading: Heading = find_section(outline_of(text), name)
    except SectionNotFound as exc:
        raise ToolFailure(
            f"{exc}"
            + (": " + "; ".join(shown(p, 120) for p in exc.nearest) if exc.nearest else "")
            + " (notes_outline lists them)",
            {"error": "sectionNotFound", "id": note_id, "section": name,
             "nearest": exc.nearest},
        ) from None  # fmt: skip
    part = data[heading.offset : heading.end].decode("utf-8", "replace")
    structured: dict[str, Any] = {
        "id": note_id,
        "title": title_of(text, posixpath.basename(note_id)),
        "section": SEPARATOR.join(heading.path),
        "content": part,
        "offset": heading.offset,
        "length": heading.size,
        "size": size,
    }
    if version is not None:
        structured["version"] = version
    if not whole:
        structured["complete"] = False
    return structured, part
