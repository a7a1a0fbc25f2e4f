"""The spent-nonce store that makes a deletion confirmation single-use.

Guarantees: `claim(nonce, ...)` returns True for at most one caller, across every thread, every
`ReplayStore` instance and every process on this machine that opens the same SQLite file (one
`BEGIN IMMEDIATE` transaction: prune, then insert-if-absent; the nonce is the PRIMARY KEY). A
nonce is never removed before its expiry plus `RETENTION_MARGIN` (so a wall clock stepped back a
little cannot resurrect an expired token whose nonce was pruned). When the table holds `max_rows`
unexpired nonces, `claim` raises `ReplayStoreFull`: it fails closed and never evicts a live nonce
(the bound reads a row count that triggers keep in the same transactions, not count(*), which
reads the whole table: ~1 ms per claim at 50,000 rows).
Any SQLite error propagates: the caller must treat an exception as "not claimed".

Durability: WAL journal with ``synchronous=NORMAL``: a claim is atomic and survives the crash of
any process, but a power loss (or kernel crash) can roll back the last committed claims. That
cannot revive a confirmation: every sealed state also carries the kernel's boot id and is refused
after a reboot (tools/delete.py), and losing committed data needs a reboot. This keeps an fsync
(milliseconds on a VM disk) off every confirmation.

Claim succeeded, deletion failed: the nonce stays spent. A confirmation is single-use whatever
happens next; the deletion itself is one atomic unlinkat, so nothing is half done; the user starts
over with a fresh notes_delete call, which gets a fresh nonce; the audit log records
"delete-failed". There is deliberately no `release`: a nonce is never un-spent.

Not guaranteed: exclusion across machines (SQLite over a network filesystem has unreliable
locks; use a local path), protection against someone who can write the database file (it lives
in a 0700 directory by default), or any check that the token is still valid (that is `state.py`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType

__all__ = [
    "RETENTION_MARGIN",
    "ReplayStore",
    "ReplayStoreFull",
    "default_replay_path",
]

RETENTION_MARGIN = 600.0
PRUNE_BATCH = 64
BUSY_TIMEOUT_MS = 10_000
WAL_ATTEMPTS = 10  # switching a new file to WAL, when another process does it at once

_NONCE_RE = re.compile(r"[0-9a-f]{32}")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS spent_nonce ("
    " nonce TEXT PRIMARY KEY NOT NULL,"
    " keep_until REAL NOT NULL"
    ") WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS spent_nonce_keep_until ON spent_nonce (keep_until)",
    # The row count, kept by triggers in the same transactions as the rows, so that the bound
    # check of a claim reads one row instead of counting the table (count(*) reads every page:
    # milliseconds per claim near max_rows). A file made before this table existed gets it,
    # with the count of the moment, in the schema's own transaction.
    "CREATE TABLE IF NOT EXISTS spent_count ("
    " id INTEGER PRIMARY KEY CHECK (id = 1),"
    " n INTEGER NOT NULL"
    ")",
    "INSERT OR IGNORE INTO spent_count (id, n) SELECT 1, count(*) FROM spent_nonce",
    "CREATE TRIGGER IF NOT EXISTS spent_nonce_added AFTER INSERT ON spent_nonce"
    " BEGIN UPDATE spent_count SET n = n + 1 WHERE id = 1; END",
    "CREATE TRIGGER IF NOT EXISTS spent_nonce_removed AFTER DELETE ON spent_nonce"
    " BEGIN UPDATE spent_count SET n = n - 1 WHERE id = 1; END",
)


class ReplayStoreFull(RuntimeError):
    """`max_rows` unexpired nonces are stored; the claim is refused rather than evict one."""


def default_replay_path(environ: Mapping[str, str] | None = None) -> str:
    """``$XDG_STATE_HOME/fs-notes/replay.sqlite3`` (else ``~/.local/state/...``), dir made 0700.

    A relative XDG_STATE_HOME is ignored, as the XDG base-directory spec requires. An existing
    ``fs-notes`` directory owned by this user is tightened to 0700; one that is a symlink, not a
    directory, or owned by someone else is refused (ValueError).
    """
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    os.makedirs(base, mode=0o700, exist_ok=True)
    directory = os.path.join(base, "fs-notes")
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{directory} is not a directory")
    if st.st_uid != os.geteuid():
        raise ValueError(f"{directory} is owned by another user")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(directory, 0o700)
    return os.path.join(directory, "replay.sqlite3")


def _journal_mode_wal(conn: sqlite3.Connection) -> object:
    """Switch to WAL. Two processes opening a new file at once can both want the lock the switch
    needs; SQLite then answers one of them "database is locked" at once, without its busy
    handler (it would deadlock): try again, a bounded number of times."""
    for attempt in range(WAL_ATTEMPTS):
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == WAL_ATTEMPTS - 1:
                raise
            time.sleep(0.02 * (attempt + 1))
    raise AssertionError("unreachable")


class ReplayStore:
    """Spent confirmation nonces in a SQLite file shared by every process that opens it."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        max_rows: int = 100_000,
        prune_batch: int = PRUNE_BATCH,
    ) -> None:
        if max_rows < 1 or prune_batch < 1:
            raise ValueError("max_rows and prune_batch must be positive")
        self._path = os.fspath(path)
        self._clock = clock
        self._max_rows = max_rows
        self._prune_batch = prune_batch
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._conn = self._connect()

    @property
    def path(self) -> str:
        return self._path

    def _connect(self) -> sqlite3.Connection:
        if self._path != ":memory:":
            # Create the file 0600 ourselves; SQLite gives its -wal/-shm files the same mode.
            os.close(os.open(self._path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600))
        conn = sqlite3.connect(
            self._path,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = _journal_mode_wal(conn)
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"replay store cannot use WAL (got {mode!r})")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _connection(self) -> sqlite3.Connection:
        # A SQLite connection must not be used across fork(): a child opens its own.
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._conn = self._connect()
        return self._conn

    def journal_mode(self) -> str:
        with self._lock:
            return str(self._connection().execute("PRAGMA journal_mode").fetchone()[0])

    def claim(self, nonce: str, expires_at: float) -> bool:
        """Spend `nonce`: True for the first caller ever, False if it was already spent.

        Raises ValueError for a malformed nonce or expiry, ReplayStoreFull when full of live
        nonces, sqlite3.Error on storage failure (never claimed in either case).
        """
        if not (isinstance(nonce, str) and _NONCE_RE.fullmatch(nonce)):
            raise ValueError("nonce must be 32 lowercase hex characters")
        if not (isinstance(expires_at, int | float) and math.isfinite(expires_at)):
            raise ValueError("expires_at must be a finite number")
        keep_until = float(expires_at) + RETENTION_MARGIN
        with self._lock:
            conn = self._connection()
            now = float(self._clock())
            conn.execute("BEGIN IMMEDIATE")
            try:
                won = self._claim_locked(conn, nonce, keep_until, now)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        if won is None:
            raise ReplayStoreFull(f"replay store holds {self._max_rows} unexpired nonces")
        return won

    def _claim_locked(
        self, conn: sqlite3.Connection, nonce: str, keep_until: float, now: float
    ) -> bool | None:
        """Inside the write transaction: prune a bounded batch, then insert unless the nonce is
        there already or the table is full (one statement); None when full."""
        conn.execute(
            "DELETE FROM spent_nonce WHERE nonce IN (SELECT nonce FROM spent_nonce"
            " WHERE keep_until < ? ORDER BY keep_until LIMIT ?)",
            (now, self._prune_batch),
        )
        inserted = conn.execute(
            "INSERT INTO spent_nonce (nonce, keep_until) SELECT ?, ?"
            " WHERE (SELECT n FROM spent_count WHERE id = 1) < ?"
            " ON CONFLICT (nonce) DO NOTHING",
            (nonce, keep_until, self._max_rows),
        ).rowcount
        if inserted == 1:
            return True
        if conn.execute("SELECT 1 FROM spent_nonce WHERE nonce = ?", (nonce,)).fetchone():
            return False
        return None

    def is_spent(self, nonce: str) -> bool:
        """Whether `nonce` is recorded as spent (pruned nonces are long expired)."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT 1 FROM spent_nonce WHERE nonce = ?", (nonce,))
                .fetchone()
            )
        return row is not None

    def __len__(self) -> int:
        with self._lock:
            (rows,) = self._connection().execute("SELECT count(*) FROM spent_nonce").fetchone()
        return int(rows)

    def close(self) -> None:
        with self._lock:
            if os.getpid() == self._pid:
                self._conn.close()

    def __enter__(self) -> ReplayStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
