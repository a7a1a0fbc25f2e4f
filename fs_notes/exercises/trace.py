"""Who refused what: the per-request refusal trace of the knock-out target (exercises only).

Guarantees: `Trace.record` appends to the list of the request being handled on this thread
(`collect`), so concurrent requests never mix; outside `collect` it records nothing. An event
whose `layer` is in `LAYERS` is a refusal by that containment layer; any other `layer` ("kernel",
"other") is a note for the report (the kernel refused on its own, a note was simply not found).
`classify_fs` is the single mapping from a filesystem-layer error to a layer. "render" events (a
hostile name served exactly and shown escaped) are never recorded by the target: the runner's
judge (`shown.py`) adds them from what the client read.

Does not: reach clients of `fs-notes serve`. Only `fs_notes.exercises.target` installs a trace
and attaches it to its responses under `TRACE_KEY`; `serve` never imports this package.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..fs import (
    Escape,
    FsError,
    Hardlinked,
    IdentityChanged,
    InvalidPath,
    NotRegular,
    OsRefused,
    SymlinkRefused,
)

LAYERS = ("policy", "lexical", "render", "filesystem", "os")
TRACE_KEY = "x-fs-notes-exercise-trace"

_CONTAINMENT = (Escape, SymlinkRefused, NotRegular, Hardlinked, InvalidPath, IdentityChanged)


@dataclass(frozen=True)
class Event:
    layer: str  # one of LAYERS (a refusal) or "kernel" / "other" (a note)
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"layer": self.layer, "detail": self.detail}

    @classmethod
    def from_json(cls, value: Any) -> Event:
        if not isinstance(value, dict):
            raise ValueError("a trace event is an object")
        layer, detail = value.get("layer"), value.get("detail")
        if not isinstance(layer, str) or not isinstance(detail, str):
            raise ValueError("a trace event has a string layer and detail")
        return cls(layer, detail)


class Trace:
    """Refusal events, collected per request on the thread that handles it."""

    def __init__(self) -> None:
        self._local = threading.local()

    @contextmanager
    def collect(self) -> Iterator[list[Event]]:
        events: list[Event] = []
        previous = getattr(self._local, "events", None)
        self._local.events = events
        try:
            yield events
        finally:
            self._local.events = previous

    def record(self, layer: str, detail: str) -> None:
        events: list[Event] | None = getattr(self._local, "events", None)
        if events is not None:
            events.append(Event(layer, detail))


def classify_fs(exc: FsError) -> str:
    """The layer an error of `fs_notes.fs` stands for: EACCES/EPERM can only come from Landlock
    here (root passes every permission check), containment refusals are the filesystem layer's,
    and the rest (not found, exists, too large) refuse nothing."""
    if isinstance(exc, OsRefused):
        return "os"
    if isinstance(exc, _CONTAINMENT):
        return "filesystem"
    return "other"


def record_fs(trace: Trace, exc: FsError, where: str) -> None:
    trace.record(classify_fs(exc), f"{where}: {type(exc).__name__}")
