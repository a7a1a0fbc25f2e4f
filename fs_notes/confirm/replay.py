"""The spent-nonce store that makes a deletion confirmation single-use, on one host: SQLite.

(The contract every replay store keeps is confirm/spent.py; this is the default store.)

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
(milliseconds on a VM disk) off every confirmation. Without a readable boot id (rounds/boot.py)
that argument fails, so the store fails closed: ``synchronous=FULL``, an fsync per claim.

Claim succeeded, deletion failed: the nonce stays spent. A confirmation is single-use whatever
happens next; the deletion itself is one atomic unlinkat, so nothing is half done; the user starts
over with a fresh notes_delete call, which gets a fresh nonce; the audit log records
"delete-failed". There is deliberately no `release`: a nonce is never un-spent.

Refused at open (`UnsafeLocation`): a database on a network or FUSE filesystem (NFS, SMB/CIFS,
FUSE, 9p, Ceph, AFS, ...: `NETWORK_FILESYSTEMS`), where SQLite's locks are not reliable and two
servers could both claim one nonce. A database that is not one, or fails SQLite's quick_check,
raises sqlite3.DatabaseError at open (serve then refuses to start).

Not guaranteed: exclusion across machines (use a local path here; several hosts share a Redis
store instead, confirm/redis_store.py), protection against someone who can
write the database file (it lives in a 0700 directory by default), or any check that the token is
still valid (that is `state.py`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType

from ..rounds.boot import boot_id
from .spent import RETENTION_MARGIN, EpochChanged, PrincipalQuotaFull, ReplayStoreFull, check_claim

__all__ = [
    "MAX_ROWS",
    "NETWORK_FILESYSTEMS",
    "RETENTION_MARGIN",
    "PrincipalQuotaFull",
    "ReplayStore",
    "ReplayStoreFull",
    "UnsafeLocation",
    "default_replay_path",
    "filesystem_type",
]

#: statfs(2) f_type of the filesystems whose file locks SQLite cannot rely on.
NETWORK_FILESYSTEMS: dict[int, str] = {
    0x6969: "NFS",
    0x517B: "SMB",
    0xFF534D42: "CIFS",
    0xFE534D42: "SMB2",
    0x65735546: "FUSE",
    0x01021997: "9p",
    0x00C36400: "Ceph",
    0x5346414F: "AFS",
    0x73757245: "Coda",
    0x0BD00BD0: "Lustre",
    0x20030528: "OrangeFS",
    0x01161970: "GFS2",
    0x7461636F: "OCFS2",
}


class UnsafeLocation(Exception):
    """The database would live where SQLite's locking is not reliable."""


