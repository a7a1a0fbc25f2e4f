"""Legacy sessions on Streamable HTTP (spec 2025-11-25 basic/transports) beside the modern one.

Which POSTs are legacy: any `initialize`; otherwise (`claims`) an `MCP-Protocol-Version` header
naming a handshake-era version, or no such header but an `Mcp-Session-Id` (2025-03-26 clients send
no version header), for a body that is a JSON-RPC response or carries no modern `_meta` version
(`takes`). A modern request stays modern even with a stray session header, and a modern-shaped body
under a legacy version header gets the modern -32022.

- `initialize` -> 200 JSON with a new `Mcp-Session-Id` (sessions.py binds it to the principal).
- a legacy POST without a session id -> 400; with an id unknown to this principal -> 404;
  with a version header that names no handshake-era revision -> 400 (another supported one than
  the session's is accepted: the 2025-11-25 text refuses only invalid or unsupported versions).
- a notification, or the client's answer to one of our requests -> 202 (an answer nothing waits
  for -> 400).
- a request -> 200 `application/json` when no server-initiated request was needed; otherwise
  `text/event-stream`: our `elicitation/create` / `sampling/createMessage` requests, then the
  response, then the stream ends. JSON-RPC errors keep HTTP 200 (older clients read an error body
  only from a successful POST). No standalone GET stream (405) and no resumption: a request whose
  stream the client closes is abandoned (its later answers get 400), so a confirmation given
  after the client stopped listening never deletes anything.
- DELETE with the session id ends the session (200), 404 if unknown.
Authentication, Origin and Host checks happen in transport/http.py before anything here runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.responses import Response, StreamingResponse

from ..protocol import requestlog
from ..protocol.dispatch import Principal
from ..protocol.envelope import Notification, Request, dumps, error_response
from ..protocol.errors import INVALID_REQUEST, ProtocolError
from .adapter import LegacyAdapter
from .messages import ClientResponse
from .session import LegacySession
from .sessions import SessionTable, TooManySessions
from .translate import carries_modern_meta
from .versions import is_legacy

log = logging.getLogger("fs_notes.legacy")

SESSION_HEADER = "Mcp-Session-Id"
Message = Request | Notification | ClientResponse


def _json(status: int, message: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(message), status, headers=headers, media_type="application/json")


def _refuse(status: int, text: str) -> Response:
    return _json(status, error_response(None, ProtocolError(INVALID_REQUEST, text)))


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + dumps(message) + b"\n\n"


class HttpLegacy:
    def __init__(self, adapter: LegacyAdapter, sessions: SessionTable | None = None) -> None:
        self.adapter = adapter
        self.sessions = sessions if sessions is not None else SessionTable()
        self._tasks: set[asyncio.Task[None]] = set()

    @staticmethod
    def claims(headers: Mapping[str, str]) -> bool:
        version = headers.get("mcp-protocol-version")
        if version is not None:
            return is_legacy(version)
        return headers.get("mcp-session-id") is not None

    async def initialize(self, msg: Request, principal: Principal) -> Response:
        started = time.monotonic()
        version = requestlog.NONE
        outcome = "http-429"
        try:
            try:
                session = self.adapter.open(msg, principal, "http")
            except ProtocolError as err:
                outcome = str(err.code)
                return _json(200, error_response(msg.id, err))
            version = session.version
            response = await self.adapter.welcome(session, msg, principal)
            outcome = requestlog.outcome(response)
            if "error" in response:
                return _json(200, response)
            try:
                sid = self.sessions.add(session)
            except TooManySessions:
                outcome = "http-429"
                session.close()
                limit = self.sessions.per_principal
                return _refuse(429, f"Too Many Requests: this principal has {limit} busy sessions")
            return _json(200, response, {SESSION_HEADER: sid})
        finally:
            requestlog.write(
                outcome,
                started,
                transport="http",
                protocol=version,
                principal=principal.name,
                what=requestlog.Asked("initialize"),
            )

    @staticmethod
    def takes(headers: Mapping[str, str], msg: Request | Notification) -> bool:
        """Whether a parsed request/notification is the legacy side's (responses always are)."""
        if isinstance(msg, Request) and msg.method == "initialize":
            return True
        return HttpLegacy.claims(headers) and not carries_modern_meta(msg.params)

    async def post(
        self, headers: Mapping[str, str], msg: Message, principal: Principal
    ) -> Response:
        if isinstance(msg, Request) and msg.method == "initialize":
            return await self.initialize(msg, principal)
        sid = headers.get("mcp-session-id")
        if sid is None:
            return _refuse(400, "Bad Request: Mcp-Session-Id header is required")
        session = self.sessions.get(sid, principal.name)
        if session is None:
            return _refuse(404, "Session not found")
        version = headers.get("mcp-protocol-version")
        if version is not None and not is_legacy(version):
            return _refuse(400, "Bad Request: unsupported MCP-Protocol-Version")
        if isinstance(msg, ClientResponse):
            if session.deliver(msg):
                return Response(status_code=202)
            return _refuse(400, "Bad Request: no request of this session waits for that answer")
        if isinstance(msg, Notification):
            await session.handle(msg, principal, _nowhere)
            return Response(status_code=202)
        return await self._answer(session, msg, principal)

    def delete(self, headers: Mapping[str, str], principal: Principal) -> Response:
        sid = headers.get("mcp-session-id", "")
        if self.sessions.remove(sid, principal.name):
            return Response(status_code=200)
        return _refuse(404, "Session not found")

    async def _answer(self, session: LegacySession, msg: Request, principal: Principal) -> Response:
        """JSON if the request needs nothing from the client, else an SSE stream (module doc)."""
        queue: asyncio.Queue[tuple[bool, dict[str, Any] | None]] = asyncio.Queue()

        async def send(message: dict[str, Any]) -> None:
            queue.put_nowait((False, message))

        async def work() -> None:
            response: dict[str, Any] | None = None
            try:
                response = await session.handle(msg, principal, send)
            finally:
                queue.put_nowait((True, response))

        task = asyncio.create_task(work())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        final, first = await queue.get()
        if final:
            return _json(200, first) if first is not None else Response(status_code=202)
        assert first is not None

        async def events() -> AsyncIterator[bytes]:
            try:
                yield _event(first)
                while True:
                    done, message = await queue.get()
                    if message is not None:
                        yield _event(message)
                    if done:
                        return
            finally:
                if not task.done():
                    log.info("legacy SSE stream for %r closed early; request abandoned", msg.id)
                    task.cancel()

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    def stop(self) -> None:
        """The server is stopping: the requests in flight of every session are cancelled."""
        self.sessions.stop()

    def close(self) -> None:
        self.sessions.close()


async def _nowhere(message: dict[str, Any]) -> None:  # notifications never send anything
    raise AssertionError("a notification tried to send a request")
