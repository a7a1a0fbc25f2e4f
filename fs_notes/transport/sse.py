"""`subscriptions/listen` over Streamable HTTP: the response is an SSE stream that stays open
(spec: transports/streamable-http, "Receiving Messages"; basic/patterns/subscriptions).

The listen is opened off the event loop (its first walk of a workspace reads the disk); an error
is answered as JSON with the status its code maps to, like any request. Otherwise the answer is
`200 text/event-stream` (with `X-Accel-Buffering: no`): the acknowledgment first, then each
notification as one `event: message` whose data is one JSON-RPC message, and an SSE comment
(`:`) every `KEEPALIVE_SECONDS` while nothing happens. The client closing the stream is the
cancellation (spec: "Closing the SSE response stream is itself the cancellation signal"): the
subscription is closed and its watches freed at once. When the server stops (SIGTERM/SIGINT),
each open stream gets the listen's completion result, then ends (`Streams.end_all`).

Guarantees: what waits to be written for a slow reader is bounded: a notification already
waiting is not queued twice (they say "look again", so one is as good as two), so at most one
per subscribed URI, one `list_changed`, the acknowledgment and the completion wait. Nothing is
written after the stream closed. Does not: resume a stream (`Last-Event-ID`: not supported by
the 2026-07-28 spec), or bound the streams (the `Listener` does, per principal; connections are
bounded by transport/guard.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..protocol.dispatch import Dispatcher, Principal
from ..protocol.envelope import Request, dumps
from ..protocol.errors import HTTP_STATUS
from ..protocol.subscriptions import Subscription, open_listen

log = logging.getLogger("fs_notes.http")

KEEPALIVE_SECONDS = 15.0


class _Outbox:
    """Messages for one stream, pushed from any thread, written on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: deque[tuple[bytes, bool]] = deque()  # (encoded, is the final response)
        self._waiting: set[bytes] = set()
        self.ready = asyncio.Event()

    def deliver(self, message: dict[str, Any]) -> None:  # any thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to write to
            self._loop.call_soon_threadsafe(self._push, message)

    def _push(self, message: dict[str, Any]) -> None:
        data = dumps(message)
        final = "id" in message
        if data in self._waiting:
            return
        if "method" in message:
            self._waiting.add(data)
        self._queue.append((data, final))
        self.ready.set()

    def take(self) -> list[tuple[bytes, bool]]:
        out = list(self._queue)
        self._queue.clear()
        self._waiting.clear()
        self.ready.clear()
        return out


class Streams:
    """The listen streams open on this server, so that stopping it can end them gracefully."""

    def __init__(self) -> None:
        self._open: set[Subscription] = set()
        self._lock = threading.Lock()

    def add(self, sub: Subscription) -> None:
        with self._lock:
            self._open.add(sub)

    def discard(self, sub: Subscription) -> None:
        with self._lock:
            self._open.discard(sub)

    def end_all(self) -> None:
        """Every open stream gets its completion result and ends (from any thread; from a
        signal handler too: the work is done in a thread of its own)."""
        with self._lock:
            subs = list(self._open)

        def end() -> None:
            for sub in subs:
                sub.close(graceful=True)

        threading.Thread(target=end, name="fs-notes-listen-end", daemon=True).start()


class _ListenResponse(Response):
    def __init__(self, sub: Subscription, outbox: _Outbox, streams: Streams) -> None:
        # Not Response.__init__: it would declare `Content-Length: 0` for the empty body.
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        self.sub, self.outbox, self.streams = sub, outbox, streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        self.streams.add(self.sub)
        writer = asyncio.ensure_future(self._write(send))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({writer, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (writer, gone):
                task.cancel()
            self.streams.discard(self.sub)
            # Off the loop: closing may wait for the watching thread's lock.
            loop.run_in_executor(None, self.sub.close)
        if writer.done() and not writer.cancelled() and writer.exception() is not None:
            log.warning("listen stream ended: %s", type(writer.exception()).__name__)

    async def _write(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.outbox.ready.wait(), KEEPALIVE_SECONDS)
            batch = self.outbox.take()
            if not batch:
                await send({"type": "http.response.body", "body": b":\n\n", "more_body": True})
                continue
            body = b"".join(b"event: message\ndata: " + data + b"\n\n" for data, _ in batch)
            final = any(last for _, last in batch)
            await send({"type": "http.response.body", "body": body, "more_body": not final})
            if final:
                return


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


async def listen(
    dispatcher: Dispatcher, msg: Request, principal: Principal, streams: Streams
) -> Response:
    """The answer to a `subscriptions/listen` POST: its SSE stream, or its error as JSON."""
    loop = asyncio.get_running_loop()
    outbox = _Outbox(loop)
    got = await loop.run_in_executor(
        None, open_listen, dispatcher, msg, principal, "http", outbox.deliver
    )
    if isinstance(got, dict):
        status = HTTP_STATUS.get(got["error"]["code"], 500)
        return Response(dumps(got), status, media_type="application/json")
    return _ListenResponse(got, outbox, streams)
