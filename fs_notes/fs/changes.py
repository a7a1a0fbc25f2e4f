"""The one door for every change to a note: `NoteChanges`, in the filesystem layer's own verbs.

Every tool that changes a note (notes_create, notes_update, notes_append, notes_edit,
notes_move and its link rewrites, notes_delete) is given one `NoteChanges` and changes notes
through it only, with the verbs `fs.WorkspaceRoot` has (`create_note`, `update_note`,
`unlink_note`, `move_note`), the workspace first. So a deletion is followed by one name from the
tool (`changes.unlink_note`) through the confined worker's client, the frame it sends and the
worker (`root.unlink_note`) to `unlinkat`; likewise an update and a move.

Two implementations, and the composition root (fs_notes/compose.py `compose`) takes one as a
required argument, with no default (its `door`: `InThisProcess`, `ThroughOsLayer`):
- `InProcessChanges` (here): the root handles of this process, layer 2 only. For the in-process
  tests, and for the exercises' knock-out of layer 3, where "the OS layer is not there" must be
  what runs.
- `sandbox.confined.ConfinedChanges`: layer 3, the workspace's confined workers; what `serve`
  uses.

Guarantees: `refusal(workspace, op)` says before anything is done why `op` cannot run in that
workspace (None: it may); a caller that gets a reason does not call the verb (the tools refuse
with it, fail closed). The in-process door never refuses: it has no layer that could be missing.

Does not: decide who may change what (layer 1, the tools), or resolve paths (each verb's root
handle checks every path again beneath its workspace fd).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

from .identity import Identity

__all__ = ["OPS", "ChangeableRoot", "InProcessChanges", "NoteChanges", "Op"]

#: The four verbs, as `refusal` names them.
Op = Literal["create_note", "update_note", "unlink_note", "move_note"]
OPS: tuple[Op, ...] = ("create_note", "update_note", "unlink_note", "move_note")


class NoteChanges(Protocol):
    """Changes to notes, by workspace name and note id (FsError when the layer refuses)."""

    def create_note(self, workspace: str, relpath: str, data: bytes) -> Identity:
        """A new note (never over anything); its identity."""
        ...

    def update_note(
        self, workspace: str, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        """The note's whole content replaced; with ``expected``, only if it still is that file
        (IdentityChanged otherwise), checked where the write happens."""
        ...

    def unlink_note(self, workspace: str, relpath: str, expected: Identity) -> None:
        """The note removed if it still is the file ``expected`` describes."""
        ...

    def move_note(
        self, workspace: str, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        """The note renamed (never over anything; with ``expected``, only if it still is that
        file); the moved note's identity."""
        ...

    def refusal(self, workspace: str, op: Op) -> str | None:
        """Why `op` is refused in `workspace` now (fail closed), or None when it may run."""
        ...


class ChangeableRoot(Protocol):
    """What `InProcessChanges` uses of a root handle (`fs.WorkspaceRoot`, or a test's)."""

    def create_note(self, relpath: str, data: bytes) -> Identity: ...
    def update_note(
        self, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity: ...
    def unlink_note(self, relpath: str, expected: Identity) -> None: ...
    def move_note(
        self, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity: ...


class InProcessChanges:
    """Changes through the root handles of this process (layer 2 only, no OS layer)."""

    def __init__(self, roots: Mapping[str, ChangeableRoot]) -> None:
        self._roots = roots

    def create_note(self, workspace: str, relpath: str, data: bytes) -> Identity:
        return self._roots[workspace].create_note(relpath, data)

    def update_note(
        self, workspace: str, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        return self._roots[workspace].update_note(relpath, data, expected=expected)

    def unlink_note(self, workspace: str, relpath: str, expected: Identity) -> None:
        self._roots[workspace].unlink_note(relpath, expected)

    def move_note(
        self, workspace: str, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        return self._roots[workspace].move_note(relpath, new_relpath, expected=expected)

    def refusal(self, workspace: str, op: Op) -> str | None:
        return None
