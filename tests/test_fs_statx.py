"""fs/statx.py (one statx per entry) and the listing's mount check built on it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from fs_notes.fs import WorkspaceRoot, mounts, statx
from fs_notes.fs.statx import NoteStat, lstat_at


def _dirfd(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "note.md").write_text("# Note\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.md").symlink_to("note.md")
    return tmp_path


@pytest.mark.parametrize("name", ["note.md", "sub", "link.md"])
def test_lstat_at_reports_what_os_lstat_reports(folder: Path, name: str) -> None:
    fd = _dirfd(folder)
    try:
        got = lstat_at(fd, name)
        want = NoteStat.of(os.stat(name, dir_fd=fd, follow_symlinks=False), got.mnt_id)
        assert got == want
        assert got.mnt_id is not None and got.mnt_id == mounts.mount_id(fd)
        assert got.key == want.key == (want.st_dev, want.st_ino, want.st_size,
                                       want.st_mtime_ns, want.st_ctime_ns)  # fmt: skip
    finally:
        os.close(fd)


def test_lstat_at_errors_carry_the_kernels_errno(folder: Path) -> None:
    fd = _dirfd(folder)
    try:
        with pytest.raises(OSError) as missing:
            lstat_at(fd, "missing.md")
        assert missing.value.errno == errno.ENOENT
        with pytest.raises(OSError) as nul:
            lstat_at(fd, "a\0b.md")
        assert nul.value.errno == errno.EINVAL
    finally:
        os.close(fd)


def test_without_statx_it_falls_back_to_lstat_and_no_mount_id(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fd = _dirfd(folder)
    try:
        with_statx = lstat_at(fd, "note.md")
        monkeypatch.setattr(statx, "statx_fn", None)
        without = lstat_at(fd, "note.md")
        assert without.mnt_id is None
        assert without._replace(mnt_id=with_statx.mnt_id) == with_statx
    finally:
        os.close(fd)


def _force_inode_mismatch(root: WorkspaceRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every listed inode number wrong, as a mount point over each note would."""
    from fs_notes.fs import root as root_module

    real = root_module._list_folder

    def wrong_inodes(fd: int) -> list[tuple[str, str, bool, int]]:
        return [(k, n, d, ino + 1) for k, n, d, ino in real(fd)]

    monkeypatch.setattr(root_module, "_list_folder", wrong_inodes)


def test_an_inode_the_folder_does_not_list_is_judged_by_mount_id(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with WorkspaceRoot.open(folder) as root:
        assert [n for n, _ in root.iter_notes()] == ["note.md"]
        _force_inode_mismatch(root, monkeypatch)
        root._listings = type(root._listings)()  # no cached listing
        # Same mount: still listed (the slow path asked statx for the mount id).
        assert [n for n, _ in root.iter_notes()] == ["note.md"]
        # A different mount id: left out. This is what a file bind-mounted over a note gets
        # (tests/test_fs_mounts.py does it for real); here the workspace's id is changed.
        anchor = root._anchor
        monkeypatch.setattr(root, "_anchor", type(anchor)(anchor.fd, anchor.dev,
                                                         (anchor.mnt_id or 0) + 1,
                                                         anchor.symlinks))  # fmt: skip
        assert [n for n, _ in root.iter_notes()] == []
