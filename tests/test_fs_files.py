"""Layer 2, one note at a time: file types, hard links, identities, create/update/unlink rules,
symlinks swapped in between operations. Every test runs through both resolvers (``ws`` fixture)."""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_fs_support import (
    RESOLVERS,
    age_tree,
    device_node,
    empty_workspace,
    identity_of,
    opened,
    tree_state,
)

from fs_notes.fs import (
    Escape,
    FsError,
    Hardlinked,
    Identity,
    IdentityChanged,
    NoteExists,
    NoteNotFound,
    NotRegular,
    SymlinkRefused,
    TooLarge,
    WorkspaceRoot,
)
from fs_notes.fs import fileops as fileops_module

WS = tuple[Path, WorkspaceRoot]
SECRET = b"SECRET"


@pytest.fixture(params=RESOLVERS)
def resolver(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def ws(tmp_path: Path, resolver: str) -> Iterator[tuple[Path, WorkspaceRoot]]:
    yield from empty_workspace(tmp_path, resolver)


def _every_op_refuses(root: WorkspaceRoot, name: str, error: type[FsError]) -> None:
    """read, stat, update and unlink raise ``error``; create raises NoteExists."""
    any_identity = Identity(0, 0, 0, 0, 0)
    for call in (
        lambda: root.read_note(name),
        lambda: root.stat_note(name),
        lambda: root.update_note(name, b"x"),
        lambda: root.unlink_note(name, any_identity),
    ):
        with pytest.raises(FsError) as info:
            call()
        assert type(info.value) is error
    with pytest.raises(NoteExists):
        root.create_note(name, b"x")


# --- file types --------------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_a_fifo_is_not_a_note_and_reading_it_does_not_block(ws: WS) -> None:
    path, root = ws
    os.mkfifo(path / "f.md")
    _every_op_refuses(root, "f.md", NotRegular)
    assert stat.S_ISFIFO(os.lstat(path / "f.md").st_mode)


def test_a_bound_unix_socket_is_not_a_note(ws: WS) -> None:
    path, root = ws
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"/proc/self/fd/{root.fd}/s.md")  # sun_path is short; tmp_path may be long
        sock.listen(1)
        _every_op_refuses(root, "s.md", NotRegular)
    finally:
        sock.close()
    assert stat.S_ISSOCK(os.lstat(path / "s.md").st_mode)


def test_a_device_node_is_not_a_note(ws: WS) -> None:
    path, root = ws
    device_node(path / "null.md")  # like /dev/null (as a regular user: 0:0, a whiteout)
    _every_op_refuses(root, "null.md", NotRegular)
    assert stat.S_ISCHR(os.lstat(path / "null.md").st_mode)


def test_a_folder_named_like_a_note_is_not_a_note(ws: WS) -> None:
    path, root = ws
    (path / "x.md").mkdir()
    (path / "x.md" / "inner.md").write_bytes(b"in")
    _every_op_refuses(root, "x.md", NotRegular)
    assert [note for note, _ in root.iter_notes()] == ["x.md/inner.md"]
    assert (path / "x.md" / "inner.md").read_bytes() == b"in"


def test_a_file_used_as_a_folder_is_not_found(ws: WS) -> None:
    path, root = ws
    (path / "a.md").write_bytes(b"a")
    for call in (
        lambda: root.read_note("a.md/b.md"),
        lambda: root.create_note("a.md/b.md", b"x"),
        lambda: root.open_dir("a.md"),
    ):
        with pytest.raises(NoteNotFound):
            call()


# --- hard links --------------------------------------------------------------------------------


def test_a_hardlinked_note_is_not_read_written_or_deleted(ws: WS) -> None:
    path, root = ws
    (path / "a.md").write_bytes(b"one")
    os.link(path / "a.md", path / "b.md")
    ident = identity_of(path / "a.md")
    for call in (
        lambda: root.read_note("a.md"),
        lambda: root.stat_note("b.md"),
        lambda: root.update_note("a.md", b"two"),
        lambda: root.update_note("b.md", b"two", expected=ident),
        lambda: root.unlink_note("a.md", ident),
    ):
        with pytest.raises(Hardlinked):
            call()
    assert (path / "a.md").read_bytes() == (path / "b.md").read_bytes() == b"one"
    assert os.stat(path / "a.md").st_nlink == 2
    os.unlink(path / "b.md")  # control: with one name left it is a note again
    assert root.read_note("a.md")[0] == b"one"


