"""The resolvers, side by side (as libpathrs' src/resolvers/): `openat2.py` resolves a path in
one openat2(2) call (RESOLVE_BENEATH|NO_SYMLINKS|NO_MAGICLINKS|NO_XDEV), `walk.py` walks it one
O_NOFOLLOW component at a time where openat2 is missing. This module is what both share: the
anchor (the workspace fd and its mount), their interface (`Resolver`), flags and helpers.

Guarantees: ``Anchor.require_same_mount`` raises Escape for an fd on another mount than the
workspace root: by mount id when the kernel reports one (this also catches bind mounts of the same
device), else by st_dev; ``Anchor.holds`` answers the same for an entry from its
``statx.lstat_at`` (an unknown mount id counts as another mount). ``raise_from_os`` is the single
translation from OSError to FsError.
Does not: resolve anything itself.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn, Protocol

from .. import mounts
from ..errors import Escape, SymlinkRefused, error_for_errno
from ..statx import NoteStat

__all__ = [
    "DIR_FLAGS",
    "MAX_LINK_HOPS",
    "Anchor",
    "Resolver",
    "SymlinkPolicy",
    "close_quietly",
    "is_symlink_at",
    "make_dir",
    "open_child_dir",
    "raise_from_os",
]

SymlinkPolicy = Literal["deny", "within"]

# Every directory we hold is opened like this: readable (scandir, fsync), never a symlink.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINK_HOPS = 40


def raise_from_os(exc: OSError) -> NoReturn:
    raise error_for_errno(exc.errno) from exc


def is_symlink_at(dirfd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_child_dir(dirfd: int, name: str) -> int:
    """openat(dirfd, name, DIR_FLAGS): one component, never followed (a symlink is refused)."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dirfd)
    except OSError as exc:
        # O_DIRECTORY|O_NOFOLLOW on a symlink gives ENOTDIR (not ELOOP) on Linux.
        if exc.errno in (errno.ENOTDIR, errno.ELOOP) and is_symlink_at(dirfd, name):
            raise SymlinkRefused() from exc
        raise_from_os(exc)


def make_dir(dirfd: int, name: str) -> None:
    """mkdirat(dirfd, name); an existing entry is fine (the following open judges it)."""
    try:
        os.mkdir(name, 0o777, dir_fd=dirfd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise_from_os(exc)


def close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Anchor:
    """The workspace directory fd (not owned here) and the mount it is on."""

    fd: int
    dev: int
    mnt_id: int | None
    symlinks: SymlinkPolicy

    @classmethod
    def of(cls, fd: int, symlinks: SymlinkPolicy) -> Anchor:
        return cls(fd, os.fstat(fd).st_dev, mounts.mount_id(fd), symlinks)

    def require_same_mount(self, fd: int) -> None:
        """Escape unless ``fd`` is on the workspace's mount (the caller still owns ``fd``)."""
        try:
            if self.mnt_id is not None:
                same = mounts.mount_id(fd) == self.mnt_id
            else:
                same = os.fstat(fd).st_dev == self.dev
        except OSError as exc:
            raise_from_os(exc)
        if not same:
            raise Escape()

    def holds(self, st: NoteStat) -> bool:
        """Whether an entry whose ``statx.lstat_at`` is ``st`` is on the workspace's mount (an
        unknown mount id, when the workspace's is known, does not count)."""
        return st.st_dev == self.dev and (self.mnt_id is None or st.mnt_id == self.mnt_id)


class Resolver(Protocol):
    """Opens things beneath an Anchor. Every fd returned is new, O_CLOEXEC, owned by the caller,
    and on the anchor's mount; components are already validated by ``paths``."""

    name: str

    def open_dir(self, comps: Sequence[str], *, create: bool = False) -> int:
        """A DIR_FLAGS fd of the folder ``comps`` ([] = the workspace). With ``create``, missing
        folders are made with mkdirat, one component at a time, never following a symlink."""
        ...

    def open_file(self, comps: Sequence[str], flags: int) -> int:
        """Open ``comps`` (non-empty) with ``flags`` (O_RDONLY... or O_PATH). The final component
        is followed only if it is a symlink and the policy is 'within'."""
        ...
