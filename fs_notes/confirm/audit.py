"""The audit trail of destructive decisions: one JSON object per line.

Guarantees: each record is one ``write()`` of one complete line to a regular file opened with
O_APPEND|O_CLOEXEC (created 0600; a FIFO or a device is refused), cut back to its old size if
the write fails or is short (a full disk never leaves half a line); concurrent writers (threads,
processes) never interleave within a line on a local filesystem; control characters are escaped,
so a record is always exactly one line. A record holds only: time (ISO-8601 UTC), principal,
workspace, note_id, outcome (a fixed vocabulary) and an optional reason code (``[a-z0-9-]``).
There is no field for note content, secrets, tokens or the requestState, and a reason is a code,
not free text. Long strings are cut at `MAX_FIELD_CHARS`.

Not guaranteed: durability across a power loss (no fsync per line), tamper-evidence (anyone who
can write the file can edit it), or that every decision is recorded (the caller calls `record`).
With ``path=None`` records go to the ``fs_notes.audit`` logger only. An existing log whose last
records are not whole JSON lines is refused at open (`AuditLogDamaged`): serve will not append
to a trail it cannot vouch for.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Final

__all__ = ["OUTCOMES", "AuditLog", "AuditLogDamaged"]

audit_logger = logging.getLogger("fs_notes.audit")
_ENCODE = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode

OUTCOMES: Final = frozenset(
    {
        "confirmed",  # the user confirmed; written before the note is removed
        "deleted",
        "declined",
        "cancelled",
        "replay-refused",
        "identity-mismatch",
        "policy-refused",
        "state-refused",
        "delete-failed",
    }
)
MAX_FIELD_CHARS = 512
_REASON_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


class AuditLogDamaged(Exception):
    """The audit log's last records are not whole JSON lines: it was not written by us alone."""


TAIL_BYTES = 64 << 10


def _check_tail(fd: int) -> None:
    """Refuse a log whose last `TAIL_BYTES` are not whole JSON objects, one per line: appending
    to it would make the trail unreadable from there on (a torn or foreign last line)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return
    start = max(0, size - TAIL_BYTES)
    tail = os.pread(fd, size - start, start)
    if not tail.endswith(b"\n"):
        raise AuditLogDamaged("its last line is incomplete; move it aside or repair it")
    lines = tail.split(b"\n")[:-1]
    if start > 0:
        lines = lines[1:]  # the first may be the end of a line that began before the tail
    for line in lines[-1000:]:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or "outcome" not in record:
            raise AuditLogDamaged(
                "it holds a line that is not an audit record; move it aside or repair it"
            )


def _field(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"audit field {name} must be a string or None")
    if len(value) > MAX_FIELD_CHARS:
        return value[: MAX_FIELD_CHARS - 1] + "\u2026"
    return value


class AuditLog:
    """Appends one JSON line per destructive decision (or logs it when `path` is None)."""

    def __init__(
        self, path: str | os.PathLike[str] | None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._path = None if path is None else os.fspath(path)
        if self._path is not None:
            self._fd = os.open(
                self._path,
                os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK,
                0o600,
            )
            try:
                if not stat.S_ISREG(os.fstat(self._fd).st_mode):  # a FIFO would block us all
                    raise AuditLogDamaged("it is not a regular file")
                os.set_blocking(self._fd, True)
                _check_tail(self._fd)
            except BaseException:
                os.close(self._fd)
                raise

    @property
    def path(self) -> str | None:
        return self._path

    def record(
        self,
        *,
        principal: str,
        workspace: str,
        note_id: str | None,
        outcome: str,
        reason: str | None = None,
    ) -> None:
        """Write one record. Raises ValueError for an unknown outcome or a malformed reason,
        OSError if the line cannot be written whole."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown audit outcome {outcome!r}")
        if reason is not None and not (isinstance(reason, str) and _REASON_RE.fullmatch(reason)):
            raise ValueError("audit reason must be a short code of [a-z0-9-]")
        moment = datetime.fromtimestamp(self._clock(), UTC)
        entry: dict[str, str | None] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "principal": _field(principal, "principal"),
            "workspace": _field(workspace, "workspace"),
            "note_id": _field(note_id, "note_id"),
            "outcome": outcome,
        }
        if reason is not None:
            entry["reason"] = reason
        line = _ENCODE(entry)
        with self._lock:
            if self._fd is None:
                if self._path is not None:
                    raise ValueError("audit log is closed")
                audit_logger.info("%s", line)
                return
            data = (line + "\n").encode("ascii")
            size = os.fstat(self._fd).st_size
            try:
                written = os.write(self._fd, data)
                if written != len(data):
                    raise OSError(f"audit line written partially ({written} of {len(data)} bytes)")
            except OSError:
                # A torn line would make the log refuse the next start and glue the next
                # record onto it: cut back to where this record began.
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, size)
                raise

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
