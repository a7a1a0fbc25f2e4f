"""What fs-notes keeps on disk, and whose folder each search index is: the one home of the names.

Where (docs/interface.md, README "What fs-notes keeps on disk"):
- the state folder: `$XDG_STATE_HOME/fs-notes` (else `~/.local/state/fs-notes`), or --state-dir,
  or the folder of --replay-db. It holds the replay database (`replay.sqlite3`, -wal, -shm),
  the kept key ring (`state.keys`) and, per workspace, a search index
  (`search-<digest>.sqlite3`, -wal, -shm) with its record (`search-<digest>.json`) and its
  lock file (`search-<digest>.lock`), and its journal of changes (`journal-<digest>.sqlite3`,
  -wal, -shm: what each change through fs-notes replaced, fs_notes/journal/store.py), which
  belongs to the same folder and is kept, claimed and removed with its index;
- the configuration folder: `$XDG_CONFIG_HOME/fs-notes` (else `~/.config/fs-notes`), where
  `fs-notes init` writes `policy.toml` and `state.keys`.

Guarantees (the attacker: another process of this user, or an earlier fs-notes that crashed,
which may have put anything at any name of the state folder):
- An index's name is a digest of its workspace's name and folder (`index_name`); its record
  names both, so `fs-notes forget FOLDER` and `--stale` can tell whose it is. A record is
  believed only if it is a regular file of at most 64 KiB holding a JSON object whose
  workspace and folder are valid Unicode text (no lone surrogate), the folder absolute, and
  whose digest is its file name's; any other is named with why (`IndexFiles.unbelieved`) and
  its index counts as one without a record.
- Lock and record are two files. `search-<digest>.lock` (empty, 0600) is the lock: `serve`
  holds a shared `flock` on it for as long as it runs (`Claim`), and nothing rewrites or
  replaces it, so a running server's lock stays on the inode every later claim and removal
  opens; only a removal holding it exclusively unlinks it (last), and a claim that waited
  checks that the name still is the inode it locked. The record is data only: `serve` keeps
  one that is already exactly its own (a regular file of this uid, one link), else writes it
  whole into a temporary file (0600, `O_EXCL`) renamed into place, so it never writes
  through a link planted at the name (the lock file is never written: whose it is, or how
  many links it has, does not matter to a lock); the fd of the file it checked or made stays
  open, and the same bytes are written through it again at stop (no utimensat, which the
  confined server may not call): the record's modification time is when the folder was last
  served.
- A claim never waits without end: it retries the lock without blocking for `LOCK_WAIT`
  seconds, then fails naming the lock file (the caller exits 2).
- `Held`: a removal opens (or makes) the lock file and takes the exclusive lock without
  waiting (a running server's shared one refuses it); it also refuses the lock an older
  fs-notes held on the record itself, and an index some process has open (SQLite's own lock
  on the -shm file: its "dead man switch" byte), so an index a running server uses, even one
  started by an older fs-notes, is never removed.
- Nothing that is not a regular file is ever opened on purpose, followed or removed: names
  are `lstat`ed first (a lock file is made with `O_EXCL` if missing) and every open is
  `O_NOFOLLOW|O_NONBLOCK` then `fstat`ed (a FIFO planted at a name never blocks), and a name
  that is not a regular file is reported as what it is (`kind`). Only an index's own regular
  files, by name beneath the state folder's descriptor (opened without following a symlink),
  are removed; nothing outside the folder is touched.
  A file with other hard links is not removed and not called removed (its data would stay),
  and never opened (`LINKED`): closing any fd of a file drops every POSIX lock this process
  holds on it, so a name planted as a hard link to the replay database's files would drop
  SQLite's locks of the running server's replay connection.
- A name something is mounted on (read from /proc/self/mountinfo, never by a stat of it) is
  never examined (`MOUNT_POINT`): a FUSE mount whose daemon stopped would hang a stat for
  ever. A claim or a removal of an index with a mount at one of its names fails naming it.
- Temporary records an interrupted write left (`.search-<digest>.json.<hex>.tmp`) are removed
  once older than `LEFTOVER_AGE` (a minute), regular files only.

Does not: know indexes kept in other state folders (each --state-dir is its own), remove the
replay database or the key ring (they are not per folder: see forget.py), close the race of a
name replaced between its `lstat` and its `unlink` (unlink takes a name, not an fd: the
other process could as well unlink it itself), keep a running server's claim against a
process that unlinks or replaces the lock file itself (this user's processes can), or say
exactly when a folder was last served when a second server replaced an unbelieved record
(the first then touches the replaced inode at stop), or lock out an older fs-notes (one that
kept no lock file) that opens an index after the check, or close the race of a hard link or a
mount put at a name between the check and the open. As root, the owner checks compare with
uid 0 and file permissions check nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import stat
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

APP = "fs-notes"
REPLAY_NAME = "replay.sqlite3"
KEYS_NAME = "state.keys"
POLICY_NAME = "policy.toml"
#: The files of one SQLite database besides the main one.
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")
#: A folder's files: its search index, record and lock, and its journal of changes
#: (journal-<digest>.sqlite3, fs_notes/journal/store.py), kept and removed together.
_INDEX = re.compile(
    r"search-([0-9a-f]{16})\.(?:sqlite3(?:-wal|-shm|-journal)?|json|lock)"
    r"|journal-([0-9a-f]{16})\.sqlite3(?:-wal|-shm|-journal)?"
)
#: A temporary record (`_write_record`'s), left behind if a write was interrupted.
_LEFTOVER = re.compile(r"\.search-([0-9a-f]{16})\.json\.[0-9a-f]{12}\.tmp")
MAX_RECORD_BYTES = 1 << 16
#: How long a claim retries a lock a removal holds (a removal holds it a moment only).
LOCK_WAIT = 5.0
#: A temporary record older than this (seconds) is left from an interrupted write.
LEFTOVER_AGE = 60.0
LEFTOVER_WHY = "a temporary record left by an interrupted write"
_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# SQLite's unix VFS: every connection to a WAL database holds a read lock on this byte of the
# -shm file while it has the file mapped (UNIX_SHM_DMS, 120 + 8 lock slots).
_SHM_DMS = 128


def state_home(environ: Mapping[str, str] | None = None) -> str:
    """The default state folder (nothing is made): a relative XDG_STATE_HOME is ignored, as
    the XDG base-directory spec requires."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, APP)


