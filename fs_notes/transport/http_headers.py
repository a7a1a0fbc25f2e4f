"""Streamable HTTP request-metadata headers (spec: transports/streamable-http "Server Validation").

Pure: headers and the parsed body in, a HeaderMismatch (-32020) out when they disagree. The headers
exist so intermediaries can route without reading the body; a server that acts on the body must
refuse a request whose headers say something else.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from ..protocol.envelope import Request
from ..protocol.errors import HEADER_MISMATCH, ProtocolError
from ..protocol.meta import VERSION_KEY

NAMED_METHODS = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}
_SENTINEL_PREFIX, _SENTINEL_SUFFIX = "=?base64?", "?="


def _mismatch(message: str) -> ProtocolError:
    return ProtocolError(HEADER_MISMATCH, f"Header mismatch: {message}")


def _visible_ascii(value: str) -> bool:
    return all(c == "\t" or 0x20 <= ord(c) <= 0x7E for c in value)


def decode_header_value(value: str) -> str:
    """Decode the Base64 sentinel form `=?base64?...?=`; plain values pass through."""
    if not _visible_ascii(value):
        raise _mismatch("header value has invalid characters")
    if value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX):
        encoded = value[len(_SENTINEL_PREFIX) : -len(_SENTINEL_SUFFIX)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise _mismatch("invalid Base64 header value") from None
    return value


def check_request_headers(headers: Mapping[str, str], req: Request) -> None:
    """Raise -32020 unless MCP-Protocol-Version, Mcp-Method and Mcp-Name match the body."""
    version = headers.get("mcp-protocol-version")
    if version is None:
        raise _mismatch("MCP-Protocol-Version header is required")
    meta = req.params.get("_meta")
    body_version = meta.get(VERSION_KEY) if isinstance(meta, dict) else None
    if isinstance(body_version, str) and version != body_version:
        raise _mismatch("MCP-Protocol-Version header does not match _meta protocolVersion")
    method = headers.get("mcp-method")
    if method is None:
        raise _mismatch("Mcp-Method header is required")
    if method != req.method:
        raise _mismatch("Mcp-Method header does not match the body method")
    field = NAMED_METHODS.get(req.method)
    if field is None or not isinstance(req.params.get(field), str):
        return  # nothing to mirror; a missing params field is the body's -32602, not a mismatch
    name = headers.get("mcp-name")
    if name is None:
        raise _mismatch("Mcp-Name header is required for " + req.method)
    if decode_header_value(name) != req.params.get(field):
        raise _mismatch(f"Mcp-Name header does not match params.{field}")
