"""Layer 2: iter_notes lists regular, singly linked *.md files and nothing else, never follows a
symlink, never leaves the workspace, and stays within the 32-component cap. Both resolvers."""

from __future__ import annotations

import os
import socket
import stat
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_fs_support import (
    RESOLVERS,
    age_tree,
    device_node,
    empty_workspace,
    opened,
    tree_state,
)

from fs_notes.fs import Escape, FsError, InvalidPath, NoteNotFound, SymlinkRefused, WorkspaceRoot

WS = tuple[Path, WorkspaceRoot]


@pytest.fixture(params=RESOLVERS)
def resolver(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def ws(tmp_path: Path, resolver: str) -> Iterator[tuple[Path, WorkspaceRoot]]:
    yield from empty_workspace(tmp_path, resolver)


def _ids(root: WorkspaceRoot, folder: str = "") -> list[str]:
    return [note for note, _ in root.iter_notes(folder)]


def test_lists_nested_notes_sorted_with_their_lstat(ws: WS) -> None:
    path, root = ws
    for rel in ("b.md", "a/z.md", "a/c/d.md", "e.md"):
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(rel.encode())
    listed = list(root.iter_notes())
    assert [note for note, _ in listed] == ["a/c/d.md", "a/z.md", "b.md", "e.md"]
    for note, st in listed:
        assert os.path.samestat(st, os.lstat(path / note)) and st.st_size == len(note)
    assert _ids(root, "a") == ["a/c/d.md", "a/z.md"]
    assert _ids(root, "a/c") == ["a/c/d.md"]


def test_skips_symlinks_hidden_entries_special_files_and_hard_links(ws: WS) -> None:
    path, root = ws
    (path / "note.md").write_bytes(b"n")
    (path / "real").mkdir()
    (path / "real" / "in.md").write_bytes(b"i")
    os.symlink("note.md", path / "link.md")
    os.symlink("real", path / "linkdir")
    os.symlink("../outside", path / "out")
    os.symlink("../outside/secret.md", path / "secret.md")
    (path / ".git").mkdir()
    (path / ".git" / "config.md").write_bytes(b"token")
    (path / ".hidden.md").write_bytes(b"h")
    os.mkfifo(path / "fifo.md")
    os.mknod(path / "sock.md", stat.S_IFSOCK | 0o600)
    device_node(path / "null.md")
    (path / "plain.txt").write_bytes(b"t")
    (path / "hard.md").write_bytes(b"h")
    os.link(path / "hard.md", path / "real" / "hard2.md")
    os.link(path.parent / "outside" / "secret.md", path / "outhard.md")
    assert _ids(root) == ["note.md", "real/in.md"]


def test_skips_a_bound_socket(ws: WS) -> None:
    _, root = ws
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(f"/proc/self/fd/{root.fd}/s.md")
        assert _ids(root) == []
    finally:
        sock.close()


@pytest.mark.parametrize("policy", ["deny", "within"])
def test_never_follows_a_folder_symlink_even_under_within(
    tmp_path: Path, resolver: str, policy: str
) -> None:
    (tmp_path / "ws" / "real").mkdir(parents=True)
    (tmp_path / "ws" / "real" / "n.md").write_bytes(b"n")
    os.symlink("real", tmp_path / "ws" / "alias")
    os.symlink(".", tmp_path / "ws" / "loop")
    with opened(tmp_path / "ws", resolver, policy) as root:
        assert _ids(root) == ["real/n.md"]


def test_does_not_read_or_list_anything_outside(tmp_path: Path, resolver: str) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside" / "sub").mkdir(parents=True)
    (tmp_path / "outside" / "secret.md").write_bytes(b"SECRET")
    (tmp_path / "outside" / "sub" / "x.md").write_bytes(b"SECRET")
    os.symlink("../outside", tmp_path / "ws" / "out")
    os.symlink(str(tmp_path / "outside"), tmp_path / "ws" / "abs")
    os.symlink("/proc/self/cwd", tmp_path / "ws" / "cwd")
    age_tree(tmp_path / "outside")
    before = tree_state(tmp_path / "outside")
    for policy in ("deny", "within"):
        with opened(tmp_path / "ws", resolver, policy) as root:
            assert _ids(root) == []
            error = SymlinkRefused if policy == "deny" else Escape
            for folder in ("out", "abs", "cwd", "out/sub"):
                with pytest.raises(FsError) as info:
                    _ids(root, folder)
                assert type(info.value) is error
            with pytest.raises(Escape):
                _ids(root, "..")
            with pytest.raises(InvalidPath):
                _ids(root, ".")
    assert tree_state(tmp_path / "outside") == before


def test_a_missing_or_file_folder_is_not_found(ws: WS) -> None:
    path, root = ws
    (path / "n.md").write_bytes(b"n")
    for folder in ("nope", "n.md"):
        with pytest.raises(NoteNotFound):
            _ids(root, folder)


def test_ids_stay_within_the_32_component_cap(ws: WS) -> None:
    path, root = ws
    deep = path
    for depth in range(1, 34):
        deep = deep / f"d{depth}"
        deep.mkdir()
        (deep / "n.md").write_bytes(b"n")
    listed = _ids(root)
    assert len(listed) == 31  # d1/n.md (2 components) ... d1/.../d31/n.md (32 components)
    assert max(len(note.split("/")) for note in listed) == 32
    for note in listed:
        assert root.read_note(note)[0] == b"n"
    with pytest.raises(FsError):
        root.read_note("/".join(f"d{i}" for i in range(1, 33)) + "/n.md")


def test_a_listing_abandoned_half_way_releases_its_folder_fds(ws: WS) -> None:
    path, root = ws
    for i in range(5):
        (path / f"d{i}").mkdir()
        (path / f"d{i}" / "n.md").write_bytes(b"n")
    fds = len(os.listdir("/proc/self/fd"))
    it = root.iter_notes()
    assert isinstance(it, types.GeneratorType)
    assert next(it)[0] == "d0/n.md"
    assert len(os.listdir("/proc/self/fd")) > fds  # it holds folder fds while paused...
    it.close()
    assert len(os.listdir("/proc/self/fd")) == fds  # ...and closes them when stopped
