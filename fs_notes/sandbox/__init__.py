"""Layer 3 of fs-notes: OS containment of the process that deletes (and writes) notes.

`probe()` tells what this host can enforce, `select_mode()` picks Landlock, else chroot, else
(only when the operator explicitly allows it) an unconfined worker, else refuses.
`ConfinedWorker` runs the operations in a separate confined process. Each module says what it
guarantees and what it does not; `chroot.py` lists the fallback's weaknesses.

The names below are imported lazily, so the worker process (which imports `sandbox.worker`)
does not pay for the supervisor's imports (psutil, subprocess) on every start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fs_notes.sandbox.confine import ConfinementReport, confine
    from fs_notes.sandbox.errors import (
        ConfinementError,
        NoEnforceableLayer,
        OsRefused,
        SandboxError,
        WorkerFailed,
    )
    from fs_notes.sandbox.probe import HostReport, probe, select_mode
    from fs_notes.sandbox.supervisor import ConfinedWorker

_WHERE = {
    "ConfinedWorker": "fs_notes.sandbox.supervisor",
    "ConfinementError": "fs_notes.sandbox.errors",
    "ConfinementReport": "fs_notes.sandbox.confine",
    "HostReport": "fs_notes.sandbox.probe",
    "NoEnforceableLayer": "fs_notes.sandbox.errors",
    "OsRefused": "fs_notes.sandbox.errors",
    "SandboxError": "fs_notes.sandbox.errors",
    "WorkerFailed": "fs_notes.sandbox.errors",
    "confine": "fs_notes.sandbox.confine",
    "probe": "fs_notes.sandbox.probe",
    "select_mode": "fs_notes.sandbox.probe",
}

__all__ = [
    "ConfinedWorker",
    "ConfinementError",
    "ConfinementReport",
    "HostReport",
    "NoEnforceableLayer",
    "OsRefused",
    "SandboxError",
    "WorkerFailed",
    "confine",
    "probe",
    "select_mode",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fs_notes.sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
