"""notes_append and notes_edit: changing part of a note, atomically, without losing an update.

Both read the note whole through the root handle (layer 2, within the workspace's read limit),
compute its new content here and write it through the same door as notes_update (fs/changes.py
`update_note`: the confined write worker under `serve`), by `versions.write_if`: the write happens
only if the note is still the file that was read (and, with expectedVersion, only if that read has
the version the caller saw), checked by the filesystem layer behind the door; see tools/versions.py
for what that compare does and does not cover. The new content replaces the note as an update does:
a temp file beside it, fsync, rename, so a note is always either its old or its new content, for a
reader and after a crash. An O_APPEND write was not chosen: a reader (or a crash) could see half an
append, it writes in place into whatever inode is at the name (no identity to compare), and the
write worker would need rights it does not have.

notes_edit: every oldText must occur exactly once in the note as read (notes/textedit.py), else
nothing changes and the error names the edit; ``dryRun`` computes the diff and writes nothing.
A note that is not valid UTF-8 is refused (rewriting it as text would change bytes nobody edited);
an append adds bytes and accepts any note.
"""

from __future__ import annotations

from typing import Any

from ..fs.changes import NoteChanges
from ..notes.textedit import Edit, EditRefused, apply_edits, unified_diff
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import shown_id
from .context import NotesEnv, ToolFailure, guarded
from .forced import ForcedChanges
from .registry import NOTE_ID, WORKSPACE_URI, ToolSpec
from .versions import (
    FORCE_ARG,
    VERSION_ARG,
    Current,
    damage_guard,
    expected_version,
    mismatch,
    read_current,
    refuse_damage,
    require_writable,
    write_if,
)

MAX_EDITS = 100
MAX_TEXT = 1 << 20  # characters, as notes_update's content

_ASK_FOR_VERSION = (
    " Pass expectedVersion (the version notes_read returned): the change is then refused, and "
    "nothing written, if the note changed since you read it."
)


def _edits(raw: list[dict[str, Any]]) -> list[Edit]:
    return [Edit(str(e["oldText"]), str(e["newText"])) for e in raw]


_TEXT_ARG: dict[str, Any] = {
    "type": "string",
    "maxLength": MAX_TEXT,
    "description": "Text to add at the very end of the note, exactly as given (start it "
    "with a newline to begin a new line)",
}
_EDIT_ITEM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "oldText": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_TEXT,
            "description": "Text that occurs exactly once in the note",
        },
        "newText": {
            "type": "string",
            "maxLength": MAX_TEXT,
            "description": "What replaces it",
        },
    },
    "required": ["oldText", "newText"],
    "additionalProperties": False,
}


class NotesAppend:
    """notes_append: text added at the end of a note, atomically."""

    def __init__(self, env: NotesEnv, changes: NoteChanges) -> None:
        self.env = env
        self.changes = changes

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_append",
            title="Append to a note",
            description="Add text at the end of an existing note (a journal, a log) atomically: "
            "the note is its old or its new content, never half of it." + _ASK_FOR_VERSION,
            properties={
                "workspaceUri": WORKSPACE_URI,
                "id": NOTE_ID,
                "content": _TEXT_ARG,
                "expectedVersion": VERSION_ARG,
            },
            required=("id", "content"),
            read_only=False,
            destructive=False,
            idempotent=False,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        changes = self.changes
        env.open(call, args.get("workspaceUri"), "read")  # it reads the note: read, and write
        ws = env.open(call, args.get("workspaceUri"), "write")
        note_id = env.note_id(args["id"])
        tail = args["content"].encode("utf-8")
        expected = expected_version(args)
        require_writable(changes, ws)
        written = write_if(
            ws, changes, note_id, expected, lambda cur: cur.data + tail,
            forget=lambda: env.changed(ws, note_id),
        )  # fmt: skip
        size = len(written.data)
        return CallToolResult(
            content=[
                TextContent(
                    text=f"appended {len(tail)} bytes to {shown_id(note_id, 300)} "
                    f"({size} bytes, version {written.version})"
                )
            ],
            structured_content={
                "id": note_id, "size": size, "appended": len(tail), "version": written.version,
            },
        ).wire()  # fmt: skip


