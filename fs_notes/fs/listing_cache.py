"""A cache of sorted folder listings, keyed by the folder's identity and change times.

Holds only names and entry kinds, never fds or decisions: every cached entry is still opened or
lstat'ed with the usual checks (no symlink, same mount, regular file, single link) when listed, so
a stale entry can at worst be skipped, never followed. A folder changed in the last
`RACY_SECONDS` is not cached: timestamps are coarse (a clock tick), so a change in the same tick
as the listing would leave the times equal (git's "racily clean" problem).
"""

from __future__ import annotations

import os
import threading
import time

# (sort key: name or "name/", name, is_dir, the inode number the folder lists for it)
Entry = tuple[str, str, bool, int]

RACY_SECONDS = 2
MAX_FOLDERS = 8192


class ListingCache:
    def __init__(self) -> None:
        self._entries: dict[tuple[int, int], tuple[int, int, list[Entry]]] = {}
        self._lock = threading.Lock()

    def get(self, st: os.stat_result) -> list[Entry] | None:
        hit = self._entries.get((st.st_dev, st.st_ino))
        if hit is not None and hit[0] == st.st_mtime_ns and hit[1] == st.st_ctime_ns:
            return hit[2]
        return None

    def put(self, st: os.stat_result, entries: list[Entry]) -> None:
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
        if time.time_ns() - newest < RACY_SECONDS * 1_000_000_000:
            return
        with self._lock:
            if len(self._entries) >= MAX_FOLDERS:
                self._entries.clear()
            self._entries[(st.st_dev, st.st_ino)] = (st.st_mtime_ns, st.st_ctime_ns, entries)
