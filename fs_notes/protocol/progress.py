"""Progress notifications (spec 2026-07-28 and 2025-11-25: basic/utilities/progress).

A request whose `_meta.progressToken` is a string or an integer may be told how long work takes:
`Dispatcher.handle` binds a `Reporter` for it in the thread that answers it (as cancel.py binds
a token), and long work deep in a handler (a search index's first build, search/index.py) calls
`report(progress, total, message)`; without a bound reporter that is a no-op. Each report becomes
`notifications/progress` {progressToken, progress, total, message} sent on the request's own
channel (stdio: a line; HTTP: an event of the request's SSE response) before its answer.

A token is echoed in every notification of its request, so its size is bounded: a string of
more than `MAX_TOKEN_CHARS` characters, or an integer outside the signed 64-bit range, gets no
progress at all (the request is answered as usual, and one DEBUG line per request says why).
Why not an invalid-params error: the spec (2026-07-28 basic/patterns/progress) lets a server
"choose not to send any progress notifications" for a request with a token, and the schema's
ProgressToken (string or integer) sets no size, so refusing such a request would fail one the
protocol calls valid; sending nothing is the allowed choice.

Guarantees: progress strictly increases from one notification to the next of a request (a
report that does not is dropped), none is sent once the request is answered (`close`), at most
one every `MIN_INTERVAL` seconds unless the work is done (progress == total), and only for a
request that asked with a token; a failing channel never fails the request. Does not: promise
any notification (work that is quick sends none or one), or report progress of anything but
the work that calls `report`.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("fs_notes.protocol")

METHOD = "notifications/progress"
MIN_INTERVAL = 0.05  # seconds between two notifications of one request
Notify = Callable[[dict[str, Any]], None]

_current: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar(
    "fs_notes_progress", default=None
)


MAX_TOKEN_CHARS = 256
_INT_RANGE = range(-(1 << 63), 1 << 63)


def token_of(params: Mapping[str, Any], *, explain: bool = False) -> str | int | None:
    """The request's progress token, if it gave a valid one of a bounded size (see the module
    docstring); with `explain`, a token refused for its size is said at DEBUG (the dispatcher
    asks, once per request)."""
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    if isinstance(token, str):
        if len(token) <= MAX_TOKEN_CHARS:
            return token
        if explain:
            log.debug("progressToken of %d characters (over %d): no progress is sent",
                      len(token), MAX_TOKEN_CHARS)  # fmt: skip
        return None
    if isinstance(token, int) and not isinstance(token, bool):
        if token in _INT_RANGE:
            return token
        if explain:
            log.debug("progressToken outside the 64-bit integer range: no progress is sent")
        return None
    return None


class Reporter:
    def __init__(self, token: str | int, notify: Notify) -> None:
        self._token = token
        self._notify = notify
        self._last: float | None = None
        self._at = 0.0
        self._open = True
        self._lock = threading.Lock()

    def report(self, progress: float, total: float | None, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            if not self._open or (self._last is not None and progress <= self._last):
                return
            if progress != total and now - self._at < MIN_INTERVAL:
                return
            self._last, self._at = progress, now
            params: dict[str, Any] = {"progressToken": self._token, "progress": progress}
            if total is not None:
                params["total"] = total
            params["message"] = message
            try:
                self._notify({"jsonrpc": "2.0", "method": METHOD, "params": params})
            except Exception:  # the client's channel failing is the transport's business
                log.debug("progress notification not sent", exc_info=True)
                self._open = False

    def close(self) -> None:
        with self._lock:
            self._open = False

    def bind(self) -> contextvars.Token[Reporter | None]:
        return _current.set(self)

    @staticmethod
    def unbind(previous: contextvars.Token[Reporter | None]) -> None:
        _current.reset(previous)


def report(progress: float, total: float | None, message: str) -> None:
    """Tell the client of the request this thread answers how far its work is (if it asked)."""
    reporter = _current.get()
    if reporter is not None:
        reporter.report(progress, total, message)


def wanted() -> bool:
    """Whether the request this thread answers asked for progress."""
    return _current.get() is not None
