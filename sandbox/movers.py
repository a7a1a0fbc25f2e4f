"""Moves through the OS layer: notes_move's renames, and its rewrites of linking notes, run in
the workspace's confined write worker (added 2026-12-01).

Guarantees: `ConfinedMovers` sends every move and every link rewrite to the write worker of the
workspace (`OsLayer.run(..., "write", ...)`), under the same fail-closed rule as creates and
updates (sandbox/confined.py): no worker, no move. The worker renames with renameat2
(RENAME_NOREPLACE) between two folder fds beneath its workspace (fs_notes/fs/rename.py), and its
Landlock domain grants REFER beneath the workspace only (sandbox/confine.py `WRITE_RIGHTS`), so
a rename with either end outside fails in the kernel (EXDEV) whatever the code above asked. A
Landlock-confined worker whose ABI has no REFER (< 2) cannot rename between folders at all:
moves are refused there before anything is tried (a clear reason, not a half-done move). The
chroot worker moves only within its chroot (the workspace); mode "none" is the operator's
explicit choice.
Does not: resolve or check paths (the worker's filesystem layer does), or decide who may move
(layer 1: a move needs the "write" operation).
"""

from __future__ import annotations

from fs_notes.fs import Identity
from fs_notes.sandbox.confine import MOVE_MIN_ABI
from fs_notes.sandbox.confined import OsLayer

__all__ = ["ConfinedMovers", "refer_refusal"]


def refer_refusal(mode: str, hello: object) -> str | None:
    """Why a worker of `mode` whose start-up report is `hello` cannot move between folders
    (None: it can). Only a Landlock worker depends on its ABI; a report without one refuses."""
    if mode != "landlock":
        return None
    conf = hello.get("confinement") if isinstance(hello, dict) else None
    abi = conf.get("abi") if isinstance(conf, dict) else None
    if type(abi) is int and abi >= MOVE_MIN_ABI:
        return None
    return (
        f"this kernel's Landlock (ABI {abi}) cannot confine a rename between folders "
        f"(the REFER right needs ABI {MOVE_MIN_ABI} or later): moves are refused"
    )


class ConfinedMovers:
    """The `NoteMover` of fs_notes/tools/move_tool.py, through the workspace's write worker."""

    def __init__(self, layer: OsLayer) -> None:
        self._layer = layer

    def unavailable(self, workspace: str) -> str | None:
        reason = self._layer.unavailable(workspace, "write")
        if reason is not None:
            return reason
        worker = self._layer.worker(workspace, "write")
        return refer_refusal(worker.mode, dict(worker.hello))

    def move(
        self, workspace: str, relpath: str, new_relpath: str, expected: Identity | None
    ) -> Identity:
        return self._layer.run(workspace, "write", lambda w: w.move(relpath, new_relpath, expected))

    def rewrite(self, workspace: str, relpath: str, data: bytes, expected: Identity) -> Identity:
        return self._layer.run(workspace, "write", lambda w: w.update(relpath, data, expected))
