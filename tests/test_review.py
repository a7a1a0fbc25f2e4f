"""`fs-notes changes` (issue 30 item 2): WHEN read as a person writes it, a clear usage error
otherwise (exit 2, nothing made), a folder with no journal said so, names made safe."""

from __future__ import annotations

import calendar
import os
import subprocess
import sys
from pathlib import Path

import pytest
from trees import files

from fs_notes.errors import ConfigError
from fs_notes.review import parse_since

NOW = 1_800_000_000.0


@pytest.mark.parametrize(("text", "ago"), [("30m", 1800), ("2h", 7200), ("1d", 86400),
                                           ("1w", 604800), ("1.5h", 5400)])  # fmt: skip
def test_a_time_ago(text: str, ago: float) -> None:
    assert parse_since(text, NOW) == NOW - ago


@pytest.mark.parametrize("text", ["2026-12-07", "2026-12-07T00:00", "2026-12-07T00:00:00Z"])
def test_a_utc_date_or_time(text: str) -> None:
    assert parse_since(text, NOW) == calendar.timegm((2026, 12, 7, 0, 0, 0))


@pytest.mark.parametrize("text", ["yesterday", "-1d", "2026-13-01", "1y", ""])
def test_anything_else_is_a_usage_error_naming_the_forms(text: str) -> None:
    with pytest.raises(ConfigError, match=r"give a time ago \(30m, 2h, 1d, 1w\)"):
        parse_since(text, NOW)


def _changes(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fs_notes", "changes", *args],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


def test_a_bad_when_exits_2_and_makes_nothing(tmp_path: Path) -> None:
    ws = files(tmp_path / "notes", {"a.md": "# A\n"})
    state = tmp_path / "state"
    out = _changes(str(ws), "--since", "soon", "--state-dir", str(state))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("fs-notes: --since soon: give a time ago")
    assert not state.exists()
    both = _changes(str(ws), "--policy", str(tmp_path / "p.toml"))
    assert both.returncode == 2 and "give a FOLDER or --policy FILE" in both.stderr


def test_a_folder_never_changed_through_fs_notes_says_so_and_lists_others(tmp_path: Path) -> None:
    ws = files(tmp_path / "notes", {"a.md": "# A\n", "evil\x1b[2Jname.md": "# E\n"})
    state = tmp_path / "state"
    state.mkdir()
    old = ws / "a.md"
    os.utime(old, (NOW - 10 * 86400, 1_000_000_000))  # long ago: not listed
    out = _changes(str(ws), "--state-dir", str(state))
    assert out.returncode == 0, out.stderr
    assert "(no journal: nothing was changed through fs-notes" in out.stdout
    assert "another program   changed evil\\u001b[2Jname.md" in out.stdout
    assert "\x1b" not in out.stdout and "a.md" not in out.stdout
    assert "0 through fs-notes, 1 by other programs" in out.stdout
    assert os.listdir(state) == []  # read-only: no journal made


def test_a_journal_it_cannot_read_is_a_clear_error_and_leaves_no_files(tmp_path: Path) -> None:
    from fs_notes.journal.store import Journal, journal_name
    from fs_notes.policy import Policy
    from fs_notes.statefolder import index_digest

    ws = files(tmp_path / "notes", {"a.md": "# A\n"})
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    [workspace] = Policy.for_single_workspace(str(ws), "changes", token_sha256=None).workspaces
    path = state / journal_name(index_digest(workspace.name, workspace.path))
    journal = Journal(str(path), days=30, max_bytes=1 << 20)
    journal.keep(note_id="a.md", kind="update", tool="notes_update", principal="me", content=b"x")
    journal.close()
    out = _changes(str(ws), "--state-dir", str(state))
    assert out.returncode == 0, out.stderr
    assert "1 through fs-notes" in out.stdout
    assert sorted(os.listdir(state)) == [path.name]  # no -wal or -shm left behind
    path.write_bytes(b"not a database at all" * 100)
    bad = _changes(str(ws), "--state-dir", str(state))
    assert bad.returncode == 2 and bad.stdout == ""
    assert "not a journal fs-notes can read" in bad.stderr and "Traceback" not in bad.stderr
