"""An update with an expected identity leaves no window between its check and the replace
(fs/fileops.py): the note is swapped out with RENAME_EXCHANGE and checked where it then is, so a
file another program puts at the name at the last moment is swapped back, never lost. The
positive control: on a file system without the exchange (EINVAL), the same last-moment write
is lost to the plain rename, which is the window the exchange closes."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from trees import files

from fs_notes.fs import fileops
from fs_notes.fs.errors import IdentityChanged
from fs_notes.fs.renameat2 import RENAME_EXCHANGE
from fs_notes.fs.root import WorkspaceRoot


def _theirs_at_the_last_moment(note: Path) -> None:
    other = note.parent / "theirs.part"
    other.write_text("# theirs, written at the last moment\n")
    os.replace(other, note)


def test_a_write_at_the_last_moment_is_swapped_back_never_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = files(tmp_path / "notes", {"j.md": "# mine before\n"})
    note = ws / "j.md"
    real = fileops.renameat2  # type: ignore[attr-defined]
    calls: list[int] = []

    def exchange(*args: Any) -> None:
        if not calls:  # the exchange itself: everything before it was checked
            _theirs_at_the_last_moment(note)
        calls.append(args[-1])
        real(*args)

    monkeypatch.setattr(fileops, "renameat2", exchange)
    with WorkspaceRoot.open(ws) as root:
        _, ident = root.read_note("j.md")
        with pytest.raises(IdentityChanged):
            root.update_note("j.md", b"# mine after\n", expected=ident)
    assert calls == [RENAME_EXCHANGE, RENAME_EXCHANGE]  # swapped, swapped back
    assert note.read_text() == "# theirs, written at the last moment\n"
    assert sorted(os.listdir(ws)) == ["j.md"]  # no temp file left, theirs at its name


def test_the_control_without_the_exchange_the_same_write_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = files(tmp_path / "notes", {"j.md": "# mine before\n"})
    note = ws / "j.md"
    real_rename = os.rename

    def no_exchange(*args: Any) -> None:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    def rename(src: Any, dst: Any, **kw: Any) -> None:
        _theirs_at_the_last_moment(note)  # after the check, before the rename
        real_rename(src, dst, **kw)

    monkeypatch.setattr(fileops, "renameat2", no_exchange)
    monkeypatch.setattr(os, "rename", rename)
    with WorkspaceRoot.open(ws) as root:
        _, ident = root.read_note("j.md")
        root.update_note("j.md", b"# mine after\n", expected=ident)
    assert note.read_text() == "# mine after\n"  # theirs is gone: the window is there


def test_an_unchanged_note_is_replaced_and_nothing_is_left_beside_it(tmp_path: Path) -> None:
    ws = files(tmp_path / "notes", {"j.md": "# mine before\n"})
    os.chmod(ws / "j.md", 0o640)
    with WorkspaceRoot.open(ws) as root:
        _, ident = root.read_note("j.md")
        new = root.update_note("j.md", b"# mine after\n", expected=ident)
        assert root.stat_note("j.md") == new
    assert (ws / "j.md").read_text() == "# mine after\n"
    assert os.stat(ws / "j.md").st_mode & 0o777 == 0o640
    assert sorted(os.listdir(ws)) == ["j.md"]


def test_a_second_save_during_the_swap_back_is_kept_beside_the_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program saves twice: before the exchange and again before the compare. Both
    saves stay visible: the older at the note's name, the newest beside it as a conflict."""
    ws = files(tmp_path / "notes", {"j.md": "# mine before\n"})
    note = ws / "j.md"
    real_exchange, real_lstat = fileops.renameat2, fileops.lstat_at  # type: ignore[attr-defined]
    seen = {"exchange": 0, "lstat": 0}

    def exchange(*args: Any) -> None:
        if seen["exchange"] == 0:
            _save(note, "# theirs 1\n")
        seen["exchange"] += 1
        real_exchange(*args)

    def lstat_at(parent: int, name: str) -> Any:
        if seen["lstat"] == 0:
            _save(note, "# theirs 2, the newest\n")
        seen["lstat"] += 1
        return real_lstat(parent, name)

    monkeypatch.setattr(fileops, "renameat2", exchange)
    monkeypatch.setattr(fileops, "lstat_at", lstat_at)
    with WorkspaceRoot.open(ws) as root:
        _, ident = root.read_note("j.md")
        with pytest.raises(IdentityChanged):
            root.update_note("j.md", b"# mine after\n", expected=ident)
    names = sorted(os.listdir(ws))
    assert names[0] == "j (conflict " + names[0][12:18] + ").md" and names[1] == "j.md", names
    assert {(ws / n).read_text() for n in names} == {"# theirs 1\n", "# theirs 2, the newest\n"}


def _save(note: Path, text: str) -> None:
    part = note.parent / "theirs.part"
    part.write_text(text)
    os.replace(part, note)