def config_home(environ: Mapping[str, str] | None = None) -> str:
    """The default configuration folder (`fs-notes init`'s): nothing is made."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, APP)


def index_digest(workspace: str, folder: str) -> str:
    return hashlib.sha256(f"{workspace}\0{folder}".encode()).hexdigest()[:16]


def index_name(workspace: str, folder: str) -> str:
    """The file name of the search index of `workspace` served from `folder` (absolute)."""
    return f"search-{index_digest(workspace, folder)}.sqlite3"


def record_name(digest: str) -> str:
    return f"search-{digest}.json"


def lock_name(digest: str) -> str:
    return f"search-{digest}.lock"


_KINDS = (
    (stat.S_ISLNK, "a symbolic link (never followed)"),
    (stat.S_ISDIR, "a directory (never entered)"),
    (stat.S_ISFIFO, "a FIFO (never opened)"),
    (stat.S_ISSOCK, "a socket (never opened)"),
    (stat.S_ISCHR, "a character device (never opened)"),
    (stat.S_ISBLK, "a block device (never opened)"),
)


def kind(mode: int) -> str:
    """What a file that is not a regular file is, as a report names it."""
    for test, what in _KINDS:
        if test(mode):
            return what
    return "not a regular file (never opened)"


@dataclass
class IndexFiles:
    """One index in a state folder: its digest, its regular files (name -> bytes), its record,
    the names that are not regular files and its leftover temporary records."""

    digest: str
    files: dict[str, int]
    workspace: str | None = None  # None: no record believed
    folder: str | None = None
    last_seen: float | None = None  # the record's mtime, else the newest file's
    others: dict[str, str] = field(default_factory=dict)  # name -> kind(): never opened
    leftovers: dict[str, tuple[int, float]] = field(default_factory=dict)  # name -> bytes, mtime
    unbelieved: str | None = None  # why its record is not believed (None: it is, or none)

    @property
    def size(self) -> int:
        return sum(self.files.values())


def open_folder(path: str) -> int:
    """The state folder's descriptor, never through a symlink (OSError; ELOOP/ENOTDIR)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


MOUNT_POINT = "a mount point (never entered)"
LINKED = "has another hard link (never opened)"


def mount_table() -> list[str]:
    """Every mount point of this process, in /proc/self/mountinfo's order (its fifth field, octal
    escapes undone); empty if it cannot be read."""
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            table = f.read()
    except OSError:
        return []
    points = []
    for line in table.splitlines():
        fields = line.split(b" ")
        if len(fields) >= 5:
            raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4])
            points.append(os.fsdecode(raw))
    return points


