"""Operations on one name in a folder fd: exclusive create, atomic replace, bounded read.

Guarantees: ``create_in`` never replaces an existing entry (O_CREAT|O_EXCL|O_NOFOLLOW; an existing
symlink raises SymlinkRefused) and removes its half-written file on failure; ``replace_in`` writes
a new file named ``.fs-notes-tmp-<random>`` in the same folder, copies the old mode (and owner when
allowed), fsyncs it, puts it at the name and fsyncs the folder, removing the temp file on
failure; nothing here follows a symlink or takes a path with more than one component. Given a
check (``still``), the replace leaves no window: right after the check, the temp file and the
note are swapped in one renameat2(RENAME_EXCHANGE); the file that was at the name (now at the
temp name) is compared with the one checked and only then removed, and if it is another (a
program wrote it in the meantime) the two are swapped back, so their file is at its name again
and nothing of it is lost (should it save once more in that moment, its newest save is put
beside the note as "NAME (conflict 3f2a1c).md", six random hex digits, never hidden). Where
the file system cannot exchange (EINVAL) the check runs right before a plain rename, a window
one lstat wide.
Does not: check what the name currently is (type, links, identity): the caller does that first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable

from .errors import FsError, IdentityChanged, SymlinkRefused
from .identity import Identity
from .renameat2 import RENAME_EXCHANGE, RENAME_NOREPLACE, renameat2
from .resolvers import is_symlink_at, raise_from_os
from .statx import NoteStat, lstat_at

__all__ = ["TMP_PREFIX", "create_in", "read_upto", "replace_in", "sync_dir", "write_all"]

TMP_PREFIX = ".fs-notes-tmp-"
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def read_upto(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def sync_dir(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # some filesystems cannot fsync a folder
            raise_from_os(exc)


def unlink_if_ours(parent: int, name: str, fd: int) -> None:
    """Remove ``name`` if it still is the file open as ``fd`` (cleanup after a failure)."""
    try:
        if os.path.samestat(os.fstat(fd), os.stat(name, dir_fd=parent, follow_symlinks=False)):
            os.unlink(name, dir_fd=parent)
    except OSError:
        pass


def create_in(parent: int, name: str, data: bytes) -> Identity:
    try:
        fd = os.open(name, _NEW_FILE_FLAGS, 0o666, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.EEXIST and is_symlink_at(parent, name):
            raise SymlinkRefused() from exc
        raise_from_os(exc)
    done = False
    try:
        write_all(fd, data)
        os.fsync(fd)
        st = os.fstat(fd)
        done = True
    except OSError as exc:
        raise_from_os(exc)
    finally:
        if not done:
            unlink_if_ours(parent, name, fd)
        os.close(fd)
    sync_dir(parent)
    return Identity.of(st)


def open_temp(parent: int, mode: int = 0o600) -> tuple[int, str]:
    for _ in range(8):
        name = TMP_PREFIX + secrets.token_hex(8)
        try:
            return os.open(name, _NEW_FILE_FLAGS, mode, dir_fd=parent), name
        except FileExistsError:
            continue
        except OSError as exc:
            raise_from_os(exc)
    raise FsError()


def replace_in(
    parent: int,
    name: str,
    data: bytes,
    old: NoteStat,
    still: Callable[[str], NoteStat] | None = None,
) -> Identity:
    """Write ``data`` to a temp file beside ``name`` and put it at ``name``; ``still(name)``, if
    given, checks (raising FsError) that the entry is still the note the caller checked and
    returns its stat, right before the exchange (``_exchange``); raising there, or a file other
    than that one swapped out, leaves the note, or whatever another program put at its name,
    as it was."""
    mode = stat.S_IMODE(old.st_mode) & 0o777
    fd, tmp = open_temp(parent, mode)  # the note's mode from the start (less the umask)
    renamed = False
    try:
        write_all(fd, data)
        mine = os.fstat(fd)
        if stat.S_IMODE(mine.st_mode) != mode:
            # A umask took bits away; a system-call filter may refuse fchmod (the workers set
            # umask 0 instead): the note then keeps the narrower mode, never a wider one.
            with contextlib.suppress(PermissionError):
                os.fchmod(fd, mode)
        if (mine.st_uid, mine.st_gid) != (old.st_uid, old.st_gid):
            # Not root: the note becomes ours, as with any editor's save.
            with contextlib.suppress(PermissionError):
                os.fchown(fd, old.st_uid, old.st_gid)
        os.fsync(fd)
        if still is None:
            os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        else:
            _exchange(parent, tmp, name, fd, still)
        renamed = True
        st = os.fstat(fd)
    except OSError as exc:
        raise_from_os(exc)
    finally:
        if not renamed:
            unlink_if_ours(parent, tmp, fd)
        os.close(fd)
    sync_dir(parent)
    return Identity.of(st)


def _keep_theirs(parent: int, tmp: str, name: str, fd: int) -> None:
    """After a swap back: if what is now at `tmp` is not our temp file (open as `fd`), another
    program saved over the note again meanwhile (its newest save is at `tmp`, its older one at
    the name): put it beside the note under a name of its own, never left hidden or removed."""
    try:
        if os.path.samestat(os.fstat(fd), os.stat(tmp, dir_fd=parent, follow_symlinks=False)):
            return  # ours: removed as every unused temp file is
    except OSError:
        return
    stem = name[:-3] if name.endswith(".md") else name
    for _ in range(8):
        with contextlib.suppress(FileExistsError):
            renameat2(parent, tmp, parent, f"{stem} (conflict {secrets.token_hex(3)}).md",
                      RENAME_NOREPLACE)  # fmt: skip
            return


def _exchange(parent: int, tmp: str, name: str, fd: int, still: Callable[[str], NoteStat]) -> None:
    """The temp file at ``name`` and the note there at ``tmp``, in one step, after ``still``
    checked the note; the file swapped out is then compared with what was checked (device,
    inode, size, mtime: the swap itself changes its ctime) and removed, or the two are swapped
    back and IdentityChanged raised."""
    checked = still(name)
    try:
        renameat2(parent, tmp, parent, name, RENAME_EXCHANGE)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        # No exchange on this file system: the check above was right before a plain rename.
        os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        return
    out = lstat_at(parent, tmp)
    if out.key[:4] != checked.key[:4] or not stat.S_ISREG(out.st_mode) or out.st_nlink != 1:
        renameat2(parent, tmp, parent, name, RENAME_EXCHANGE)  # theirs back at its name
        _keep_theirs(parent, tmp, name, fd)
        raise IdentityChanged()
    os.unlink(tmp, dir_fd=parent)  # the note this replaced, checked
