"""The one layout notation of the escape cases and the attacks (after Go's os.Root tests), its
builder, and the file snapshots that prove nothing escaped.

A layout is built in a root folder holding ``ws/`` (the workspace) and ``outside/``, with
``outside/secret.md`` always there (content: ``secret``, "SECRET" unless the caller says). One
entry per string, relative to the root:

    "ws/a/"                              a folder
    "ws/a/b.md"                          a regular file, content "inside"
    "ws/a/b.md: text"                    a regular file with that text
    "ws/l.md => ../outside/secret.md"    a symlink; the target is written verbatim
    "ws/h.md ~> outside/secret.md"       a hard link to an existing file (relative to the root)
    "ws/f.md |fifo"                      a FIFO
    "ws/s.md |socket"                    a bound unix socket
    "ws/d.md |nulldev"                   a character device 1:3, the null device (needs root)
    "ws/mnt |bind outside"               a folder on which the exercises' target bind-mounts
                                         ``outside`` (needs root; `build` only records it)

``{root}`` in an entry stands for the root's absolute path (no trailing slash). Guarantees:
nothing is created through a symlink, nor outside the root (an entry's path must be relative and
without '..'; a symlink's target is written verbatim: that is the attack); a snapshot reads file
content with O_NOATIME, so taking one never counts as a read. Does not: clean up (the caller
removes the whole temporary folder).
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

SECRET = "SECRET"  # noqa: S105 (the default content of outside/secret.md)
INSIDE = "inside"


class HostLimit(Exception):
    """The layout needs something this host or user cannot do (the attack is then n/a)."""


@dataclass
class Built:
    binds: list[tuple[str, str]] = field(default_factory=list)  # (source, mount point)


def _relative(entry_path: str) -> Path:
    path = Path(entry_path)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"layout entries must be relative and without '..': {entry_path!r}")
    return path


def _parents(root: Path, relative: Path) -> Path:
    """Create the parent folders of ``root/relative``, never through a symlink."""
    current = root
    for name in relative.parts[:-1]:
        current = current / name
        if current.is_symlink():
            raise ValueError(f"layout would create something through a symlink: {relative}")
        current.mkdir(exist_ok=True)
    return root / relative


def _socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) < 100:
            sock.bind(os.fsencode(path))
        else:  # sun_path is ~108 bytes: bind through /proc/self/fd of the parent
            parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                sock.bind(f"/proc/self/fd/{parent}/{path.name}")
            finally:
                os.close(parent)
    finally:
        sock.close()


def _nulldev(path: Path) -> None:
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError as exc:
        raise HostLimit(f"cannot create a device node here: {exc.strerror}") from None


_NODES = {" |fifo": os.mkfifo, " |socket": _socket, " |nulldev": _nulldev}


def secret_note(marker: str) -> str:
    """What ``outside/secret.md`` holds in an exercise run: a note titled with the run's marker."""
    return f"# {marker}\nnot yours\n"


def build(root: Path, layout: Iterable[str], secret: str = SECRET) -> Built:
    """Create ``root/ws``, ``root/outside/secret.md`` (holding ``secret``) and every entry."""
    built = Built()
    (root / "ws").mkdir(parents=True, exist_ok=True)
    (root / "outside").mkdir(exist_ok=True)
    (root / "outside" / "secret.md").write_text(secret, encoding="utf-8")
    for raw in layout:
        entry = raw.replace("{root}", str(root))
        node = next((suffix for suffix in _NODES if entry.endswith(suffix)), None)
        if " => " in entry:
            name, target = entry.split(" => ", 1)
            _parents(root, _relative(name)).symlink_to(target)
        elif " ~> " in entry:
            name, target = entry.split(" ~> ", 1)
            existing = root / _relative(target)
            os.link(existing, _parents(root, _relative(name)), follow_symlinks=False)
        elif node is not None:
            _NODES[node](_parents(root, _relative(entry.removesuffix(node))))
        elif " |bind " in entry:
            name, source = entry.split(" |bind ", 1)
            (root / _relative(name)).mkdir(parents=True, exist_ok=True)
            built.binds.append((str(root / _relative(source)), str(root / _relative(name))))
        elif entry.endswith("/"):
            _parents(root, _relative(entry) / "-")  # makes the folder itself
        else:
            name, sep, content = entry.partition(": ")
            _parents(root, _relative(name)).write_text(content if sep else INSIDE, "utf-8")
    return built


@dataclass(frozen=True)
class FileState:
    kind: str
    content: bytes
    ino: int
    mtime_ns: int
    ctime_ns: int
    atime_ns: int


def _kind(mode: int) -> str:
    for kind, test in (
        ("symlink", stat.S_ISLNK),
        ("fifo", stat.S_ISFIFO),
        ("socket", stat.S_ISSOCK),
        ("dir", stat.S_ISDIR),
        ("file", stat.S_ISREG),
    ):
        if test(mode):
            return kind
    return "other"


def file_kind(path: Path) -> str:
    """What ``path`` is, not following a symlink: "symlink", "fifo", "socket", "dir", "file",
    "other" or "missing"."""
    try:
        return _kind(path.lstat().st_mode)
    except FileNotFoundError:
        return "missing"


def _read_noatime(path: Path) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | os.O_NOATIME)
    except PermissionError:  # O_NOATIME needs ownership (or CAP_FOWNER)
        fd = os.open(path, flags)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def snapshot(path: Path) -> FileState | None:
    """The state of ``path`` (not following a symlink), or None if it does not exist."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    kind = _kind(st.st_mode)
    content = _read_noatime(path) if kind == "file" else b""
    return FileState(kind, content, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_atime_ns)


def prime_atime(path: Path) -> None:
    """Set the access time an hour before the modification time, so that under relatime the
    next read of the file (by anyone) moves it: a read becomes visible."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        os.utime(path, ns=(st.st_mtime_ns - 3600 * 10**9, st.st_mtime_ns), follow_symlinks=False)


def atime_detects_reads(scratch: Path) -> bool:
    """Whether a plain read moves a primed access time on this filesystem (relatime/strictatime
    yes; noatime no)."""
    probe = scratch / "atime-probe"
    probe.write_text("probe")
    prime_atime(probe)
    before = probe.lstat().st_atime_ns
    with open(probe, "rb") as f:
        f.read()
    try:
        return probe.lstat().st_atime_ns != before
    finally:
        probe.unlink()


def changed(before: FileState | None, after: FileState | None, *, reads: bool) -> str | None:
    """How a protected path changed ("read", "modified", ...), or None."""
    if before is None or after is None:
        return None if before == after else ("created" if before is None else "removed")
    if (before.kind, before.ino) != (after.kind, after.ino):
        return "replaced"
    if before.content != after.content or before.mtime_ns != after.mtime_ns:
        return "modified"
    if before.ctime_ns != after.ctime_ns:
        return "changed (metadata)"
    if reads and before.atime_ns != after.atime_ns:
        return "read"
    return None
