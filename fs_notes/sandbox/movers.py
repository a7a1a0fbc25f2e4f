"""Moves through the OS layer: notes_move's renames, and its rewrites of linking notes, run in
the workspace's confined write worker (added 2026-12-01).

Guarantees: `sandbox.confined.ConfinedChanges` sends every move (`move_note`) and every link
rewrite (`update_note`) to the write worker of the workspace (`OsLayer.run(..., "write", ...)`),
under the same fail-closed rule as creates and updates: no worker, no move; and asks
`refer_refusal` (here) before a move. The worker renames with renameat2
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

from fs_notes.sandbox.confine import MOVE_MIN_ABI

__all__ = ["refer_refusal"]


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
