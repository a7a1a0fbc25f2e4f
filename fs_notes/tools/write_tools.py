"""notes_create and notes_update: the two tools that write, through a `NoteWriter`.

The writer is the filesystem layer directly, or (issue 5) a confined worker process whose OS
rights are limited to creating and rewriting files beneath the workspace.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..fs import FsError, Identity
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from .context import NotesEnv, ToolFailure, fs_message, guarded, note_id_arg
from .registry import CONTENT, NOTE_ID, WORKSPACE_URI, ToolSpec


class NoteWriter(Protocol):
    def create(self, workspace: str, relpath: str, data: bytes) -> Identity: ...
    def update(self, workspace: str, relpath: str, data: bytes) -> Identity: ...


class DirectWriter:
    """Writes through the root handles of the server process itself (layer 2 only)."""

    def __init__(self, env: NotesEnv) -> None:
        self._env = env

    def create(self, workspace: str, relpath: str, data: bytes) -> Identity:
        return self._env.roots[workspace].create_note(relpath, data)

    def update(self, workspace: str, relpath: str, data: bytes) -> Identity:
        return self._env.roots[workspace].update_note(relpath, data)


def build(env: NotesEnv, writer: NoteWriter) -> list[ToolSpec]:
    def write(call: Call, args: dict[str, Any], verb: str) -> dict[str, Any]:
        ws = env.open(call, args["workspaceUri"], "write")
        note_id = note_id_arg(args["id"]).text
        data = args["content"].encode("utf-8")
        try:
            if verb == "created":
                ident = writer.create(ws.workspace.name, note_id, data)
            else:
                ident = writer.update(ws.workspace.name, note_id, data)
        except FsError as exc:
            raise ToolFailure(fs_message(exc, note_id)) from None
        env.cache.forget(ws.workspace.name, note_id)
        return CallToolResult(
            content=[TextContent(text=f"{verb} {note_id} ({ident.size} bytes)")],
            structured_content={"id": note_id, "size": ident.size},
        ).wire()

    @guarded
    def notes_create(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        return write(call, args, "created")

    @guarded
    def notes_update(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        return write(call, args, "updated")

    props = {"workspaceUri": WORKSPACE_URI, "id": NOTE_ID, "content": CONTENT}
    return [
        ToolSpec(
            name="notes_create",
            title="Create a note",
            description="Create a new note (missing folders are created). Never overwrites: "
            "fails if a note already exists at that id.",
            properties=props,
            required=("workspaceUri", "id", "content"),
            read_only=False,
            destructive=False,
            idempotent=False,
            handler=notes_create,
        ),
        ToolSpec(
            name="notes_update",
            title="Update a note",
            description="Replace an existing note's whole content atomically.",
            properties=props,
            required=("workspaceUri", "id", "content"),
            read_only=False,
            destructive=True,
            idempotent=True,
            handler=notes_update,
        ),
    ]
