"""Helpers for the filesystem-layer tests (tests/test_fs_*.py), and tests of the helpers.

``tree_state`` records everything observable about a folder tree without touching it (files are
read with O_NOATIME, folders listed through O_NOATIME fds), including atime. ``age_tree`` first
sets every time stamp an hour back: on a relatime mount the next read of a file (or listing of a
folder) then moves its atime to now, so an unchanged atime shows it was not read.
``test_tree_state_sees_a_read`` is the positive control for that claim.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from fs_notes.fs import Identity, WorkspaceRoot, openat2_available

RESOLVERS = ["openat2", "walk"]
POLICIES = ["deny", "within"]

_NOATIME_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NOATIME | os.O_CLOEXEC
_NOATIME_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NOATIME | os.O_NONBLOCK | os.O_CLOEXEC

Entry = tuple[int, int, int, int, int, int, int, bytes | str | None]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def unavailable(reason: str) -> None:
    """A host limitation: fail under CI=true, else skip."""
    if in_ci():
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def device_node(path: Path) -> None:
    """Make a character device at `path`: like /dev/null as root; as a regular user the one
    any user may make since Linux 5.8, 0:0 (an overlayfs whiteout) - a device node a regular
    user's own process can plant in their folder, refused as any other."""
    number = os.makedev(1, 3) if os.geteuid() == 0 else os.makedev(0, 0)
    os.mknod(path, stat.S_IFCHR | 0o600, number)
    assert stat.S_ISCHR(os.lstat(path).st_mode)


def tree_state(base: Path) -> dict[str, Entry]:
    """Every entry beneath ``base`` (not following symlinks): type+mode, inode, size, mtime,
    atime, ctime, links, and the bytes of regular files or the target of symlinks."""
    out: dict[str, Entry] = {}
    top = os.open(base, _NOATIME_DIR)
    try:
        _visit(top, "", out)
    finally:
        os.close(top)
    return out


def _visit(dirfd: int, prefix: str, out: dict[str, Entry]) -> None:
    for name in sorted(os.listdir(dirfd)):
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        extra: bytes | str | None = None
        if stat.S_ISREG(st.st_mode):
            fd = os.open(name, _NOATIME_FILE, dir_fd=dirfd)
            try:
                extra = os.read(fd, st.st_size + 1)
            finally:
                os.close(fd)
        elif stat.S_ISLNK(st.st_mode):
            extra = os.readlink(name, dir_fd=dirfd)
        out[prefix + name] = (
            st.st_mode,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            # Meeting a symlink during lookup may touch its atime even when the lookup refuses
            # it; a link's target is not content, so its atime is not recorded.
            0 if stat.S_ISLNK(st.st_mode) else st.st_atime_ns,
            st.st_ctime_ns,
            st.st_nlink,
            extra,
        )
        if stat.S_ISDIR(st.st_mode):
            child = os.open(name, _NOATIME_DIR, dir_fd=dirfd)
            try:
                _visit(child, prefix + name + "/", out)
            finally:
                os.close(child)


def age_tree(base: Path, seconds: int = 3600) -> None:
    """Set atime and mtime of everything beneath ``base`` (and ``base``) ``seconds`` back."""
    then = (os.stat(base).st_mtime_ns // 10**9 - seconds) * 10**9
    for dirpath, dirnames, filenames in os.walk(base, topdown=False):
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), ns=(then, then), follow_symlinks=False)
    os.utime(base, ns=(then, then), follow_symlinks=False)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def identity_of(path: Path) -> Identity:
    return Identity.of(os.stat(path, follow_symlinks=False))


def opened(path: Path, resolver: str, symlinks: str = "deny") -> WorkspaceRoot:
    """The workspace at ``path`` through exactly ``resolver`` (openat2 missing: see unavailable)."""
    if resolver == "openat2" and not openat2_available():
        unavailable("openat2 is not available on this host")
    root = WorkspaceRoot.open(path, resolver=resolver, symlinks=symlinks)  # type: ignore[arg-type]
    assert root.resolver_name == resolver
    return root


def one_note(tmp_path: Path, *, outside: bool = False) -> Path:
    """The folder tmp_path/notes holding one note, a.md ("# A"); with `outside`, the folder
    tmp_path/outside beside it holds secret.md ("# secret")."""
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "a.md").write_text("# A\n")
    if outside:
        (tmp_path / "outside").mkdir()
        (tmp_path / "outside" / "secret.md").write_text("# secret\n")
    return ws


def empty_workspace(tmp_path: Path, resolver: str) -> Iterator[tuple[Path, WorkspaceRoot]]:
    """An empty workspace tmp_path/ws (plus tmp_path/outside/secret.md), opened by ``resolver``;
    for a module's ``ws`` fixture."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_bytes(b"SECRET")
    root = opened(tmp_path / "ws", resolver)
    try:
        yield tmp_path / "ws", root
    finally:
        root.close()


# --- the helpers' own tests (positive controls) ------------------------------------------------


def test_tree_state_sees_a_read(tmp_path: Path) -> None:
    (tmp_path / "fresh.md").write_bytes(b"x")
    age_tree(tmp_path)
    before = tree_state(tmp_path)
    assert tree_state(tmp_path) == before  # looking does not disturb
    with open(tmp_path / "fresh.md", "rb") as f:
        f.read()
    assert tree_state(tmp_path) != before, "atime did not move on read: is the mount noatime?"


def test_tree_state_sees_a_listing_and_a_write(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.md").write_bytes(b"x")
    age_tree(tmp_path)
    before = tree_state(tmp_path)
    os.listdir(tmp_path / "d")
    listed = tree_state(tmp_path)
    assert listed["d"] != before["d"]
    (tmp_path / "d" / "f.md").write_bytes(b"x")
    assert tree_state(tmp_path)["d/f.md"] != listed["d/f.md"]
