"""notes_create and notes_update: the two tools that write, through the one door for changes.

The door (fs/changes.py `NoteChanges`) is what `serve` uses, `sandbox.confined.ConfinedChanges`:
a confined worker process per workspace whose OS rights are limited to creating and rewriting
files beneath it; or the filesystem layer in this process (`InProcessChanges`: layers 1 and 2
only, for tests and the exercises' knock-out). A door that refuses `create_note` or
`update_note` in a workspace (no enforceable OS layer: fail closed) is asked before anything
else happens, and its reason is shown; the note id is checked lexically here and resolved again
by the filesystem layer behind the door. An update is a compare-and-write (tools/versions.py):
the bytes read here must have the expectedVersion if one is given (added 2026-12-01), must not
be destroyed unsaid by the new content (the damage guard, unless force; added
2026-12-07; and where the workspace's `force` is "out-of-band", unless the person approved the
change outside the client: tools/forced.py), and the door replaces the note only if it is
still the file read. Every result carries the note's new version.
"""

from __future__ import annotations

from typing import Any

from ..fs import FsError
from ..fs.changes import NoteChanges
from ..fs.version import note_version
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import shown_id
from .context import NotesEnv, ToolFailure, fs_message, guarded
from .forced import ForcedChanges
from .registry import CONTENT, NOTE_ID, WORKSPACE_URI, ToolSpec
from .versions import (
    FORCE_ARG,
    VERSION_ARG,
    damage_guard,
    expected_version,
    require_writable,
    write_if,
)

_PROPS: dict[str, dict[str, Any]] = {
    "workspaceUri": WORKSPACE_URI,
    "id": NOTE_ID,
    "content": CONTENT,
}
_UPDATE_PROPS = {**_PROPS, "expectedVersion": VERSION_ARG, "force": FORCE_ARG}


def _write(
    env: NotesEnv,
    changes: NoteChanges,
    call: Call,
    args: dict[str, Any],
    verb: str,
    forced: ForcedChanges | None = None,
) -> dict[str, Any]:
    """notes_create ("created") or notes_update ("updated"): see the module docstring."""
    if "expectedVersion" in args:  # comparing versions reads the note: read, and write
        env.open(call, args.get("workspaceUri"), "read")
    ws = env.open(call, args.get("workspaceUri"), "write")
    note_id = env.note_id(args["id"])
    data = args["content"].encode("utf-8")
    expected = expected_version(args)
    require_writable(changes, ws, "create_note" if verb == "created" else "update_note")
    readable = env.may_read(call, args.get("workspaceUri")) is not None
    guard = None
    if verb == "updated":
        person = forced.person(call, ws, readable=readable) if forced is not None else None
        guard = damage_guard(env.policy.limits, args, person)
    too_large = (
        "fs-notes cannot check what the update would remove: pass force: true to replace it "
        "anyway"
        if guard is None or guard.person is None
        else "fs-notes cannot show the person what the update would remove, and forcing a "
        "change here needs their approval"
    )
    if expected is not None or guard is not None:  # compare-and-write (tools/versions.py)
        written = write_if(
            ws, changes, note_id, expected, lambda _: data,
            forget=lambda: env.changed(ws, note_id), guard=guard, figures=readable,
            too_large=too_large,
        )  # fmt: skip
        ident = written.ident if written.ident is not None else written.before.ident
    else:
        try:
            if verb == "created":
                ident = changes.create_note(ws.workspace.name, note_id, data)
            else:
                ident = changes.update_note(ws.workspace.name, note_id, data)
        except FsError as exc:
            raise ToolFailure(fs_message(exc, note_id)) from None
        env.changed(ws, note_id)
    if not readable:
        # A version hashes the file's inode with its bytes: to a principal who wrote the
        # bytes but may not read, it would give away the inode. It could not use it either
        # (expectedVersion needs read). Issue 27.
        return CallToolResult(
            content=[TextContent(text=f"{verb} {shown_id(note_id, 300)} ({len(data)} bytes)")],
            structured_content={"id": note_id, "size": len(data)},
        ).wire()
    version = note_version(ident, data)
    return CallToolResult(
        content=[
            TextContent(
                text=f"{verb} {shown_id(note_id, 300)} ({ident.size} bytes, version {version})"
            )
        ],
        structured_content={"id": note_id, "size": ident.size, "version": version},
    ).wire()


class NotesCreate:
    """notes_create: a new note, never over one."""

    def __init__(self, env: NotesEnv, changes: NoteChanges) -> None:
        self.env, self.changes = env, changes

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_create",
            title="Create a note",
            description="Create a new note (missing folders are created). Never overwrites: "
            "fails if a note already exists at that id.",
            properties=_PROPS,
            required=("id", "content"),
            read_only=False,
            destructive=False,
            idempotent=False,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        return _write(self.env, self.changes, call, args, "created")


class NotesUpdate:
    """notes_update: a note's whole content replaced, a compare-and-write with the damage guard."""

    def __init__(
        self, env: NotesEnv, changes: NoteChanges, forced: ForcedChanges | None = None
    ) -> None:
        self.env, self.changes, self.forced = env, changes, forced

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_update",
            title="Update a note",
            description="Replace an existing note's whole content atomically. Pass "
            "expectedVersion (the version notes_read returned): the update is then refused, "
            "and nothing written, if the note changed since you read it. An update that would "
            "remove most of the note, its front matter or its headings, or leave a "
            "placeholder such as '... rest unchanged', is refused unless force is true (and, "
            "where the workspace says so, the person approves it outside the client).",
            properties=_UPDATE_PROPS,
            required=("id", "content"),
            read_only=False,
            destructive=True,
            idempotent=True,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        return _write(self.env, self.changes, call, args, "updated", self.forced)
