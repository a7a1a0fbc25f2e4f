"""Streamable HTTP transport (MCP 2026-07-28) at `/mcp`, on Starlette + uvicorn.

Checks, in order, each answered before the body is acted on:
  non-POST -> 405 (Allow: POST) | foreign Origin, or a Host not allowed (`HostCheck`) -> 403 |
  missing/wrong bearer token -> 401 with WWW-Authenticate | body over the limit -> 413 |
  not JSON -> 400/-32700 | invalid envelope -> 400/-32600 | header/body mismatch -> 400/-32020 |
  notification -> 202, empty body | request -> 200 JSON, or the status its error code maps to.
Tokens are compared in constant time by the authenticator; nothing about why authentication failed
reaches the client. An authenticated principal with `limits.requests_per_principal` requests in
flight gets 429 (with Retry-After) for one more; other principals are not affected. Connections
and their timeouts are bounded before any of this (transport/guard.py). Handshake-era clients
(`initialize`, `Mcp-Session-Id`, a 2025 version header) pass the same Origin/Host/token/size
checks, then go to their session (fs_notes/legacy/http.py); DELETE with a session id ends it.
The Host check (`HostCheck`) accepts the loopback names on the listening port and each
--allow-host value (`HOST:PORT`, or `HOST` on any port).
`subscriptions/listen` is answered with an SSE stream that stays open (transport/sse.py); it
does not count as a request in flight once its stream has begun (listens have their own bound).
A request with a `_meta.progressToken` whose work reports progress (a first index build) is
answered with an SSE stream: its `notifications/progress` events, then its response.
SIGINT/SIGTERM cancel every modern request in flight (protocol/cancel.py `InFlight.stop`)
before uvicorn's graceful shutdown: long work (a first index build) stops at its next note, and
its client gets no answer.
Each request leaves one log line (protocol/requestlog.py): the dispatcher or the legacy session
writes it, and every refusal here (405, 403, 401, 413, 429, an unreadable body) writes its own,
with the status as outcome and nothing the client sent (never the token).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..legacy import ClientResponse, LegacyAdapter, read_message
from ..legacy.http import HttpLegacy
from ..legacy.sessions import SessionTable
from ..limits import EXECUTING_PER_PRINCIPAL, Limits
from ..protocol import requestlog
from ..protocol.cancel import InFlight, Token
from ..protocol.dispatch import Dispatcher, Principal
from ..protocol.envelope import EnvelopeError, Request, dumps, error_response, parse
from ..protocol.errors import HTTP_STATUS, INVALID_REQUEST, ProtocolError
from ..protocol.progress import token_of
from ..protocol.subscriptions import LISTEN
from .http_headers import check_request_headers
from .sse import Streams, listen

log = logging.getLogger("fs_notes.http")

MAX_BODY = 4 << 20
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
Authenticator = Callable[[str | None], Principal | None]


def _json(status: int, message: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(message), status, headers=headers, media_type="application/json")


def _plain_error(
    status: int, code: int, text: str, headers: dict[str, str] | None = None
) -> Response:
    """An error answered at the edge (before or instead of any work). The connection is closed
    after it (`Connection: close`), so nobody can pipeline refused requests on one connection
    and stall it by never reading the answers (transport/guard.py)."""
    closing = {**(headers or {}), "Connection": "close"}
    return _json(status, error_response(None, ProtocolError(code, text)), closing)


def _bearer(header: str | None) -> str | None:
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def build_app(
    dispatcher: Dispatcher,
    authenticate: Authenticator,
    *,
    allowed_origins: Iterable[str] = (),
    allowed_hosts: Iterable[str] | None = None,
    max_body: int = MAX_BODY,
    legacy: HttpLegacy | None = None,
    limits: Limits | None = None,
) -> Starlette:
    origins = frozenset(allowed_origins)
    per_principal = (limits or Limits()).requests_per_principal
    in_flight: dict[str, int] = {}
    executing: dict[str, asyncio.Semaphore] = {}
    # Clients that open with `initialize` get legacy sessions (fs_notes/legacy/http.py).
    table = SessionTable(per_principal=(limits or Limits()).sessions_per_principal)
    sessions = legacy if legacy is not None else HttpLegacy(LegacyAdapter(dispatcher), table)
    hosts = HostCheck(allowed_hosts) if allowed_hosts is not None else None
    streams = Streams()  # open subscriptions/listen streams, ended when the server stops
    inflight = InFlight()  # the requests being answered, cancelled when the server stops

    async def endpoint(request: HttpRequest) -> Response:
        started = time.monotonic()

        def edge(response: Response, principal: Principal | None = None) -> Response:
            """A request refused before dispatch: its one log line (protocol/requestlog.py),
            without anything the client sent (no token, no header, no body)."""
            requestlog.write(
                f"http-{response.status_code}",
                started,
                transport="http",
                principal=principal.name if principal is not None else requestlog.NONE,
                what=requestlog.Asked(request.method),
            )
            return response

        ending = request.method == "DELETE" and "mcp-session-id" in request.headers
        if request.method != "POST" and not ending:
            return edge(
                Response(status_code=405, headers={"Allow": "POST", "Connection": "close"})
            )
        origin = request.headers.get("origin")
        if origin is not None and origin not in origins:
            log.warning("refused foreign Origin %r", origin[:200])
            return edge(_plain_error(403, INVALID_REQUEST, "Forbidden origin"))
        if hosts is not None and not hosts.accepts(request.headers.get("host", "")):
            return edge(_plain_error(403, INVALID_REQUEST, "Forbidden host"))
        token = _bearer(request.headers.get("authorization"))
        principal = authenticate(token) if token is not None else None
        if principal is None:
            challenge = 'Bearer realm="fs-notes"'
            if token is not None:
                challenge += ', error="invalid_token"'
            return edge(
                _plain_error(401, INVALID_REQUEST, "Unauthorized", {"WWW-Authenticate": challenge})
            )
        if ending:
            return edge(sessions.delete(request.headers, principal), principal)
        held = in_flight.get(principal.name, 0)
        if held >= per_principal:
            return edge(
                _plain_error(
                    429,
                    INVALID_REQUEST,
                    f"Too many requests in flight for this principal (limit {per_principal})",
                    {"Retry-After": "1"},
                ),
                principal,
            )
        in_flight[principal.name] = held + 1
        try:
            response, logged = await answer(request, principal)
            return response if logged else edge(response, principal)
        finally:
            left = in_flight[principal.name] - 1
            if left:
                in_flight[principal.name] = left
            else:
                del in_flight[principal.name]

    async def answer(request: HttpRequest, principal: Principal) -> tuple[Response, bool]:
        """The response, and whether its log line was written (False: `endpoint` writes it;
        a notification, a client's answer and a legacy refusal write none of their own)."""
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_body):
            return _plain_error(413, INVALID_REQUEST, "Request body too large"), False
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_body:
                    return _plain_error(413, INVALID_REQUEST, "Request body too large"), False
        except ClientDisconnect:  # the client went away mid-body: nobody to answer
            return Response(status_code=400, headers={"Connection": "close"}), False
        claimed = sessions.claims(request.headers)
        started = time.monotonic()
        try:
            msg = read_message(bytes(body)) if claimed else parse(bytes(body))
        except EnvelopeError as exc:
            reply = error_response(exc.id, exc.error)
            requestlog.write(
                str(exc.error.code), started, transport="http", principal=principal.name
            )
            return _json(400, reply), True
        if isinstance(msg, ClientResponse) or sessions.takes(request.headers, msg):
            reply_http = await sessions.post(request.headers, msg, principal)
            # Its session logged a request it answered; a refusal before one is logged here.
            # (Notifications and the client's answers are not requests: no line.)
            refused = isinstance(msg, Request) and msg.method != "initialize"
            return reply_http, not (refused and reply_http.status_code >= 400)
        if isinstance(msg, Request):
            try:
                check_request_headers(request.headers, msg)
            except ProtocolError as err:
                requestlog.write(
                    str(err.code),
                    started,
                    transport="http",
                    protocol=requestlog.version_of(msg.params),
                    principal=principal.name,
                    what=dispatcher.asked(msg.method, msg.params, principal),
                )
                return _json(400, error_response(msg.id, err)), True
        if isinstance(msg, Request) and msg.method == LISTEN:
            return await listen(dispatcher, msg, principal, streams), True
        if isinstance(msg, Request):
            turn = executing.setdefault(principal.name, asyncio.Semaphore(EXECUTING_PER_PRINCIPAL))
            if token_of(msg.params) is not None:
                return await _with_progress(
                    request, dispatcher, msg, principal, turn, inflight
                ), True
            async with turn:  # a principal's share of the executor threads (limits.py)
                response = await _unless_disconnected(
                    request, dispatcher, msg, principal, inflight
                )
        else:
            response = await dispatcher.handle_async(msg, principal, "http")
        return _answered(response), True

    app = Starlette(
        routes=[Route("/mcp", endpoint, methods=["GET", "POST", "DELETE", "PUT", "PATCH"])]
    )
    app.state.listen_streams = streams
    app.state.in_flight = inflight  # stopping the server cancels them (`run`)
    app.state.legacy = sessions  # and those of the legacy sessions
    return app