class NotesEdit:
    """notes_edit: exact pieces of a note's text replaced, atomically, with the diff."""

    def __init__(
        self, env: NotesEnv, changes: NoteChanges, forced: ForcedChanges | None = None
    ) -> None:
        self.env = env
        self.changes = changes
        self.forced = forced

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_edit",
            title="Edit a note",
            description="Replace exact pieces of a note's text: each edit's oldText must occur "
            "exactly once in the note, else nothing changes and the error says which edit "
            "failed. All edits apply at once, atomically; the result is a unified diff "
            "(dryRun: only the diff, nothing written). Edits that would remove most of the "
            "note, its front matter or its headings are refused unless force is true (and, "
            "where the workspace says so, the person approves them outside the client)."
            + _ASK_FOR_VERSION,
            properties={
                "workspaceUri": WORKSPACE_URI,
                "id": NOTE_ID,
                "edits": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_EDITS,
                    "items": _EDIT_ITEM,
                    "description": "The replacements, each of text as it is in the note now",
                },
                "dryRun": {
                    "type": "boolean",
                    "description": "Only show the diff; write nothing",
                },
                "expectedVersion": VERSION_ARG,
                "force": FORCE_ARG,
            },
            required=("id", "edits"),
            read_only=False,
            destructive=True,
            idempotent=False,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        changes = self.changes
        env.open(call, args.get("workspaceUri"), "read")  # its diff and match counts show the note
        ws = env.open(call, args.get("workspaceUri"), "write")
        note_id = env.note_id(args["id"])
        edits = _edits(args["edits"])
        expected = expected_version(args)
        dry_run = args.get("dryRun") is True
        diffs: list[str] = []

        def edited(cur: Current) -> bytes | None:
            try:
                before = cur.data.decode("utf-8")
            except UnicodeDecodeError:
                raise ToolFailure(
                    f"refused: {shown_id(note_id, 300)} is not valid UTF-8 text, so it cannot be "
                    "edited (nothing was written)"
                ) from None
            try:
                after = apply_edits(before, edits)
            except EditRefused as exc:
                raise ToolFailure(
                    f"refused: nothing was changed in {shown_id(note_id, 300)}: {exc}",
                    {"error": "editNotApplied", "id": note_id, "edit": exc.index,
                     "reason": exc.reason, "matches": exc.matches},
                ) from None  # fmt: skip
            diffs[:] = [unified_diff(before, after, note_id)]
            return None if dry_run or after == before else after.encode("utf-8")

        person = self.forced.person(call, ws, readable=True) if self.forced else None
        guard = damage_guard(env.policy.limits, args, person)
        if dry_run:  # the same checks, nothing written (and no writer needed)
            current = read_current(ws, note_id)
            if expected is not None and current.version != expected:
                raise mismatch(note_id, expected)
            edited(current)
            if guard is not None and guard.person is None and diffs:  # (nobody asked on a dry run)
                after = apply_edits(current.data.decode("utf-8"), edits).encode("utf-8")
                refuse_damage(note_id, current, after, guard)
            size, version = len(current.data), current.version
        else:
            require_writable(changes, ws)
            written = write_if(
                ws, changes, note_id, expected, edited,
                forget=lambda: env.changed(ws, note_id), guard=guard,
            )  # fmt: skip
            size, version = len(written.data), written.version
        diff = diffs[0] if diffs else ""
        if dry_run:
            head = f"dry run: {len(edits)} edits would apply to {shown_id(note_id, 300)}"
        elif diff:
            head = f"edited {shown_id(note_id, 300)} ({size} bytes, version {version})"
        else:
            head = f"no change: the edits leave {shown_id(note_id, 300)} as it was"
        structured = {"id": note_id, "size": size, "version": version, "diff": diff,
                      "dryRun": dry_run, "edits": len(edits)}  # fmt: skip
        return CallToolResult(
            content=[TextContent(text=head + ("\n" + diff if diff else ""))],
            structured_content=structured,
        ).wire()
