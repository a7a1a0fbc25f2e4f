"""What fs-notes keeps on disk, and whose folder each search index is: the one home of the names.

Where (docs/interface.md, README "What fs-notes keeps on disk"):
- the state folder: `$XDG_STATE_HOME/fs-notes` (else `~/.local/state/fs-notes`), or --state-dir,
  or the folder of --replay-db. It holds the replay database (`replay.sqlite3`, -wal, -shm),
  the kept key ring (`state.keys`) and, per workspace, a search index
  (`search-<digest>.sqlite3`, -wal, -shm) with its record (`search-<digest>.json`);
- the configuration folder: `$XDG_CONFIG_HOME/fs-notes` (else `~/.config/fs-notes`), where
  `fs-notes init` writes `policy.toml` and `state.keys`.

Guarantees:
- An index's name is a digest of its workspace's name and folder (`index_name`); its record
  names both, so `fs-notes forget FOLDER` and `--stale` can tell whose it is. `serve` writes the
  record (whole: a temporary file linked into place, 0600, never through a symlink) and holds a
  shared `flock` on it for as long as it runs (`claim`), and touches it at start and at stop:
  its modification time is when the folder was last served.
- `Held`: a removal takes the exclusive lock without waiting (a running server's shared one
  refuses it), and also refuses an index some process has open (SQLite's own lock on the -shm
  file: its "dead man switch" byte), so an index a running server uses, even one started by an
  older fs-notes that kept no record, is never removed.
- Only regular files whose names are an index's are ever removed, by name beneath the state
  folder's descriptor (opened without following a symlink): a symbolic link there is never
  followed, and nothing outside the folder is touched.

Does not: know indexes kept in other state folders (each --state-dir is its own), remove the
replay database or the key ring (they are not per folder: see forget.py), or lock against a
server that opens an index after the check (a server takes its lock before it opens one, and
waits for a removal in progress to end).
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

APP = "fs-notes"
REPLAY_NAME = "replay.sqlite3"
KEYS_NAME = "state.keys"
POLICY_NAME = "policy.toml"
#: The files of one SQLite database besides the main one.
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")
_INDEX = re.compile(r"search-([0-9a-f]{16})\.(sqlite3(?:-wal|-shm|-journal)?|json)")
MAX_RECORD_BYTES = 1 << 16
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


@dataclass
class IndexFiles:
    """One index in a state folder: its digest, its files (name -> bytes) and its record."""

    digest: str
    files: dict[str, int]
    workspace: str | None = None  # None: no record (made before records were kept)
    folder: str | None = None
    last_seen: float | None = None  # the record's mtime, else the newest file's
    links: tuple[str, ...] = ()  # names that are symbolic links (never followed or removed)

    @property
    def size(self) -> int:
        return sum(self.files.values())


def open_folder(path: str) -> int:
    """The state folder's descriptor, never through a symlink (OSError; ELOOP/ENOTDIR)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def scan(dir_fd: int) -> list[IndexFiles]:
    """The indexes in the state folder `dir_fd`, sorted by digest."""
    found: dict[str, IndexFiles] = {}
    links: dict[str, list[str]] = {}
    for name in os.listdir(dir_fd):
        match = _INDEX.fullmatch(name)
        if match is None:
            continue
        digest = match.group(1)
        entry = found.setdefault(digest, IndexFiles(digest, {}))
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            links.setdefault(digest, []).append(name)
            continue
        entry.files[name] = st.st_size
        if name.endswith(".json"):
            entry.last_seen = st.st_mtime
            _read_record(dir_fd, name, entry)
        elif entry.workspace is None:
            entry.last_seen = max(entry.last_seen or 0.0, st.st_mtime)
    for digest, names in links.items():
        found[digest].links = tuple(sorted(names))
    return [found[d] for d in sorted(found) if found[d].files or found[d].links]