def mount_points(dir_fd: int) -> frozenset[str]:
    """The names in the folder `dir_fd` that something is mounted on, from /proc/self/mountinfo
    (never by a stat of the name: on a FUSE mount whose daemon stopped, that never returns)."""
    try:
        folder = os.readlink(f"/proc/self/fd/{dir_fd}")
    except OSError:
        return frozenset()
    names = set()
    for point in mount_table():
        parent, name = os.path.split(point)
        if parent == folder and name:
            names.add(name)
    return frozenset(names)


def _refuse_mounts(dir_fd: int, digest: str) -> None:
    """OSError naming the first of the index's names something is mounted on: a removal or a
    claim never examines one (a stopped FUSE daemon would hang it)."""
    names = [f"search-{digest}.sqlite3{s}" for s in SQLITE_SUFFIXES]
    names += [record_name(digest), lock_name(digest)]
    mounted = mount_points(dir_fd)
    for name in names:
        if name in mounted:
            raise OSError(errno.EPERM, f"{name} is {MOUNT_POINT}: unmount it")


def scan(dir_fd: int) -> list[IndexFiles]:
    """The indexes in the state folder `dir_fd`, sorted by digest. Never raises for one
    name: what cannot be read is reported on its entry. A mount point is never examined, and
    a file with another hard link never opened (closing any fd of a file drops every POSIX lock
    this process holds on it: a hard link to the replay database's would drop SQLite's)."""
    found: dict[str, IndexFiles] = {}
    mtimes: dict[str, float] = {}
    mounted = mount_points(dir_fd)
    for name in os.listdir(dir_fd):
        match = _INDEX.fullmatch(name) or _LEFTOVER.fullmatch(name)
        if match is None:
            continue
        digest = match.group(1) or match.group(2)
        entry = found.setdefault(digest, IndexFiles(digest, {}))
        if name in mounted:
            entry.others[name] = MOUNT_POINT
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError as exc:
            entry.others[name] = f"cannot be examined: {exc.strerror}"
            continue
        if not stat.S_ISREG(st.st_mode):
            entry.others[name] = kind(st.st_mode)
        elif name.startswith("."):
            entry.leftovers[name] = (st.st_size, st.st_mtime)
        else:
            entry.files[name] = st.st_size
            if name.endswith(".json"):
                linked = st.st_nlink != 1
                entry.unbelieved = LINKED if linked else _read_record(dir_fd, name, entry)
                if entry.unbelieved is None:
                    entry.last_seen = st.st_mtime
            elif not name.endswith(".lock"):
                mtimes[entry.digest] = max(mtimes.get(entry.digest, 0.0), st.st_mtime)
    for entry in found.values():
        if entry.workspace is None and entry.digest in mtimes:
            entry.last_seen = mtimes[entry.digest]
    return [found[d] for d in sorted(found)]


def _read_record(dir_fd: int, name: str, entry: IndexFiles) -> str | None:
    """Believe the record `name` (set entry.workspace and .folder) or say why not."""
    try:
        fd = _open_regular(dir_fd, name, os.O_RDONLY)
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if fd is None:  # replaced since its lstat
        return "replaced while it was read (never opened)"
    try:
        raw = os.read(fd, MAX_RECORD_BYTES + 1)
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    finally:
        os.close(fd)
    return _believe(raw, entry)


def _believe(raw: bytes, entry: IndexFiles) -> str | None:
    if len(raw) > MAX_RECORD_BYTES:
        return f"larger than {MAX_RECORD_BYTES // 1024} KiB"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return "not JSON text"
    if not isinstance(data, dict):
        return "not a JSON object"
    workspace, folder = data.get("workspace"), data.get("folder")
    if not isinstance(workspace, str) or not isinstance(folder, str):
        return "its workspace or folder is missing or not a string"
    try:
        digest = index_digest(workspace, folder)
    except UnicodeError:
        return "its workspace or folder is not valid Unicode (a lone surrogate)"
    if "\0" in folder or not os.path.isabs(folder):
        return "its folder is not an absolute path"
    if digest != entry.digest:  # a record is believed only if it names the index beside it
        return "it names another workspace or folder than its file name's"
    entry.workspace, entry.folder = workspace, folder
    return None


