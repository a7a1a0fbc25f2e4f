"""Layer 3 of fs-notes: OS containment of the process that deletes (and writes) notes.

`probe()` tells what this host can enforce, `select_mode()` picks Landlock, else chroot, else
(only when the operator explicitly allows it) an unconfined worker, else refuses.
`ConfinedWorker` runs the operations in a separate confined process. Each module says what it
guarantees and what it does not; `chroot.py` lists the fallback's weaknesses.
"""

from sandbox.confine import ConfinementReport, confine
from sandbox.errors import (
    ConfinementError,
    NoEnforceableLayer,
    OsRefused,
    SandboxError,
    WorkerFailed,
)
from sandbox.probe import HostReport, probe, select_mode
from sandbox.supervisor import ConfinedWorker, DebugOptions

__all__ = [
    "ConfinedWorker",
    "ConfinementError",
    "ConfinementReport",
    "DebugOptions",
    "HostReport",
    "NoEnforceableLayer",
    "OsRefused",
    "SandboxError",
    "WorkerFailed",
    "confine",
    "probe",
    "select_mode",
]