# --- identities --------------------------------------------------------------------------------


def test_unlink_refuses_a_note_whose_content_changed(ws: WS) -> None:
    path, root = ws
    ident = root.create_note("n.md", b"v1")
    (path / "n.md").write_bytes(b"v2, longer")
    with pytest.raises(IdentityChanged):
        root.unlink_note("n.md", ident)
    assert (path / "n.md").read_bytes() == b"v2, longer"


def test_unlink_refuses_a_note_replaced_by_a_same_named_file(ws: WS) -> None:
    path, root = ws
    ident = root.create_note("n.md", b"same")
    st = os.stat(path / "n.md")
    (path / "other").write_bytes(b"same")
    os.utime(path / "other", ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime
    os.replace(path / "other", path / "n.md")
    with pytest.raises(IdentityChanged):
        root.unlink_note("n.md", ident)
    assert (path / "n.md").exists()


def test_unlink_refuses_a_note_rewritten_in_place_with_its_mtime_restored(ws: WS) -> None:
    path, root = ws
    ident = root.create_note("n.md", b"aaaa")
    with open(path / "n.md", "r+b") as f:
        f.write(b"bbbb")
    os.utime(path / "n.md", ns=(ident.mtime_ns, ident.mtime_ns))  # ctime still moves
    with pytest.raises(IdentityChanged):
        root.unlink_note("n.md", ident)
    assert (path / "n.md").read_bytes() == b"bbbb"


def test_unlink_with_the_current_identity_deletes_exactly_that_note(ws: WS) -> None:
    path, root = ws
    root.create_note("keep.md", b"k")
    root.create_note("sub/n.md", b"n")
    root.unlink_note("sub/n.md", root.stat_note("sub/n.md"))
    assert not (path / "sub" / "n.md").exists()
    assert (path / "sub").is_dir() and (path / "keep.md").read_bytes() == b"k"
    with pytest.raises(NoteNotFound):
        root.unlink_note("sub/n.md", Identity(0, 0, 0, 0, 0))


def test_read_stat_and_write_report_the_same_identity(ws: WS) -> None:
    path, root = ws
    created = root.create_note("n.md", b"hello")
    assert created == root.stat_note("n.md") == identity_of(path / "n.md")
    data, read_ident = root.read_note("n.md")
    assert (data, read_ident) == (b"hello", created)
    updated = root.update_note("n.md", b"bye", expected=created)
    assert updated == root.stat_note("n.md") != created


def test_identity_is_not_a_mapping_of_anything_else(ws: WS) -> None:
    _, root = ws
    root.create_note("n.md", b"x")
    with pytest.raises(TypeError):
        root.unlink_note("n.md", root.stat_note("n.md").to_json())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        root.update_note("n.md", b"y", expected=[1, 2, 3, 4, 5])  # type: ignore[arg-type]
    assert root.read_note("n.md")[0] == b"x"


# --- create ------------------------------------------------------------------------------------


def test_create_never_overwrites(ws: WS) -> None:
    path, root = ws
    (path / "n.md").write_bytes(b"original")
    with pytest.raises(NoteExists):
        root.create_note("n.md", b"new")
    assert (path / "n.md").read_bytes() == b"original"


def test_create_refuses_a_dangling_symlink_and_creates_nothing_at_its_target(ws: WS) -> None:
    path, root = ws
    os.symlink("target.md", path / "n.md")
    os.symlink("../outside/new.md", path / "out.md")
    for name in ("n.md", "out.md"):
        with pytest.raises(SymlinkRefused):
            root.create_note(name, b"x")
    assert not (path / "target.md").exists()
    assert not (path.parent / "outside" / "new.md").exists()


def test_create_makes_missing_folders_but_never_through_a_symlink(ws: WS) -> None:
    path, root = ws
    root.create_note("a/b/c/n.md", b"deep")
    assert (path / "a" / "b" / "c" / "n.md").read_bytes() == b"deep"
    os.symlink("a", path / "link")
    with pytest.raises(SymlinkRefused):
        root.create_note("link/x/n.md", b"x")
    assert not (path / "a" / "x").exists()


def test_create_leaves_no_half_written_note_when_writing_fails(
    ws: WS, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, root = ws

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "full")

    monkeypatch.setattr(fileops_module, "write_all", full)
    with pytest.raises(FsError, match="no space left"):
        root.create_note("n.md", b"x")
    monkeypatch.undo()
    assert os.listdir(path) == []


# --- update ------------------------------------------------------------------------------------


def test_update_replaces_atomically_and_keeps_the_mode(ws: WS) -> None:
    path, root = ws
    (path / "n.md").write_bytes(b"old")
    os.chmod(path / "n.md", 0o640)
    old_ino = os.stat(path / "n.md").st_ino
    root.update_note("n.md", b"new content")
    st = os.stat(path / "n.md")
    assert (path / "n.md").read_bytes() == b"new content"
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_ino != old_ino and st.st_nlink == 1
    assert os.listdir(path) == ["n.md"]  # no temp file left


def test_update_refuses_a_missing_note_and_a_stale_identity(ws: WS) -> None:
    path, root = ws
    with pytest.raises(NoteNotFound):
        root.update_note("n.md", b"x")
    assert not (path / "n.md").exists()
    first = root.create_note("n.md", b"1")
    root.update_note("n.md", b"2", expected=first)
    with pytest.raises(IdentityChanged):
        root.update_note("n.md", b"3", expected=first)
    assert (path / "n.md").read_bytes() == b"2"


def test_update_removes_its_temp_file_when_the_rename_fails(
    ws: WS, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, root = ws
    (path / "n.md").write_bytes(b"old")

    def busy(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EBUSY, "busy")

    monkeypatch.setattr(os, "rename", busy)
    with pytest.raises(FsError, match="busy, try again"):
        root.update_note("n.md", b"new")
    monkeypatch.undo()
    assert os.listdir(path) == ["n.md"] and (path / "n.md").read_bytes() == b"old"


# --- reads -------------------------------------------------------------------------------------


def test_read_is_capped_by_max_bytes(ws: WS) -> None:
    path, root = ws
    (path / "n.md").write_bytes(b"12345")
    assert root.read_note("n.md", max_bytes=5)[0] == b"12345"
    with pytest.raises(TooLarge):
        root.read_note("n.md", max_bytes=4)


def test_read_part_reads_a_range_of_a_note_whatever_its_size(ws: WS) -> None:
    path, root = ws
    (path / "n.md").write_bytes(b"0123456789")
    data, ident = root.read_part("n.md", 3, 4)
    assert (data, ident.size) == (b"3456", 10)
    assert root.read_part("n.md", 8, 100)[0] == b"89"  # fewer at the end
    assert root.read_part("n.md", 10, 5)[0] == b""
    assert root.read_part("n.md", 0, 0)[0] == b""
    with pytest.raises(ValueError):
        root.read_part("n.md", -1, 4)


def test_read_part_makes_every_check_read_note_makes(ws: WS) -> None:
    path, root = ws
    outside = path.parent / "outside.md"
    outside.write_bytes(SECRET)
    (path / "l.md").symlink_to(outside)
    (path / "h.md").write_bytes(b"x")
    os.link(path / "h.md", path / "h2.md")
    os.mkfifo(path / "f.md")
    for name, error in (("l.md", SymlinkRefused), ("h.md", Hardlinked), ("f.md", NotRegular)):
        with pytest.raises(FsError) as info:
            root.read_part(name, 0, 100)
        assert type(info.value) is error
    with pytest.raises(FsError):
        root.read_part("../outside.md", 0, 100)
    assert outside.read_bytes() == SECRET


def test_the_listing_reports_every_md_entry_it_leaves_out_and_why(ws: WS) -> None:
    path, root = ws
    (path / "ok.md").write_text("x")
    (path / "l.md").symlink_to(path / "ok.md")
    (path / "h1.md").write_text("x")
    os.link(path / "h1.md", path / "h2.md")
    os.mkfifo(path / "f.md")
    (path / "dir.md").mkdir()  # a folder named like a note: walked, not reported
    (path / "other.txt").write_text("x")  # not a note name: not reported
    (path / ".hidden.md").write_text("x")  # hidden: never looked at
    left_out: list[tuple[str, str]] = []
    listed = [n for n, _ in root.iter_notes(on_skip=lambda n, why: left_out.append((n, why)))]
    assert listed == ["ok.md"]
    assert sorted(left_out) == [
        ("f.md", "not a regular file"),
        ("h1.md", "hard-linked"),
        ("h2.md", "hard-linked"),
        ("l.md", "symbolic link"),
    ]


# --- symlink policy 'within' -------------------------------------------------------------------


def test_within_follows_inside_links_for_reads_only(tmp_path: Path, resolver: str) -> None:
    (tmp_path / "ws" / "a").mkdir(parents=True)
    (tmp_path / "ws" / "a" / "n.md").write_bytes(b"inside")
    os.symlink("a/n.md", tmp_path / "ws" / "l.md")
    os.symlink("../a", tmp_path / "ws" / "a" / "self")
    with opened(tmp_path / "ws", resolver, "within") as root:
        assert root.read_note("l.md")[0] == b"inside"
        assert root.read_note("a/self/self/n.md")[0] == b"inside"
        assert root.stat_note("l.md") == identity_of(tmp_path / "ws" / "a" / "n.md")
        ident = root.stat_note("l.md")
        for call in (
            lambda: root.update_note("l.md", b"x"),
            lambda: root.unlink_note("l.md", ident),
            lambda: root.create_note("l.md", b"x"),
        ):
            with pytest.raises(SymlinkRefused):
                call()
        root.update_note("a/self/n.md", b"via a folder link")  # folders may be links
    assert os.readlink(tmp_path / "ws" / "l.md") == "a/n.md"
    assert (tmp_path / "ws" / "a" / "n.md").read_bytes() == b"via a folder link"


@pytest.mark.parametrize("hops", [40, 41])
def test_within_follows_at_most_40_links(tmp_path: Path, resolver: str, hops: int) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "n.md").write_bytes(b"end")
    for i in range(hops):
        nxt = f"l{i + 1}.md" if i + 1 < hops else "n.md"
        os.symlink(nxt, tmp_path / "ws" / f"l{i}.md")
    with opened(tmp_path / "ws", resolver, "within") as root:
        if hops <= 40:
            assert root.read_note("l0.md")[0] == b"end"
        else:
            with pytest.raises(SymlinkRefused):
                root.read_note("l0.md")


# --- things that change between two operations -------------------------------------------------


def test_a_note_swapped_for_a_symlink_after_stat_is_refused(ws: WS) -> None:
    path, root = ws
    (path / "n.md").write_bytes(b"note")
    ident = root.stat_note("n.md")
    os.rename(path / "n.md", path / "old")
    os.symlink("../outside/secret.md", path / "n.md")
    outside = path.parent / "outside"
    age_tree(outside)
    before = tree_state(outside)
    for call in (
        lambda: root.read_note("n.md"),
        lambda: root.update_note("n.md", b"x", expected=ident),
        lambda: root.unlink_note("n.md", ident),
    ):
        with pytest.raises(SymlinkRefused):
            call()
    assert tree_state(outside) == before
    assert os.path.islink(path / "n.md")


@pytest.mark.parametrize("policy", ["deny", "within"])
def test_a_folder_swapped_for_a_symlink_is_refused(
    tmp_path: Path, resolver: str, policy: str
) -> None:
    (tmp_path / "ws" / "a").mkdir(parents=True)
    (tmp_path / "ws" / "a" / "secret.md").write_bytes(b"inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_bytes(SECRET)
    with opened(tmp_path / "ws", resolver, policy) as root:
        ident = root.stat_note("a/secret.md")
        os.rename(tmp_path / "ws" / "a", tmp_path / "ws" / "a.old")
        os.symlink("../outside", tmp_path / "ws" / "a")
        age_tree(tmp_path / "outside")
        before = tree_state(tmp_path / "outside")
        error = SymlinkRefused if policy == "deny" else Escape
        for call in (
            lambda: root.read_note("a/secret.md"),
            lambda: root.unlink_note("a/secret.md", ident),
            lambda: root.update_note("a/secret.md", b"x"),
            lambda: list(root.iter_notes("a")),
        ):
            with pytest.raises(FsError) as info:
                call()
            assert type(info.value) is error
        assert tree_state(tmp_path / "outside") == before


def test_the_workspace_moved_and_replaced_after_start_keeps_serving_the_original(
    tmp_path: Path, resolver: str
) -> None:
    """Documented: we hold the fd, so we keep serving the directory we opened."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "n.md").write_bytes(b"original")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "n.md").write_bytes(SECRET)
    with opened(tmp_path / "ws", resolver) as root:
        os.rename(tmp_path / "ws", tmp_path / "moved")
        os.symlink("outside", tmp_path / "ws")
        assert root.read_note("n.md")[0] == b"original"
        root.create_note("new.md", b"x")
    assert (tmp_path / "moved" / "new.md").exists()
    assert sorted(os.listdir(tmp_path / "outside")) == ["n.md"]


# --- the handle itself -------------------------------------------------------------------------


def test_open_refuses_a_workspace_path_that_is_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "link")
    for resolver_name in RESOLVERS:
        with pytest.raises(SymlinkRefused):
            WorkspaceRoot.open(tmp_path / "link", resolver=resolver_name)  # type: ignore[arg-type]
    with pytest.raises(NotRegular):
        (tmp_path / "file").write_bytes(b"")
        WorkspaceRoot.from_fd(os.open(tmp_path / "file", os.O_RDONLY))


def test_from_fd_takes_ownership_even_when_it_fails(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    with pytest.raises(ValueError):
        WorkspaceRoot.from_fd(fd, resolver="nope")  # type: ignore[arg-type]
    with pytest.raises(OSError) as info:
        os.fstat(fd)
    assert info.value.errno == errno.EBADF


def test_a_root_from_an_o_path_fd_serves_every_operation(tmp_path: Path, resolver: str) -> None:
    """The sandbox hands workspace fds around; an O_PATH one must do (listing reopens '.')."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "n.md").write_bytes(b"n")
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    with WorkspaceRoot.from_fd(fd, resolver=resolver) as root:  # type: ignore[arg-type]
        assert root.resolver_name == resolver
        assert root.read_note("a/n.md")[0] == b"n"
        assert [note for note, _ in root.iter_notes()] == ["a/n.md"]
        ident = root.update_note("a/n.md", b"m")
        root.unlink_note("a/n.md", ident)
        root.create_note("b/n.md", b"x")
    assert sorted(os.listdir(tmp_path)) == ["a", "b"] and os.listdir(tmp_path / "a") == []


def test_after_close_every_operation_fails_and_the_fd_is_released(tmp_path: Path) -> None:
    root = WorkspaceRoot.open(tmp_path, resolver="walk")
    fd = root.fd
    root.close()
    root.close()  # idempotent
    with pytest.raises(FsError, match="closed"):
        root.read_note("n.md")
    with pytest.raises(FsError, match="closed"):
        list(root.iter_notes())
    with pytest.raises(OSError):
        os.fstat(fd)


def test_open_dir_gives_a_new_close_on_exec_folder_fd_beneath_the_root(ws: WS) -> None:
    path, root = ws
    (path / "a").mkdir()
    os.symlink("a", path / "l")
    for rel, target in (("", path), ("a", path / "a")):
        fd = root.open_dir(rel)
        try:
            assert fd != root.fd and not os.get_inheritable(fd)
            assert os.path.samestat(os.fstat(fd), os.stat(target))
        finally:
            os.close(fd)
    with pytest.raises(SymlinkRefused):
        root.open_dir("l")
    with pytest.raises(Escape):
        root.open_dir("..")
    assert not os.get_inheritable(root.fd)


def test_a_folder_too_deep_to_list_is_reported_not_silently_dropped(ws: WS) -> None:
    path, root = ws
    deep = path.joinpath(*["d"] * 32)
    deep.mkdir(parents=True)
    (deep / "x.md").write_text("x")  # 33 components: beyond every path operation's cap
    (path / "ok.md").write_text("x")
    left_out: list[tuple[str, str]] = []
    listed = [n for n, _ in root.iter_notes(on_skip=lambda n, why: left_out.append((n, why)))]
    assert listed == ["ok.md"]
    assert left_out == [("d/" * 31 + "d/", "folder too deep")]
