"""notes_properties: a note's front-matter properties, read, set and removed (issue 31 item 2).

Read: the properties as notes_read gives them (notes/properties.py) with the note's version.
Change (`set`, `unset`): the new text is computed by notes/property_edit.py (only the asked keys
change, every other byte of the note stays; refused when that cannot be exact), and written as
every versioned write is, by `versions.write_if` through the one door for changes (the journal
keeps the note's previous bytes): a compare-and-write of what was read, with `expectedVersion`
when given.
"""

from __future__ import annotations

from typing import Any

from ..fs.changes import NoteChanges
from ..notes.properties import properties_of
from ..notes.property_edit import MAX_KEY_CHARS, MAX_KEYS, PropertiesRefused, change_properties
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import shown, shown_id
from .context import NotesEnv, ToolFailure, guarded
from .registry import NOTE_ID, WORKSPACE_URI, ToolSpec
from .versions import (
    VERSION_ARG,
    Current,
    expected_version,
    mismatch,
    read_current,
    require_writable,
    write_if,
)

__all__ = ["NotesProperties"]


class NotesProperties:
    """notes_properties: front-matter keys read, set or removed, nothing else touched."""

    def __init__(self, env: NotesEnv, changes: NoteChanges) -> None:
        self.env, self.changes = env, changes

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_properties",
            title="Note properties",
            description="Read a note's front-matter properties, or set and remove some of "
            "them: only those keys change (comments, order, quoting, the other keys and the "
            "body stay as they are); refused, with nothing written, if that cannot be done "
            "exactly. Pass expectedVersion to refuse if the note changed since you read it.",
            properties={
                "workspaceUri": WORKSPACE_URI,
                "id": NOTE_ID,
                "set": {
                    "type": "object",
                    "maxProperties": MAX_KEYS,
                    "description": "Properties to set (added if missing), with JSON values: "
                    '{"status": "done", "tags": ["garden"]}',
                },
                "unset": {
                    "type": "array",
                    "maxItems": MAX_KEYS,
                    "items": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS},
                    "description": "Properties to remove",
                },
                "expectedVersion": VERSION_ARG,
            },
            required=("id",),
            read_only=False,
            destructive=True,
            idempotent=True,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        ws = env.open(call, args.get("workspaceUri"), "read")
        note_id = env.note_id(args["id"])
        set_: dict[str, Any] = args.get("set") or {}
        unset: list[str] = list(args.get("unset") or [])
        expected = expected_version(args)
        if not set_ and not unset:
            current = read_current(ws, note_id, "its properties cannot be read whole here")
            if expected is not None and current.version != expected:
                raise mismatch(note_id, expected)
            return _answer(note_id, current.data, current.version, [])
        ws = env.open(call, args.get("workspaceUri"), "write")
        require_writable(self.changes, ws)

        def changed(cur: Current) -> bytes | None:
            try:
                text = cur.data.decode("utf-8")
            except UnicodeDecodeError:
                raise ToolFailure(
                    f"refused: {shown_id(note_id, 300)} is not valid UTF-8 text, so its "
                    "properties cannot be changed (nothing was written)"
                ) from None
            try:
                after = change_properties(text, set_, unset)
            except PropertiesRefused as exc:
                raise ToolFailure(
                    f"refused: {shown_id(note_id, 300)}: {exc} (nothing was written)",
                    {"error": "propertiesRefused", "id": note_id, "reason": str(exc)},
                ) from None
            return None if after == text else after.encode("utf-8")

        written = write_if(
            ws, self.changes, note_id, expected, changed,
            forget=lambda: env.changed(ws, note_id),
            too_large="its properties cannot be changed here",
        )  # fmt: skip
        return _answer(note_id, written.data, written.version, [*set_, *unset])


def _answer(note_id: str, data: bytes, version: str, changed: list[str]) -> dict[str, Any]:
    properties = properties_of(data.decode("utf-8", "replace"))
    head = (
        f"{'changed ' + ', '.join(shown(k, 80) for k in changed) + ' of ' if changed else ''}"
        f"{shown_id(note_id, 300)}: {len(properties)} properties (version {version})"
    )
    listed = [f"{shown(k, 80)}: {shown(str(v), 200)}" for k, v in list(properties.items())[:50]]
    return CallToolResult(
        content=[TextContent(text="\n".join([head, *listed]))],
        structured_content={
            "id": note_id,
            "properties": properties,
            "version": version,
            "changed": changed,
        },
    ).wire()
