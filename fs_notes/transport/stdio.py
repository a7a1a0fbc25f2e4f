"""stdio transport: newline-delimited JSON-RPC on stdin/stdout; logs on stderr only.

Each request runs as its own task (blocking methods in a thread pool), so a slow call never holds
up the others; responses are written whole, one per line, from the event loop thread. The
protocol stream gets a private duplicate of fd 1 and fd 1 itself is pointed at stderr, so a stray
print or a child process can never corrupt the stream. Ends cleanly on EOF, SIGTERM or SIGINT,
after the requests in flight have been answered (bounded by a grace period).

A client that opens with `initialize` (2025-11-25 and older) gets a legacy session for the life of
the process (fs_notes/legacy/stdio.py); modern requests keep working beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import BinaryIO

from ..legacy import ClientResponse, LegacyAdapter, StdioLegacy
from ..protocol.dispatch import Dispatcher, Principal
from ..protocol.envelope import EnvelopeError, Notification, Request, dumps, error_response
from ..protocol.errors import INVALID_REQUEST, ProtocolError

log = logging.getLogger("fs_notes.stdio")

MAX_LINE = 8 << 20  # bytes in one message
GRACE_SECONDS = 10.0


def claim_stdout() -> BinaryIO:
    """Return a private binary stream on the real stdout; send fd 1 to stderr from now on."""
    proto_fd = os.dup(1)
    os.set_inheritable(proto_fd, False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "wb", buffering=0)


class _LineReader:
    """Reads newline-terminated messages, refusing (and skipping) lines over MAX_LINE."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def next(self) -> bytes | None:
        """The next line; b"" for an oversized line that was skipped; None at EOF."""
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None
        except asyncio.LimitOverrunError:
            while True:  # drop the rest of the oversized line
                try:
                    await self._reader.readuntil(b"\n")
                    return b""
                except asyncio.LimitOverrunError as exc:
                    await self._reader.readexactly(exc.consumed)
                except asyncio.IncompleteReadError:
                    return None


async def _open_stdin(limit: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    mode = os.fstat(0).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        return reader

    def pump() -> None:  # a regular file as stdin: read it in a thread
        with open(0, "rb", closefd=False) as f:
            for chunk in iter(lambda: f.read(65536), b""):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        loop.call_soon_threadsafe(reader.feed_eof)

    loop.run_in_executor(None, pump)
    return reader


async def serve(
    dispatcher: Dispatcher,
    principal: Principal,
    out: BinaryIO,
    *,
    on_ready: Callable[[], None] | None = None,
    legacy: LegacyAdapter | None = None,
) -> None:
    stream = await _open_stdin(MAX_LINE)
    reader = _LineReader(stream)
    loop = asyncio.get_running_loop()
    stopping = False

    def on_signal() -> None:
        nonlocal stopping
        stopping = True
        stream.feed_eof()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    inflight: set[asyncio.Task[None]] = set()
    started: set[Future[None]] = set()  # blocking requests handed straight to the executor

    write_lock = threading.Lock()

    def write(message: dict[str, object]) -> None:
        # Called from the event loop and, for blocking methods, from the executor thread that
        # answered (Dispatcher.respond): one whole line per message, under the lock.
        nonlocal stopping
        line = dumps(message) + b"\n"
        try:
            with write_lock:
                out.write(line)
        except (BrokenPipeError, ValueError):
            stopping = True

    # A connection opened with `initialize` gets a legacy session (fs_notes/legacy/stdio.py).
    link = StdioLegacy(legacy or LegacyAdapter(dispatcher), principal, write)

    async def run_legacy(msg: ClientResponse | Request | Notification) -> None:
        response = await link.handle(msg)
        if response is not None:
            write(response)

    def finished(future: Future[None]) -> None:  # runs in the executor thread
        started.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("stdio request failed", exc_info=future.exception())

    def track(task: asyncio.Task[None]) -> None:
        inflight.add(task)
        task.add_done_callback(inflight.discard)

    async def dispatch(raw: bytes) -> None:
        try:
            msg = link.read(raw)
        except EnvelopeError as exc:
            write(error_response(exc.id, exc.error))
            return
        if isinstance(msg, ClientResponse) or link.takes(msg):
            track(asyncio.create_task(run_legacy(msg)))
            # Let it run up to its first wait before the next line is read: `initialize` opens
            # the legacy session there, and the next line's parsing depends on it.
            await asyncio.sleep(0)
            return
        future = dispatcher.start(msg, principal, "stdio", write)
        if future is None:  # not startable without the loop (the tools are still loading)
            track(asyncio.create_task(dispatcher.respond(msg, principal, "stdio", write)))
        elif not future.done():
            started.add(future)
            future.add_done_callback(finished)

    if on_ready:
        on_ready()
    try:
        while not stopping:
            line = await reader.next()
            if line is None:
                break
            if line == b"":
                write(error_response(None, ProtocolError(INVALID_REQUEST, "Message too large")))
                continue
            if not line.strip():
                continue
            await dispatch(line)
    finally:
        link.close()  # nothing waits for a client that has gone
        waiting: set[asyncio.Future[None]] = set(inflight)
        waiting.update(asyncio.wrap_future(f) for f in list(started))
        if waiting:
            _, pending = await asyncio.wait(waiting, timeout=GRACE_SECONDS)
            for task in pending:
                task.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
    log.info("stdio transport closed")
