"""The kernel resolver: one openat2(2) call per lookup, relative to the workspace fd.

Guarantees: every lookup uses RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, plus
RESOLVE_NO_SYMLINKS under the 'deny' policy, so the kernel itself refuses '..' above the
workspace, absolute paths and absolute link targets (EXDEV -> Escape), any mount crossing, including
same-device bind mounts (EXDEV -> Escape), magic links and, under 'deny', every symlink (ELOOP ->
SymlinkRefused). Under 'within' a symlink is followed only while it resolves beneath the
workspace; the final component is still opened O_NOFOLLOW under 'deny'. Folders created for
``open_dir(create=True)`` are made with mkdirat and reopened O_NOFOLLOW, so a symlink raced into
their place is refused.
Does not: validate components (``paths`` does); check the file type (``root`` does).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from .. import openat2 as _openat2
from . import (
    DIR_FLAGS,
    Anchor,
    close_quietly,
    make_dir,
    open_child_dir,
    raise_from_os,
)

__all__ = ["Openat2Resolver"]

_BASE = _openat2.RESOLVE_BENEATH | _openat2.RESOLVE_NO_MAGICLINKS | _openat2.RESOLVE_NO_XDEV


class Openat2Resolver:
    name = "openat2"

    def __init__(self, anchor: Anchor) -> None:
        self._anchor = anchor
        deny = anchor.symlinks == "deny"
        self._resolve = _BASE | (_openat2.RESOLVE_NO_SYMLINKS if deny else 0)
        self._file_flags = os.O_CLOEXEC | (os.O_NOFOLLOW if deny else 0)
        # No O_NOFOLLOW for folders: under 'deny', RESOLVE_NO_SYMLINKS refuses a trailing symlink
        # with ELOOP (O_NOFOLLOW|O_DIRECTORY would say ENOTDIR); under 'within' it is followed.
        self._dir_flags = DIR_FLAGS & ~os.O_NOFOLLOW

    def _open(self, comps: Sequence[str], flags: int) -> int:
        path = "/".join(comps) if comps else "."
        return _openat2.openat2(self._anchor.fd, path, flags, self._resolve)

    def open_file(self, comps: Sequence[str], flags: int) -> int:
        try:
            return _openat2.openat2(
                self._anchor.fd, "/".join(comps), flags | self._file_flags, self._resolve
            )
        except OSError as exc:
            raise_from_os(exc)

    def open_dir(self, comps: Sequence[str], *, create: bool = False) -> int:
        try:
            return self._open(comps, self._dir_flags)
        except OSError as exc:
            if not (create and exc.errno == errno.ENOENT):
                raise_from_os(exc)
        # Find the deepest existing folder, then make the rest one mkdirat at a time.
        fd = -1
        depth = len(comps) - 1
        while depth >= 0:
            try:
                fd = self._open(comps[:depth], self._dir_flags)
                break
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise_from_os(exc)
            depth -= 1
        if fd < 0:  # not even the workspace itself: it was removed while we hold it
            raise_from_os(OSError(errno.ENOENT, os.strerror(errno.ENOENT)))
        try:
            for name in comps[depth:]:
                make_dir(fd, name)
                child = open_child_dir(fd, name)
                close_quietly(fd)
                fd = child
                self._anchor.require_same_mount(fd)
        except BaseException:
            close_quietly(fd)
            raise
        return fd
