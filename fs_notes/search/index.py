"""The full-text index of one workspace: SQLite FTS5 (it ships with Python's sqlite3; BM25
ranking, prefix queries and diacritics folding come with it, where a hand-written scan had none).

Guarantees:
- The index is a cache, never an authority. `refresh` is given the listing the filesystem layer
  just made (tools/context.py `NotesEnv.notes`: servable notes only, no hidden folder, no
  symlink, nothing outside) with each note's identity key; only notes whose key changed are read
  again (through the same layer), notes no longer listed are dropped. Edits made outside
  fs-notes are therefore picked up by the next search. The caller re-checks every result with
  the filesystem layer before returning it, and `forget`s one that changed.
- Ranking (`search`): a note whose title or file name is the query comes first; then BM25 over
  title (weight 10), tags (8), file name and path (6) and body (1), with any of the words
  matching (more and rarer ones rank higher), "quoted phrases" as phrases and the last word as a
  prefix
  (query.py). Case and diacritics are folded (unicode61, remove_diacritics 2).
- Bounded: at most `MAX_BODY_CHARS` of a note's text is indexed; a note over its workspace's read
  limit is indexed by its title only.
- The file is created 0600 by us, in the state folder (the replay database's), never in a
  workspace.

Does not: stem words, split scripts written without spaces (CJK) into words, or index links,
aliases and other properties (issue 14 asks for them; not yet). A `tag` filter keeps the notes
with that tag or one nested in it (tools/tags.py reads them).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .query import match_expression, plain

log = logging.getLogger("fs_notes.search")

MAX_BODY_CHARS = 256 << 10
PROGRESS_EVERY = 5000
#: Bumped when the schema changes: an index of another version is rebuilt from scratch.
VERSION = 2
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS doc (rid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL,"
    " key TEXT NOT NULL, title TEXT NOT NULL, stem TEXT NOT NULL, tags TEXT NOT NULL)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(title, name, tags, body,"
    " tokenize = 'unicode61 remove_diacritics 2', prefix = '2 3')",
)
# doc.tags: the note's tags, case-folded, each between spaces (" project/alpha work "), so that
# a tag and its nested ones are found with LIKE on " tag " and " tag/".
_RANKED = (
    "SELECT doc.id, doc.key, doc.title, snippet(fts, 3, '**', '**', '\u2026', 12),"
    " bm25(fts, 10.0, 6.0, 8.0, 1.0) AS score,"
    " (lower(doc.title) = :plain OR lower(doc.stem) = :plain) AS exact"
    " FROM fts JOIN doc ON doc.rid = fts.rowid"
    " WHERE fts MATCH :match AND (:folder = '' OR substr(doc.id, 1, length(:folder)) = :folder)"
    " AND (:tag = '' OR instr(doc.tags, ' ' || :tag || ' ') > 0"
    " OR instr(doc.tags, ' ' || :tag || '/') > 0)"
    " ORDER BY exact DESC, score, doc.id LIMIT :limit OFFSET :offset"
)


@dataclass(frozen=True)
class Hit:
    id: str
    key: str  # the identity key the note was indexed with
    title: str
    snippet: str
    score: float


def _names(note_id: str) -> tuple[str, str]:
    """(stem, searchable name and path) of a note id: "a/tps-report.md" -> ("tps-report",
    "tps report a tps-report")."""
    stem = note_id.rsplit("/", 1)[-1].removesuffix(".md")
    path = note_id.removesuffix(".md")
    spaced = "".join(" " if c in "/-_." else c for c in f"{stem} {path}")
    return stem, spaced


class NoteIndex:
    """One workspace's index, in the SQLite file `path` (None: in memory). Thread-safe."""

    def __init__(self, path: str | None) -> None:
        if path is not None:
            os.close(os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600))
        self._path = path or ":memory:"
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._conn = self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        if self._path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = OFF")  # a cache: a lost write is re-read next time
        if conn.execute("PRAGMA user_version").fetchone()[0] != VERSION:
            conn.execute("DROP TABLE IF EXISTS doc")  # a cache of another shape: start over
            conn.execute("DROP TABLE IF EXISTS fts")
            conn.execute(f"PRAGMA user_version = {VERSION}")
        for statement in _SCHEMA:
            conn.execute(statement)
        return conn

    def _connection(self) -> sqlite3.Connection:
        if os.getpid() != self._pid:  # after fork (the server's private view): a new one
            self._pid = os.getpid()
            self._conn = self._connect()
        return self._conn

    def refresh(
        self,
        listed: Iterable[tuple[str, str]],
        load: Callable[[str], tuple[str, str, list[str]] | None],
    ) -> int:
        """Bring the index in line with `listed` ((id, identity key) of every servable note);
        `load(id)` gives (title, text, tags), or None for a note that cannot be read now. Returns
        how many notes were (re)indexed."""
        with self._lock:
            conn = self._connection()
            known = dict(conn.execute("SELECT id, key FROM doc"))
            seen: set[str] = set()
            changed = 0
            conn.execute("BEGIN")
            try:
                for note_id, key in listed:
                    seen.add(note_id)
                    if known.get(note_id) == key:
                        continue
                    self._drop(conn, note_id)
                    loaded = load(note_id)
                    if loaded is not None:
                        self._add(conn, note_id, key, *loaded)
                    changed += 1
                    if changed % PROGRESS_EVERY == 0:
                        log.info("search index: %d notes indexed so far", changed)
                for gone in known.keys() - seen:
                    self._drop(conn, gone)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        if changed >= PROGRESS_EVERY:
            log.info("search index: %d notes indexed", changed)
        return changed

    @staticmethod
    def _drop(conn: sqlite3.Connection, note_id: str) -> None:
        row = conn.execute("SELECT rid FROM doc WHERE id = ?", (note_id,)).fetchone()
        if row is not None:
            conn.execute("DELETE FROM fts WHERE rowid = ?", (row[0],))
            conn.execute("DELETE FROM doc WHERE rid = ?", (row[0],))

    @staticmethod
    def _add(
        conn: sqlite3.Connection, note_id: str, key: str, title: str, text: str, tags: list[str]
    ) -> None:
        stem, name = _names(note_id)
        folded = " " + " ".join(t.casefold() for t in tags) + " "
        rid = conn.execute(
            "INSERT INTO doc (id, key, title, stem, tags) VALUES (?, ?, ?, ?, ?)",
            (note_id, key, title, stem, folded),
        ).lastrowid
        words = " ".join(t.replace("/", " ").replace("-", " ") for t in tags)
        conn.execute(
            "INSERT INTO fts (rowid, title, name, tags, body) VALUES (?, ?, ?, ?, ?)",
            (rid, title, name, words, text[:MAX_BODY_CHARS]),
        )

    def forget(self, note_id: str) -> None:
        """Drop one note (it changed since it was indexed: the next refresh reads it again)."""
        with self._lock:
            self._drop(self._connection(), note_id)

    def search(
        self, query: str, *, limit: int, offset: int = 0, folder: str = "", tag: str = ""
    ) -> list[Hit]:
        """The best `limit` matches after `offset` (see the module docstring); [] when the query
        holds no word."""
        expression = match_expression(query)
        if expression is None:
            return []
        prefix = folder.rstrip("/") + "/" if folder else ""
        params = {"match": expression, "plain": plain(query), "folder": prefix,
                  "tag": tag.casefold(), "limit": limit, "offset": offset}  # fmt: skip
        with self._lock:
            rows = self._connection().execute(_RANKED, params).fetchall()
        return [Hit(r[0], r[1], r[2], r[3], float(r[4])) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
