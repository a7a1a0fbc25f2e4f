"""Every bound fs-notes puts on what one client, or anyone who reaches the port, can hold.

One home for the numbers: the `[limits]` table of a policy file sets them (docs/policy.md), and
each is enforced in one place, named next to it. A bound that is reached gives the one who
reached it a clear error, and nobody else anything:
- `max_connections`: open HTTP connections, authenticated or not. Beyond it a new connection is
  closed at once (transport/guard.py); it is also capped so that `fd_reserve` file descriptors
  stay free for workers, notes and the databases whatever the connections hold.
- `request_timeout`: seconds a connection has to deliver a request's headers and body
  (slowloris); `keep_alive_timeout`: seconds an idle keep-alive connection is kept.
- `requests_per_principal`: requests of one principal being answered at once, per transport
  (HTTP: 429 beyond it; transport/http.py); of those, at most `EXECUTING_PER_PRINCIPAL` hold an
  executor thread at a time.
- `sessions_per_principal`: legacy (2025-11-25) HTTP sessions one principal holds
  (legacy/sessions.py): one more ends that principal's own least recently used idle one.
- `nonces_per_principal`: unexpired spent confirmation nonces one principal holds in the replay
  store (confirm/replay.py), inside the store's own bound.
- `listens_per_principal`: open `subscriptions/listen` streams of one principal, and
  `subscriptions_per_principal`: the note URIs its open streams are subscribed to, together
  (tools/live.py): one more is refused with an error naming the limit (added 2026-12-01).
- `max_shrink`, `max_headings_lost`: the share of a note's length and of its headings an
  update or edit may remove unless the caller passes `force` (tools/versions.py, with
  fs_notes/notes/damage.py; 1: no bound).
- `undo_days`, `undo_mib`: how long, and up to how many MiB per workspace, the journal of
  changes keeps what each change replaced (fs_notes/journal/store.py; added 2026-12-07). 0 days
  keeps nothing: changes then cannot be undone, and every start says so.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

#: Descriptors kept free for workers, notes and databases under a full connection table.
FD_RESERVE = 128
#: Threads that answer requests touching the disk (app.py), and how many of them one principal's
#: requests may hold at once over HTTP (the rest of its requests wait their turn, not threads):
#: a principal within its in-flight bound still cannot take every thread from the others.
EXECUTOR_THREADS = 8
EXECUTING_PER_PRINCIPAL = EXECUTOR_THREADS // 2


@dataclass(frozen=True)
class Limits:
    max_connections: int = 256
    request_timeout: float = 10.0
    keep_alive_timeout: float = 5.0
    requests_per_principal: int = 16
    sessions_per_principal: int = 32
    nonces_per_principal: int = 10_000
    listens_per_principal: int = 8
    subscriptions_per_principal: int = 1024
    #: A search index not served for this many days is removed when serve starts (0: never).
    unused_index_days: int = 30
    #: The share of a note's length, and of its headings, an update or edit may remove without
    #: `force` (fs_notes/notes/damage.py; added 2026-12-07).
    max_shrink: float = 0.5
    max_headings_lost: float = 0.5
    #: How long (days) and up to how much (MiB per workspace) the journal keeps what each change
    #: replaced, so it can be undone (fs_notes/journal/store.py; added 2026-12-07).
    undo_days: int = 30
    undo_mib: int = 256

    def to_json(self) -> dict[str, float | int]:
        return {
            "max_connections": self.max_connections,
            "request_timeout": self.request_timeout,
            "keep_alive_timeout": self.keep_alive_timeout,
            "requests_per_principal": self.requests_per_principal,
            "sessions_per_principal": self.sessions_per_principal,
            "nonces_per_principal": self.nonces_per_principal,
            "listens_per_principal": self.listens_per_principal,
            "subscriptions_per_principal": self.subscriptions_per_principal,
            "unused_index_days": self.unused_index_days,
            "max_shrink": self.max_shrink,
            "max_headings_lost": self.max_headings_lost,
            "undo_days": self.undo_days,
            "undo_mib": self.undo_mib,
        }


#: (low, high) accepted for each key of the [limits] table.
RANGES: dict[str, tuple[float, float]] = {
    "max_connections": (4, 65536),
    "request_timeout": (0.5, 3600),
    "keep_alive_timeout": (0.5, 3600),
    "requests_per_principal": (1, 4096),
    "sessions_per_principal": (1, 1024),
    "nonces_per_principal": (16, 100_000),
    "listens_per_principal": (1, 256),
    "subscriptions_per_principal": (1, 100_000),
    "unused_index_days": (0, 36500),
    "max_shrink": (0.01, 1),
    "max_headings_lost": (0.01, 1),
    "undo_days": (0, 36500),
    "undo_mib": (1, 1 << 20),
}


def connection_budget(wanted: int) -> int:
    """How many connections may be open: `wanted`, but never so many that fewer than
    `FD_RESERVE` descriptors stay free. Raises the soft RLIMIT_NOFILE to the hard one first."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FD_RESERVE))
