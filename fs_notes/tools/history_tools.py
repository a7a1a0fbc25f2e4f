"""notes_history and notes_restore: the kept versions of a note, and one of them put back.

Every change through fs-notes keeps what it replaced in the workspace's journal first
(fs_notes/journal/: the door around the door for changes). notes_history lists a note's kept
versions (a deleted note's too): when, which tool, which principal, how many bytes. notes_restore
puts one back through the same door as every change, so the restore is itself kept (and can be
undone), made by the confined worker under `serve`, and a compare-and-write: with
`expectedVersion`, only if the note is still at that version; the bytes restored are exactly
the bytes kept.

Both need read (a version's size and the principals who changed the note tell of it); restoring
needs write too. Neither shows a kept version's text: notes_read reads the restored note.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..fs import FsError, NoteNotFound
from ..fs.version import is_version, note_version
from ..journal.door import KeptChanges
from ..journal.store import Entry, Journal
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import isolated, shown, shown_id
from .context import NotesEnv, ToolFailure, fs_message, guarded
from .registry import NOTE_ID, WORKSPACE_URI, ToolSpec
from .versions import VERSION_ARG, expected_version, mismatch, require_writable, write_if

_KEPT_VERSION: dict[str, Any] = {
    "type": "string",
    "description": "The kept version to put back, as notes_history lists it",
}

_WHAT = {"update": "replaced", "delete": "deleted", "create": "created", "move": "moved"}


def _line(entry: Entry) -> str:
    stamp = entry.to_json()["at"]
    who = f"{shown(entry.tool, 60)} by {isolated(shown(entry.principal, 100))}"
    if entry.kind == "move":
        return f"- {stamp}: moved to {shown_id(entry.new_id or '', 300)} ({who})"
    if entry.content is None:
        return f"- {stamp}: {_WHAT[entry.kind]} ({who})"
    return f"- {entry.version} {stamp}: {entry.size} bytes, {_WHAT[entry.kind]} ({who})"


class NotesHistory:
    """notes_history: a note's kept versions, newest first."""

    def __init__(self, env: NotesEnv, journals: Mapping[str, Journal]) -> None:
        self.env, self.journals = env, journals

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_history",
            title="A note's history",
            description="The versions of a note that fs-notes kept before changing or deleting "
            "it, newest first: each with when, which tool, which principal and its size, and "
            "the moves that renamed it. Works for a deleted note's id too. notes_restore puts "
            "one back.",
            properties={"workspaceUri": WORKSPACE_URI, "id": NOTE_ID},
            required=("id",),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        ws = self.env.open(call, args.get("workspaceUri"), "read")
        note_id = self.env.note_id(args["id"])
        entries = self.journals[ws.workspace.name].history(note_id)
        versions = [e.to_json() for e in entries if e.content is not None and e.id == note_id]
        moves = [e.to_json() | {"id": e.id} for e in entries if e.kind == "move"]
        lines = [_line(e) for e in entries]
        if not lines:
            lines = [f"(no kept versions of {shown_id(note_id, 300)})"]
        return CallToolResult(
            content=[TextContent(text="\n".join(lines))],
            structured_content={"id": note_id, "versions": versions, "moves": moves},
        ).wire()


class NotesRestore:
    """notes_restore: a kept version put back, through the door, kept itself."""

    def __init__(
        self, env: NotesEnv, changes: KeptChanges, journals: Mapping[str, Journal]
    ) -> None:
        self.env, self.changes, self.journals = env, changes, journals

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_restore",
            title="Restore a note's version",
            description="Put a version notes_history listed back, byte for byte: the note's "
            "content is replaced by it (or the deleted note made again). What it replaces is "
            "kept too, so a restore can itself be undone. Pass expectedVersion (the note's "
            "version now) to restore only if the note did not change since you looked.",
            properties={
                "workspaceUri": WORKSPACE_URI,
                "id": NOTE_ID,
                "version": _KEPT_VERSION,
                "expectedVersion": VERSION_ARG,
            },
            required=("id", "version"),
            read_only=False,
            destructive=True,
            idempotent=True,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        env.open(call, args.get("workspaceUri"), "read")
        ws = env.open(call, args.get("workspaceUri"), "write")
        note_id = env.note_id(args["id"])
        wanted = args["version"]
        if not is_version(wanted):
            raise ToolFailure(
                "invalid version: pass one notes_history listed (\"v1:\" and 32 hexadecimal "
                "digits)"
            )
        expected = expected_version(args)
        name = ws.workspace.name
        kept = next(
            (e for e in self.journals[name].history(note_id)
             if e.id == note_id and e.version == wanted and e.content is not None),
            None,
        )  # fmt: skip
        if kept is None or kept.content is None:
            raise ToolFailure(
                f"no kept version {wanted} of {shown_id(note_id, 300)}: notes_history lists "
                "the versions kept (nothing was changed)",
                {"error": "versionNotKept", "id": note_id, "version": wanted},
            )
        data = kept.content
        try:
            ws.root.stat_note(note_id)
            gone = False
        except NoteNotFound:
            gone = True
        except FsError as exc:
            raise ToolFailure(fs_message(exc, note_id)) from None
        if gone:
            if expected is not None:
                raise mismatch(note_id, expected)
            require_writable(self.changes, ws, "create_note")
            try:
                ident = self.changes.create_note(name, note_id, data)
            except FsError as exc:
                raise ToolFailure(fs_message(exc, note_id)) from None
            finally:
                env.changed(ws, note_id)
            version = note_version(ident, data)
        else:
            require_writable(self.changes, ws, "update_note")
            written = write_if(
                ws, self.changes, note_id, expected,
                lambda now: None if now.data == data else data,
                forget=lambda: env.changed(ws, note_id),
            )  # fmt: skip
            version = written.version
        text = (
            f"restored {shown_id(note_id, 300)} to {wanted} ({len(data)} bytes, now version "
            f"{version})"
        )
        return CallToolResult(
            content=[TextContent(text=text)],
            structured_content={
                "id": note_id, "restored": wanted, "size": len(data), "version": version,
            },
        ).wire()  # fmt: skip
