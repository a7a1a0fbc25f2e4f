"""Layer 2 closes every fd it opens, on success and on every failure path: the number of entries
in /proc/self/fd is the same before and after thousands of operations, most of them refused."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from test_fs_support import POLICIES, RESOLVERS, open_fds, opened

from fs_notes.fs import FsError, Identity, WorkspaceRoot


def _layout(base: Path) -> None:
    (base / "ws" / "a" / "b").mkdir(parents=True)
    (base / "outside").mkdir()
    (base / "outside" / "secret.md").write_bytes(b"SECRET")
    (base / "ws" / "a" / "b" / "n.md").write_bytes(b"note")
    os.symlink("../outside", base / "ws" / "out")
    os.symlink("a/b/n.md", base / "ws" / "in.md")
    os.symlink("loop", base / "ws" / "loop")
    os.symlink("../../outside/secret.md", base / "ws" / "a" / "l.md")
    os.mkfifo(base / "ws" / "fifo.md")
    (base / "ws" / "x.md").mkdir()
    (base / "ws" / "big.md").write_bytes(b"x" * 100)
    (base / "ws" / "hard.md").write_bytes(b"h")
    os.link(base / "ws" / "hard.md", base / "ws" / "hard2.md")


def _operations(root: WorkspaceRoot) -> list[Callable[[], object]]:
    bogus = Identity(1, 2, 3, 4, 5)
    ops: list[Callable[[], object]] = []
    for path in (
        "a/b/n.md",
        "in.md",
        "out/secret.md",
        "loop/x.md",
        "a/l.md",
        "fifo.md",
        "x.md",
        "hard.md",
        "missing/n.md",
        "a/b/missing.md",
        "../outside/secret.md",
        "a//b",
        "a/b/n.md/x",
    ):
        ops += [
            lambda p=path: root.read_note(p),  # type: ignore[misc]
            lambda p=path: root.stat_note(p),  # type: ignore[misc]
            lambda p=path: root.update_note(p, b"u", expected=bogus),  # type: ignore[misc]
            lambda p=path: root.unlink_note(p, bogus),  # type: ignore[misc]
            lambda p=path: root.create_note(p, b"c"),  # type: ignore[misc]
            lambda p=path: list(root.iter_notes(p)),  # type: ignore[misc]
            lambda p=path: os.close(root.open_dir(p)),  # type: ignore[misc]
        ]
    ops.append(lambda: root.read_note("big.md", max_bytes=10))
    ops.append(lambda: list(root.iter_notes()))
    ops.append(lambda: next(root.iter_notes()))  # abandoned half-way
    ops.append(lambda: _create_update_delete(root))
    return ops


def _create_update_delete(root: WorkspaceRoot) -> None:
    ident = root.create_note("new/deeper/t.md", b"1")
    ident = root.update_note("new/deeper/t.md", b"22", expected=ident)
    root.unlink_note("new/deeper/t.md", ident)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("resolver", RESOLVERS)
def test_thousands_of_operations_leave_no_fd_open(
    tmp_path: Path, resolver: str, policy: str
) -> None:
    _layout(tmp_path)
    before = open_fds()
    outcomes: set[str] = set()
    with opened(tmp_path / "ws", resolver, policy) as root:
        ops = _operations(root)
        for _ in range(12):
            for op in ops:
                try:
                    op()
                    outcomes.add("ok")
                except FsError as exc:
                    outcomes.add(type(exc).__name__)
        assert open_fds() == before + 1  # only the workspace fd itself
    assert open_fds() == before
    assert len(ops) * 12 > 1000
    # the loop really went through the failure paths, not just the happy one
    assert {"ok", "Escape", "NoteNotFound", "NotRegular", "Hardlinked", "TooLarge"} <= outcomes
    assert {"SymlinkRefused", "InvalidPath", "NoteExists", "IdentityChanged"} <= outcomes
    assert (tmp_path / "outside" / "secret.md").read_bytes() == b"SECRET"
    assert sorted(os.listdir(tmp_path / "outside")) == ["secret.md"]
