"""The host probe and the fail-closed choice of the deletion mode."""

from __future__ import annotations

import dataclasses

import pytest

from fs_notes.fs import openat2_available
from sandbox import landlock_abi as ll
from sandbox.errors import NoEnforceableLayer
from sandbox.probe import HostReport, probe, select_mode
from sandbox.testing import requirement

BASE = HostReport(
    landlock_abi=7,
    landlock_enforced=True,
    landlock_errata=0,
    landlock_reason=None,
    openat2=True,
    chroot=True,
    chroot_reason=None,
    landlock_hidden=False,
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


def test_hiding_landlock_makes_the_probe_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FS_NOTES_HIDE_LANDLOCK", "1")
    report = probe()
    assert report.landlock_hidden
    assert report.landlock_abi is None
    assert not report.landlock_enforced
    assert report.landlock_reason is not None and "hidden" in report.landlock_reason
    if report.chroot:
        assert select_mode(report, allow_unconfined=False) == "chroot"
    else:
        with pytest.raises(NoEnforceableLayer):
            select_mode(report, allow_unconfined=False)
