"""Which mount a file descriptor is on: statx(2) STATX_MNT_ID via ctypes (Linux 5.8+).

Guarantees: ``mount_id(fd)`` is the kernel's mount id of the open file, or None when this kernel
or libc cannot tell (no statx, or STATX_MNT_ID missing from the returned mask). Two fds with the
same mount id are on the same mount (while both are open the mount cannot be freed and its id
reused). The walk resolver uses this to refuse bind mounts of the *same* device, which an st_dev
comparison cannot see.
Does not: fall back to parsing /proc (which may be absent in a chroot); callers that get None
must fall back to comparing st_dev and say so.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from .statx import STATX_MNT_ID, result_buffer, statx_fn

__all__ = ["mount_id", "mount_id_at"]

AT_EMPTY_PATH = 0x1000
AT_SYMLINK_NOFOLLOW = 0x100
_MASK_AND_MNT_ID = struct.Struct("=I140xQ")  # stx_mask at 0x00, stx_mnt_id at 0x90


def mount_id(fd: int) -> int | None:
    """The mount id of ``fd``, or None if statx/STATX_MNT_ID is unavailable; OSError on failure."""
    return _mount_id(fd, b"", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)


def mount_id_at(dirfd: int, name: str) -> int | None:
    """The mount id of ``name`` in ``dirfd``, not following a symlink (None: unknown here)."""
    return _mount_id(dirfd, os.fsencode(name), AT_SYMLINK_NOFOLLOW)


def _mount_id(dirfd: int, path: bytes, flags: int) -> int | None:
    if statx_fn is None:
        return None
    buf = result_buffer()
    if statx_fn(dirfd, path, flags, STATX_MNT_ID, buf) != 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:  # libc has the wrapper, the kernel has not
            return None
        raise OSError(err, os.strerror(err))
    mask, mnt_id = _MASK_AND_MNT_ID.unpack_from(buf)
    return int(mnt_id) if mask & STATX_MNT_ID else None
