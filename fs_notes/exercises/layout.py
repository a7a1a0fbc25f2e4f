"""Hostile folder layouts in a tiny notation, and the file snapshots that prove nothing escaped.

The notation is the team's (tests/escape_cases.py, after Go's os.Root tests), one entry per
string, relative to an attack's root folder (which holds ``ws/``, the workspace, and
``outside/``):

    "ws/a/"                        a folder
    "ws/a/b.md"                    a regular file, content "inside"
    "ws/a/b.md: text"              a regular file with that text
    "ws/l.md => ../outside/x.md"   a symlink (target verbatim)
    "ws/h.md ~> outside/x.md"      a hard link to an existing file
    "ws/f.md |fifo"                a FIFO               "ws/s.md |socket"   a bound unix socket
    "ws/d.md |nulldev"             a character device 1:3 (the null device; needs root)
    "ws/mnt |bind outside"         a folder on which the target bind-mounts ``outside`` (root)

``{root}`` stands for the attack root's absolute path and ``{secret}`` for the run's secret
marker. Guarantees: nothing is created through a symlink; a snapshot reads file content with
O_NOATIME, so taking one never counts as a read. Does not: clean up (the caller removes the
whole temporary folder).
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


class HostLimit(Exception):
    """The layout needs something this host or user cannot do (the attack is then n/a)."""


@dataclass
class Built:
    binds: list[tuple[str, str]] = field(default_factory=list)


def _relative(entry_path: str) -> Path:
    path = Path(entry_path)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"layout entries must be relative and without '..': {entry_path!r}")
    return path


def _parents(root: Path, relative: Path) -> Path:
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


def build(root: Path, layout: Iterable[str], secret: str) -> Built:
    """Create ``root/ws``, ``root/outside/secret.md`` and every entry of ``layout``."""
    built = Built()
    (root / "ws").mkdir(parents=True, exist_ok=True)
    (root / "outside").mkdir(exist_ok=True)
    (root / "outside" / "secret.md").write_text(f"# {secret}\nnot yours\n", encoding="utf-8")
    for raw in layout:
        entry = raw.replace("{root}", str(root)).replace("{secret}", secret)
        if " => " in entry:
            name, target = entry.split(" => ", 1)
            _parents(root, _relative(name)).symlink_to(target)
        elif " ~> " in entry:
            name, target = entry.split(" ~> ", 1)
            os.link(root / _relative(target), _parents(root, _relative(name)))
        elif entry.endswith(" |fifo"):
            os.mkfifo(_parents(root, _relative(entry.removesuffix(" |fifo"))))
        elif entry.endswith(" |socket"):
            _socket(_parents(root, _relative(entry.removesuffix(" |socket"))))
        elif entry.endswith(" |nulldev"):
            path = _parents(root, _relative(entry.removesuffix(" |nulldev")))
            try:
                os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
            except PermissionError as exc:
                raise HostLimit(f"cannot create a device node here: {exc.strerror}") from None
        elif " |bind " in entry:
            name, source = entry.split(" |bind ", 1)
            (root / _relative(name)).mkdir(parents=True, exist_ok=True)
            built.binds.append((str(root / _relative(source)), str(root / _relative(name))))
        elif entry.endswith("/"):
            _parents(root, _relative(entry) / "-")
        else:
            name, sep, content = entry.partition(": ")
            text = content.replace("\\n", "\n") if sep else "inside"
            _parents(root, _relative(name)).write_text(text, encoding="utf-8")
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
