"""stdio transport: newline-delimited JSON-RPC on stdin/stdout; logs on stderr only.

stdin is read by a leader/follower pool (leaders.py): the thread that reads a request answers it,
after another thread took over the reading, so a slow call never holds up the others and no
request waits for a second thread to wake up. At most MAX_THREADS requests are answered at once.
Responses are written whole, one per line, under a lock. The protocol stream gets a private
duplicate of fd 1 and fd 1 itself is pointed at stderr, so a stray print or a child process can
never corrupt the stream. Ends cleanly on EOF after the requests in flight have been answered
(bounded by a grace period); on SIGTERM or SIGINT it cancels them first (protocol/cancel.py
`InFlight.stop`), so long work such as a first index build stops at its next note instead of
holding the exit up (a cancelled request gets no answer). Started from a terminal (stdin is a
tty), it says on stderr that it waits for an MCP client on stdin and how to stop it
(`WAITING`).

Each request leaves one log line (protocol/requestlog.py): the dispatcher writes it, a line
refused before dispatch (not JSON, not JSON-RPC, too large) is written here. A request with a
`_meta.progressToken` gets its `notifications/progress` lines before its answer.

A client that opens with `initialize` (2025-11-25 and older) gets a legacy session for the life of
the process (fs_notes/legacy/stdio.py), served on the event loop (its server-to-client requests
wait there); the reading thread hands it each line in order and reads the next only once that
line is routed. Modern requests keep working beside it.

`notifications/cancelled` naming a modern request in flight cancels it (protocol/cancel.py): it
gets no answer, and a listing it was doing stops at the next note.

`subscriptions/listen` opens a subscription that shares this channel (transport/listens.py):
notifications are written as lines like any answer; `notifications/cancelled` naming the listen
id ends it, and at the end of the connection each open one gets its completion result.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

from ..legacy import ClientResponse, LegacyAdapter, StdioLegacy
from ..protocol import requestlog
from ..protocol.cancel import InFlight, Token
from ..protocol.dispatch import Dispatcher, Principal
from ..protocol.envelope import (
    EnvelopeError,
    Notification,
    Request,
    dumps,
    error_response,
    parse,
)
from ..protocol.errors import INVALID_REQUEST, ProtocolError
from ..protocol.subscriptions import LISTEN
from .leaders import Leaders, LineSource
from .listens import StdioListens

log = logging.getLogger("fs_notes.stdio")

MAX_LINE = 8 << 20  # bytes in one message
GRACE_SECONDS = 10.0
MAX_THREADS = 8  # requests answered at once
CANCELLED = "notifications/cancelled"
WAITING = (
    "fs-notes: waiting for an MCP client on stdin (JSON-RPC, one message a line); this is a "
    "server for an MCP client to start, not a shell. Ctrl-D or Ctrl-C stops it.\n"
)


def claim_stdout() -> BinaryIO:
    """Return a private binary stream on the real stdout; send fd 1 to stderr from now on."""
    proto_fd = os.dup(1)
    os.set_inheritable(proto_fd, False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(proto_fd, "wb", buffering=0)


async def serve(
    dispatcher: Dispatcher,
    principal: Principal,
    out: BinaryIO,
    *,
    on_ready: Callable[[], None] | None = None,
    legacy: LegacyAdapter | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    source = LineSource(0, MAX_LINE)
    tasks: set[asyncio.Task[None]] = set()  # work on the event loop (legacy sessions)
    inflight = InFlight()  # modern requests being answered, for notifications/cancelled
    write_lock = threading.Lock()

    def end() -> None:  # from any thread
        pool.stop()
        with contextlib.suppress(RuntimeError):  # the loop may be closing already
            loop.call_soon_threadsafe(ended.set)

    def write(message: dict[str, object]) -> None:
        # Called from the reading threads and the event loop: one whole line per message, under
        # the lock.
        line = dumps(message) + b"\n"
        try:
            with write_lock:
                out.write(line)
        except (BrokenPipeError, ValueError):
            end()

    # A connection opened with `initialize` gets a legacy session (fs_notes/legacy/stdio.py).
    link = StdioLegacy(legacy or LegacyAdapter(dispatcher), principal, write)
    listens = StdioListens(dispatcher, principal, write, inflight)

    async def run_legacy(msg: ClientResponse | Request | Notification) -> None:
        response = await link.handle(msg)
        if response is not None:
            write(response)

    def refused(error: dict[str, object]) -> None:
        """A line refused before dispatch (unreadable, too large): answered, and its one log
        line (protocol/requestlog.py)."""
        write(error)
        code = error.get("error")
        outcome = str(code.get("code")) if isinstance(code, dict) else "?"
        requestlog.write(outcome, time.monotonic(), transport="stdio", principal=principal.name)

    async def run_modern(msg: Request | Notification) -> None:
        response = await dispatcher.handle_async(msg, principal, "stdio", notify=write)
        if response is not None:
            write(response)

    def track(task: asyncio.Task[None]) -> None:
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def dispatch_on_loop(raw: bytes) -> None:
        """A line while a legacy session may be open: parsed and routed on the event loop."""
        try:
            msg = link.read(raw)
        except EnvelopeError as exc:
            refused(error_response(exc.id, exc.error))
            return
        if isinstance(msg, ClientResponse) or link.takes(msg):
            track(asyncio.create_task(run_legacy(msg)))
            # Let it run up to its first wait before the next line is read: `initialize` opens
            # the legacy session there, and the next line's parsing depends on it.
            await asyncio.sleep(0)
            return
        track(asyncio.create_task(run_modern(msg)))

    def answer(msg: Request | Notification, token: Token | None) -> None:
        # In the thread that read the line. A cancelled request is never answered.
        try:
            response = dispatcher.handle(msg, principal, "stdio", token, notify=write)
        finally:
            if token is not None and isinstance(msg, Request):
                inflight.end(msg.id, token)
        if response is not None:
            write(response)

    def classify(raw: bytes) -> Callable[[], None] | None:
        """Runs in the leading thread, line by line in order; the work to do after it leads no
        more (None: done here)."""
        if raw == b"":
            refused(error_response(None, ProtocolError(INVALID_REQUEST, "Message too large")))
            return None
        if not raw.strip():
            return None
        if link.session is None:
            try:
                msg = parse(raw)
            except EnvelopeError as exc:
                refused(error_response(exc.id, exc.error))
                return None
            if isinstance(msg, Notification) and msg.method == CANCELLED:
                # Read in order: a request before its cancellation is already registered.
                inflight.cancel((msg.params or {}).get("requestId"))
                listens.cancel((msg.params or {}).get("requestId"))
                return None
            if not (isinstance(msg, Request) and msg.method == "initialize"):
                token = inflight.begin(msg.id) if isinstance(msg, Request) else None
                if isinstance(msg, Request) and msg.method == LISTEN and token is not None:
                    return functools.partial(listens.open, msg, token)
                return functools.partial(answer, msg, token)
        # The handshake, or a line while a legacy session is open: on the event loop, and the
        # next line is read only once this one is routed.
        asyncio.run_coroutine_threadsafe(dispatch_on_loop(raw), loop).result(GRACE_SECONDS)
        return None

    def stop() -> None:  # SIGINT, SIGTERM: what is in flight is cancelled, not waited for
        cancelled = inflight.stop()
        if cancelled:
            log.info("stopping: %d request(s) in flight cancelled", cancelled)
        link.stop()  # and a legacy session's
        end()

    pool = Leaders(source, classify, max_threads=MAX_THREADS, on_end=end)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    pool.start()
    if os.isatty(0):  # a person, not an MCP client, started it: say what it waits for
        sys.stderr.write(WAITING)
        sys.stderr.flush()
    if on_ready:
        on_ready()
    try:
        await ended.wait()
    finally:
        pool.stop()
        listens.close_all()
        link.close()  # nothing waits for a client that has gone
        if not await loop.run_in_executor(None, pool.wait_idle, GRACE_SECONDS):
            log.warning("stdio: answers still in progress after %s s", GRACE_SECONDS)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=GRACE_SECONDS)
            for task in pending:
                task.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        source.release()
    log.info("stdio transport closed")
