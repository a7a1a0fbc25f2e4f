"""`fs-notes check` as an operator runs it (issue 25): it leaves nothing in the temporary
folder, and with --policy it reports a workspace folder serve could not open and exits 2, as
serve does for it (CONTRACT: 2 is a configuration error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from wire import REPO, child_env


def _check(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env(TMPDIR=str(tmp))
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", "check", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip


def _policy(tmp: Path, folder: Path) -> Path:
    policy = tmp / "policy.toml"
    policy.write_text(
        f'[[principal]]\nname = "me"\nlocal = true\n[[workspace]]\nname = "notes"\n'
        f'path = "{folder}"\n[[grant]]\nprincipal = "me"\nworkspace = "notes"\n'
        'operations = ["read"]\n'
    )
    policy.chmod(0o600)
    return policy


def test_check_leaves_no_temporary_folder_behind(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = _check(tmp, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "error" not in report["processes"]["server"], report["processes"]["server"]
    assert sorted(os.listdir(tmp)) == []


def test_check_with_a_policy_naming_a_missing_folder_exits_2_and_names_it(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "gone"
    done = _check(tmp_path, "--json", "--policy", str(_policy(tmp_path, missing)))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f'fs-notes: workspace "notes" ({missing}): does not exist (serve refuses to start)'
    ]
    assert json.loads(done.stdout)["workspaces"] == [
        {"name": "notes", "path": str(missing), "problem": "does not exist"}
    ]
    # and serve, given the same policy, exits 2 as well
    served = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", "--policy", str(tmp_path / "policy.toml")],
        capture_output=True, text=True, env=child_env(), cwd=REPO, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert served.returncode == 2


def test_check_with_a_policy_whose_folders_exist_exits_0_and_lists_them(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    done = _check(tmp_path, "--policy", str(_policy(tmp_path, folder)))
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("workspace ")]
    assert lines == [["workspace", "notes:", f"{folder}:", "a", "folder", "serve", "can", "open"]]


def test_check_names_why_user_namespaces_are_refused_and_the_fixes(tmp_path: Path) -> None:
    """Issue 26: with unshare refused from outside (tests/deny_syscalls.py), `check` says user
    namespaces are refused, why (the step, the errno, the settings it read) and, for each
    setting of this kernel set to refuse them, how to allow them."""
    from fs_notes.sandbox.userns import UserNamespaces, read_settings

    deny = str(Path(__file__).with_name("deny_syscalls.py"))
    done = subprocess.run(
        [sys.executable, deny, "unshare", "--", sys.executable, "-m", "fs_notes", "check"],
        capture_output=True, text=True, env=child_env(TMPDIR=str(tmp_path)), cwd=REPO,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    refused = UserNamespaces(False, "unshare", "EPERM", tuple(read_settings().items()))
    lines = done.stdout.splitlines()
    assert f"user namespaces:       no ({refused.reason})" in lines
    at = lines.index(f"user namespaces:       no ({refused.reason})")
    assert lines[at + 1 : at + 1 + len(refused.fixes)] == [
        f"  to allow them:       {fix}" for fix in refused.fixes
    ]
    plain = _check(tmp_path, "--json")
    assert json.loads(plain.stdout)["user_namespaces"]["works"] in (True, False)
