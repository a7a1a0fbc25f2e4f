"""`serve --log-file FILE`: the log also written to a file, rotated by size, that the confined
server keeps writing.

The file and its backups (`FILE.1` ... `FILE.N`, N = `--log-file-backups`, default 3) are all
opened when the server starts, before it confines itself, and never by name again. Rotation
(when a record would take `FILE` past `--log-file-max-bytes`, default 10 MiB) happens inside
these open files: `FILE.N-1` is copied over `FILE.N`, ..., `FILE` over `FILE.1`, then `FILE` is
truncated, with pread/pwrite/ftruncate on the fds. So no rename, create or unlink happens after
start-up, and self-confinement (Landlock) needs no rule for the log's folder: the confined
server can write to these N+1 files and to nothing else there (docs/self-confinement.md).

Guarantees: each name is opened with O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC, created 0600 if missing; a
symlink planted at the name is refused (not followed), and so is anything that is not a regular
file (a FIFO would block the server), a file of another owner, or a file with more than one
hard link (a planted link to another file of ours would be appended to); an existing file is
appended to and its mode made 0600. A failure to open is a configuration error (exit 2, one
line) that leaves nothing half-done: the files this start created are removed again, and an
existing file's mode is changed only once all N+1 are open. A log file inside a served
workspace's folder is refused before anything is made (`refuse_inside`, exit 2). A failure to
write later is reported by logging's own handler error path (stderr) and
never stops the server. Records are formatted by the same formatter as stderr (logline.py), so
the file's lines are escaped the same way.

Does not: share a log file between two servers (each rotates on its own: use one file per
server), compress backups, keep anything across a rotation beyond N backups, or survive someone
else renaming or truncating the files (the server keeps writing to the files it opened).
Rotation costs a copy of at most N x max-bytes; it happens once per max-bytes of log.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import stat
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import ConfigError

DEFAULT_MAX_BYTES = 10 << 20
DEFAULT_BACKUPS = 3
MAX_BACKUPS = 20
MIN_MAX_BYTES = 4096
_CHUNK = 1 << 20


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:  # a symlink at the name (O_NOFOLLOW)
        return "is a symbolic link (refused)"
    if exc.errno == errno.EISDIR:
        return "is a folder, not a file"
    return exc.strerror or str(exc)


@dataclass
class _Opened:
    fd: int
    path: str
    created: bool  # made by this start (removed again if the start fails)
    stat: os.stat_result


def _open(path: str, *, append: bool) -> _Opened:
    """One of the files, opened (created 0600 if missing) and checked; its mode is set later,
    once all are open (`RotatingLogFile.__init__`). ConfigError if refused."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    if append:
        flags |= os.O_APPEND
    try:
        try:  # O_EXCL: whether this start made it (nothing is followed: a symlink is EEXIST)
            fd, created = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600), True
        except FileExistsError:
            fd, created = os.open(path, flags), False
    except OSError as exc:
        raise ConfigError(f"--log-file {path}: {_reason(exc)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"--log-file {path}: not a regular file")
        if st.st_uid != os.geteuid():
            raise ConfigError(f"--log-file {path}: owned by another user")
        if st.st_nlink != 1:
            raise ConfigError(f"--log-file {path}: has {st.st_nlink} hard links (refused)")
    except BaseException:
        os.close(fd)
        raise
    return _Opened(fd, path, created, st)


def _undo(opened: list[_Opened]) -> None:
    """A start that failed part-way: close what it opened and remove the files it created, each
    only if its name still holds the file it made (never one put there since)."""
    for item in opened:
        if item.created:
            with contextlib.suppress(OSError):
                if os.path.samestat(os.lstat(item.path), item.stat):
                    os.unlink(item.path)
        with contextlib.suppress(OSError):
            os.close(item.fd)


def refuse_inside(path: str, folders: Iterable[tuple[str, str]]) -> None:
    """ConfigError (exit 2) if `path` (the log file) is inside one of `folders` ((workspace name,
    folder path) of every workspace served): by path, symbolic links resolved, and by device
    and inode of the log's folder and each folder above it, so a second path to a workspace
    that is not a symbolic link (a bind mount, bindfs, a container's volume) is refused too.
    The log names note ids and principals, and a file there would be served (a name ending
    in .md is a note), watched (each line written would wake the search index) and readable by
    whoever may read the folder. Checked before anything is created."""
    where = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    above = _folders_above(os.path.dirname(where))
    for name, folder in folders:
        real = os.path.realpath(folder)
        try:
            st = os.stat(real)
            same = (st.st_dev, st.st_ino) in above
        except OSError:  # a workspace that cannot be examined: serve refuses it on its own
            same = False
        if same or os.path.commonpath([where, real]) == real:
            raise ConfigError(
                f'--log-file {path}: inside the folder of workspace "{name}" ({folder}), which '
                "is served: the log holds note ids and principal names; put it outside every "
                "workspace folder"
            )


def _folders_above(folder: str) -> set[tuple[int, int]]:
    """(st_dev, st_ino) of `folder` and of each folder above it, up to /."""
    seen: set[tuple[int, int]] = set()
    while True:
        with contextlib.suppress(OSError):
            st = os.stat(folder)
            seen.add((st.st_dev, st.st_ino))
        parent = os.path.dirname(folder)
        if parent == folder:
            return seen
        folder = parent


def _copy(src: int, dst: int) -> None:
    """`dst` becomes a copy of `src` (both by fd; `dst` is not O_APPEND)."""
    os.ftruncate(dst, 0)
    offset = 0
    while True:
        chunk = os.pread(src, _CHUNK, offset)
        if not chunk:
            return
        done = 0
        while done < len(chunk):
            done += os.pwrite(dst, chunk[done:], offset + done)
        offset += len(chunk)


class RotatingLogFile(logging.Handler):
    """A logging handler writing whole lines to `path`, rotated by size within its open files."""

    def __init__(
        self, path: str, max_bytes: int = DEFAULT_MAX_BYTES, backups: int = DEFAULT_BACKUPS
    ) -> None:
        super().__init__()
        self._write_lock = threading.Lock()
        self._fd = -1
        self._backups: list[int] = []
        if max_bytes < MIN_MAX_BYTES:
            raise ConfigError(f"--log-file-max-bytes must be at least {MIN_MAX_BYTES}")
        if not 0 <= backups <= MAX_BACKUPS:
            raise ConfigError(f"--log-file-backups must be 0 to {MAX_BACKUPS}")
        self.path = path
        self.max_bytes = max_bytes
        opened: list[_Opened] = []
        try:
            opened.append(_open(path, append=True))
            for n in range(1, backups + 1):
                try:
                    opened.append(_open(f"{path}.{n}", append=False))
                except ConfigError as exc:
                    raise ConfigError(
                        f"{exc} (rotated file {n} of --log-file {path}: nothing was created)"
                    ) from None
            for item in opened:  # all open: only now is anything of an existing file changed
                if stat.S_IMODE(item.stat.st_mode) != 0o600:
                    os.fchmod(item.fd, 0o600)
                os.set_blocking(item.fd, True)
        except BaseException:
            _undo(opened)
            raise
        self._fd = opened[0].fd
        self._backups = [item.fd for item in opened[1:]]
        self._size = opened[0].stat.st_size

    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + "\n").encode("utf-8", errors="backslashreplace")
            with self._write_lock:
                if self._size > 0 and self._size + len(data) > self.max_bytes:
                    self._rotate()
                os.write(self._fd, data)
                self._size += len(data)
        except Exception:
            self.handleError(record)

    def _rotate(self) -> None:
        chain = [self._fd, *self._backups]
        for newer, older in reversed(list(itertools.pairwise(chain))):
            _copy(newer, older)
        os.ftruncate(self._fd, 0)
        self._size = 0

    def _close_fds(self) -> None:
        for fd in [self._fd, *self._backups] if self._fd >= 0 else self._backups:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._backups = []

    def close(self) -> None:
        with self._write_lock:
            if self._fd >= 0:
                self._close_fds()
                self._fd = -1
        super().close()


def attach(
    path: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    backups: int = DEFAULT_BACKUPS,
    *,
    workspaces: Iterable[tuple[str, str]] = (),
) -> None:
    """Add the file to the root logger's handlers, beside stderr and formatted as it is
    (logline.install ran first). ConfigError if it is inside one of `workspaces` ((name,
    folder) of each workspace served) or cannot be opened safely."""
    root = logging.getLogger()
    path = os.path.abspath(path)
    refuse_inside(path, workspaces)
    handler = RotatingLogFile(path, max_bytes, backups)
    formatter = next((h.formatter for h in root.handlers if h.formatter is not None), None)
    if formatter is not None:
        handler.setFormatter(formatter)
    root.addHandler(handler)
