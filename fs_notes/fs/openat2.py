"""ctypes binding for openat2(2) (Linux 5.6+): the syscall, its constants, and a one-time probe.

Guarantees: ``openat2`` either returns a new fd or raises ``OSError`` with the kernel's errno;
EAGAIN/EINTR (a concurrent rename or mount while resolving with RESOLVE_BENEATH) are retried at
most ``MAX_RETRIES`` times, then EAGAIN is raised. ``available()`` answers once per process
whether the syscall works here with every RESOLVE_* flag this package uses (ENOSYS on old
kernels, EPERM from a seccomp filter, EINVAL for unknown flags all mean "no").
Does not: choose flags; the resolver does. Does not translate errors into FsError.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import sys
from typing import Any

__all__ = [
    "MAX_RETRIES",
    "RESOLVE_BENEATH",
    "RESOLVE_IN_ROOT",
    "RESOLVE_NO_MAGICLINKS",
    "RESOLVE_NO_SYMLINKS",
    "RESOLVE_NO_XDEV",
    "available",
    "openat2",
]

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

MAX_RETRIES = 16

# openat2 has the same number on every architecture that uses the unified syscall table.
_SYS_OPENAT2_BY_MACHINE = {
    "x86_64": 437,
    "amd64": 437,
    "aarch64": 437,
    "arm64": 437,
    "i386": 437,
    "i686": 437,
    "armv7l": 437,
    "riscv64": 437,
    "ppc64le": 437,
    "s390x": 437,
}
SYS_OPENAT2: int | None = _SYS_OPENAT2_BY_MACHINE.get(platform.machine().lower())


class OpenHow(ctypes.Structure):
    """struct open_how from <linux/openat2.h> (version 0, 24 bytes)."""

    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
# No argtypes: their per-call conversion costs more than the syscall itself. The arguments are
# small integers (number, dirfd, size), which libffi widens to a full register, and pointers
# passed as pointer objects (path bytes, byref(open_how)), never as bare integers.
_NR = SYS_OPENAT2 if SYS_OPENAT2 is not None else -1
_HOW_SIZE = ctypes.sizeof(OpenHow)
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()
_RETRY = frozenset((errno.EAGAIN, errno.EINTR))

# Read-only open_how structs (a byref keeps its struct alive), shared per (flags, mode, resolve):
# the kernel only reads them, so threads can share them.
_HOWS: dict[tuple[int, int, int], Any] = {}
_MAX_HOWS = 64


def _how(flags: int, mode: int, resolve: int) -> Any:
    key = (flags, mode, resolve)
    ref = _HOWS.get(key)
    if ref is None:
        ref = ctypes.byref(OpenHow(flags, mode, resolve))
        if len(_HOWS) < _MAX_HOWS:
            _HOWS[key] = ref
    return ref


def openat2(dirfd: int, path: str | bytes, flags: int, resolve: int, mode: int = 0) -> int:
    """openat2(dirfd, path, {flags, mode, resolve}); a new fd, or OSError."""
    if SYS_OPENAT2 is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    raw = path if isinstance(path, bytes) else path.encode(_FS_ENCODING, _FS_ERRORS)
    if b"\x00" in raw:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    how = _how(flags, mode, resolve)
    err = errno.EAGAIN
    for _ in range(MAX_RETRIES):
        fd: int = _syscall(_NR, dirfd, raw, how, _HOW_SIZE)
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err not in _RETRY:
            break
    raise OSError(err, os.strerror(err))


PROBE_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV


@functools.cache
def available() -> bool:
    """Whether openat2 works here with all the RESOLVE_* flags we use (probed once)."""
    try:
        root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fd = openat2(root, ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, PROBE_RESOLVE)
    except OSError:
        return False
    finally:
        os.close(root)
    os.close(fd)
    return True
