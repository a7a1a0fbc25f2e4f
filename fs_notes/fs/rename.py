"""Moving one note between two folder fds: renameat2(RENAME_NOREPLACE), checked before and after.

Guarantees: ``move_between(src_parent, src_name, dst_parent, dst_name, checked, holds)`` calls
renameat2(2) on the two directory fds with exactly RENAME_NOREPLACE (never RENAME_EXCHANGE or
RENAME_WHITEOUT), so an existing entry at the target, of any type (a note, a symlink, a folder,
a dangling link), is never replaced: the kernel refuses with EEXIST, raised as NoteExists. Both
names are single components (no '/', never '.' or '..': ``paths`` checked them), so nothing is
resolved but the last component in each fd; neither is followed if it is a symlink (rename acts
on the entry). A rename across mounts is refused by the kernel (EXDEV, raised as Escape), also
for two bind mounts of one filesystem. After the rename the entry now at the target is looked
at again (lstat on the target fd): if it is not the file ``checked`` described (device, inode),
someone replaced the source name between our check and the rename, and it is renamed back (again
NOREPLACE) and IdentityChanged raised; the same if it is no longer on the workspace's mount
(``holds``). Both folders are fsynced. There is no fallback: without renameat2 (libc and kernel)
or where the filesystem cannot honour RENAME_NOREPLACE (EINVAL), the move is refused
(MoveUnsupported), never done by a plain rename() that could overwrite.

Does not: check the source before the rename (the caller does: root.py's ``_require_target``, on
the same parent fd), check that the target name is one the lexical layer serves (hidden, not
'.md': the lexical layer's policy, as for create), or close the window between the identity
check and the rename: in that window another local process can put a different file at the
source name, which is then moved (and, being seen afterwards, moved back): the outcome stays
inside the workspace's two folders. A source hard-linked after the check is moved with its link.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import sys
from collections.abc import Callable

from .errors import FsError, IdentityChanged, NoteExists
from .fileops import sync_dir
from .identity import Identity
from .resolvers import raise_from_os
from .statx import NoteStat, lstat_at

__all__ = ["RENAME_NOREPLACE", "MoveUnsupported", "move_between", "renameat2"]

RENAME_NOREPLACE = 1
# renameat2 predates the unified syscall table: its number differs per architecture.
_SYS_RENAMEAT2_BY_MACHINE = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276}
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


class MoveUnsupported(FsError):
    message = "moving is not supported here (no renameat2 with RENAME_NOREPLACE)"


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


def _rename(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    try:
        renameat2(src_dir, src, dst_dir, dst, RENAME_NOREPLACE)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise NoteExists() from exc
        if exc.errno in (errno.ENOSYS, errno.EINVAL):
            raise MoveUnsupported() from exc
        raise_from_os(exc)


def move_between(
    src_parent: int,
    src_name: str,
    dst_parent: int,
    dst_name: str,
    checked: NoteStat,
    holds: Callable[[NoteStat], bool],
) -> Identity:
    """Rename ``src_name`` of ``src_parent`` to ``dst_name`` of ``dst_parent`` (never
    replacing anything), provided what arrives is the file ``checked`` describes; the moved
    note's new identity (a rename changes its ctime)."""
    _rename(src_parent, src_name, dst_parent, dst_name)
    try:
        now = lstat_at(dst_parent, dst_name)
    except OSError as exc:
        raise_from_os(exc)  # gone at once: another process moved it on; nothing of ours to undo
    if (now.st_dev, now.st_ino) != (checked.st_dev, checked.st_ino) or not holds(now):
        # Not the note we checked: put it back where it was (if the source name is taken
        # again, it stays at the target, inside the workspace).
        with contextlib.suppress(FsError):
            _rename(dst_parent, dst_name, src_parent, src_name)
        raise IdentityChanged()
    sync_dir(dst_parent)
    if dst_parent != src_parent:
        sync_dir(src_parent)
    return Identity.of(now)
