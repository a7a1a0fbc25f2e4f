"""Helpers for the tests of the OS containment layer as the tools use it (tools/confined.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fs_notes.policy import Policy
from sandbox.probe import HostReport, probe
from sandbox.testing import requirement


def policy_for(ws: Path, sandbox: str = "landlock") -> Policy:
    """A one-workspace policy for the local principal "me" with the given sandbox level."""
    return Policy.for_single_workspace(str(ws), "me", token_sha256=None, sandbox=sandbox)  # type: ignore[arg-type]


def nothing_enforceable(timeout: float = 10.0) -> HostReport:
    """This host's probe with neither Landlock nor chroot (a stand-in for `sandbox.probe.probe`)."""
    return dataclasses.replace(
        probe(),
        landlock_enforced=False,
        landlock_abi=None,
        chroot=False,
        landlock_reason="test",
        chroot_reason="test",
    )


def host_mode() -> str:
    """The mode this host gives (CI rule: fail, never skip, when Landlock is expected)."""
    verdict, why = requirement("landlock")
    if verdict == "fail":
        pytest.fail(why)
    if verdict == "skip":
        pytest.skip(why)
    return "landlock" if verdict == "run" else "chroot"
