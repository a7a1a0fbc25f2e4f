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
- The file is made 0600 with O_NOFOLLOW (a symbolic link planted at its name is refused, never
  followed); SQLite gives its -wal and -shm files the same mode.
- Bounded: at each `keep`, rows older than `days` go, then the oldest until the kept bytes are
  within `max_bytes`; `secure_delete` zeroes what a removed row held in the file, so a pruned
  note's text is not left in the journal's free pages. `days` 0 keeps no bytes at all.
- Ids are kept as their exact bytes (surrogate escapes as the file system's bytes), so every valid
  name, UTF-8 or not, comes back as it went in.

Does not: keep a note above the workspace's read limit (the door refuses that change instead),
know changes made by other programs (the watch and `fs-notes changes` see those), survive
`fs-notes forget` (which removes it with the folder's index), or protect the journal from this
user's other processes (the state folder is theirs too; it is kept private to the user only).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Literal

from ..fs.identity import Identity

__all__ = ["Entry", "Journal", "Kind", "journal_name"]

Kind = Literal["create", "update", "delete", "move"]
BUSY_MS = 5000
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
#: (the kept bytes left out: an empty value stands for them)
_SINCE = (
    "SELECT seq, at, id, new_id, kind, tool, principal, version, size, "
    "CASE WHEN content IS NULL THEN NULL ELSE x'' END, after FROM kept WHERE at >= ? ORDER BY seq"
)


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

    def __init__(
        self, path: str, *, days: float, max_bytes: int, read_only: bool = False
    ) -> None:
        """`read_only` (`fs-notes changes`): an existing journal only (FileNotFoundError
        otherwise, or when a symbolic link is at its name), nothing written to it."""
        self.path = path
        self.days = days
        self.max_bytes = max_bytes
        self.read_only = read_only
        self._lock = threading.Lock()
        if path != ":memory:":
            flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
            flags |= os.O_RDONLY if read_only else os.O_CREAT | os.O_RDWR
            fd = os.open(path, flags, 0o600)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise FileNotFoundError(errno.ENOENT, "not a regular file", path)
            finally:
                os.close(fd)
        self._pid = os.getpid()
        self._conn = self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            return conn
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
        if self.path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("PRAGMA temp_store = MEMORY")  # the confined server makes no temporary files
        if conn.execute("PRAGMA user_version").fetchone()[0] != VERSION:
            conn.execute("DROP TABLE IF EXISTS kept")
            conn.execute(f"PRAGMA user_version = {VERSION}")
        for statement in _SCHEMA:
            conn.execute(statement)
        return conn

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
            if pruned and self.path != ":memory:":
                # The pages the pruned rows had are zeroed in the file (secure_delete), but the
                # write-ahead log still holds their old images: copy it in and empty it (a
                # reader of another server holding it leaves it for the next prune).
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return seq

    def _prune(self, db: sqlite3.Connection, newest: int) -> bool:
        """Rows past the age bound, then the oldest past the size bound; the newest stays.
        Whether any went."""
        aged = db.execute("DELETE FROM kept WHERE at < ? AND seq != ?",
                          (time.time() - self.days * 86400, newest)).rowcount  # fmt: skip
        total = db.execute("SELECT coalesce(sum(length(content)), 0) FROM kept").fetchone()[0]
        if total <= self.max_bytes:
            return aged > 0
        for seq, length in db.execute(
            "SELECT seq, coalesce(length(content), 0) FROM kept WHERE seq != ? ORDER BY seq",
            (newest,),
        ).fetchall():
            if total <= self.max_bytes:
                break
            db.execute("DELETE FROM kept WHERE seq = ?", (seq,))
            total -= length
        return True

    def done(self, seq: int, after: Identity | None) -> None:
        """The change of row `seq` went through and left the note as `after` (None: removed)."""
        value = json.dumps(after.to_json()) if after is not None else "null"
        with self._lock:
            self._db().execute("UPDATE kept SET after = ? WHERE seq = ?", (value, seq))

    def drop(self, seq: int) -> None:
        """The change of row `seq` did not go through: its row goes."""
        with self._lock:
            self._db().execute("DELETE FROM kept WHERE seq = ?", (seq,))

    def history(self, note_id: str) -> list[Entry]:
        """The note's kept rows, newest first: those that replaced its bytes under this id, and
        the moves that brought it here or took it away."""
        key = _key(note_id)
        with self._lock:
            rows = self._db().execute(_BY_ID, (key, key)).fetchall()
        return [_entry(r) for r in rows]

    def since(self, when: float) -> list[Entry]:
        """Every row from `when` on, oldest first, without the kept bytes (`content` is empty
        where bytes were kept)."""
        with self._lock:
            rows = self._db().execute(_SINCE, (when,)).fetchall()
        return [_entry(r) for r in rows]

    def close(self) -> None:
        with self._lock:
            if os.getpid() == self._pid:
                self._conn.close()
