"""What `serve` refuses at start-up, before it serves anything (issue 27): a state folder that is
not as private as ssh wants the folder of its keys (the server's own user's, writable by no one
else: item 4), naming the fix and making nothing in it; two workspaces that open one folder
(item 1, part). Each with its positive control: the same set-up, made right, starts."""

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


def test_two_workspaces_that_open_one_folder_are_refused(tmp_path: Path) -> None:
    """Issue 27 item 1 (part): a symbolic link on the way makes two paths one folder; the
    policy's paths differ, the folders opened do not. The control: two folders start."""
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "diary.md").write_text("# Diary\n")
    (tmp_path / "bob").mkdir()
    # bob's folder above his workspace, replaced by a link to the folder above alice's (the
    # workspace's own last component is opened O_NOFOLLOW: a link there is refused anyway)
    (tmp_path / "bob" / "projects").symlink_to(tmp_path)

    def policy(second: Path) -> Path:
        path = tmp_path / "policy.toml"
        path.write_text(
            '[[principal]]\nname = "alice"\nlocal = true\n\n'
            f'[[workspace]]\nname = "alice"\npath = "{tmp_path / "alice"}"\n\n'
            f'[[workspace]]\nname = "bob"\npath = "{second}"\n\n'
            '[[grant]]\nprincipal = "alice"\nworkspace = "alice"\noperations = ["read"]\n'
        )
        return path

    def serve(policy_file: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy_file),
             "--state-dir", str(tmp_path / "state")],
            input="", capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
        )  # fmt: skip

    bobs = tmp_path / "bob" / "projects" / "alice"
    done = serve(policy(bobs))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f'fs-notes: workspace "bob" ({bobs}) opens the same folder as '
        f'workspace "alice" ({tmp_path / "alice"}): two workspaces must be two folders'
    )
    (tmp_path / "bob" / "projects").unlink()
    bobs.mkdir(parents=True)
    done = serve(policy(bobs))  # the control: two folders
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "alice" / "diary.md").read_text() == "# Diary\n"
