"""Splitting a raw relative path into components, before any system call.

Guarantees: every component returned is a non-empty name without '/', NUL, that is not '.' or
'..', at most 255 bytes once encoded, and there are at most ``MAX_COMPONENTS`` of them. An absolute
path or any '..' raises Escape (even 'a/../b', which would stay inside: note ids are canonical,
and never opening '..' is simpler than reasoning about it); everything else malformed raises
InvalidPath.
Does not: look at the disk. Whether a component is a symlink, a mount point or missing is decided
by the resolvers, which hold on their own even for components that pass here.
"""

from __future__ import annotations

import sys

from .errors import Escape, InvalidPath

__all__ = ["MAX_COMPONENTS", "NAME_MAX", "PATH_MAX", "split_folder", "split_relpath"]

NAME_MAX = 255
PATH_MAX = 4095
MAX_COMPONENTS = 32
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def split_relpath(relpath: str) -> list[str]:
    """Components of a non-empty relative path ("a/b.md" -> ["a", "b.md"])."""
    if type(relpath) is not str:
        raise InvalidPath()
    if relpath.startswith("/"):
        raise Escape()
    if not relpath or "\x00" in relpath:
        raise InvalidPath()
    try:
        size = len(relpath.encode(_FS_ENCODING, _FS_ERRORS))
    except UnicodeEncodeError:
        raise InvalidPath() from None
    if size > PATH_MAX:
        raise InvalidPath()
    parts = relpath.split("/")
    if len(parts) > MAX_COMPONENTS:
        raise InvalidPath()
    if ".." in parts:
        raise Escape()
    if "" in parts or "." in parts:
        raise InvalidPath()
    if size > NAME_MAX:  # only then can one component be too long
        for part in parts:
            if len(part.encode(_FS_ENCODING, _FS_ERRORS)) > NAME_MAX:
                raise InvalidPath()
    return parts


def split_folder(folder: str) -> list[str]:
    """Like split_relpath, but "" names the workspace itself (no components)."""
    if folder == "":
        return []
    return split_relpath(folder)
