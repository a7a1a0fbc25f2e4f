"""Escape exercises: hostile workspaces, the real server, and which layer refused what.

`fs-notes exercises` builds each attack of the catalogue (`catalogue.py`) in a temporary folder
and drives the real server over stdio through it, once with every layer on and once with each
containment layer knocked out (`target.py`, a hidden entry point `serve` never reaches), then
compares the matrix with the documented one (`expected.py`, docs/design.md). `--race` adds the
race harness (`race.py`). The start-up class (`startup.py`, its cases in `startup_cases.py`)
starts the real `fs-notes serve` on layouts it must refuse before serving anything, each with a
control that must start.

What it guarantees: an "escaped" verdict comes from checking the outside files themselves
(access time, content, inode, existence) and every response for the run's secret marker, never
from the server's word; a "blocked" verdict names the first layer whose refusal the target's
trace recorded. What it does not: prove the absence of escapes it has no attack for, or of races
it did not hit (the race harness samples them).
"""

from __future__ import annotations

__all__ = ["exercises", "summary"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from . import command

        return getattr(command, name)
    raise AttributeError(f"module 'fs_notes.exercises' has no attribute {name!r}")
