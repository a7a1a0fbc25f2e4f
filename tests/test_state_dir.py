"""The state folder is as private as ssh wants the folder of its keys (issue 27 item 4): the
server's own user's, and writable by no one else, or `serve` refuses to start, naming the fix
and making nothing in it. The positive control: the same folder made private starts."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from wire import REPO, child_env


def _serve(notes: Path, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", str(notes), "--state-dir", str(state)],
        input="", capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
    )  # fmt: skip


def test_a_state_folder_others_can_write_is_refused_with_the_fix(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    state = tmp_path / "state dir"
    state.mkdir()
    for mode in (0o777, 0o720, 0o702, 0o1777):
        state.chmod(mode)
        done = _serve(notes, state)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            f"fs-notes: --state-dir {state} can be written by the group or others "
            f"(mode {mode:04o}); fix it with: chmod go-w {shlex.quote(str(state))}"
        )
        assert os.listdir(state) == []  # nothing made in it
    state.chmod(0o700)  # the control: private, it starts (and ends with its input)
    done = _serve(notes, state)
    assert done.returncode == 0, done.stderr
    assert "replay.sqlite3" in os.listdir(state)


def test_a_state_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    other = 65534 if os.geteuid() != 65534 else 0
    if os.geteuid() == 0:
        os.chown(state, other, other)
        done = _serve(notes, state)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            f"fs-notes: --state-dir {state} belongs to another user (uid {other}): use one of yours"
        )
        assert os.listdir(state) == []
        os.chown(state, 0, 0)
    else:  # a regular user cannot give a folder away; /tmp's owner is root: the same refusal
        done = _serve(notes, Path("/"))
        assert done.returncode == 2, done.stderr
        assert "belongs to another user (uid 0)" in done.stderr
    done = _serve(notes, state)  # the control: its own
    assert done.returncode == 0, done.stderr
