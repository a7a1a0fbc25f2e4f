"""renameat2(RENAME_EXCHANGE) and the attacker process that swaps two paths in a tight loop.

    python -m fs_notes.exercises.swap PATH_A PATH_B [--seconds S]

Guarantees: `exchange(a, b)` atomically swaps two existing names (a folder and a symlink, say)
or raises OSError; the attacker process exits on SIGTERM/SIGKILL, when its parent dies
(PR_SET_PDEATHSIG), or after `--seconds` (default 120) at the latest, so it never outlives a run.
Does not: exist outside Linux (renameat2 is Linux-only); the syscall number is used only where
the C library has no wrapper (x86_64: 316, aarch64: 276).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import signal
import sys
import time
from collections.abc import Callable

AT_FDCWD = -100
RENAME_EXCHANGE = 2
PR_SET_PDEATHSIG = 1
_SYSCALL = {"x86_64": 316, "aarch64": 276}

_libc = ctypes.CDLL(None, use_errno=True)


def _renameat2() -> Callable[[bytes, bytes], int]:
    fn = getattr(_libc, "renameat2", None)
    if fn is not None:
        return lambda a, b: int(fn(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE))
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(f"renameat2: no wrapper and no syscall number for {platform.machine()}")
    return lambda a, b: int(_libc.syscall(number, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE))


_call = _renameat2()


def exchange(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> None:
    if _call(os.fsencode(a), os.fsencode(b)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fspath(a))


_swaps = [0]


def attack(a: str, b: str, seconds: float) -> int:
    """Swap `a` and `b` until `seconds` pass (or a signal ends it); the number of swaps."""
    ca, cb = os.fsencode(a), os.fsencode(b)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(1000):
            if _call(ca, cb) == 0:
                _swaps[0] += 1
    return _swaps[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fs_notes.exercises.swap")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--seconds", type=float, default=120.0)
    args = p.parse_args(argv)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        attack(args.a, args.b, args.seconds)
    finally:
        print(_swaps[0], flush=True)  # the count, for whoever started us
    return 0


if __name__ == "__main__":
    sys.exit(main())
