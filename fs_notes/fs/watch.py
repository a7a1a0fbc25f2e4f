"""FolderWatch: which folders of a workspace changed since last asked (inotify).

The search index (fs_notes/search/) must pick up every edit, made by fs-notes or by the user's
editor, on the next query, without walking every note each time. A `FolderWatch` holds one inotify
instance per workspace with a watch on each folder the listing walked; a query first asks it which
entries changed and looks at only those again.

Guarantees:
- A watch is only ever added through a directory fd the filesystem layer opened beneath the
  workspace (the listing walk hands them over, `WorkspaceRoot.iter_notes(on_folder=...)`): the
  path given to inotify_add_watch is `/proc/self/fd/N`, the magic link to that very directory, so
  no name of the workspace is resolved again and nothing outside it is watched. The fd is not
  kept: the watch holds the directory's inode, not a handle to read it.
- Events only ever produce a folder path as the walk named it plus an entry name from the kernel;
  the caller looks at that entry again through the filesystem layer (`WorkspaceRoot.note_entry`,
  the listing's rules for one entry), which decides what is a note. The watch decides nothing
  about access.
- No change is missed (for a caller that walks on `stale` and otherwise looks again at the ids
  `take()` reports): a folder's watch is added before it is listed; `take().stale` is True when
  anything could have been missed or renamed (a folder created, removed, moved or replaced, a
  watched folder moved out or unmounted, the kernel's event queue overflowing, a watch that could
  not be added, a fork), and on its own `MAX_AGE_SECONDS` after the walk: inotify does not tell a
  folder's watch of a link count changed through another name (a hard link made from outside)
  or of writes through a shared memory mapping, so those are caught by the next walk (and any
  result is re-checked before it is returned anyway). After `reset()` the next walk starts over.
- Bounded: at most `MAX_WATCHES` folders (beyond it the watch is incomplete and so always stale:
  every query walks the workspace, as without inotify), events read `READ_BYTES` at a time, at most
  `MAX_NAMES` names remembered between queries (beyond it: stale).

Does not: see changes made on another host through a network filesystem (inotify reports only
this host's; the full walk at most every MAX_AGE_SECONDS catches them: docs/deploy.md), or work
without /proc (then nothing is ever primed and every query walks the workspace: slower, never
staler). A renamed folder is not followed: it makes the watch stale.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct
import threading
import time
from dataclasses import dataclass, field

from ..clib import inotify, inotify_missing

log = logging.getLogger("fs_notes.fs")

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_EXCL_UNLINK = 0x4000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

ENTRY_EVENTS = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO
ENTRY_EVENTS |= IN_CREATE | IN_DELETE
SELF_EVENTS = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED
MASK = ENTRY_EVENTS | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK
# Entry events on a folder that change the tree's shape (ATTRIB and MODIFY of a subfolder do not).
_TREE_EVENTS = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO

MAX_AGE_SECONDS = 600.0
MAX_WATCHES = 65536
MAX_NAMES = 100_000
MAX_SUSPECTS = 256
READ_BYTES = 64 << 10
MAX_READS = 64  # per take: a queue longer than 4 MiB of events is as good as an overflow
_HEADER = struct.Struct("iIII")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class Changes:
    """What changed since the last `take()`: `stale` (walk everything), else the ids (folder
    path as walked + "/" + entry name, for *.md names) that were created, removed, written,
    moved in or out or had their attributes changed: to be looked at and read again, even if
    their stat looks the same (an edit within one clock tick)."""

    stale: bool
    names: frozenset[str] = field(default_factory=frozenset)


class FolderWatch:
    """The inotify watches of one workspace's folders (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd = -1
        self._pid = -1
        self._folders: dict[int, str] = {}  # watch descriptor -> folder path as walked
        self._stale = True
        self._complete = False  # the last walk watched every folder it listed, the top one too
        self._names: set[str] = set()
        # Ids that were not notes when last looked at for a reason no event will end (a hard
        # link made or a mount put over them from elsewhere): looked at again by every take.
        self._suspects: dict[str, None] = {}
        self._warned = False
        self._walked_at = 0.0

    # -- during a walk -----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every watch (a new inotify instance): the next walk adds them again."""
        with self._lock:
            self._close()
            self._stale = False
            self._complete = False
            self._names.clear()
            calls = inotify()
            if calls is None:
                self._unavailable(inotify_missing() or "no inotify")
                return
            fd = calls.init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                self._unavailable(os.strerror(ctypes.get_errno()))
                return
            self._fd, self._pid = fd, os.getpid()
            log.debug("folder watch on (inotify): a search looks again only at what changed")

    def add(self, folder: str, dir_fd: int) -> None:
        """Watch `folder` (its path as the walk names it) through the walk's own fd `dir_fd`;
        called before the folder is listed. A failure leaves the watch incomplete."""
        with self._lock:
            if self._fd < 0 or len(self._folders) >= MAX_WATCHES:
                self._stale = True
                return
            calls = inotify()
            assert calls is not None
            path = f"/proc/self/fd/{dir_fd}".encode()
            wd = calls.add_watch(self._fd, path, MASK)
            if wd < 0:
                code = ctypes.get_errno()
                self._stale = True
                why = (
                    "the inotify limit (fs.inotify.max_user_watches)"
                    if code == errno.ENOSPC
                    else None
                )
                self._unavailable(why or os.strerror(code))
                return
            self._folders[wd] = folder

    def invalidate(self) -> None:
        """Something the caller took may not have been applied: the next take is stale."""
        with self._lock:
            self._stale = True

    def suspect(self, note_id: str, reason: str = "") -> None:
        """`note_id` is not a note now, for a reason no event will end (a hard link or a mount
        made from elsewhere, a result the re-check refused): every take names it again, until
        `cleared` (at most `MAX_SUSPECTS`, the oldest forgotten first)."""
        if reason not in ("", "hard-linked", "on another mount") or not _utf8(note_id):
            return
        with self._lock:
            self._suspects.pop(note_id, None)
            self._suspects[note_id] = None
            while len(self._suspects) > MAX_SUSPECTS:
                del self._suspects[next(iter(self._suspects))]

    def cleared(self, note_id: str) -> None:
        with self._lock:
            self._suspects.pop(note_id, None)

    def walked(self) -> None:
        """The walk listed everything: the watch is primed unless an add failed or it never saw
        the top folder."""
        with self._lock:
            self._complete = not self._stale and "" in self._folders.values()
            self._walked_at = time.monotonic()
            if not self._complete:
                self._stale = True

    # -- between walks -----------------------------------------------------------------------

    def take(self) -> Changes:
        """The changes since the last take (or walk), and forget them."""
        with self._lock:
            if self._fd >= 0 and self._pid != os.getpid():
                self._close()  # a forked copy shares the parent's queue: start over
                self._stale = True
            if self._fd < 0 or not self._complete:
                return Changes(stale=True)
            if time.monotonic() - self._walked_at > MAX_AGE_SECONDS:
                return Changes(stale=True)
            self._drain()
            if self._stale:
                return Changes(stale=True)
            out = Changes(False, frozenset(self._names) | frozenset(self._suspects))
            self._names.clear()
            return out

    def _drain(self) -> None:
        for _ in range(MAX_READS):
            if self._stale:
                return  # the next walk starts over (reset): the rest of the queue is moot
            try:
                data = os.read(self._fd, READ_BYTES)
            except BlockingIOError:
                return
            except OSError:
                self._stale = True
                return
            if not data:
                return
            pos = 0
            while pos + _HEADER.size <= len(data):
                wd, mask, _cookie, size = _HEADER.unpack_from(data, pos)
                raw = data[pos + _HEADER.size : pos + _HEADER.size + size].split(b"\0", 1)[0]
                pos += _HEADER.size + size
                self._event(wd, mask, raw)
        self._stale = True  # more than MAX_READS of events: walk instead

    def _event(self, wd: int, mask: int, raw: bytes) -> None:
        if mask & (IN_Q_OVERFLOW | SELF_EVENTS) or (mask & IN_ISDIR and mask & _TREE_EVENTS):
            self._stale = True  # lost events, a watched folder gone or moved, the tree reshaped
            return
        if mask & IN_ATTRIB and (not raw or mask & IN_ISDIR):
            self._stale = True  # a folder's mode or owner: it may be listable now, or no more
            return
        folder = self._folders.get(wd)
        if folder is None or not raw or mask & IN_ISDIR:
            return
        name = os.fsdecode(raw)
        note_id = folder + "/" + name if folder else name
        if name.endswith(".md") and _utf8(note_id):  # else never a note id: nothing to look at
            self._names.add(note_id)
        if len(self._names) > MAX_NAMES:
            self._stale = True

    def fileno(self) -> int:
        """The inotify descriptor, readable when an event is queued (-1: none; tools/live.py
        waits on it); only `take()` reads it."""
        with self._lock:
            return self._fd if self._pid == os.getpid() else -1

    # -- lifetime ----------------------------------------------------------------------------

    def _unavailable(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "folder watch unavailable (%s): every search walks its whole workspace", why
            )

    def _close(self) -> None:
        if self._fd >= 0 and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = -1
        self._folders.clear()

    def close(self) -> None:
        with self._lock:
            self._close()
            self._stale = True