def filesystem_type(path: str) -> int:
    """statfs(2) f_type of the filesystem holding `path` (OSError if it cannot be read)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first word
    if libc.statfs(os.fsencode(path), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int.from_bytes(buf.raw[: ctypes.sizeof(ctypes.c_long)], "little", signed=True) & (
        (1 << 32) - 1
    )

MAX_ROWS = 100_000
PRUNE_BATCH = 64
BUSY_TIMEOUT_MS = 3_000  # a claim holds the lock for milliseconds; a stuck holder is an error
WAL_ATTEMPTS = 10  # switching a new file to WAL, when another process does it at once

_SCHEMA_OBJECTS = frozenset(
    {"spent_nonce", "spent_nonce_keep_until", "spent_count", "spent_nonce_added",
     "spent_nonce_removed", "spent_by", "spent_by_added", "spent_by_removed"}
)  # fmt: skip


def _schema_complete(conn: sqlite3.Connection) -> bool:
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    return names >= _SCHEMA_OBJECTS
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
    # Per principal (issue 13): whose claim each row is, and a count per principal kept the
    # same way, so that one principal's quota is checked by reading one row.
    "CREATE TABLE IF NOT EXISTS spent_by ("
    " principal TEXT PRIMARY KEY NOT NULL,"
    " n INTEGER NOT NULL"
    ") WITHOUT ROWID",
    "CREATE TRIGGER IF NOT EXISTS spent_by_added AFTER INSERT ON spent_nonce"
    " BEGIN INSERT INTO spent_by (principal, n) VALUES (NEW.principal, 1)"
    " ON CONFLICT (principal) DO UPDATE SET n = n + 1; END",
    "CREATE TRIGGER IF NOT EXISTS spent_by_removed AFTER DELETE ON spent_nonce"
    " BEGIN UPDATE spent_by SET n = n - 1 WHERE principal = OLD.principal; END",
)


def default_replay_path(environ: Mapping[str, str] | None = None) -> str:
    """``$XDG_STATE_HOME/fs-notes/replay.sqlite3`` (else ``~/.local/state/...``), dir made 0700.

    A relative XDG_STATE_HOME is ignored, as the XDG base-directory spec requires. An existing
    ``fs-notes`` directory owned by this user is tightened to 0700; one that is a symlink, not a
    directory, or owned by someone else is refused (ValueError).
    """
    from ..statefolder import REPLAY_NAME, state_home  # where state lives: its one home

    directory = state_home(environ)
    os.makedirs(os.path.dirname(directory), mode=0o700, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{directory} is not a directory")
    if st.st_uid != os.geteuid():
        raise ValueError(f"{directory} is owned by another user")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(directory, 0o700)
    return os.path.join(directory, REPLAY_NAME)


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
    """Spent confirmation nonces in a SQLite file shared by every process that opens it (the
    contract is confirm/spent.py's `SpentNonces`)."""

    #: Its commits may roll back at a power loss: states bind the boot id instead of an epoch.
    binds_boot = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        max_rows: int = MAX_ROWS,
        per_principal: int | None = None,
        prune_batch: int = PRUNE_BATCH,
    ) -> None:
        if max_rows < 1 or prune_batch < 1 or (per_principal is not None and per_principal < 1):
            raise ValueError("max_rows, per_principal and prune_batch must be positive")
        self._per_principal = per_principal if per_principal is not None else max_rows
        self._path = os.fspath(path)
        self._clock = clock
        self._max_rows = max_rows
        self._prune_batch = prune_batch
        self._lock = threading.Lock()
        self._pid = os.getpid()
        #: Without the kernel's boot id the reboot check cannot run (rounds/boot.py): every
        #: claim is then fsync'ed before it counts.
        self.durable_claims = boot_id() is None
        self._conn = self._connect()

    @property
    def path(self) -> str:
        return self._path

    def describe(self) -> str:
        return f"SQLite {self._path}"

    def epoch(self) -> None:
        """None: this store has no epoch of its own (the boot id stands for it)."""
        return None

    def _connect(self) -> sqlite3.Connection:
        if self._path != ":memory:":
            # Where the file really is: a symbolic link (to it, or on the way) must not hide
            # a network filesystem.
            kind = NETWORK_FILESYSTEMS.get(
                filesystem_type(os.path.dirname(os.path.realpath(self._path)))
            )
            if kind is not None:
                raise UnsafeLocation(
                    f"it is on a {kind} filesystem, where SQLite's locks are not reliable "
                    "(two servers could accept one confirmation twice); use a local folder"
                )
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
            conn.execute(f"PRAGMA synchronous = {'FULL' if self.durable_claims else 'NORMAL'}")
            verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
            if verdict != "ok":
                raise sqlite3.DatabaseError(f"quick_check: {verdict}")
            if _schema_complete(conn):  # a reconnection (after fork): no write lock needed
                return conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(_SCHEMA[0])
                columns = {row[1] for row in conn.execute("PRAGMA table_info(spent_nonce)")}
                if "principal" not in columns:  # a file made before per-principal quotas
                    conn.execute(
                        "ALTER TABLE spent_nonce ADD COLUMN principal TEXT NOT NULL DEFAULT ''"
                    )
                for statement in _SCHEMA[1:]:
                    conn.execute(statement)
                conn.execute(
                    "INSERT OR IGNORE INTO spent_by (principal, n)"
                    " SELECT principal, count(*) FROM spent_nonce GROUP BY principal"
                )
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

    def claim(
        self, nonce: str, expires_at: float, principal: str = "", epoch: str | None = None
    ) -> bool:
        """Spend `nonce` for `principal`: True for the first caller ever, False if it was
        already spent.

        Raises ValueError for a malformed nonce or expiry, PrincipalQuotaFull when `principal`
        holds `per_principal` live nonces, ReplayStoreFull when the store is full of them,
        EpochChanged for a state sealed under another store's epoch (this one has none),
        sqlite3.Error on storage failure (never claimed in any of these cases).
        """
        keep_until = check_claim(nonce, expires_at)
        if epoch is not None:
            raise EpochChanged("the state was sealed for another replay store")
        with self._lock:
            conn = self._connection()
            now = float(self._clock())
            conn.execute("BEGIN IMMEDIATE")
            try:
                won = self._claim_locked(conn, nonce, keep_until, now, principal)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        if won == "quota":
            raise PrincipalQuotaFull(
                f"this principal holds {self._per_principal} unexpired confirmations"
            )
        if won is None or not isinstance(won, bool):
            raise ReplayStoreFull(f"replay store holds {self._max_rows} unexpired nonces")
        return won

    def _claim_locked(
        self, conn: sqlite3.Connection, nonce: str, keep_until: float, now: float, principal: str
    ) -> bool | str | None:
        """Inside the write transaction: prune a bounded batch, then insert unless the nonce is
        there already, the principal is at its quota or the table is full (one statement);
        "quota" or None when refused for one of the last two."""
        conn.execute(
            "DELETE FROM spent_nonce WHERE nonce IN (SELECT nonce FROM spent_nonce"
            " WHERE keep_until < ? ORDER BY keep_until LIMIT ?)",
            (now, self._prune_batch),
        )
        inserted = conn.execute(
            "INSERT INTO spent_nonce (nonce, keep_until, principal) SELECT ?, ?, ?"
            " WHERE (SELECT n FROM spent_count WHERE id = 1) < ?"
            " AND coalesce((SELECT n FROM spent_by WHERE principal = ?), 0) < ?"
            " ON CONFLICT (nonce) DO NOTHING",
            (nonce, keep_until, principal, self._max_rows, principal, self._per_principal),
        ).rowcount
        if inserted == 1:
            return True
        if conn.execute("SELECT 1 FROM spent_nonce WHERE nonce = ?", (nonce,)).fetchone():
            return False
        held = conn.execute("SELECT n FROM spent_by WHERE principal = ?", (principal,)).fetchone()
        if held is not None and held[0] >= self._per_principal:
            return "quota"
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
