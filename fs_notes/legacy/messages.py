"""Reading what a legacy client sends: requests and notifications, and also responses.

In a handshake-era session the server sends requests of its own (`elicitation/create`,
`sampling/createMessage`), so the client sends JSON-RPC responses back. A modern connection never
accepts one (envelope.py answers -32600); a legacy session reads them here. Anything that is not a
well-formed response goes through the modern envelope rules unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..protocol.envelope import EnvelopeError, Notification, Request, RequestId, parse
from ..protocol.errors import INVALID_REQUEST, PARSE_ERROR, ProtocolError


@dataclass(frozen=True, slots=True)
class ClientResponse:
    """The client's answer to a server-initiated request: `result` or `error`, never both."""

    id: RequestId
    result: dict[str, Any] | None
    error: dict[str, Any] | None


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def read_message(raw: bytes) -> Request | Notification | ClientResponse:
    """Parse one message of a legacy session; raise EnvelopeError as `envelope.parse` does."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise EnvelopeError(ProtocolError(PARSE_ERROR, "Parse error: invalid JSON")) from exc
    if not (isinstance(obj, dict) and "method" not in obj and ("result" in obj or "error" in obj)):
        return parse(raw)
    raw_id = obj.get("id")
    rid: RequestId | None = raw_id if _valid_id(raw_id) else None
    if obj.get("jsonrpc") != "2.0" or rid is None:
        raise EnvelopeError(
            ProtocolError(INVALID_REQUEST, "Invalid Request: malformed response"), rid
        )
    body = obj.get("result", obj.get("error"))
    if ("result" in obj) == ("error" in obj) or not isinstance(body, dict):
        raise EnvelopeError(
            ProtocolError(INVALID_REQUEST, "Invalid Request: malformed response"), rid
        )
    if "result" in obj:
        return ClientResponse(rid, body, None)
    return ClientResponse(rid, None, body)
