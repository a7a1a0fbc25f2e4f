"""The fallback resolver: one openat(2) per component, for kernels without a usable openat2.

Guarantees: starting from the workspace fd, every component is opened with
O_DIRECTORY|O_NOFOLLOW (the last one of a file lookup with O_NOFOLLOW and the caller's flags)
relative to the fd of the previous one, and every fd opened is checked to be on the workspace's
mount (mount id, else st_dev), so mount points are refused (Escape). '..' is never opened: under
the 'within' policy a link target's '..' pops the stack of fds we already hold, and popping past
the workspace is an Escape; so is an absolute link target. Under 'deny' any symlink is refused.
Work is bounded: at most MAX_LINK_HOPS (40) links, MAX_HELD folders deep. Every fd opened here is
closed on every path except the one returned.
Does not: notice a folder that is renamed or moved while we hold its fd: the walk continues from
where that folder is now (we never re-resolve by name, so this cannot lead outside the
workspace unless the folder itself is moved outside, which needs write access outside).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Sequence

from ..errors import Escape, InvalidPath, NoteNotFound, NotRegular, SymlinkRefused
from . import (
    DIR_FLAGS,
    MAX_LINK_HOPS,
    Anchor,
    close_quietly,
    is_symlink_at,
    make_dir,
    open_child_dir,
    raise_from_os,
)

__all__ = ["MAX_HELD", "WalkResolver"]

MAX_HELD = 128

_Pending = deque[tuple[str, bool]]  # (name, came from a link target)


class WalkResolver:
    name = "walk"

    def __init__(self, anchor: Anchor) -> None:
        self._anchor = anchor
        self._follow = anchor.symlinks == "within"

    def open_dir(self, comps: Sequence[str], *, create: bool = False) -> int:
        return self._walk(comps, None, create)

    def open_file(self, comps: Sequence[str], flags: int) -> int:
        return self._walk(comps, flags, False)

    def _walk(self, comps: Sequence[str], file_flags: int | None, create: bool) -> int:
        pending: _Pending = deque((name, False) for name in comps)
        held: list[int] = []
        hops = 0
        try:
            while pending:
                name, from_link = pending.popleft()
                if name in ("", "."):  # only from link targets: 'a//b', 'a/./b', 'dir/'
                    continue
                cur = held[-1] if held else self._anchor.fd
                if name == "..":  # only from link targets; never opened
                    if not held:
                        raise Escape()
                    close_quietly(held.pop())
                    continue
                if file_flags is not None and not pending:
                    fd = self._open_final(cur, name, file_flags)
                else:
                    fd = self._open_folder(cur, name, create, from_link)
                if fd is None:  # a symlink, and the policy says follow it
                    hops += 1
                    if hops > MAX_LINK_HOPS:
                        raise SymlinkRefused()
                    _push_target(cur, name, pending)
                    continue
                if file_flags is not None and not pending:
                    return fd
                held.append(fd)
                if len(held) > MAX_HELD:
                    raise InvalidPath()
            if file_flags is not None:
                raise NotRegular()  # the path ended on a folder ('link => ..')
            if held:
                return held.pop()
            return open_child_dir(self._anchor.fd, ".")
        finally:
            for fd in held:
                close_quietly(fd)

    def _checked(self, fd: int) -> int:
        try:
            self._anchor.require_same_mount(fd)
        except BaseException:
            close_quietly(fd)
            raise
        return fd

    def _symlink(self, exc: OSError | None = None) -> None:
        """A symlink was met: return (to follow it) or raise, by policy."""
        if not self._follow:
            raise SymlinkRefused() from exc

    def _open_final(self, cur: int, name: str, flags: int) -> int | None:
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
        except OSError as exc:
            if exc.errno == errno.ELOOP and is_symlink_at(cur, name):
                self._symlink(exc)
                return None
            raise_from_os(exc)
        if flags & os.O_PATH:  # O_PATH|O_NOFOLLOW opens the link itself
            try:
                is_link = stat.S_ISLNK(os.fstat(fd).st_mode)
            except BaseException:
                close_quietly(fd)
                raise
            if is_link:
                close_quietly(fd)
                self._symlink()
                return None
        return self._checked(fd)

    def _open_folder(self, cur: int, name: str, create: bool, from_link: bool) -> int | None:
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=cur)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP) and is_symlink_at(cur, name):
                self._symlink(exc)
                return None
            if not (create and exc.errno == errno.ENOENT):
                raise_from_os(exc)
            if from_link:  # never create where a (dangling) link points
                raise SymlinkRefused() from exc
            make_dir(cur, name)
            fd = open_child_dir(cur, name)
        return self._checked(fd)


def _push_target(cur: int, name: str, pending: _Pending) -> None:
    try:
        target = os.readlink(name, dir_fd=cur)
    except OSError as exc:
        raise_from_os(exc)
    if target.startswith("/"):
        raise Escape()
    if not target:
        raise NoteNotFound()
    pending.extendleft((part, True) for part in reversed(target.split("/")))
