"""The host probe and the fail-closed choice of the deletion mode."""

from __future__ import annotations

import dataclasses
import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest
from layers import requirement
from wire import REPO

from fs_notes.fs import openat2_available
from fs_notes.sandbox import landlock_abi as ll
from fs_notes.sandbox.errors import NoEnforceableLayer
from fs_notes.sandbox.probe import HostReport, probe, select_mode

BASE = HostReport(
    landlock_abi=7,
    landlock_enforced=True,
    landlock_errata=0,
    landlock_reason=None,
    openat2=True,
    chroot=True,
    chroot_reason=None,
)
NO_LANDLOCK = dataclasses.replace(
    BASE, landlock_abi=None, landlock_enforced=False, landlock_reason="absent"
)
NOTHING = dataclasses.replace(NO_LANDLOCK, chroot=False, chroot_reason="EPERM")


@pytest.mark.parametrize(
    ("report", "allow_unconfined", "mode"),
    [
        (BASE, False, "landlock"),
        (BASE, True, "landlock"),  # allowing weaker never chooses weaker
        (NO_LANDLOCK, False, "chroot"),
        (NO_LANDLOCK, True, "chroot"),
        (NOTHING, True, "none"),  # only with the operator's explicit opt-in
        # ABI present but the enforcement test failed: that is not Landlock.
        (dataclasses.replace(BASE, landlock_enforced=False), False, "chroot"),
    ],
)
def test_select_mode_picks_the_strongest_enforceable_layer(
    report: HostReport, allow_unconfined: bool, mode: str
) -> None:
    assert select_mode(report, allow_unconfined) == mode


def test_select_mode_fails_closed_when_nothing_is_enforceable() -> None:
    with pytest.raises(NoEnforceableLayer):
        select_mode(NOTHING, allow_unconfined=False)


def test_the_probe_reports_this_host() -> None:
    report = probe()
    assert report.openat2 == openat2_available()
    verdict, why = requirement("landlock")
    if verdict == "fail":
        pytest.fail(why)
    if verdict == "run":
        assert report.landlock_enforced
        assert report.landlock_abi == ll.abi_version()
        assert report.landlock_reason is None
    chroot_verdict, chroot_why = requirement("chroot")
    if chroot_verdict == "fail":
        pytest.fail(chroot_why)
    if chroot_verdict == "run":
        assert report.chroot and report.chroot_reason is None
    json = report.to_json()
    assert set(json) >= {"landlock", "openat2", "chroot"}
    assert set(json["landlock"]) >= {"abi", "enforced"}


PROBE = """
import json
from fs_notes.sandbox.probe import probe, select_mode
from fs_notes.sandbox.errors import NoEnforceableLayer
r = probe()
try:
    mode = select_mode(r, allow_unconfined=False)
except NoEnforceableLayer:
    mode = "refused"
print(json.dumps({"abi": r.landlock_abi, "enforced": r.landlock_enforced,
                  "reason": r.landlock_reason, "chroot": r.chroot, "mode": mode}))
"""


def test_landlock_hidden_from_outside_makes_the_probe_fall_back() -> None:
    # tests/hide_landlock.py: ENOSYS for the Landlock calls, the product has no switch for it.
    launcher = str(Path(__file__).with_name("hide_landlock.py"))
    out = subprocess.run(
        [sys.executable, launcher, sys.executable, "-c", PROBE],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["abi"] is None and report["enforced"] is False
    assert report["reason"] == ll.reason_for("landlock_create_ruleset", errno.ENOSYS)
    assert report["mode"] == ("chroot" if report["chroot"] else "refused")
