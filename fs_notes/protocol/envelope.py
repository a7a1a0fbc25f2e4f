"""JSON-RPC 2.0 envelopes: bytes in, a parsed message or a ProtocolError out; responses out.

Pure functions, no I/O. The rules (spec: basic/index, JSON-RPC 2.0):
- not JSON                                  -> -32700, answered without an id
- a batch (JSON array), a non-object,
  wrong/missing "jsonrpc", a bad id type
  (null, bool, float, object), a missing or
  non-string method, non-object params, or a
  response object sent by the client         -> -32600 (with the id when it could be read)
- an object without "id" and otherwise valid -> a notification: never answered
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import INVALID_REQUEST, PARSE_ERROR, ProtocolError

RequestId = str | int


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: dict[str, Any]


class EnvelopeError(Exception):
    """A message that cannot be processed; `id` is set when the request id could be read."""

    def __init__(self, error: ProtocolError, id: RequestId | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.id = id


def _valid_id(value: object) -> bool:
    # bool is an int subclass in Python; JSON-RPC ids are strings or integers, never null.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def parse(raw: bytes | str) -> Request | Notification:
    """Parse one JSON-RPC message; raise EnvelopeError for anything that is not a valid one."""
    try:
        obj = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (ValueError, RecursionError) as exc:
        raise EnvelopeError(ProtocolError(PARSE_ERROR, "Parse error: invalid JSON")) from exc
    if isinstance(obj, list):
        raise EnvelopeError(
            ProtocolError(INVALID_REQUEST, "Invalid Request: batches are not supported")
        )
    if not isinstance(obj, dict):
        raise EnvelopeError(
            ProtocolError(INVALID_REQUEST, "Invalid Request: not a JSON-RPC object")
        )
    has_id = "id" in obj
    raw_id = obj.get("id")
    rid: RequestId | None = raw_id if _valid_id(raw_id) else None
    if obj.get("jsonrpc") != "2.0":
        raise EnvelopeError(
            ProtocolError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'), rid
        )
    if has_id and rid is None:
        raise EnvelopeError(
            ProtocolError(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
        )
    method = obj.get("method")
    if not isinstance(method, str):
        if "result" in obj or "error" in obj:
            msg = "Invalid Request: clients must not send responses"
        else:
            msg = 'Invalid Request: "method" must be a string'
        raise EnvelopeError(ProtocolError(INVALID_REQUEST, msg), rid)
    params = obj.get("params", {})
    if not isinstance(params, dict):
        raise EnvelopeError(
            ProtocolError(INVALID_REQUEST, 'Invalid Request: "params" must be an object'), rid
        )
    if rid is None:
        return Notification(method, params)
    return Request(rid, method, params)


class PreEncoded(dict[str, Any]):
    """A constant result whose JSON encoding is computed once (tools/list, server/discover).

    It is still a dict (so every reader sees the same data); `dumps` splices the cached bytes in.
    """

    def __init__(self, value: dict[str, Any]) -> None:
        super().__init__(value)
        self.encoded = _encode(value)

    def __setitem__(self, key: str, value: Any) -> None:
        raise TypeError("PreEncoded results are immutable")

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            raise TypeError("PreEncoded results are immutable")
        return self[key]


def result_response(id: RequestId, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": result}


def error_response(id: RequestId | None, error: ProtocolError) -> dict[str, Any]:
    resp: dict[str, Any] = {"jsonrpc": "2.0"}
    if id is not None:
        resp["id"] = id
    resp["error"] = error.to_error()
    return resp


def dumps(message: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON, one line (no raw newlines can appear: JSON escapes them)."""
    result = message.get("result")
    if isinstance(result, PreEncoded) and len(message) == 3:
        head = _encode({"jsonrpc": "2.0", "id": message["id"]})
        return head[:-1] + b',"result":' + result.encoded + b"}"
    return _encode(message)


# Built once: json.dumps with options other than the defaults builds a new encoder per call.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_COMPACT_ASCII = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


def _encode(value: Any) -> bytes:
    try:
        return _COMPACT(value).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (e.g. a client's "\udcc0" echoed back) has no UTF-8 form: escape it.
        return _COMPACT_ASCII(value).encode("ascii")
