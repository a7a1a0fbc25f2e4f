"""WorkspaceRoot.move_note (layer 2 alone, fs/rename.py): renameat2(RENAME_NOREPLACE) between
two folder fds beneath the workspace, the source checked like a delete's, never overwriting;
every case on both resolvers, and nothing outside changed (content, inode, mode, owner, times)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fs_notes.fs import (
    Escape,
    Hardlinked,
    Identity,
    IdentityChanged,
    InvalidPath,
    NoteExists,
    NoteNotFound,
    SymlinkRefused,
    WorkspaceRoot,
    openat2_available,
)
from fs_notes.fs import rename as rename_mod
from fs_notes.fs.rename import RENAME_NOREPLACE, renameat2

RESOLVERS = ["walk", *(["openat2"] if openat2_available() else [])]


def _state(path: Path) -> tuple[object, ...]:
    st = path.lstat()
    content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
    return (content, st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ctime_ns)


class Tree:
    def __init__(self, base: Path) -> None:
        self.ws = base / "ws"
        self.outside = base / "outside"
        self.ws.mkdir()
        self.outside.mkdir()
        (self.ws / "note.md").write_bytes(b"# Note\n")
        self.secret = self.outside / "secret.md"
        self.secret.write_bytes(b"# secret\n")

    def outside_state(self) -> dict[str, tuple[object, ...]]:
        return {p.name: _state(p) for p in sorted(self.outside.iterdir())}


@pytest.fixture(params=RESOLVERS)
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Tree, WorkspaceRoot]]:
    t = Tree(tmp_path)
    root = WorkspaceRoot.open(t.ws, resolver=request.param)
    try:
        yield t, root
    finally:
        root.close()


def test_a_move_renames_the_same_file_into_a_new_folder(tree: tuple[Tree, WorkspaceRoot]) -> None:
    t, root = tree
    before = (t.ws / "note.md").stat()
    outside = t.outside_state()
    ident = root.move_note("note.md", "archive/2026/note.md")
    assert not (t.ws / "note.md").exists()
    moved = t.ws / "archive" / "2026" / "note.md"
    assert moved.read_bytes() == b"# Note\n"
    assert moved.stat().st_ino == before.st_ino  # the same inode: a rename, not a copy
    assert ident == Identity.of(moved.stat())
    assert t.outside_state() == outside


def test_a_move_back_to_the_top_and_a_rename_in_place_work(
    tree: tuple[Tree, WorkspaceRoot],
) -> None:
    t, root = tree
    root.move_note("note.md", "a/n.md")
    root.move_note("a/n.md", "n.md")
    root.move_note("n.md", "renamed.md")
    assert (t.ws / "renamed.md").read_bytes() == b"# Note\n"
    assert sorted(p.name for p in t.ws.iterdir()) == ["a", "renamed.md"]


def test_a_move_never_replaces_an_existing_note(tree: tuple[Tree, WorkspaceRoot]) -> None:
    t, root = tree
    (t.ws / "other.md").write_bytes(b"# Other\n")
    with pytest.raises(NoteExists):
        root.move_note("note.md", "other.md")
    assert (t.ws / "other.md").read_bytes() == b"# Other\n"
    assert (t.ws / "note.md").read_bytes() == b"# Note\n"


@pytest.mark.parametrize("target", ["dangling.md", "tosecret.md", "folder.md"])
def test_a_move_never_replaces_a_symlink_or_folder_at_the_target(
    tree: tuple[Tree, WorkspaceRoot], target: str
) -> None:
    t, root = tree
    (t.ws / "dangling.md").symlink_to("../outside/new.md")
    (t.ws / "tosecret.md").symlink_to("../outside/secret.md")
    (t.ws / "folder.md").mkdir()
    outside = t.outside_state()
    with pytest.raises(NoteExists):
        root.move_note("note.md", target)
    assert t.outside_state() == outside
    assert not (t.outside / "new.md").exists()


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("../outside/x.md", Escape),
        ("a/../../outside/x.md", Escape),
        ("/tmp/x.md", Escape),
        ("", InvalidPath),
        ("a//x.md", InvalidPath),
        ("x.md\x00", InvalidPath),
    ],
)
def test_a_target_outside_or_malformed_is_refused_before_anything(
    tree: tuple[Tree, WorkspaceRoot], target: str, error: type[Exception]
) -> None:
    t, root = tree
    outside = t.outside_state()
    with pytest.raises(error):
        root.move_note("note.md", target)
    assert (t.ws / "note.md").read_bytes() == b"# Note\n"
    assert t.outside_state() == outside


@pytest.mark.parametrize("link", ["../outside", "ABS"])
def test_a_target_folder_that_is_a_symlink_is_refused(
    tree: tuple[Tree, WorkspaceRoot], link: str
) -> None:
    t, root = tree
    (t.ws / "d").symlink_to(t.outside if link == "ABS" else link)
    outside = t.outside_state()
    with pytest.raises(SymlinkRefused):
        root.move_note("note.md", "d/x.md")
    with pytest.raises(SymlinkRefused):
        root.move_note("note.md", "d/deeper/x.md")
    assert t.outside_state() == outside
    assert (t.ws / "note.md").exists()


def test_a_source_folder_that_is_a_symlink_is_refused(tree: tuple[Tree, WorkspaceRoot]) -> None:
    t, root = tree
    (t.ws / "d").symlink_to("../outside")
    outside = t.outside_state()
    with pytest.raises(SymlinkRefused):
        root.move_note("d/secret.md", "stolen.md")
    assert t.outside_state() == outside
    assert not (t.ws / "stolen.md").exists()


def test_a_source_that_is_a_symlink_is_refused(tree: tuple[Tree, WorkspaceRoot]) -> None:
    t, root = tree
    (t.ws / "l.md").symlink_to("../outside/secret.md")
    outside = t.outside_state()
    with pytest.raises(SymlinkRefused):
        root.move_note("l.md", "moved.md")
    assert (t.ws / "l.md").is_symlink()
    assert t.outside_state() == outside


def test_a_hard_linked_source_is_refused_and_the_outside_inode_untouched(
    tree: tuple[Tree, WorkspaceRoot],
) -> None:
    t, root = tree
    os.link(t.secret, t.ws / "h.md")
    outside = t.outside_state()  # a rename would move its ctime
    with pytest.raises(Hardlinked):
        root.move_note("h.md", "moved.md")
    assert t.outside_state() == outside
    assert (t.ws / "h.md").exists() and not (t.ws / "moved.md").exists()


def test_a_missing_source_is_not_found_and_creates_no_target_folder(
    tree: tuple[Tree, WorkspaceRoot],
) -> None:
    t, root = tree
    with pytest.raises(NoteNotFound):
        root.move_note("missing.md", "new/x.md")
    assert not (t.ws / "new").exists()


def test_the_expected_identity_must_still_hold(tree: tuple[Tree, WorkspaceRoot]) -> None:
    t, root = tree
    stale = root.stat_note("note.md")
    (t.ws / "note.md").write_bytes(b"# Changed since\n")
    with pytest.raises(IdentityChanged):
        root.move_note("note.md", "moved.md", expected=stale)
    assert not (t.ws / "moved.md").exists()
    root.move_note("note.md", "moved.md", expected=root.stat_note("note.md"))
    assert (t.ws / "moved.md").read_bytes() == b"# Changed since\n"


def test_a_file_swapped_in_at_the_source_during_the_rename_is_put_back(
    tree: tuple[Tree, WorkspaceRoot], monkeypatch: pytest.MonkeyPatch
) -> None:
    t, root = tree
    real = rename_mod.renameat2
    (t.ws / "swapped-in.md").write_bytes(b"# someone else's\n")
    calls: list[tuple[str, str]] = []

    def racing(src_dir: int, src: str, dst_dir: int, dst: str, flags: int) -> None:
        if not calls:  # after our check, another process replaces the source name
            os.replace(t.ws / "swapped-in.md", t.ws / "note.md")
        calls.append((src, dst))
        real(src_dir, src, dst_dir, dst, flags)

    monkeypatch.setattr(rename_mod, "renameat2", racing)
    with pytest.raises(IdentityChanged):
        root.move_note("note.md", "moved.md")
    assert calls == [("note.md", "moved.md"), ("moved.md", "note.md")]
    assert (t.ws / "note.md").read_bytes() == b"# someone else's\n"  # put back
    assert not (t.ws / "moved.md").exists()


def test_renameat2_noreplace_refuses_an_existing_name(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as exc:
            renameat2(fd, "a", fd, "b", RENAME_NOREPLACE)
        assert exc.value.errno == errno.EEXIST
        renameat2(fd, "a", fd, "c", RENAME_NOREPLACE)
    finally:
        os.close(fd)
    assert (tmp_path / "b").read_text() == "b" and (tmp_path / "c").read_text() == "a"


@pytest.mark.mounts(body=True)  # as a regular user: in a mount namespace of its own
def test_a_move_across_a_mount_is_refused(tmp_path: Path) -> None:
    """A folder inside the workspace that is a bind mount of outside/: the target folder is on
    another mount (refused by the resolver), and a rename there would be EXDEV anyway."""
    t = Tree(tmp_path)
    (t.ws / "mnt").mkdir()
    subprocess.run(["mount", "--bind", str(t.outside), str(t.ws / "mnt")], check=True)
    try:
        for resolver in RESOLVERS:
            with WorkspaceRoot.open(t.ws, resolver=resolver) as root:  # type: ignore[arg-type]
                outside = t.outside_state()
                with pytest.raises(Escape):
                    root.move_note("note.md", "mnt/x.md")
                with pytest.raises(Escape):
                    root.move_note("mnt/secret.md", "stolen.md")
                assert t.outside_state() == outside
                assert (t.ws / "note.md").exists() and not (t.ws / "stolen.md").exists()
    finally:
        subprocess.run(["umount", str(t.ws / "mnt")], check=True)
