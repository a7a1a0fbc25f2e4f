"""The journal of changes: what each change through fs-notes replaced, kept so it can be undone.

One SQLite file per workspace in the state folder, `journal-<digest>.sqlite3` (the digest of the
workspace's name and folder, as its search index has: statefolder.py), or in memory for a server
without a state folder (then it lives as long as the server). Each row is one change: when, which
tool, which principal, the note's id before (and after, for a move), its version and bytes before
(none for a creation or a move) and its identity after, once the change went through.

Guarantees:
- `keep` commits the row before it returns (WAL, synchronous=FULL: on disk past a crash), and the
  door (journal/door.py) calls it before the change, so a change that went through has its row;
  `done` records the identity the change left, `drop` removes the row of a change that did not
  go through.
- The file is opened with O_NOFOLLOW (a symbolic link planted at its name is refused, never
  followed); SQLite gives its -wal and -shm files the same mode.
- Bounded: rows older than `days` go at each `keep`, when the journal is opened and once an hour
  while it is open; past `max_bytes` of kept text, the oldest rows go, but never one younger
  than `PROTECTED_S` (a day): a change that would need one of those gone is refused
  (`JournalFull`), so no writer can flush what another change kept by writing a lot.
  `secure_delete` zeroes what a removed row held in the file, and the write-ahead log is
  copied in and emptied after every removal (retried hourly while another reader holds it), so
  a pruned note's text is not left in the journal's free pages. `days` 0 keeps no bytes at all.
- The file is this user's, singly linked and private to the user (made 0600; a wider mode is
  refused), as seen on the descriptor that was opened, and is still the file at its name once
  SQLite has it open (device and inode compared).
- Ids are kept as their exact bytes (surrogate escapes as the file system's bytes), so every valid
  name, UTF-8 or not, comes back as it went in.

Does not: keep a note above the workspace's read limit (the door refuses that change instead),
know changes made by other programs (the watch and `fs-notes changes` see those), survive
`fs-notes forget` (which removes it with the folder's index), or protect the journal from this
user's other processes (the state folder is theirs too; it is kept private to the user only:
SQLite opens the -wal and -shm files by name, following a link this user planted there).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Literal

from ..fs.identity import Identity
from ..privatefile import BUSY_MS, connect_private, open_durable

__all__ = ["Entry", "Journal", "JournalFull", "Kind", "journal_name"]

Kind = Literal["create", "update", "delete", "move"]
#: A kept version younger than this is never pruned for space (only by age, past `days`).
PROTECTED_S = 86400.0
#: How often an open journal prunes by age (and retries a write-ahead log it could not empty).
PRUNE_EVERY_S = 3600.0
#: The shape of the file; another is started afresh (what it held is lost, and said so).
VERSION = 1

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS kept (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        id BLOB NOT NULL,
        new_id BLOB,
        kind TEXT NOT NULL,
        tool TEXT NOT NULL,
        principal TEXT NOT NULL,
        version TEXT,
        size INTEGER NOT NULL,
        content BLOB,
        after TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS kept_id ON kept (id, seq)",
    "CREATE INDEX IF NOT EXISTS kept_new_id ON kept (new_id, seq)",
    "CREATE INDEX IF NOT EXISTS kept_at ON kept (at)",
)


def journal_name(digest: str) -> str:
    """The journal's file name for a workspace's digest (statefolder.index_digest)."""
    return f"journal-{digest}.sqlite3"


def _key(note_id: str) -> bytes:
    return note_id.encode("utf-8", "surrogateescape")


def _id(raw: bytes | None) -> str | None:
    return None if raw is None else bytes(raw).decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Entry:
    """One kept change. `content` is None for a creation and a move (nothing was replaced);
    `after` is the identity the change left (None for a deletion, and while `finished` is
    False)."""

    seq: int
    at: float
    id: str
    new_id: str | None
    kind: Kind
    tool: str
    principal: str
    version: str | None
    size: int
    content: bytes | None
    after: Identity | None
    #: Whether the change was recorded as done (False: in flight, or the server stopped first).
    finished: bool = True

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "version": self.version,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)),
            "tool": self.tool,
            "principal": self.principal,
            "size": self.size,
            "kind": self.kind,
        }
        if self.new_id is not None:
            out["newId"] = self.new_id
        return out


_COLUMNS = "seq, at, id, new_id, kind, tool, principal, version, size, content, after"
_INSERT = f"INSERT INTO kept ({_COLUMNS}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)"  # noqa: S608
_BY_ID = f"SELECT {_COLUMNS} FROM kept WHERE id = ? OR new_id = ? ORDER BY seq DESC"  # noqa: S608
#: The newest change through fs-notes that left a note at this id (the kept bytes left out).
_LAST = (
    "SELECT seq, at, id, new_id, kind, tool, principal, version, size, NULL, after FROM kept "
    "WHERE (id = ? AND kind IN ('create', 'update')) OR new_id = ? ORDER BY seq DESC LIMIT 1"
)
#: (the kept bytes left out: an empty value stands for them)
_SINCE = (
    "SELECT seq, at, id, new_id, kind, tool, principal, version, size, "
    "CASE WHEN content IS NULL THEN NULL ELSE x'' END, after FROM kept WHERE at >= ? ORDER BY seq"
)


class JournalFull(Exception):
    """The change's row cannot be kept within `max_bytes` without pruning versions younger
    than `PROTECTED_S`: the change is refused, nothing pruned."""

    def __init__(self, max_bytes: int, *, alone: bool = False) -> None:
        super().__init__(max_bytes)
        self.max_bytes = max_bytes
        #: The change's own bytes are more than `max_bytes`: no pruning could make room.
        self.alone = alone


def _set_up(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA user_version").fetchone()[0] != VERSION:
        conn.execute("DROP TABLE IF EXISTS kept")
        conn.execute(f"PRAGMA user_version = {VERSION}")
    for statement in _SCHEMA:
        conn.execute(statement)


def _entry(row: tuple[Any, ...]) -> Entry:
    seq, at, raw_id, new_id, kind, tool, principal, version, size, content, after = row
    return Entry(
        int(seq),
        float(at),
        _id(raw_id) or "",
        _id(new_id),
        kind,
        str(tool),
        str(principal),
        None if version is None else str(version),
        int(size),
        None if content is None else bytes(content),
        _after(after),
        after is not None,
    )


def _after(raw: object) -> Identity | None:
    value = None if raw is None else json.loads(str(raw))
    return None if value is None else Identity.from_json(value)


class Journal:
    """One workspace's journal (thread-safe; reconnects after a fork)."""

    def __init__(self, path: str, *, days: float, max_bytes: int, read_only: bool = False) -> None:
        """`read_only` (`fs-notes changes`): an existing journal only (FileNotFoundError
        otherwise, or when a symbolic link is at its name), nothing written to it."""
        self.path = path
        self.days = days
        self.max_bytes = max_bytes
        self.read_only = read_only
        self._lock = threading.Lock()
        self._wal_dirty = False
        self._stop = threading.Event()
        self._pid = os.getpid()
        self._conn, self._fd = connect_private(path, read_only, self._connect)
        if not read_only:
            self.prune()
            threading.Thread(target=self._pruning, name="fs-notes-journal", daemon=True).start()

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            # Read-write on purpose, though nothing is written: SQLite then empties and removes
            # the -wal and -shm files it needed once the last connection closes.
            uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=rw"
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            if conn.execute("PRAGMA user_version").fetchone()[0] != VERSION:
                conn.close()
                raise sqlite3.DatabaseError("a journal of another version of fs-notes")
            return conn
        return open_durable(self.path, _set_up)

    def _db(self) -> sqlite3.Connection:
        if os.getpid() != self._pid:  # after fork (the server's private view): a new one
            self._pid = os.getpid()
            self._conn = self._connect()
        return self._conn

    @property
    def keeps(self) -> bool:
        """Whether this journal keeps anything (days 0: nothing can be undone)."""
        return self.days > 0

    def keep(
        self,
        *,
        note_id: str,
        kind: Kind,
        tool: str,
        principal: str,
        version: str | None = None,
        content: bytes | None = None,
        new_id: str | None = None,
        size: int | None = None,
    ) -> int:
        """Commit one change's row before the change is made; its sequence number."""
        kept = content if self.keeps else None
        with self._lock:
            db = self._db()
            db.execute("BEGIN IMMEDIATE")
            try:
                cur = db.execute(
                    _INSERT,
                    (time.time(), _key(note_id), None if new_id is None else _key(new_id), kind,
                     tool, principal, version, len(content) if content is not None else size or 0,
                     kept),
                )  # fmt: skip
                seq = int(cur.lastrowid or 0)
                pruned = self._prune(db, seq)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if pruned:
                self._checkpoint(db)
        return seq

    def prune(self) -> None:
        """Rows past the age bound go now (and a write-ahead log left full is emptied)."""
        with self._lock:
            db = self._db()
            gone = db.execute(
                "DELETE FROM kept WHERE at < ?", (time.time() - self.days * 86400,)
            ).rowcount
            if gone or self._wal_dirty:
                self._checkpoint(db)

    def _pruning(self) -> None:
        while not self._stop.wait(PRUNE_EVERY_S):
            with contextlib.suppress(sqlite3.Error):
                self.prune()

    def _checkpoint(self, db: sqlite3.Connection) -> None:
        """Rows were removed: their pages are zeroed in the file (secure_delete), but the
        write-ahead log still holds their old images, so it is copied in and emptied; while a
        reader (another server, `fs-notes changes`) holds it, that is retried on the hour."""
        if self.path == ":memory:":
            return
        busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        self._wal_dirty = bool(busy)

    def _prune(self, db: sqlite3.Connection, newest: int) -> bool:
        """Rows past the age bound, then the oldest (older than PROTECTED_S) past the size
        bound; JournalFull if that is not enough. Whether any went."""
        now = time.time()
        aged = db.execute("DELETE FROM kept WHERE at < ? AND seq != ?",
                          (now - self.days * 86400, newest)).rowcount  # fmt: skip
        total = db.execute("SELECT coalesce(sum(length(content)), 0) FROM kept").fetchone()[0]
        if total <= self.max_bytes:
            return aged > 0
        own = db.execute("SELECT coalesce(length(content), 0) FROM kept WHERE seq = ?",
                         (newest,)).fetchone()[0]  # fmt: skip
        if own > self.max_bytes:
            raise JournalFull(self.max_bytes, alone=True)
        for seq, length in db.execute(
            "SELECT seq, length(content) FROM kept WHERE seq != ? AND content IS NOT NULL "
            "AND at < ? ORDER BY seq",
            (newest, now - PROTECTED_S),
        ).fetchall():
            if total <= self.max_bytes:
                break
            db.execute("DELETE FROM kept WHERE seq = ?", (seq,))
            total -= length
        if total > self.max_bytes:
            raise JournalFull(self.max_bytes)
        return True

    def done(self, seq: int, after: Identity | None) -> None:
        """The change of row `seq` went through and left the note as `after` (None: removed)."""
        value = json.dumps(after.to_json()) if after is not None else "null"
        with self._lock:
            self._db().execute("UPDATE kept SET after = ? WHERE seq = ?", (value, seq))

    def drop(self, seq: int) -> None:
        """The change of row `seq` did not go through: its row goes (and with it, from the
        file and its log, the bytes it kept)."""
        with self._lock:
            db = self._db()
            if db.execute("DELETE FROM kept WHERE seq = ?", (seq,)).rowcount:
                self._checkpoint(db)

    def history(self, note_id: str) -> list[Entry]:
        """The note's kept rows, newest first: those that replaced its bytes under this id, and
        the moves that brought it here or took it away."""
        key = _key(note_id)
        with self._lock:
            rows = self._db().execute(_BY_ID, (key, key)).fetchall()
        return [_entry(r) for r in rows]

    def last_change(self, note_id: str) -> Entry | None:
        """The newest kept change that left a note at `note_id` (a creation, an update, or a
        move to it), without its kept bytes; None if there is none."""
        key = _key(note_id)
        with self._lock:
            row = self._db().execute(_LAST, (key, key)).fetchone()
        return None if row is None else _entry(row)

    def since(self, when: float) -> list[Entry]:
        """Every row from `when` on, oldest first, without the kept bytes (`content` is empty
        where bytes were kept)."""
        with self._lock:
            rows = self._db().execute(_SINCE, (when,)).fetchall()
        return [_entry(r) for r in rows]

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if os.getpid() == self._pid:
                self._conn.close()
            if self._fd >= 0:  # after the connection: its locks go with this descriptor
                os.close(self._fd)
                self._fd = -1
