"""A cache of each note's title and text, keyed by file identity.

An entry is used only while the file's (device, inode, size, mtime, ctime) is unchanged, so an
edit, a replacement or a rename never serves stale data. Text is cached up to a total budget;
beyond it, notes are read again on each search. The cache holds no handles and decides nothing
about access: every lookup starts from an authorized, contained read.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

TEXT_BUDGET_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class CachedNote:
    key: tuple[int, int, int, int, int]
    title: str
    text: str | None  # None when over the budget, not kept, or the note is over its read limit
    text_bytes: int
    large: bool = False  # over the workspace's read limit: the title comes from its first bytes
    version: str | None = None  # fs/version.py of the bytes the text came from, when known


class NoteCache:
    def __init__(self, budget: int = TEXT_BUDGET_BYTES) -> None:
        self._entries: dict[tuple[str, str], CachedNote] = {}
        self._budget = budget
        self._used = 0
        self._lock = threading.Lock()

    def get(
        self, workspace: str, note_id: str, key: tuple[int, int, int, int, int]
    ) -> CachedNote | None:
        entry = self._entries.get((workspace, note_id))
        return entry if entry is not None and entry.key == key else None

    def put(
        self,
        workspace: str,
        note_id: str,
        key: tuple[int, int, int, int, int],
        title: str,
        text: str | None,
        *,
        keep_text: bool = True,
        version: str | None = None,
    ) -> CachedNote:
        """Remember a note's title, and its text if it fits the budget and ``keep_text``
        (``text`` None: a note over its read limit, of which only the title is known)."""
        size = 2 * len(text) if text is not None else 0
        with self._lock:
            old = self._entries.get((workspace, note_id))
            if old is not None:
                self._used -= old.text_bytes
            if text is None:
                entry = CachedNote(key, title, None, 0, large=True)
            elif not keep_text or self._used + size > self._budget:
                entry = CachedNote(key, title, None, 0)
            else:
                entry = CachedNote(key, title, text, size, version=version)
            self._entries[(workspace, note_id)] = entry
            self._used += entry.text_bytes
        return entry

    def forget(self, workspace: str, note_id: str) -> None:
        with self._lock:
            old = self._entries.pop((workspace, note_id), None)
            if old is not None:
                self._used -= old.text_bytes
