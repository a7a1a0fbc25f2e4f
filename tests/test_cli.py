"""The command line (docs/interface.md): usage and configuration errors exit 2 with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from wire import REPO, child_env


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=child_env(),
    )


def test_a_bad_policy_stops_serve_with_exit_2_naming_file_line_and_field(tmp_path: Path) -> None:
    policy = tmp_path / "team.toml"
    policy.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n[[workspace]]\nname = "w"\n'
        f'path = "{tmp_path}"\nsymlinks = "sometimes"\n'
    )
    result = _run("serve", "--policy", str(policy))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"{policy}:8:" in lines[0] and "symlinks" in lines[0]


@pytest.mark.parametrize(
    "args,needle",
    [
        (("serve",), "notes folder"),
        (("serve", "/nonexistent/folder"), "not a folder"),
        (("serve", "{tmp}", "--http", "nonsense"), "HOST:PORT"),
        (("serve", "{tmp}", "--state-key-file", "/nonexistent/key"), "--state-key-file"),
    ],
)
def test_configuration_errors_exit_2_with_one_line(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    result = _run(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_usage_errors_exit_2() -> None:
    assert _run("frobnicate").returncode == 2
