"""What anyone who reaches the HTTP port can hold: connections and time (fs_notes/limits.py).

Guarantees, for the server `run` starts (transport/http.py):
- At most `limits.max_connections` connections are open (fewer if RLIMIT_NOFILE would otherwise
  leave under `FD_RESERVE` descriptors free), so workers, notes and databases always find
  descriptors. When the table is full, a new connection takes the place of the oldest one that
  has never had a request answered (then of the longest idle keep-alive one); a request being
  read or answered is never cut for it. If every connection is busy, the new one is closed at
  once. So connections that never finish a request cannot keep a client that does out: it
  gets in, sends its request at once, and from then on it is no longer the one to go.
- A connection has `limits.request_timeout` seconds from its first byte (or from being accepted)
  to deliver a request's headers and whole body; then it is closed, whatever it sent. A
  response being streamed is not cut: the clock stops once the request is in.
- An idle keep-alive connection is closed after `limits.keep_alive_timeout` (uvicorn's own timer).
- A client that stops reading its answers (the send buffer is full) has `limits.request_timeout`
  seconds to read on; then the connection is closed, and the answer with it. So a connection
  cannot be held busy, out of reach of eviction, by never reading (pipelined requests whose
  answers pile up, a large answer read slowly). Refusals at the edge close their connection
  (`Connection: close`, transport/http.py), so refused requests cannot be pipelined at all.
- The refusals are logged at most once per `LOG_EVERY` seconds each, with a count.

Does not: tell authenticated from unauthenticated connections (it runs before any header is
read: one bound for all, sized so that the rest of the server keeps working), or limit requests
per principal (transport/http.py does, once the token is known).

Built on uvicorn's internals, not its documented interface, and why. uvicorn documents
`limit_concurrency` (a 503 for requests past N connections or tasks: nothing is evicted, and
a connection that never sends a request keeps its place), `timeout_keep_alive` (only between
requests, used above) and `h11_max_incomplete_event_size` (bytes, not time); it has no
whole-request timeout, no bound on answers left unread, and no documented way to hand it one
accepted connection (`Server.serve(sockets=...)` takes listening sockets), so a server of our
own in front would have to parse HTTP itself to know when a request is in and an answer done:
a second HTTP server relaying every byte. So this subclasses uvicorn's h11 protocol and
relies on, exactly (tests/test_dependency_contracts.py checks each on the installed uvicorn,
and pyproject.toml bounds uvicorn to the releases it was checked on):
- `uvicorn.Config(http=CLASS)` takes a protocol class (its signature says so; the docs name
  only "auto", "h11", "httptools"), which `Config.load()` keeps as `http_protocol_class` and
  `uvicorn.Server` instantiates per connection with `config=`, `server_state=`,
  `app_state=`, `_loop=` (this class keeps H11Protocol's `__init__`).
- `uvicorn.protocols.http.h11_impl.H11Protocol` (an undocumented module): the methods
  overridden here, each calling the original (through super()): `connection_made`,
  `data_received`, `on_response_complete` (uvicorn's own: the cycle calls it when an answer
  is complete; it arms the keep-alive timer and runs a pipelined request's events),
  `pause_writing`, `resume_writing`, `connection_lost`; and the attributes they read:
  `connections` (the server's set of open protocols, which `connection_made` has joined when
  it returns and `connection_lost` leaves), `transport`, `loop`, `conn` (the h11.Connection),
  `cycle` (None before the first request) and its `response_complete`.
- h11's documented `Connection.their_state`, `IDLE` and `SEND_BODY`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..limits import Limits

log = logging.getLogger("fs_notes.http")
LOG_EVERY = 10.0


class _Counter:
    """A refusal logged at most once per LOG_EVERY seconds, with how many there were."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.count = 0
        self.last = 0.0

    def hit(self) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.last >= LOG_EVERY:
            log.warning("%s (%d since the last report)", self.message, self.count)
            self.count, self.last = 0, now


def protocol_class(limits: Limits, max_connections: int) -> type[H11Protocol]:
    """An h11 protocol class for uvicorn (`Config(http=...)`) that enforces `limits`."""
    full = _Counter(f"connection refused: {max_connections} connections are busy")
    evicted = _Counter(f"connection closed to make room: {max_connections} connections are open")
    slow = _Counter(f"connection closed: no whole request within {limits.request_timeout:g} s")
    stalled = _Counter(f"connection closed: its answers unread for {limits.request_timeout:g} s")

    class GuardedProtocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _answered = 0  # responses completed on this connection
        _since = 0.0  # when it was opened, or last went idle

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._since = self.loop.time()
            if len(self.connections) > max_connections:
                victim = self._evictable()
                if victim is None:
                    full.hit()
                    transport.abort()
                    return
                evicted.hit()
                victim.transport.abort()
                self.connections.discard(victim)
            self._arm()

        def _waiting(self) -> bool:
            """No request of this connection is being answered (never one, or idle now)."""
            busy = self.cycle is not None and not self.cycle.response_complete
            return not busy and self.conn.their_state in (h11.IDLE, h11.SEND_BODY)

        def _evictable(self) -> GuardedProtocol | None:
            waiting = [
                c
                for c in self.connections
                if c is not self and isinstance(c, GuardedProtocol) and c._waiting()
            ]
            if not waiting:
                return None
            return min(waiting, key=lambda c: (c._answered > 0, c._since))

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(limits.request_timeout, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
                slow.hit()
                self.transport.abort()

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
                self._arm()  # a new request begins (or goes on): its clock runs
            super().data_received(data)
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()  # the whole request is in

        def on_response_complete(self) -> None:
            super().on_response_complete()  # arms uvicorn's keep-alive timer
            self._answered += 1
            self._since = self.loop.time()
            self._disarm()

        _stalled: asyncio.TimerHandle | None = None

        def pause_writing(self) -> None:  # the client does not read what we send
            super().pause_writing()
            if self._stalled is None:
                self._stalled = self.loop.call_later(limits.request_timeout, self._unread)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._stalled is not None:
                self._stalled.cancel()
                self._stalled = None

        def _unread(self) -> None:
            self._stalled = None
            stalled.hit()
            self.transport.abort()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._stalled is not None:
                self._stalled.cancel()
                self._stalled = None
            super().connection_lost(exc)

    return GuardedProtocol


def config_options(limits: Limits, max_connections: int) -> dict[str, Any]:
    """The uvicorn.Config keyword arguments that carry `limits`."""
    return {
        "http": protocol_class(limits, max_connections),
        "timeout_keep_alive": limits.keep_alive_timeout,
        "backlog": min(2048, max_connections * 2),
    }
