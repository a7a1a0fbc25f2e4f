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

import os

from .errors import Escape, InvalidPath

__all__ = ["MAX_COMPONENTS", "NAME_MAX", "PATH_MAX", "split_folder", "split_relpath"]

NAME_MAX = 255
PATH_MAX = 4095
MAX_COMPONENTS = 32


def split_relpath(relpath: str) -> list[str]:
    """Components of a non-empty relative path ("a/b.md" -> ["a", "b.md"])."""
    if not isinstance(relpath, str):
        raise InvalidPath()
    if relpath.startswith("/"):
        raise Escape()
    if not relpath or "\x00" in relpath:
        raise InvalidPath()
    try:
        encoded = os.fsencode(relpath)
    except UnicodeEncodeError:
        raise InvalidPath() from None
    if len(encoded) > PATH_MAX:
        raise InvalidPath()
    parts = relpath.split("/")
    if len(parts) > MAX_COMPONENTS:
        raise InvalidPath()
    if ".." in parts:
        raise Escape()
    for part in parts:
        if part in ("", ".") or len(os.fsencode(part)) > NAME_MAX:
            raise InvalidPath()
    return parts


def split_folder(folder: str) -> list[str]:
    """Like split_relpath, but "" names the workspace itself (no components)."""
    if folder == "":
        return []
    return split_relpath(folder)
