"""Attacker code for the compromised-process class of the escape exercises.

Layer 3 exists for a compromised server: code of the attacker's running in the server process, or
in a worker, after their confinement. `attack` is that code: one bare system call on an outside
path (or process), with no check of ours in the way. The knock-out target runs it in its own
process (the server, confined exactly as `serve` confines itself) and in attacker workers
(`rawworker.RawWorker`, confined through the real worker's entry point); the runner then judges
from outside: the outside file's content, mode, owner, times, links and extended attributes, a
planted file's absence, and whether the victim process got a tracer.

Guarantees: each call is made exactly once, on exactly the paths given; the result is "ok" or
the errno's name. Does not: exist in `serve`; cover `stat` of an outside path or reading another
process's /proc/<pid>/environ, which no layer of fs-notes refuses today (docs/design.md).
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from typing import Final

OPS: Final = ("chmod", "chown", "utime", "setxattr", "link", "mknod", "unlink", "read", "ptrace")
PTRACE_ATTACH: Final = 16

_libc = ctypes.CDLL(None, use_errno=True)


def _ptrace(victim: int) -> None:
    if _libc.ptrace(PTRACE_ATTACH, victim, None, None) == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _read(target: str) -> None:
    fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.read(fd, 1)  # the byte stays here: a read is judged by the file's access time
    finally:
        os.close(fd)


def _call(op: str, target: str, planted: str, victim: int) -> Callable[[], object]:
    return {
        "chmod": lambda: os.chmod(target, 0o4777),  # noqa: S103 (the attack itself)
        "chown": lambda: os.chown(target, 65534, 65534),
        "utime": lambda: os.utime(target, (0, 0)),
        "setxattr": lambda: os.setxattr(target, "user.pwned", b"1"),
        "link": lambda: os.link(target, planted),
        "mknod": lambda: os.mknod(planted),
        "unlink": lambda: os.unlink(target),
        "read": lambda: _read(target),
        "ptrace": lambda: _ptrace(victim),
    }[op]


def attack(op: str, target: str, planted: str, victim: int) -> str:
    """Run attack `op` here; "ok" or the name of the errno it failed with."""
    if op not in OPS:
        raise ValueError(f"unknown attack {op!r}")
    try:
        _call(op, target, planted, victim)()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "ok"


def refused(result: str) -> bool:
    """Whether `result` is the OS layer saying no (Landlock EACCES, seccomp or capabilities
    EPERM, a chroot's "no such file")."""
    return result in ("EACCES", "EPERM", "ENOENT")


def traced_by(victim: int) -> int:
    """The pid tracing `victim` (0: none), from /proc (the runner's own check)."""
    try:
        with open(f"/proc/{victim}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0
