"""notes_create and notes_update: the two tools that write, through a `NoteWriter`.

The writer is the filesystem layer in this process (`DirectWriter`: layers 1 and 2 only, for
tests and embedding), or what `serve` uses: `sandbox.confined.ConfinedWriters`, a confined worker
process per workspace whose OS rights are limited to creating and rewriting files beneath it.
A writer that says writing is unavailable in a workspace (no enforceable OS layer: fail closed)
is asked before anything else happens, and its reason is shown; the note id is checked lexically
here and resolved again by the filesystem layer inside the writer. An update with expectedVersion
(added 2026-12-01) is a compare-and-write (tools/versions.py): the bytes read here must have that
version, and the writer replaces the note only if it is still the file read. Every result carries
the note's new version.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..fs import FsError, Identity
from ..fs.version import note_version
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import shown_id
from .context import NotesEnv, ToolFailure, fs_message, guarded
from .registry import CONTENT, NOTE_ID, WORKSPACE_URI, ToolSpec
from .versions import VERSION_ARG, expected_version, require_writable, write_if


class NoteWriter(Protocol):
    def create(self, workspace: str, relpath: str, data: bytes) -> Identity: ...
    def update(
        self, workspace: str, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        """Replace the note's content; with ``expected``, only if it still is that file
        (IdentityChanged otherwise), checked where the write happens (tools/versions.py)."""
        ...

    def unavailable(self, workspace: str) -> str | None:
        """Why writing in this workspace is refused (fail closed), or None when it may run."""
        ...


class DirectWriter:
    """Writes through the root handles of the server process itself (layer 2 only)."""

    def __init__(self, env: NotesEnv) -> None:
        self._env = env

    def create(self, workspace: str, relpath: str, data: bytes) -> Identity:
        return self._env.roots[workspace].create_note(relpath, data)

    def update(
        self, workspace: str, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        return self._env.roots[workspace].update_note(relpath, data, expected=expected)

    def unavailable(self, workspace: str) -> str | None:
        return None


def build(env: NotesEnv, writer: NoteWriter) -> list[ToolSpec]:
    def write(call: Call, args: dict[str, Any], verb: str) -> dict[str, Any]:
        if "expectedVersion" in args:  # comparing versions reads the note: read, and write
            env.open(call, args.get("workspaceUri"), "read")
        ws = env.open(call, args.get("workspaceUri"), "write")
        note_id = env.note_id(args["id"])
        data = args["content"].encode("utf-8")
        expected = expected_version(args)
        require_writable(writer, ws)
        if expected is not None:  # compare-and-write (tools/versions.py)
            written = write_if(
                ws, writer, note_id, expected, lambda _: data,
                forget=lambda: env.cache.forget(ws.workspace.name, note_id),
            )  # fmt: skip
            ident = written.ident if written.ident is not None else written.before.ident
        else:
            try:
                if verb == "created":
                    ident = writer.create(ws.workspace.name, note_id, data)
                else:
                    ident = writer.update(ws.workspace.name, note_id, data)
            except FsError as exc:
                raise ToolFailure(fs_message(exc, note_id)) from None
            env.cache.forget(ws.workspace.name, note_id)
        if env.may_read(call, args.get("workspaceUri")) is None:
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

    @guarded
    def notes_create(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        return write(call, args, "created")

    @guarded
    def notes_update(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        return write(call, args, "updated")

    props = {"workspaceUri": WORKSPACE_URI, "id": NOTE_ID, "content": CONTENT}
    update_props = {**props, "expectedVersion": VERSION_ARG}
    return [
        ToolSpec(
            name="notes_create",
            title="Create a note",
            description="Create a new note (missing folders are created). Never overwrites: "
            "fails if a note already exists at that id.",
            properties=props,
            required=("id", "content"),
            read_only=False,
            destructive=False,
            idempotent=False,
            handler=notes_create,
        ),
        ToolSpec(
            name="notes_update",
            title="Update a note",
            description="Replace an existing note's whole content atomically. Pass "
            "expectedVersion (the version notes_read returned): the update is then refused, "
            "and nothing written, if the note changed since you read it.",
            properties=update_props,
            required=("id", "content"),
            read_only=False,
            destructive=True,
            idempotent=True,
            handler=notes_update,
        ),
    ]
