"""The README's main command: `fs-notes demo` runs the whole scripted session and exits 0."""

from __future__ import annotations

import subprocess
import sys

from wire import REPO, child_env


def test_demo_runs_the_delete_flow_and_escape_attempts_and_exits_0() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fs_notes", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=child_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failed" in proc.stdout and "[FAILED]" not in proc.stdout
    assert "user accepts projects/tps-report.md" in proc.stdout