def _open_regular(dir_fd: int, name: str, flags: int) -> int | None:
    """`name` opened if it is a regular file with no other hard link (lstat first, fstat
    after: never a FIFO, a device, a symbolic link, nor another name of a file this process
    may hold POSIX locks on); None if it is missing or is something else."""
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(before.st_mode) or before.st_nlink != 1:
        return None
    try:
        fd = os.open(name, flags | _OPEN, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # replaced meanwhile
            return None
        raise
    if not os.path.samestat(before, os.fstat(fd)):
        os.close(fd)
        return None
    return fd


def in_use(dir_fd: int, digest: str) -> bool:
    """Whether a process has this index open: SQLite's read lock on the -shm file's DMS byte
    (every connection to a WAL database holds it while connected). A -shm that is not a
    regular file is not SQLite's (scan reports what it is): it is never opened."""
    fd = _open_regular(dir_fd, f"search-{digest}.sqlite3-shm", os.O_RDONLY)
    if fd is None:
        return False
    try:
        # struct flock: l_type, l_whence, l_start, l_len, l_pid (Linux, 64-bit off_t)
        query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, _SHM_DMS, 1, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        lock_kind: int = struct.unpack("hhqqi4x", answer)[0]
        return lock_kind != fcntl.F_UNLCK
    finally:
        os.close(fd)


class Held(Exception):
    """The index is used by a running server."""


def _open_lock(dir_fd: int, digest: str) -> tuple[int, bool]:
    """The index's lock file, opened, and whether this made it (0600). OSError naming it if
    it is not a regular file (whose it is does not matter: it is never written)."""
    name = lock_name(digest)
    for _ in range(8):  # made, or there: unless it is removed or replaced each time
        with contextlib.suppress(FileExistsError):  # O_EXCL: never through a symlink
            flags = os.O_RDONLY | os.O_CREAT | os.O_EXCL | _OPEN
            return os.open(name, flags, 0o600, dir_fd=dir_fd), True
        fd = _open_regular(dir_fd, name, os.O_RDONLY)
        if fd is not None:
            return fd, False
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):  # never opened
            raise OSError(errno.EPERM, f"{name} is {kind(st.st_mode)}: remove it")
        if st.st_nlink != 1:
            raise OSError(errno.EPERM, f"{name} {LINKED}: remove it")
    raise OSError(errno.EBUSY, f"{name} was removed again and again: retry")


def _try_flock(fd: int, how: int) -> bool:
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def _is_at(dir_fd: int, name: str, fd: int) -> bool:
    """Whether `name` still is the file `fd` has open."""
    try:
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return os.path.samestat(os.fstat(fd), now)


@contextlib.contextmanager
def exclusive(dir_fd: int, entry: IndexFiles) -> Iterator[None]:
    """Hold the index's lock file exclusively (without waiting; made if missing) while its
    files are removed; Held if a running server holds it (or an older server the record),
    or has the index open. OSError if the lock file is not one."""
    _refuse_mounts(dir_fd, entry.digest)
    fd, made = _open_lock(dir_fd, entry.digest)
    old = None
    try:
        if not _try_flock(fd, fcntl.LOCK_EX):
            made = False  # a server opened it first: it is the server's now
            raise Held("a running fs-notes server holds it")
        # an older fs-notes held its shared lock on the record itself, believed or not
        old = _open_regular(dir_fd, record_name(entry.digest), os.O_RDONLY)
        if old is not None and not _try_flock(old, fcntl.LOCK_EX):
            raise Held("a running fs-notes server holds it")
        if in_use(dir_fd, entry.digest):
            raise Held("a running process has it open")
        yield
    except Held:
        if made and _is_at(dir_fd, lock_name(entry.digest), fd):
            # the one this made and holds (a claim that opened it meanwhile opens it again)
            os.unlink(lock_name(entry.digest), dir_fd=dir_fd)
        raise
    finally:
        if old is not None:
            os.close(old)
        os.close(fd)


KEPT_LINKED = "another hard link keeps its data"
KEPT_RECORD = "kept while another file of its index stays"


def remove(dir_fd: int, entry: IndexFiles) -> tuple[dict[str, int], dict[str, str]]:
    """Remove the index's regular files, its old leftovers, then its record, then its lock
    file (last: a claim waiting on it then makes a new one); (removed: name -> bytes, kept:
    name -> why). Call it inside `exclusive`. A file that changed into something else since
    the scan is left (never followed), one with other hard links too."""
    removed: dict[str, int] = {}
    kept = remove_leftovers(dir_fd, entry, removed)
    tail = (record_name(entry.digest), lock_name(entry.digest))
    for name in [*sorted(n for n in entry.files if n not in tail), *tail]:
        if name == tail[0] and (name not in entry.files or any(n in entry.files for n in kept)):
            if name in entry.files:  # kept with what stays, so forget finds it again
                kept[name] = KEPT_RECORD
            continue
        why = _unlink_regular(dir_fd, name, removed)
        if why is not None:
            kept[name] = why
    for name in set(removed) - set(entry.files) - set(entry.leftovers):
        del removed[name]  # the lock file exclusive() made: not the user's to hear about
    return removed, kept


