"""The way a test that mounts runs as a regular user (tests/mountns.py, tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import mountns
import pytest


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    assert mountns.can_mount()
    where = tmp_path / "m"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


@pytest.mark.mounts
def test_a_mounting_test_mounts_and_its_body_runs_with_no_capability(tmpfs: Path) -> None:
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    assert any(line.split()[1] == str(tmpfs) and line.split()[2] == "tmpfs" for line in mounts)
    if os.environ.get(mountns.INSIDE) == "1":  # a regular user's run, in its own namespace
        assert os.geteuid() != 0 and os.getuid() == int(os.environ["FS_NOTES_TEST_OUTER_UID"])
        assert mountns.capabilities() == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapAmb": 0}
        (tmpfs / "n.md").write_text("x")
        assert (tmpfs / "n.md").stat().st_uid == os.getuid()  # files are this user's
    else:
        assert os.geteuid() == 0


def test_a_re_run_reports_the_inner_outcome(tmp_path: Path) -> None:
    case = tmp_path / "test_case.py"
    case.write_text("def test_good():\n    assert 1 == 1\n\n\ndef test_bad():\n    assert 1 == 2\n"
                    "\n\ndef test_skips():\n    import pytest\n    pytest.skip('no')\n")
    passed, out = mountns.rerun(f"{case}::test_good", 60)
    assert passed, out
    passed, out = mountns.rerun(f"{case}::test_bad", 60)
    assert not passed and "assert 1 == 2" in out
    passed, out = mountns.rerun(f"{case}::test_skips", 60)  # a skip inside is not a pass
    assert not passed and "1 skipped" in out
