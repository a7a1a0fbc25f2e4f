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
import errno
from collections.abc import Callable

from .errors import FsError, IdentityChanged, NoteExists
from .fileops import sync_dir
from .identity import Identity
from .renameat2 import RENAME_NOREPLACE, renameat2
from .resolvers import raise_from_os
from .statx import NoteStat, lstat_at

__all__ = ["RENAME_NOREPLACE", "MoveUnsupported", "move_between", "renameat2"]


class MoveUnsupported(FsError):
    message = "moving is not supported here (no renameat2 with RENAME_NOREPLACE)"


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