def remove_leftovers(
    dir_fd: int, entry: IndexFiles, removed: dict[str, int], *, now: float | None = None
) -> dict[str, str]:
    """Remove the entry's temporary records older than LEFTOVER_AGE (into `removed`); the
    kept ones, name -> why."""
    kept: dict[str, str] = {}
    now = time.time() if now is None else now
    for name, (_size, mtime) in sorted(entry.leftovers.items()):
        if now - mtime < LEFTOVER_AGE:
            kept[name] = "a temporary record less than a minute old (being written?)"
            continue
        why = _unlink_regular(dir_fd, name, removed)
        if why is not None:
            kept[name] = why
    return kept


def _unlink_regular(dir_fd: int, name: str, removed: dict[str, int]) -> str | None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return kind(st.st_mode)
    if st.st_nlink > 1:
        return KEPT_LINKED
    os.unlink(name, dir_fd=dir_fd)
    removed[name] = st.st_size
    return None


class Claim:
    """What a running server holds on the indexes of its workspaces: a shared lock on each
    index's lock file, and the fd of its record, written again (the same bytes) at
    `release`, so that its modification time says when the folder was last served."""

    def __init__(self) -> None:
        self._held: list[tuple[int, int, bytes]] = []  # lock fd, record fd, record bytes

    def take(self, state_dir: str, workspace: str, folder: str) -> None:
        """Claim the index of `workspace` at `folder` in `state_dir` (OSError if it cannot:
        its message names the file, beneath the state folder, and what to do)."""
        dir_fd = open_folder(state_dir)
        try:
            digest = index_digest(workspace, folder)
            body = json.dumps({"workspace": workspace, "folder": folder}).encode()
            _refuse_mounts(dir_fd, digest)
            lock = _lock_shared(dir_fd, digest)
            try:
                record = _write_record(dir_fd, record_name(digest), body)
            except BaseException:
                os.close(lock)
                raise
            self._held.append((lock, record, body))
        finally:
            os.close(dir_fd)

    def release(self) -> None:
        """Touch each record (the folder was served until now) and let the locks go."""
        for lock, record, body in self._held:
            with contextlib.suppress(OSError):
                os.pwrite(record, body, 0)
            os.close(record)
            os.close(lock)
        self._held.clear()


def _lock_shared(dir_fd: int, digest: str) -> int:
    """The index's lock file, locked shared: retried without blocking for LOCK_WAIT seconds
    while a removal holds it; opened again if it was removed or replaced meanwhile."""
    name = lock_name(digest)
    deadline = time.monotonic() + LOCK_WAIT
    locked = False
    while True:
        fd, _made = _open_lock(dir_fd, digest)
        try:
            locked = _try_flock(fd, fcntl.LOCK_SH)
            if locked and _is_at(dir_fd, name, fd):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if locked:  # it was there, locked, then gone: every time
        raise OSError(errno.EBUSY, f"{name} was removed or replaced again and again: retry")
    raise OSError(
        errno.EWOULDBLOCK,
        f"{name} is locked by another process, for {LOCK_WAIT:.0f} seconds now (a removal by "
        "fs-notes forget holds it a moment only): stop that process (fuser -v names it), "
        "then start the server again",
    )


def _write_record(dir_fd: int, name: str, body: bytes) -> int:
    """The record: the one there if it already is exactly `body` in a regular file of this
    uid with one link, else `body` written whole into a temporary file (0600) renamed into
    place. Its fd (read-write), the file checked or made."""
    try:
        fd = _open_regular(dir_fd, name, os.O_RDWR)
    except OSError:  # not ours to write (EACCES, say): replaced
        fd = None
    if fd is not None:
        st = os.fstat(fd)
        if (
            st.st_nlink == 1
            and st.st_uid == os.geteuid()
            and st.st_size == len(body)
            and os.pread(fd, len(body) + 1, 0) == body
        ):
            os.pwrite(fd, body, 0)  # served from now: its mtime
            return fd
        os.close(fd)
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
    try:
        if os.write(fd, body) != len(body):
            raise OSError(errno.EIO, f"{tmp}: a short write")
        try:
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except IsADirectoryError:
            raise OSError(errno.EISDIR, f"{name} is a directory: remove it") from None
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return fd
