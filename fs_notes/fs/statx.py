"""One statx(2) per directory entry: its lstat fields and its mount id together (Linux 5.8+).

Guarantees: ``lstat_at(dirfd, name)`` never follows a symlink (AT_SYMLINK_NOFOLLOW) and returns a
``NoteStat`` whose fields equal what ``os.stat(name, dir_fd=dirfd, follow_symlinks=False)``
reports (st_dev is built with ``os.makedev`` from the major and minor numbers, as glibc builds
it) plus the kernel's mount id of the entry, or ``mnt_id=None`` when this kernel does not report
one. Where libc has no statx wrapper, the kernel has no statx, or the kernel leaves out a basic
field, it falls back to ``os.stat`` and ``mnt_id=None``, so callers that need a mount id must
treat None as "unknown" (``Anchor.holds`` refuses the entry then). It raises ``OSError`` with the
kernel's errno otherwise.
Does not: decide anything. It exists because the listing and every delete/update check need
both answers, and two calls (lstat + statx for the mount id) cost twice the syscall and ctypes
overhead per note.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
import threading
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["STATX_MNT_ID", "NoteStat", "lstat_at", "result_buffer", "statx_fn"]

AT_SYMLINK_NOFOLLOW = 0x100
# STATX_TYPE | MODE | NLINK | UID | GID | MTIME | CTIME | INO | SIZE: what NoteStat holds.
STATX_NEEDED = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x40 | 0x80 | 0x100 | 0x200
STATX_MNT_ID = 0x1000
_BUFFER_SIZE = 256  # struct statx is 256 bytes

# struct statx (linux/stat.h), only the fields we read:
# 0x00 mask, 0x10 nlink, 0x14 uid, 0x18 gid, 0x1c mode, 0x20 ino, 0x28 size, 0x60 ctime {sec, nsec},
# 0x70 mtime {sec, nsec}, 0x88 dev_major, 0x8c dev_minor, 0x90 mnt_id.
_LAYOUT = struct.Struct("=I12xIIIH2xQQ48xqI4xqI4x8xIIQ")
assert _LAYOUT.size == 0x98


class NoteStat(NamedTuple):
    """An entry's lstat fields; the first five are its identity (``fs.Identity``) in order."""

    st_dev: int
    st_ino: int
    st_size: int
    st_mtime_ns: int
    st_ctime_ns: int
    st_mode: int
    st_nlink: int
    st_uid: int
    st_gid: int
    mnt_id: int | None

    @property
    def key(self) -> tuple[int, int, int, int, int]:
        """(dev, ino, size, mtime_ns, ctime_ns): the same values as ``Identity.of(self)``."""
        return (self.st_dev, self.st_ino, self.st_size, self.st_mtime_ns, self.st_ctime_ns)

    @classmethod
    def of(cls, st: os.stat_result, mnt_id: int | None = None) -> NoteStat:
        return cls(
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_mode,
            st.st_nlink,
            st.st_uid,
            st.st_gid,
            mnt_id,
        )


def _load_statx() -> Callable[..., int] | None:
    fn = getattr(ctypes.CDLL(None, use_errno=True), "statx", None)
    if fn is None:
        return None
    # No argtypes: every argument is an int-sized integer or a pointer (path bytes, buffer).
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


#: The libc statx binding, loaded once for the package (mounts.py uses it too); None without one.
statx_fn = _load_statx()
_local = threading.local()  # one result buffer per thread, reused


def result_buffer() -> ctypes.Array[ctypes.c_char]:
    """This thread's statx result buffer (struct statx), reused."""
    buf: ctypes.Array[ctypes.c_char] | None = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = ctypes.create_string_buffer(_BUFFER_SIZE)
    return buf
_unpack = _LAYOUT.unpack_from
_makedev = os.makedev
_NS = 1_000_000_000
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def _fallback(dirfd: int, name: str) -> NoteStat:
    return NoteStat.of(os.stat(name, dir_fd=dirfd, follow_symlinks=False))


def lstat_at(dirfd: int, name: str) -> NoteStat:
    """The lstat fields and mount id of entry ``name`` of ``dirfd``; OSError on failure."""
    if statx_fn is None:
        return _fallback(dirfd, name)
    buf = result_buffer()
    raw = name.encode(_FS_ENCODING, _FS_ERRORS)
    if b"\x00" in raw:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    if statx_fn(dirfd, raw, AT_SYMLINK_NOFOLLOW, STATX_NEEDED | STATX_MNT_ID, buf) != 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:  # libc has the wrapper, the kernel has not
            return _fallback(dirfd, name)
        raise OSError(err, os.strerror(err))
    (mask, nlink, uid, gid, mode, ino, size, c_sec, c_nsec, m_sec, m_nsec, major, minor, mnt) = (
        _unpack(buf)
    )
    if mask & STATX_NEEDED != STATX_NEEDED:
        return _fallback(dirfd, name)
    return NoteStat(
        _makedev(major, minor),
        ino,
        size,
        m_sec * _NS + m_nsec,
        c_sec * _NS + c_nsec,
        mode,
        nlink,
        uid,
        gid,
        mnt if mask & STATX_MNT_ID else None,
    )
