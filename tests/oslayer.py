"""Helpers for the tests of the OS containment layer as the tools use it (sandbox/confined.py)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Literal

import pytest
from layers import Verdict, requirement

from fs_notes.compose import open_roots
from fs_notes.policy import Policy
from fs_notes.sandbox.confined import OsLayer
from fs_notes.sandbox.errors import ConfinementError
from fs_notes.sandbox.probe import HostReport, probe
from fs_notes.sandbox.supervisor import ConfinedWorker


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


def chroot_only(timeout: float = 10.0) -> HostReport:
    """This host's probe as a host without Landlock would give it (chroot still works): a
    stand-in for `sandbox.probe.probe` in process; the real thing is tests/hide_landlock.py."""
    return dataclasses.replace(
        probe(), landlock_enforced=False, landlock_abi=None, landlock_reason="test"
    )


def needed(layer: Literal["landlock", "chroot", "view", "root"]) -> Verdict:
    """tests/layers.py's verdict, acted on: "fail" fails the test, "skip" (a developer's
    machine only) skips it; any other verdict is returned for the test to prove."""
    verdict, why = requirement(layer)
    if verdict == "fail":
        pytest.fail(why)
    if verdict == "skip":
        pytest.skip(why)
    return verdict


def only_where(layer: Literal["landlock", "chroot", "view", "root"]) -> None:
    """For a test that proves nothing without `layer`: "fail" fails it, and any verdict of
    tests/layers.py but "run" skips it."""
    if needed(layer) != "run":
        pytest.skip(requirement(layer)[1])


def layer_runs(mode: str, worker: type[ConfinedWorker] = ConfinedWorker) -> bool:
    """For a test of a worker's mode: "none" always runs; "landlock" and "chroot" fail or
    skip per tests/layers.py, or are False when Landlock is hidden (tests/hide_landlock.py),
    after proving the fail-closed rule there: a landlock `worker` refuses to start."""
    if mode not in ("landlock", "chroot"):
        return True
    if needed(mode) == "hidden":  # type: ignore[arg-type]
        with pytest.raises(ConfinementError):
            worker(os.getcwd(), "delete", "landlock")
        return False
    return True


def host_mode() -> str:
    """The mode this host gives (CI rule: fail, never skip, when Landlock is expected)."""
    return "landlock" if needed("landlock") == "run" else "chroot"


def make_layer(policy: Policy, **kwargs: Any) -> OsLayer:
    """An OsLayer over root handles opened now, as serve opens them at start-up; closing the
    layer closes them too."""
    roots = open_roots(policy)
    layer = OsLayer(policy, roots, **kwargs)
    close = layer.close

    def close_all() -> None:
        close()
        for root in roots.values():
            root.close()

    layer.close = close_all  # type: ignore[method-assign]
    return layer
