"""The private SQLite files fs-notes keeps in the state folder (the journal of changes, the
pending approvals): opened as this user's own, before SQLite opens them by name.

Guarantees: `open_private` refuses a symbolic link at the name (O_NOFOLLOW), anything but a
regular file, a file of another user (root may read any, read-only), one with a second name
(a hard link: the same bytes reachable from elsewhere) and one the group or others may read
(refused, not changed: a confined server may not call fchmod); `same_file` then checks that the
file SQLite opened by name is the one that was checked (device and inode).
`connect_private` does both around SQLite's own open, and leaves the checked descriptor open: the
caller closes it only after the connection (closing any descriptor of a file drops every POSIX
lock this process holds on it, SQLite's too; another process would then take the database for
unused and delete its write-ahead log under this one, whose later reads would miss what others
wrote).
Does not: cover the -wal and -shm files SQLite opens by name itself (it gives them the
database's mode; the state folder is 0700, so only this user can plant anything there), or
protect against this user's own processes.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import time
from collections.abc import Callable

__all__ = [
    "BUSY_MS",
    "connect_private",
    "initialized",
    "open_durable",
    "open_private",
    "same_file",
]

#: How long a statement waits for another process's lock before it fails.
BUSY_MS = 5000


def initialized(conn: sqlite3.Connection, setup: Callable[[sqlite3.Connection], None]) -> None:
    """`setup(conn)` (a version check, the schema) in one write transaction, which waits for
    another process doing the same (BEGIN IMMEDIATE takes the write lock first: no upgrade
    from a read lock that SQLite would refuse at once to avoid a deadlock)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        setup(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def open_durable(
    path: str, setup: Callable[[sqlite3.Connection], None] | None = None
) -> sqlite3.Connection:
    """A connection to `path` as fs-notes keeps its private files: autocommit, write-ahead
    log, every commit fsynced, removed rows zeroed (secure_delete), no temporary files (the
    confined server may make none); then `setup` in one write transaction (`initialized`).
    Closed again if any of it fails."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
    if path != ":memory:":
        # Two servers starting at once on a new file: the switch to WAL can answer "locked"
        # without waiting (SQLite's deadlock guard skips the busy handler), so it is retried.
        deadline = time.monotonic() + BUSY_MS / 1000
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError:
                if time.monotonic() >= deadline:
                    conn.close()
                    raise
                time.sleep(0.02)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute("PRAGMA temp_store = MEMORY")
    if setup is not None:
        try:
            initialized(conn, setup)
        except BaseException:
            conn.close()
            raise
    return conn


def open_private(path: str, read_only: bool) -> int:
    """The file at `path` (made 0600 if missing, unless `read_only`), opened without following a
    link at its name: a regular file of this user (root may read any), with one link, that no
    other user may read; the caller closes the descriptor. PermissionError or FileNotFoundError
    saying which check failed."""
    flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    flags |= os.O_RDONLY if read_only else os.O_CREAT | os.O_RDWR
    fd = os.open(path, flags, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(errno.ENOENT, "not a regular file", path)
        if st.st_uid != os.geteuid() and not (read_only and os.geteuid() == 0):
            raise PermissionError(errno.EPERM, "owned by another user", path)
        if st.st_nlink != 1:
            raise PermissionError(errno.EPERM, "has another name (a hard link)", path)
        if stat.S_IMODE(st.st_mode) & 0o077:
            # (Refused, not changed: the server opens it confined, where fchmod is not allowed.)
            mode = oct(stat.S_IMODE(st.st_mode))[2:]
            raise PermissionError(
                errno.EPERM, f"others may read it (mode {mode}): make it 0600 (chmod 600)", path
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def same_file(fd: int, path: str, conn: sqlite3.Connection) -> None:
    """The file SQLite opened by name is the one `fd` checked (not one swapped in since)."""
    mine, named = os.fstat(fd), os.stat(path, follow_symlinks=False)
    if (mine.st_dev, mine.st_ino) != (named.st_dev, named.st_ino):
        conn.close()
        raise PermissionError(errno.EPERM, "replaced while it was being opened", path)


def connect_private(
    path: str, read_only: bool, connect: Callable[[], sqlite3.Connection]
) -> tuple[sqlite3.Connection, int]:
    """`connect()` on the private file at `path` (`open_private` first, `same_file` after):
    the connection and the checked descriptor, to be closed after the connection, never
    before. A path of ":memory:" is connected as it is (descriptor -1)."""
    if path == ":memory:":
        return connect(), -1
    fd = open_private(path, read_only)
    try:
        conn = connect()
        same_file(fd, path, conn)
    except BaseException:
        os.close(fd)
        raise
    return conn, fd
