"""Errors raised by the OS containment layer.

Guarantees: every failure of the confined worker reaches the caller as one of these classes or as
the `fs_notes.fs.FsError` subclass the worker named; none of them carries a path or file content.

Does not: decide what a client is told (the tools layer maps these to one fixed message).
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class for OS-layer failures."""


class ConfinementError(SandboxError):
    """Confinement could not be applied; the worker refuses to run unconfined instead."""


class WorkerFailed(SandboxError):
    """The worker died, timed out, or broke the protocol; it has been killed and reaped."""


class NoEnforceableLayer(SandboxError):
    """Neither Landlock nor chroot works here and unconfined deletion was not allowed."""


class OsRefused(SandboxError):
    """The OS refused an operation inside the worker (Landlock: EACCES; chroot: ENOENT)."""

    def __init__(self, errno: int, message: str = "refused by the operating system") -> None:
        super().__init__(message)
        self.errno = errno
