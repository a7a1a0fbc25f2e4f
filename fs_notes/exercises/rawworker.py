"""The attacker worker: confined exactly like a real worker, then it runs bare system calls.

To prove the OS layer alone (the no-filesystem column of the exercises, and the sandbox tests),
something must ask the kernel for an unlink, a create or a read with no resolution and no checks
at all, from inside a confined worker. The production worker (`sandbox.worker`) has no such
operation. The attacker's program is one of its own (`attacker_worker.py`), confined through
`sandbox.worker.prepare`, the same entry point, with the same arguments, as the real worker
(Landlock rights of its kind, chroot, capabilities, no_new_privs, the system-call filter, every
fd closed), and only then serving its requests: JSON frames answered with the production reply
frames (OK, OS_ERROR with the errno, BAD_REQUEST).

`RawWorker` is the supervisor side: a `sandbox.supervisor.ConfinedWorker` that starts this
program instead, optionally with fds passed in on purpose (a leak to exploit) and told to keep
them (`keep_passed_fds`), so a test can show what the worker's fd closing is for.

Guarantees: nothing here is reachable from `fs-notes serve`; the confinement is the real one
(one function, not a copy). Does not: check anything about the paths it is given: that is the
point.
"""

from __future__ import annotations

import errno
import json
from typing import Any, Literal

from fs_notes.sandbox import monitor
from fs_notes.sandbox.errors import OsRefused
from fs_notes.sandbox.kinds import Mode
from fs_notes.sandbox.supervisor import ConfinedWorker


class RawWorker(ConfinedWorker):
    """A confined worker that runs bare unlink/create/read calls (see the module docstring)."""

    PROGRAM = "fs_notes.exercises.attacker_worker"

    def __init__(
        self,
        workspace: str | int,
        kind: Literal["delete", "write"],
        mode: Mode,
        *,
        passed_fds: tuple[int, ...] = (),
        keep_passed_fds: bool = False,
        symlinks: Literal["deny", "within"] = "deny",
        start_timeout: float = 10.0,
    ) -> None:
        self._passed = passed_fds
        self._keep = keep_passed_fds
        super().__init__(workspace, kind, mode, symlinks=symlinks, start_timeout=start_timeout)

    def _command(self, channel_fd: int) -> list[str]:
        cmd = super()._command(channel_fd)
        if self._keep:
            for fd in self._passed:
                cmd += ["--keep-fd", str(fd)]
        return cmd

    def _passed_fds(self) -> tuple[int, ...]:
        if monitor.current() is not None and not self._keep:
            # a root target's monitor hands a worker its own fds only (sandbox/monitor.py): a
            # leaked fd of the server never reaches it, so there is nothing to pass to be closed
            return ()
        return self._passed

    def _expected_fds(self, channel_fd: int) -> set[int]:
        fds = super()._expected_fds(channel_fd)
        return fds | set(self._passed) if self._keep else fds

    def _raw(self, request: dict[str, Any], timeout: float) -> None:
        self._call(_frame(request), timeout)

    def unlink_raw(self, path: str, *, dir_fd: int | None = None, timeout: float = 5.0) -> None:
        """A bare os.unlink(path, dir_fd=...) in the worker, with no resolution checks."""
        self._raw({"op": "unlink", "path": path, "dir_fd": dir_fd}, timeout)

    def create_raw(self, path: str, *, dir_fd: int | None = None, timeout: float = 5.0) -> None:
        """A bare exclusive create of an empty file in the worker."""
        self._raw({"op": "create", "path": path, "dir_fd": dir_fd}, timeout)

    def read_raw(self, path: str, *, dir_fd: int | None = None, timeout: float = 5.0) -> None:
        """A bare open + read in the worker (the bytes stay there; only success is told)."""
        self._raw({"op": "read", "path": path, "dir_fd": dir_fd}, timeout)

    def rename_raw(self, path: str, other: str, *, timeout: float = 5.0) -> None:
        """A bare renameat2(path, other, RENAME_NOREPLACE) in the worker (relative paths from
        its workspace), with no resolution checks (added 2026-12-01)."""
        self._raw({"op": "rename", "path": path, "other": other}, timeout)

    def attack(self, op: str, target: str, planted: str, victim: int, aim: str = "") -> str:
        """Attacker code in the confined worker (`compromised.attack`): "ok" or the errno name."""
        try:
            self._raw(
                {"op": "attack", "attack": op, "path": target, "planted": planted,
                 "victim": victim, "aim": aim},
                5.0,
            )  # fmt: skip
        except OsRefused as exc:
            return errno.errorcode.get(exc.errno, str(exc.errno))
        return "ok"

    def sleep(self, seconds: float, timeout: float = 5.0) -> None:
        """Keep the worker busy for `seconds`."""
        self._raw({"op": "sleep", "seconds": seconds}, timeout)


def _frame(request: dict[str, Any]) -> bytes:
    from fs_notes.sandbox.protocol import frame

    if "\x00" in str(request.get("path", "")):
        raise ValueError("a path with NUL cannot be sent")
    return frame(json.dumps(request).encode())


