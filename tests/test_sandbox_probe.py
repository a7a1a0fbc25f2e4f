"""The host probe and the fail-closed choice of the deletion mode."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from layers import requirement
from wire import REPO

from fs_notes.fs import openat2_available
from fs_notes.sandbox import landlock_abi as ll
from fs_notes.sandbox.errors import NoEnforceableLayer
from fs_notes.sandbox.probe import HostReport, probe, select_mode
from fs_notes.sandbox.userns import (
    SETTINGS,
    UserNamespaces,
    probe_here,
    read_settings,
    refusing,
)

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


# -- user namespaces (issue 26 item 2; sandbox/userns.py) ------------------------------------


def test_user_namespaces_work_here_and_the_fork_probe_agrees() -> None:
    """This host (CI's, both passes) gives its users user namespaces: the probe's child made one
    with a mount namespace and mounted in it; serve's start-up probe (a fork) finds the same."""
    report = probe().user_namespaces
    assert report is not None
    if not report.works and os.environ.get("CI", "").lower() != "true":
        pytest.skip(f"user namespaces refused here: {report.reason}")
    assert report.works and report.reason is None and report.fixes == []
    assert dict(report.settings) == read_settings()
    assert report.to_json()["refusing"] == []
    assert probe_here() == report


def _probe_under(*denied: str) -> dict[str, Any]:
    deny = str(Path(__file__).with_name("deny_syscalls.py"))
    code = (
        "import json; from fs_notes.sandbox.probe import probe; "
        "print(json.dumps(probe().to_json()))"
    )
    out = subprocess.run(
        [sys.executable, deny, *denied, "--", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    userns: dict[str, Any] = json.loads(out.stdout)["user_namespaces"]
    return userns


def test_unshare_refused_from_outside_is_reported_with_what_was_read() -> None:
    """unshare answers EPERM (a seccomp filter from outside, as a container runtime's would):
    the probe says which step was refused and names the settings of this kernel that refuse
    user namespaces, or, none being set so (this host), that something else refuses them."""
    userns = _probe_under("unshare")
    settings = read_settings()
    expected = UserNamespaces(False, "unshare", "EPERM", tuple(settings.items()))
    assert userns == expected.to_json()
    assert userns["works"] is False and userns["refused_at"] == "unshare"
    assert userns["reason"].startswith("unshare(CLONE_NEWUSER | CLONE_NEWNS) was refused (EPERM); ")
    if not refusing(settings):  # this host: nothing is set to refuse them
        read = ", ".join(f"{n} = {v}" for n, v in settings.items() if v is not None)
        assert userns["reason"].endswith(
            f"no setting of this kernel refuses it ({read}): something else does, such as a "
            "system-call filter (a container's) or a security module"
        )
        assert userns["fixes"] == []


def test_a_namespace_made_without_privilege_in_it_is_refused_at_the_mount() -> None:
    """Ubuntu's AppArmor restriction lets unshare succeed and refuses what the namespace is for;
    faked here by refusing mount: the probe does not stop at a successful unshare."""
    userns = _probe_under("mount")
    assert (userns["works"], userns["refused_at"], userns["error"]) == (False, "mount", "EPERM")
    assert userns["reason"].startswith("mounting in the new namespaces was refused (EPERM); ")


_DEBIAN = {"kernel.unprivileged_userns_clone": "0", "user.max_user_namespaces": "15000"}
_UBUNTU = {"kernel.apparmor_restrict_unprivileged_userns": "1", "user.max_user_namespaces": "1"}
_NO_MAX = {"user.max_user_namespaces": "0", "user.max_mnt_namespaces": "0"}
_ALLOWING = {
    "kernel.unprivileged_userns_clone": "1",
    "user.max_user_namespaces": "15000",
    "user.max_mnt_namespaces": "15000",
    "kernel.apparmor_restrict_unprivileged_userns": "0",
}


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (_DEBIAN, ["kernel.unprivileged_userns_clone"]),
        (_UBUNTU, ["kernel.apparmor_restrict_unprivileged_userns"]),
        (_NO_MAX, ["user.max_user_namespaces", "user.max_mnt_namespaces"]),
        (_ALLOWING, []),
        ({}, []),  # a kernel with none of them
    ],
)
def test_the_settings_named_are_those_set_to_refuse(
    values: dict[str, str | None], named: list[str]
) -> None:
    assert [s.name for s in refusing(values)] == named
    refused = UserNamespaces(False, "unshare", "EPERM", tuple(values.items()))
    assert refused.reason is not None
    for name in named:
        setting = next(s for s in SETTINGS if s.name == name)
        assert f"{name} = {setting.refuses}: {setting.means}" in refused.reason
        assert f"{name}: {setting.fix}" in refused.fixes
    assert ("no setting of this kernel refuses it" in refused.reason) == (not named)
    assert len(refused.fixes) == len(named)


def test_each_fix_says_how_to_allow_them() -> None:
    fixes = {s.name: s.fix for s in SETTINGS}
    assert fixes["kernel.unprivileged_userns_clone"].startswith(
        "sysctl -w kernel.unprivileged_userns_clone=1"
    )
    assert "'userns,'" in fixes["kernel.apparmor_restrict_unprivileged_userns"]
    assert (
        "kernel.apparmor_restrict_unprivileged_userns=0"
        in fixes["kernel.apparmor_restrict_unprivileged_userns"]
    )
