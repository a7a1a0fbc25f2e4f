"""renameat2(2) itself, through the C library (or the raw system call where libc lacks it).

Guarantees: the names are passed as the file system's bytes, a NUL in either is refused
(EINVAL) before the call, and failure is an OSError with the kernel's errno (ENOSYS where
neither libc nor a known system-call number has it).
Does not: decide which flags are safe (fs/rename.py moves with RENAME_NOREPLACE only;
fs/fileops.py replaces a note with RENAME_EXCHANGE, to check what it replaced), or resolve
anything but the last component in each folder fd (the caller passes single components).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from collections.abc import Callable

__all__ = ["RENAME_EXCHANGE", "RENAME_NOREPLACE", "renameat2"]

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
# renameat2 predates the unified syscall table: its number differs per architecture.
_SYS_RENAMEAT2_BY_MACHINE = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276}
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def _load() -> tuple[Callable[..., int] | None, Callable[..., int] | None]:
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    return fn, syscall


_renameat2, _syscall = _load()
_NUMBER = _SYS_RENAMEAT2_BY_MACHINE.get(platform.machine().lower())


def renameat2(src_dir: int, src: str, dst_dir: int, dst: str, flags: int) -> None:
    """renameat2(2) itself; OSError with the kernel's errno on failure (ENOSYS without it)."""
    old = src.encode(_FS_ENCODING, _FS_ERRORS)
    new = dst.encode(_FS_ENCODING, _FS_ERRORS)
    if b"\0" in old or b"\0" in new:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    if _renameat2 is not None:
        result = _renameat2(src_dir, old, dst_dir, new, flags)
    elif _syscall is not None and _NUMBER is not None:
        result = _syscall(
            ctypes.c_long(_NUMBER),
            ctypes.c_int(src_dir),
            ctypes.c_char_p(old),
            ctypes.c_int(dst_dir),
            ctypes.c_char_p(new),
            ctypes.c_uint(flags),
        )
    else:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
