"""The suite's own rules (tests/conftest.py), each shown to fail a session that breaks it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wire import REPO

CASE = """
import os, pytest

def test_writes_the_state_folder():
    folder = os.path.join(os.environ["XDG_STATE_HOME"], "fs-notes")
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, "search-0000000000000000.json"), "w").close()

def test_is_skipped():
    if os.environ.get("SKIP_ONE") == "1":
        pytest.skip("for the rule")
"""


def _session(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    case = tmp_path / "test_case.py"
    case.write_text(CASE)
    full = {**os.environ, "PYTHONPATH": f"{REPO / 'tests'}:{REPO}", **env}
    full.pop("FS_NOTES_TEST_UNPRIVILEGED", None)
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
         "--rootdir", str(tmp_path), str(case), *args],
        cwd=tmp_path, env=full, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_session_that_touches_the_real_state_folder_fails(tmp_path: Path) -> None:
    state = tmp_path / "state"  # stands for ~/.local/state: this test never touches the real one
    done = _session(tmp_path, "-k", "writes", XDG_STATE_HOME=str(state))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout  # the test itself passed: the rule failed the session
    assert ("the tests made or changed 1 file(s) in the real state folder (a server started "
            "without child_env): search-0000000000000000.json") in done.stdout  # fmt: skip
    control = _session(tmp_path, "-k", "skipped", XDG_STATE_HOME=str(state))
    assert control.returncode == 0, control.stdout  # nothing new there now: it passes


def test_a_skip_fails_the_regular_user_pass_and_root_cannot_run_it(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "SKIP_ONE": "1"}
    plain = _session(tmp_path, "-k", "skipped", **env)
    assert plain.returncode == 0 and "1 skipped" in plain.stdout  # the control
    strict = _session(tmp_path, "-k", "skipped", FS_NOTES_TEST_UNPRIVILEGED="1", **env)
    if os.geteuid() == 0:
        assert strict.returncode == 4, strict.stdout + strict.stderr  # a usage error
        assert "the tests run as root" in strict.stderr
    else:
        assert strict.returncode == 1, strict.stdout
        assert "regular-user pass: 1 test(s) skipped; none may be" in strict.stdout


MOUNTING = """
import os, pytest

@pytest.mark.mounts
def test_mounts_and_fails():
    assert os.environ.get("FS_NOTES_TEST_MOUNT_NS", "0") == "-"
"""


def test_a_mounting_test_is_run_again_in_a_namespace_and_its_failure_reported(
    tmp_path: Path,
) -> None:
    case = tmp_path / "test_mounting.py"
    case.write_text(MOUNTING)
    full = {**os.environ, "PYTHONPATH": f"{REPO / 'tests'}:{REPO}",
            "XDG_STATE_HOME": str(tmp_path / "state")}  # fmt: skip
    full.pop("FS_NOTES_TEST_MOUNT_NS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
         "--rootdir", str(tmp_path), str(case)],
        cwd=tmp_path, env=full, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout
    if os.geteuid() == 0:  # root mounts where it is: the test ran here, outside any namespace
        assert "assert '0' == '-'" in done.stdout
        assert "in a user and mount namespace of its own" not in done.stdout
    else:  # a regular user's: run again inside one (where the variable is "1"), and said so
        assert "in a user and mount namespace of its own" in done.stdout
        assert "assert '1' == '-'" in done.stdout
