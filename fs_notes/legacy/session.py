"""One handshake-era session, served through the modern (2026-07-28) handlers.

Every legacy request runs through the same `Dispatcher` a modern client reaches, with the
per-request `_meta` synthesized from what the client declared at `initialize`
(translate.modern_params). When a handler answers `input_required`, the session turns each embedded
input request into a server-initiated JSON-RPC request to the client, waits for the answers, and
calls the handler again with them as `inputResponses` and the handler's own sealed `requestState`,
byte for byte. The handlers therefore run every check (authorization, sealed state, replay,
identity) exactly as for a modern client; this module only carries messages.

Guarantees: a server-initiated request goes out only for a capability the client declared at
`initialize` (else -32021, as the modern handler would answer); the rounds of one request are the
legacy flow's steps in the one table of phases (fs_notes/rounds/phases.py: handling -> asking ->
handling ... -> done, at most `MAX_ROUNDS` calls of the handler); answers are matched to requests by
the id this session chose, and only the client's own answers are passed on; roots are never asked
for and never used; a request the client cancels gets no response; nothing waits longer than
`answer_timeout` for the client.

Not guaranteed here: authentication (the transport binds a session to its principal), and any
check of the answers' content (the modern handler validates them; a malformed answer gets its
-32602).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..protocol import requestlog
from ..protocol.cancel import STOPPING, Token
from ..protocol.dispatch import Dispatcher, Principal
from ..protocol.envelope import Notification, Request, RequestId, error_response, result_response
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, ProtocolError
from ..render import shown
from ..rounds.phases import LEGACY, Event, Progress, TooManyRounds
from .messages import ClientResponse
from .translate import (
    ADAPTER_PARAMS,
    legacy_error,
    legacy_result,
    modern_params,
    outbound_params,
    refusal,
)

log = logging.getLogger("fs_notes.legacy")

Send = Callable[[dict[str, Any]], Awaitable[None]]

assert LEGACY.max_rounds is not None
MAX_ROUNDS = LEGACY.max_rounds  # handler calls one legacy request may take (tools bound theirs)
ANSWER_TIMEOUT = 300.0  # seconds to wait for the client to answer (a sealed state lives 300 s)


class ClientRefused(Exception):
    """The client answered a server-initiated request with an error, or not in time."""


class _Cancelled(Exception):
    """The client cancelled the request this round trip serves (or the session closed)."""


class LegacySession:
    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        version: str,
        capabilities: dict[str, Any],
        client_info: dict[str, Any] | None,
        principal: str,
        transport: str,
        answer_timeout: float = ANSWER_TIMEOUT,
    ) -> None:
        self.version = version
        self.capabilities = capabilities
        self.client_info = client_info
        self.principal = principal
        self.transport = transport
        self.initialized = False
        self._dispatcher = dispatcher
        self._timeout = answer_timeout
        self._ids = itertools.count(1)
        # our request id -> (the legacy request it serves, the future of the client's answer)
        self._pending: dict[RequestId, tuple[RequestId, asyncio.Future[ClientResponse]]] = {}
        self._inflight: set[RequestId] = set()
        self._cancelled: set[RequestId] = set()
        self._tokens: dict[RequestId, Token] = {}  # of the requests in flight (protocol/cancel.py)
        self._stopping = False
        self._closed = False

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def meta_params(self, params: dict[str, Any]) -> dict[str, Any]:
        return modern_params(params, self.capabilities, self.client_info)

    # -- client -> server --------------------------------------------------------------------

    async def handle(
        self, msg: Request | Notification, principal: Principal, send: Send
    ) -> dict[str, Any] | None:
        """Answer one legacy message (None for notifications and cancelled requests); each
        request leaves its one log line (protocol/requestlog.py), whatever its rounds."""
        if isinstance(msg, Notification):
            return await self._answer(msg, principal, send)
        started = time.monotonic()
        response = await self._answer(msg, principal, send)
        requestlog.write(
            requestlog.outcome(response),
            started,
            transport=self.transport,
            protocol=self.version,
            principal=principal.name,
            what=self._dispatcher.asked(msg.method, msg.params, principal),
        )
        return response

    async def _answer(
        self, msg: Request | Notification, principal: Principal, send: Send
    ) -> dict[str, Any] | None:
        if principal.name != self.principal:  # the transport checks first; never mix principals
            return error_response(
                msg.id if isinstance(msg, Request) else None,
                ProtocolError(INVALID_REQUEST, "Invalid Request: unknown session"),
            )
        if isinstance(msg, Notification):
            self._notified(msg)
            return None
        if msg.method == "initialize":
            return error_response(
                msg.id, ProtocolError(INVALID_REQUEST, "Invalid Request: already initialized")
            )
        if msg.method == "ping":
            return result_response(msg.id, {})
        self._inflight.add(msg.id)
        token = self._tokens[msg.id] = Token()
        if self._stopping:
            token.cancel(STOPPING)
        try:
            return await self._serve(msg, principal, send, token)
        except _Cancelled:
            log.info("legacy request %r: %s", msg.id, token.why)
            return None
        except ClientRefused as exc:
            log.warning("legacy request %r: %s", msg.id, exc)
            if msg.method == "tools/call":
                text = f"Nothing was done: {exc}."
                from ..protocol.models import tool_error  # pydantic: not on the start-up path

                return result_response(msg.id, legacy_result(tool_error(text)))
            return error_response(msg.id, ProtocolError(INTERNAL_ERROR, "Internal error"))
        except ProtocolError as err:
            if err.log_detail:
                log.warning("legacy %s id=%r refused: %s", msg.method, msg.id, err.log_detail)
            return error_response(msg.id, err)
        except Exception:  # a bug here must not leave the client waiting or leak a traceback
            log.exception("internal error in legacy %s id=%r", msg.method, msg.id)
            return error_response(msg.id, ProtocolError(INTERNAL_ERROR, "Internal error"))
        finally:
            self._inflight.discard(msg.id)
            self._cancelled.discard(msg.id)
            if self._tokens.get(msg.id) is token:
                del self._tokens[msg.id]

    def _notified(self, note: Notification) -> None:
        if note.method == "notifications/initialized":
            self.initialized = True
        elif note.method == "notifications/cancelled":
            rid = note.params.get("requestId")
            if isinstance(rid, str | int) and not isinstance(rid, bool):
                self.cancel(rid)
        elif note.method == "notifications/roots/list_changed":
            log.info("legacy client says its roots changed; roots are never used here")
        else:
            log.debug("legacy notification %s ignored", shown(note.method, 200))

    async def _serve(
        self, msg: Request, principal: Principal, send: Send, token: Token
    ) -> dict[str, Any]:
        params = self.meta_params(msg.params)
        progress = Progress(LEGACY)
        _step(progress, Event.BEGIN)
        loop = asyncio.get_running_loop()

        async def sending(message: dict[str, Any]) -> None:
            await send(message)

        def notify(message: dict[str, Any]) -> None:  # progress, from the answering thread
            asyncio.run_coroutine_threadsafe(sending(message), loop)

        while True:  # each pass is one round of the table: handling, then asking or done
            response = await self._dispatcher.handle_async(
                Request(msg.id, msg.method, params),
                principal,
                self.transport,
                token,
                notify=notify,
                logged=False,  # this request's one line is written by `handle`
            )
            if response is None or msg.id in self._cancelled:  # (None: its work stopped)
                raise _Cancelled
            result = response.get("result")
            if not isinstance(result, dict):
                progress.fire(Event.FINISHED)
                return legacy_error(msg.method, response)  # in this revision's own codes
            if result.get("resultType") != "input_required":
                progress.fire(Event.FINISHED)
                return result_response(msg.id, legacy_result(result))
            progress.fire(Event.INPUT_REQUIRED)
            answers = await self._ask(msg.id, result.get("inputRequests"), send)
            params = {k: v for k, v in params.items() if k not in ADAPTER_PARAMS}
            if answers:
                params["inputResponses"] = answers
            if "requestState" in result:
                params["requestState"] = result["requestState"]
            _step(progress, Event.ANSWERED)

    # -- server -> client --------------------------------------------------------------------

    async def _ask(self, origin: RequestId, requests: object, send: Send) -> dict[str, Any]:
        """Send each input request to the client; its answers keyed as the requests were."""
        if requests is None:
            return {}
        if not isinstance(requests, dict):
            raise ProtocolError(INTERNAL_ERROR, "Internal error", log_detail="bad inputRequests")
        for entry in requests.values():
            method = entry.get("method") if isinstance(entry, dict) else None
            params = entry.get("params") if isinstance(entry, dict) else None
            refused = refusal(method, params, self.capabilities)
            if refused is not None:
                raise refused
        if self._closed:
            raise _Cancelled
        loop = asyncio.get_running_loop()
        outgoing: list[tuple[str, RequestId, asyncio.Future[ClientResponse]]] = []
        for key in requests:
            rid: RequestId = next(self._ids)
            future: asyncio.Future[ClientResponse] = loop.create_future()
            self._pending[rid] = (origin, future)
            outgoing.append((key, rid, future))
        try:
            for key, sent, _ in outgoing:
                method, params = requests[key]["method"], requests[key]["params"]
                await send(
                    {
                        "jsonrpc": "2.0",
                        "id": sent,
                        "method": method,
                        "params": outbound_params(method, params, self.version),
                    }
                )
            try:
                answers = await asyncio.wait_for(
                    asyncio.gather(*(f for _, _, f in outgoing)), self._timeout
                )
            except TimeoutError:
                await _withdraw(outgoing, send, "timed out")
                raise ClientRefused(
                    f"the client did not answer within {self._timeout:g} seconds"
                ) from None
            except _Cancelled:
                await _withdraw(outgoing, send, "the request it serves was cancelled")
                raise
        finally:
            for _, sent, _ in outgoing:
                self._pending.pop(sent, None)
        out: dict[str, Any] = {}
        for (key, _, _), answer in zip(outgoing, answers, strict=True):
            if answer.error is not None:
                code = answer.error.get("code")
                raise ClientRefused(
                    f"the client refused {requests[key]['method']} (error {code!r})"
                )
            out[key] = answer.result
        return out

    def deliver(self, response: ClientResponse) -> bool:
        """Hand the client's answer to the request waiting for it; False if none is waiting."""
        entry = self._pending.get(response.id)
        if entry is None or entry[1].done():
            log.info("legacy client answered %r, which nothing waits for", response.id)
            return False
        entry[1].set_result(response)
        return True

    def cancel(self, origin: RequestId) -> None:
        """The client cancelled request `origin`: stop waiting on its behalf, answer nothing."""
        if origin not in self._inflight:
            return
        self._cancelled.add(origin)
        token = self._tokens.get(origin)
        if token is not None:
            token.cancel()  # a listing or an index build it runs stops at its next note
        for owner, future in self._pending.values():
            if owner == origin and not future.done():
                future.set_exception(_Cancelled())

    def stop(self) -> None:
        """The server is stopping (SIGINT, SIGTERM): every request in flight, and each one from
        now on, is cancelled (its work stops at its next checkpoint; it gets no answer)."""
        self._stopping = True
        for token in list(self._tokens.values()):
            token.cancel(STOPPING)

    def close(self) -> None:
        """The connection or session ended: every wait stops now."""
        self._closed = True
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(_Cancelled())


def _step(progress: Progress, event: Event) -> None:
    """A step into `handling`; past the flow's bound, an internal error (a handler that never
    stops asking is a server bug)."""
    try:
        progress.fire(event)
    except TooManyRounds:
        raise ProtocolError(
            INTERNAL_ERROR, "Internal error", log_detail=f"more than {MAX_ROUNDS} input rounds"
        ) from None


async def _withdraw(
    outgoing: list[tuple[str, RequestId, asyncio.Future[ClientResponse]]], send: Send, reason: str
) -> None:
    """Tell the client that our unanswered requests are withdrawn (spec: cancellation)."""
    for _, rid, future in outgoing:
        if future.done() and not future.cancelled() and future.exception() is None:
            continue  # answered
        await send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": rid, "reason": reason},
            }
        )
