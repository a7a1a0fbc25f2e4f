"""Bind mounts for the mount-point exercise, made in a private mount namespace (root only).

Guarantees: `enter_private_binds` first unshares the mount namespace and makes every mount in
it private, so the binds it then makes are seen by this process and its children only, never by
the host, and vanish when the last of them exits. `can_bind` tries the same in a throwaway child.
Does not: work without CAP_SYS_ADMIN (unprivileged users get an OSError: the exercise that needs
it is then reported "n/a" with that reason).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Sequence

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter_private_binds(binds: Sequence[tuple[str, str]]) -> None:
    """Unshare the mount namespace (private, recursively) and bind `src` onto `dst` for each."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    for src, dst in binds:
        _check(libc.mount(os.fsencode(src), os.fsencode(dst), None, MS_BIND, None), "bind mount")


def can_bind(scratch: str) -> str | None:
    """None if a private bind mount works here (tried in a child), else why not."""
    src, dst = os.path.join(scratch, "bind-src"), os.path.join(scratch, "bind-dst")
    os.makedirs(src, exist_ok=True)
    os.makedirs(dst, exist_ok=True)
    code = (
        "import sys; from fs_notes.exercises.mountns import enter_private_binds; "
        "enter_private_binds([(sys.argv[1], sys.argv[2])])"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, src, dst], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot test a private bind mount: {exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["unknown error"])[-1]
        return f"no private bind mount here (needs root / CAP_SYS_ADMIN): {last}"
    return None
