"""When a containment test may run, must fail, or may skip: one rule for every test of layer 3.

Guarantees: `requirement("landlock")` answers "run" only if the probe saw Landlock *enforced*
(and at least the ABI in FS_NOTES_EXPECT_LANDLOCK, when set); "hidden" when the tests run under
tests/hide_landlock.py (which sets FS_NOTES_TEST_LANDLOCK_HIDDEN=1) and the probe indeed finds no
Landlock (the test must then prove the landlock worker refuses to start: fail closed; a launcher
that did not hide it is a failure); otherwise "fail" when CI=true or FS_NOTES_EXPECT_LANDLOCK is
set, and "skip" only on a developer machine. `requirement("chroot")` is "run", else "fail" under
CI=true, else "skip". `requirement("view")` (the server's private view, sandbox/view.py) is
"run" where it can be built (root), else "fail" under CI=true, else "skip". `requirement("root")`
is "run" as root, else "fail" under CI=true, else "skip".

The regular-user pass (FS_NOTES_TEST_UNPRIVILEGED=1, set by .ci/run when a regular user runs
it): what needs root ("view", "root") answers "unprivileged" when this process is not root - the
test must then prove what a regular user gets instead (the server says so and refuses, or runs
without it as documented), never skip. A test helper: the product never reads these variables.

Does not: import pytest (the tests turn the verdict into pytest.fail / pytest.skip), or probe
more than once per process.
"""

from __future__ import annotations

import functools
import os
from typing import Literal

from fs_notes.sandbox.probe import HostReport, probe

Verdict = Literal["run", "hidden", "fail", "skip", "unprivileged"]


def unprivileged_pass() -> bool:
    """The regular-user pass: tests/conftest.py has checked that it does not run as root."""
    return os.environ.get("FS_NOTES_TEST_UNPRIVILEGED") == "1" and os.geteuid() != 0


@functools.cache
def host_report() -> HostReport:
    return probe()


def requirement(layer: Literal["landlock", "chroot", "view", "root"]) -> tuple[Verdict, str]:
    ci = os.environ.get("CI", "").lower() == "true"
    if layer == "root":
        if os.geteuid() == 0:
            return "run", ""
        if unprivileged_pass():
            return "unprivileged", "not root"
        return ("fail" if ci else "skip"), "needs root"
    if layer == "view":
        from fs_notes.sandbox.view import unavailable_reason

        reason = unavailable_reason()
        if reason is None:
            return "run", ""
        if unprivileged_pass():
            return "unprivileged", f"no private view: {reason}"
        return ("fail" if ci else "skip"), f"no private view: {reason}"
    if layer == "chroot":
        report = host_report()
        if report.chroot:
            return "run", ""
        return ("fail" if ci else "skip"), f"chroot unavailable: {report.chroot_reason}"
    report = host_report()
    if os.environ.get("FS_NOTES_TEST_LANDLOCK_HIDDEN") == "1":
        if report.landlock_enforced:
            return "fail", "tests/hide_landlock.py ran, yet the probe found Landlock enforced"
        return "hidden", "Landlock hidden by tests/hide_landlock.py"
    expect = os.environ.get("FS_NOTES_EXPECT_LANDLOCK", "")
    if report.landlock_enforced:
        if expect.isdigit() and (report.landlock_abi or 0) < int(expect):
            return "fail", f"Landlock ABI {report.landlock_abi} < expected {expect}"
        return "run", ""
    why = f"Landlock not enforced: {report.landlock_reason}"
    return ("fail" if ci or expect else "skip"), why


def status_field(pid: int, name: str) -> str:
    """A field of /proc/PID/status ("CapEff", "Uid", ...)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == name:
                return value.strip()
    raise AssertionError(f"{name} not in /proc/{pid}/status")
