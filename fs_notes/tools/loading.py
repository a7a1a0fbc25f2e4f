"""Reading a note's title and text through the note cache (notecache.py), and the cache's keys.

`load_note` is the one way a tool gets a note's title or text: it reads through the workspace's
root handle (layer 2) unless the cache holds an entry for the note's current identity. A note over
its workspace's read limit is read only far enough for its title. Decides nothing about access:
callers pass a note id that came from a listing or through the id rules.
"""

from __future__ import annotations

import os

from ..fs import Identity, TooLarge
from ..fs.version import note_version
from ..notes.titles import TITLE_SCAN_CHARS, title_of
from .context import NotesEnv, Opened
from .notecache import CachedNote

Key = tuple[int, int, int, int, int]


def ident_key(ident: Identity) -> Key:
    """The identity of a note as a cache key."""
    return (ident.dev, ident.ino, ident.size, ident.mtime_ns, ident.ctime_ns)


def key_text(key: Key) -> str:
    """A cache key as the search index stores it."""
    return ":".join(map(str, key))


def stat_key(st: os.stat_result) -> Key:
    """The identity of a listed note as a cache key (the fields of ``Identity.of(st)``)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def whole_utf8(data: bytes, *, at_start: bool, at_end: bool) -> tuple[int, int]:
    """(start, end) of the longest run of ``data`` made of whole UTF-8 sequences: up to three
    continuation bytes dropped at the front (unless ``at_start``) and an incomplete sequence at
    the back (unless ``at_end``)."""
    start = 0
    if not at_start:
        while start < min(3, len(data)) and 0x80 <= data[start] <= 0xBF:
            start += 1
    end = len(data)
    if not at_end:
        for back in range(1, min(4, end - start) + 1):
            byte = data[end - back]
            if byte < 0x80:
                break
            if byte >= 0xC0:  # a lead byte: keep its sequence only if it is complete
                need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
                if back < need:
                    end -= back
                break
    return start, end


def load_note(
    env: NotesEnv,
    ws: Opened,
    note_id: str,
    st: os.stat_result | Identity | None,
    *,
    need_text: bool = True,
) -> CachedNote:
    """The cached title/text of a note, (re)reading it through the root handle when needed
    (``st``: the note's lstat or Identity, whose fields key the cache; ``need_text=False``: the
    title is enough). A note over the workspace's read limit is cached with its title only
    (``large``)."""
    if st is not None:
        key = ident_key(st) if isinstance(st, Identity) else stat_key(st)
        hit = env.cache.get(ws.workspace.name, note_id, key)
        if hit is not None and (hit.text is not None or hit.large or not need_text):
            return hit
    name = note_id.rsplit("/", 1)[-1]
    try:
        data, ident = ws.root.read_note(note_id, max_bytes=ws.workspace.read_limit)
    except TooLarge:
        head, ident = ws.root.read_part(note_id, 0, 4 * TITLE_SCAN_CHARS)
        _, end = whole_utf8(head, at_start=True, at_end=False)
        title = title_of(head[:end].decode("utf-8", errors="replace"), name)
        return env.cache.put(ws.workspace.name, note_id, ident_key(ident), title, None)
    text = data.decode("utf-8", errors="replace")
    title, version = title_of(text, name), note_version(ident, data)  # from this one read
    return env.cache.put(
        ws.workspace.name, note_id, ident_key(ident), title, text, version=version
    )
