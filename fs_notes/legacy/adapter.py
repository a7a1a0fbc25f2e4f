"""`initialize`: opening a handshake-era session in front of the modern handlers.

The InitializeResult is built from the modern `server/discover` result (capabilities, instructions,
serverInfo), so both eras see one server. The client's declared capabilities are kept for the life
of the session and become the `clientCapabilities` of every request it sends; `clientInfo` is kept
for logs only. A client that declares `roots` is logged: roots are never asked for and never used
for authorization (the principal comes from the transport alone).
"""

from __future__ import annotations

import logging
from typing import Any

from ..protocol.dispatch import Dispatcher, Principal
from ..protocol.envelope import Request, result_response
from ..protocol.errors import INVALID_PARAMS, ProtocolError
from .session import ANSWER_TIMEOUT, LegacySession
from .translate import initialize_result
from .versions import negotiate

log = logging.getLogger("fs_notes.legacy")


class LegacyAdapter:
    """Opens legacy sessions against one dispatcher (the same one modern clients reach)."""

    def __init__(self, dispatcher: Dispatcher, *, answer_timeout: float = ANSWER_TIMEOUT) -> None:
        self.dispatcher = dispatcher
        self.answer_timeout = answer_timeout

    def open(self, req: Request, principal: Principal, transport: str) -> LegacySession:
        """Validate an `initialize` request and create its session (raises -32602)."""
        requested = req.params.get("protocolVersion")
        caps = req.params.get("capabilities")
        info = req.params.get("clientInfo")
        if not isinstance(requested, str):
            raise ProtocolError(INVALID_PARAMS, "Invalid params: protocolVersion must be a string")
        if not isinstance(caps, dict):
            raise ProtocolError(INVALID_PARAMS, "Invalid params: capabilities must be an object")
        if info is not None and not isinstance(info, dict):
            raise ProtocolError(INVALID_PARAMS, "Invalid params: clientInfo must be an object")
        version = negotiate(requested)
        shown = _name(info)
        log.info(
            "legacy session for %s over %s: client %s asked %s, speaking %s",
            principal.name,
            transport,
            shown,
            requested[:40],
            version,
        )
        if "roots" in caps:
            log.info("client %s declared roots; they are never used for authorization", shown)
        return LegacySession(
            self.dispatcher,
            version=version,
            capabilities=caps,
            client_info=info,
            principal=principal.name,
            transport=transport,
            answer_timeout=self.answer_timeout,
        )

    async def welcome(
        self, session: LegacySession, req: Request, principal: Principal
    ) -> dict[str, Any]:
        """The response to `initialize`: the session's version and the server's description."""
        discover = await self.dispatcher.handle_async(
            Request(req.id, "server/discover", session.meta_params({})),
            principal,
            session.transport,
            logged=False,  # the transport logs the `initialize` it answers
        )
        assert discover is not None
        result = discover.get("result")
        if not isinstance(result, dict):
            return discover
        return result_response(req.id, initialize_result(session.version, result))


def _name(info: dict[str, Any] | None) -> str:
    if info is None:
        return "(unnamed)"
    return f"{str(info.get('name'))[:80]!r} {str(info.get('version'))[:40]!r}"
