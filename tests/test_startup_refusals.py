"""What `serve` refuses at start-up, before it serves anything (issue 27): a state folder that is
not as private as ssh wants the folder of its keys (the server's own user's, writable by no one
else: item 4), naming the fix and making nothing in it; a workspace whose way could have been
redirected by someone other than its owner (a link or a folder above it of another user, or one
others can write), two workspaces that open one folder or one inside the other (item 1); the
same for the folders of the replay database, the key file and the audit log. Each with its
positive control: the same set-up, made right, starts. The unit cases of the walk are in
tests/test_trusted_walk.py."""

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
        f'workspace "alice" ({tmp_path / "alice"}): two workspaces must be two folders, '
        "neither inside the other"
    )
    (tmp_path / "bob" / "projects").unlink()
    bobs.mkdir(parents=True)
    done = serve(policy(bobs))  # the control: two folders
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "alice" / "diary.md").read_text() == "# Diary\n"


def _policy(tmp_path: Path, *workspaces: tuple[str, Path]) -> Path:
    path = tmp_path / "policy.toml"
    text = '[[principal]]\nname = "alice"\nlocal = true\n\n'
    for name, folder in workspaces:
        text += f'[[workspace]]\nname = "{name}"\npath = "{folder}"\n\n'
        text += f'[[grant]]\nprincipal = "alice"\nworkspace = "{name}"\noperations = ["read"]\n\n'
    path.write_text(text)
    return path


def _serve_policy(tmp_path: Path, policy: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy),
         "--state-dir", str(tmp_path / "state"), *more],
        input="", capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
    )  # fmt: skip


def _last(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    return done.stderr.strip().splitlines()[-1]


def test_a_workspace_inside_another_through_a_link_is_refused_both_ways(tmp_path: Path) -> None:
    """The policy's paths are not nested (the policy loader refuses those as written); a link
    on the way makes one folder hold the other. Either order: "is inside" and "holds"."""
    (tmp_path / "alice" / "archive").mkdir(parents=True)
    (tmp_path / "bob").mkdir()
    (tmp_path / "bob" / "projects").symlink_to(tmp_path / "alice")
    alices, bobs = tmp_path / "alice", tmp_path / "bob" / "projects" / "archive"
    end = "two workspaces must be two folders, neither inside the other"
    assert _last(_serve_policy(tmp_path, _policy(tmp_path, ("alice", alices), ("bob", bobs)))) == (
        f'fs-notes: workspace "bob" ({bobs}) is inside workspace "alice" ({alices}): {end}'
    )
    assert _last(_serve_policy(tmp_path, _policy(tmp_path, ("bob", bobs), ("alice", alices)))) == (
        f'fs-notes: workspace "alice" ({alices}) holds workspace "bob" ({bobs}): {end}'
    )
    (tmp_path / "bob" / "projects").unlink()  # the control: bob's own folder, beside alice's
    bobs.mkdir(parents=True)
    done = _serve_policy(tmp_path, _policy(tmp_path, ("alice", alices), ("bob", bobs)))
    assert done.returncode == 0, done.stderr


def test_a_workspace_whose_way_others_could_redirect_is_refused_naming_the_folder(
    tmp_path: Path,
) -> None:
    """Issue 27's attack, made by whoever can write a folder above the workspace: others (any
    user, here) or another user owning a link on the way (as root: the link is given away).
    The refusal names the component; nothing is served. The control: the way made private."""
    shared = tmp_path / "shared"
    (shared / "notes").mkdir(parents=True)
    (shared / "notes" / "a.md").write_text("# A\n")
    shared.chmod(0o777)
    policy = _policy(tmp_path, ("notes", shared / "notes"))
    assert _last(_serve_policy(tmp_path, policy)) == (
        f'fs-notes: workspace "notes" ({shared / "notes"}): {shared} can be written by others '
        "(mode 0777; chmod go-w fixes it)"
    )
    shared.chmod(0o755)
    done = _serve_policy(tmp_path, policy)
    assert done.returncode == 0, done.stderr
    if os.geteuid() != 0:
        return  # a regular user cannot give a link away (tests/test_trusted_walk.py proves it)
    (tmp_path / "bob").mkdir()
    link = tmp_path / "bob" / "projects"
    link.symlink_to(shared)
    os.chown(link, 12345, 12345, follow_symlinks=False)
    policy = _policy(tmp_path, ("bob", link / "notes"))
    assert _last(_serve_policy(tmp_path, policy)) == (
        f'fs-notes: workspace "bob" ({link / "notes"}): {link} is a symbolic link of uid '
        "12345, not of root, the folder's owner: its owner could make the path lead to another "
        "folder"
    )


def test_the_folders_of_the_replay_database_key_file_and_audit_log_are_checked_too(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    open_ = tmp_path / "open"
    open_.mkdir()
    open_.chmod(0o777)
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: refused too, a file there is opened by its name
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    policy = _policy(tmp_path, ("notes", notes))
    fix = "can be written by others (mode 0777; chmod go-w fixes it)"
    for flag, name in (("--replay-db", "replay.sqlite3"), ("--audit-log", "audit.log")):
        done = subprocess.run(
            [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy),
             flag, str(open_ / name)],
            input="", capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
        )  # fmt: skip
        where = "the replay database" if flag == "--replay-db" else flag
        assert _last(done) == f"fs-notes: {where} {open_ / name}: {open_} {fix}"
        assert os.listdir(open_) == []
        done = subprocess.run(
            [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy),
             flag, str(sticky / name)],
            input="", capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
        )  # fmt: skip
        assert _last(done) == (
            f"fs-notes: {where} {sticky / name}: {sticky} can be written by others "
            "(mode 1777; chmod go-w fixes it)"
        )
        assert os.listdir(sticky) == []
        done = subprocess.run(  # the control: in a folder of ours
            [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy),
             flag, str(private / name)],
            input="", capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    key = open_ / "state.keys"
    key.write_bytes(b"")
    done = _serve_policy(tmp_path, policy, "--state-key-file", str(key))
    assert _last(done) == f"fs-notes: --state-key-file {key}: {open_} {fix}"