def _read_record(dir_fd: int, name: str, entry: IndexFiles) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        data = json.loads(os.read(fd, MAX_RECORD_BYTES).decode("utf-8"))
    except (OSError, ValueError):
        return
    finally:
        os.close(fd)
    if not isinstance(data, dict):
        return
    workspace, folder = data.get("workspace"), data.get("folder")
    # A record is believed only if it names the index it sits beside.
    if (
        isinstance(workspace, str)
        and isinstance(folder, str)
        and index_digest(workspace, folder) == entry.digest
    ):
        entry.workspace, entry.folder = workspace, folder


def in_use(dir_fd: int, digest: str) -> bool:
    """Whether a process has this index open: SQLite's read lock on the -shm file's DMS byte
    (every connection to a WAL database holds it while connected)."""
    try:
        fd = os.open(
            f"search-{digest}.sqlite3-shm",
            os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
            dir_fd=dir_fd,
        )
    except FileNotFoundError:
        return False
    try:
        # struct flock: l_type, l_whence, l_start, l_len, l_pid (Linux, 64-bit off_t)
        query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, _SHM_DMS, 1, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        kind: int = struct.unpack("hhqqi4x", answer)[0]
        return kind != fcntl.F_UNLCK
    finally:
        os.close(fd)


class Held(Exception):
    """The index is used by a running server."""


@contextlib.contextmanager
def exclusive(dir_fd: int, entry: IndexFiles) -> Iterator[None]:
    """Hold the index's record locked exclusively (without waiting) while its files are
    removed; Held if a running server holds it or has the index open."""
    fd = None
    if entry.workspace is not None:
        try:
            fd = os.open(
                record_name(entry.digest),
                os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=dir_fd,
            )
        except FileNotFoundError:
            fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise Held("a running fs-notes server holds it") from None
                raise
        if in_use(dir_fd, entry.digest):
            raise Held("a running process has it open")
        yield
    finally:
        if fd is not None:
            os.close(fd)


def remove(dir_fd: int, entry: IndexFiles) -> dict[str, int]:
    """Remove the index's regular files (the record last); name -> bytes of what was removed.
    A file that changed into something else since the scan is left (never followed)."""
    removed: dict[str, int] = {}
    names = sorted(entry.files, key=lambda n: n.endswith(".json"))  # the record last
    for name in names:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        os.unlink(name, dir_fd=dir_fd)
        removed[name] = st.st_size
    return removed


class Claim:
    """What a running server holds on the indexes of its workspaces: a shared lock on each
    index's record, written if missing and written again (the same bytes, through the fd
    opened at start-up: no utimensat, which the confined server may not call) now and at
    `release`, so that its modification time says when the folder was last served."""

    def __init__(self) -> None:
        self._held: list[tuple[int, bytes]] = []

    def take(self, state_dir: str, workspace: str, folder: str) -> None:
        """Claim the index of `workspace` at `folder` in `state_dir` (OSError if it cannot)."""
        dir_fd = open_folder(state_dir)
        try:
            digest = index_digest(workspace, folder)
            name = record_name(digest)
            body = json.dumps({"workspace": workspace, "folder": folder}).encode()
            for _ in range(8):  # a removal in progress: its record goes, then ours is made
                _write_record(dir_fd, name, body)
                fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH)  # waits for a removal holding it
                    now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    os.close(fd)
                    continue
                except BaseException:
                    os.close(fd)
                    raise
                if os.path.samestat(os.fstat(fd), now):
                    self._held.append((fd, body))
                    _touch(fd, body)
                    return
                os.close(fd)
            raise OSError(errno.EBUSY, f"{name}: replaced again and again")
        finally:
            os.close(dir_fd)

    def release(self) -> None:
        """Touch each record (the folder was served until now) and let the locks go."""
        for fd, body in self._held:
            _touch(fd, body)
            os.close(fd)
        self._held.clear()


def _touch(fd: int, body: bytes) -> None:
    with contextlib.suppress(OSError):
        os.pwrite(fd, body, 0)


def _write_record(dir_fd: int, name: str, body: bytes) -> None:
    """The record, whole, 0600, if none is there (a temporary file linked into place)."""
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            return
        raise OSError(errno.EEXIST, f"{name} is not a regular file")
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
    try:
        try:
            os.write(fd, body)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another server made it meanwhile
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    finally:
        os.unlink(tmp, dir_fd=dir_fd)