def _answered(response: dict[str, Any] | None) -> Response:
    """A JSON-RPC answer as HTTP: 202 for none, else JSON with the status its code maps to."""
    if response is None:
        return Response(status_code=202)
    error = response.get("error")
    status = HTTP_STATUS.get(error["code"], 500) if error else 200
    return _json(status, response)


async def _with_progress(
    request: HttpRequest,
    dispatcher: Dispatcher,
    msg: Request,
    principal: Principal,
    turn: asyncio.Semaphore,
    inflight: InFlight,
) -> Response:
    """Answer a request that carries a progress token: as JSON if it is answered before any
    progress is reported, else as an SSE stream (spec: transports, "the server MAY send
    JSON-RPC notifications before sending the JSON-RPC response"): each
    `notifications/progress`, then the response, then the stream ends. A client that
    disconnects (before or during the stream) cancels the request."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[bool, dict[str, Any] | None]] = asyncio.Queue()
    key, token = _begin(inflight)

    def notify(message: dict[str, Any]) -> None:  # from the thread answering the request
        loop.call_soon_threadsafe(queue.put_nowait, (False, message))

    async def work() -> None:
        response: dict[str, Any] | None = None
        try:
            async with turn:  # a principal's share of the executor threads (limits.py)
                response = await dispatcher.handle_async(
                    msg, principal, "http", token, notify=notify
                )
        finally:
            queue.put_nowait((True, response))

    task = asyncio.ensure_future(work())
    task.add_done_callback(lambda _: inflight.end(key, token))
    first = asyncio.ensure_future(queue.get())
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({first, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not first.done():
        first.cancel()
        token.cancel()  # the work stops at its next checkpoint; nobody is there to answer
        return Response(status_code=202)
    final, message = first.result()
    if final:
        return _answered(message)
    assert message is not None

    async def events() -> AsyncIterator[bytes]:
        try:
            yield _event(message)
            while True:
                done, more = await queue.get()
                if more is not None:
                    yield _event(more)
                if done:
                    return
        finally:
            if not task.done():
                token.cancel()  # the stream was closed before the answer: cancelled

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + dumps(message) + b"\n\n"


async def _unless_disconnected(
    request: HttpRequest,
    dispatcher: Dispatcher,
    msg: Request,
    principal: Principal,
    inflight: InFlight,
) -> dict[str, Any] | None:
    """Answer `msg`; a client that disconnects first cancels it (spec: cancellation, "The
    server MUST treat a client disconnect as cancellation of that request")."""
    key, token = _begin(inflight)
    work = asyncio.ensure_future(dispatcher.handle_async(msg, principal, "http", token))
    work.add_done_callback(lambda _: inflight.end(key, token))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not work.done():
        token.cancel()  # the work stops at its next checkpoint; nobody is there to answer
        return None
    return work.result()


def _begin(inflight: InFlight) -> tuple[object, Token]:
    """A request's token, registered (by itself: request ids are the clients' and may repeat
    across them) until its work ends, so that stopping the server cancels it."""
    key = object()
    return key, inflight.begin(key)


async def _disconnected(request: HttpRequest) -> None:
    """Return when the client has gone (the body is read: what is left is the disconnect)."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


class HostCheck:
    """DNS-rebinding protection: the Host header must be one of the allowed `name:port` values,
    or a name allowed on any port (an entry without a port). Names compare case-insensitively;
    a malformed Host (empty, or a port that is not digits) is refused."""

    def __init__(self, allowed: Iterable[str]) -> None:
        exact: set[str] = set()
        any_port: set[str] = set()
        for entry in allowed:
            name, port = split_host(entry.lower())
            (exact if port is not None else any_port).add(
                f"{name}:{port}" if port is not None else name
            )
        self._exact, self._any_port = frozenset(exact), frozenset(any_port)

    def accepts(self, header: str) -> bool:
        try:
            name, port = split_host(header.lower())
        except ValueError:
            return False
        if port is None:
            return name in self._any_port or f"{name}:80" in self._exact
        return name in self._any_port or f"{name}:{port}" in self._exact


def split_host(value: str) -> tuple[str, int | None]:
    """("name", port) of a Host header or --allow-host value: "h", "h:8080", "[::1]:8080"."""
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"not a host: {value!r}")
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError(f"not a host: {value!r}")
        name, rest = value[: end + 1], value[end + 1 :]
    else:
        name, colon, port_text = value.partition(":")
        rest = colon + port_text
    if not rest:
        return name, None
    if not rest.startswith(":") or not rest[1:].isdigit() or not 0 < int(rest[1:]) < 65536:
        raise ValueError(f"not a host: {value!r}")
    return name, int(rest[1:])


class RateLimit(logging.Filter):
    """At most `per_second` records a second from a logger a client can make talk (uvicorn's
    'Invalid HTTP request received.'): a flood of bad requests cannot flood the log; the number
    left out is said with the next record let through."""

    def __init__(self, per_second: int = 10) -> None:
        super().__init__()
        self.per_second = per_second
        self.window = 0
        self.count = 0
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        import time

        now = int(time.monotonic())
        if now != self.window:
            self.window, self.count = now, 0
        self.count += 1
        if self.count > self.per_second:
            self.dropped += 1
            return False
        if self.dropped:
            record.msg = f"{record.getMessage()} ({self.dropped} more like it not logged)"
            record.args = None
            self.dropped = 0
        return True


def loopback_hosts(port: int) -> list[str]:
    """The loopback names on the listening port (a browser omits :80 for port 80)."""
    names = ["127.0.0.1", "localhost", "[::1]"]
    return [f"{n}:{port}" for n in names]


def loopback_origins(port: int) -> list[str]:
    return [f"http://{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]")]


def run(
    app: Starlette,
    host: str,
    port: int,
    *,
    on_started: Callable[[int], None] | None = None,
    limits: Limits | None = None,
    max_connections: int | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (uvicorn installs the handlers and shuts down gracefully),
    with the connection bounds of transport/guard.py."""
    import uvicorn

    from .guard import config_options

    limits = limits or Limits()
    bound = max_connections if max_connections is not None else limits.max_connections
    config = uvicorn.Config(
        app,
        host=host.strip("[]"),
        port=port,
        log_level="warning",
        log_config=None,  # uvicorn's records go through our one-line formatter (logline.py)
        access_log=False,
        lifespan="off",
        **config_options(limits, bound),
    )
    logging.getLogger("uvicorn.error").addFilter(RateLimit())
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    server = uvicorn.Server(config)
    streams = getattr(app.state, "listen_streams", None)
    inflight = getattr(app.state, "in_flight", None)
    legacy = getattr(app.state, "legacy", None)
    stop = server.handle_exit

    def handle_exit(sig: int, frame: Any) -> None:
        # Stopping cancels the requests in flight (long work, a first index build, stops at
        # its next note instead of holding the exit up) and ends each listen stream with its
        # result.
        if isinstance(inflight, InFlight):
            cancelled = inflight.stop()
            if cancelled:
                log.info("stopping: %d request(s) in flight cancelled", cancelled)
        if isinstance(legacy, HttpLegacy):
            legacy.stop()
        if isinstance(streams, Streams):
            streams.end_all()
        stop(sig, frame)

    server.handle_exit = handle_exit  # type: ignore[method-assign]

    @contextlib.contextmanager
    def capture_signals() -> Iterator[None]:
        # uvicorn's own raises the signal again once it has shut down, so serve would end by
        # SIGINT's KeyboardInterrupt (exit 1) or die of SIGTERM (143): the shutdown it did is
        # the clean end (exit 0, docs/interface.md).
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, server.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    server.capture_signals = capture_signals  # type: ignore[method-assign]
    sockets = [sock] if sock is not None else None
    if on_started is not None:
        original = server.startup

        async def startup(sockets: Any = None) -> None:
            await original(sockets)
            on_started(port)

        server.startup = startup  # type: ignore[method-assign]
    server.run(sockets=sockets)
