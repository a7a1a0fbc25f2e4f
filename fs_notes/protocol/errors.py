"""JSON-RPC and MCP error codes, and the exception that carries one to the wire.

A `ProtocolError` is what a handler raises to answer a request with a JSON-RPC error. Its message
and data go to the client verbatim, so they must never contain internal paths or secrets: the real
reason belongs in the log (`log_detail`), never in `message`.
"""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022
#: The message of a resources/read for a resource that does not exist (code INVALID_PARAMS).
RESOURCE_NOT_FOUND = "Resource not found"

# The HTTP status each error code maps to on Streamable HTTP (spec: transports/streamable-http).
HTTP_STATUS: dict[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    METHOD_NOT_FOUND: 404,
    INVALID_PARAMS: 400,
    INTERNAL_ERROR: 500,
    HEADER_MISMATCH: 400,
    MISSING_CAPABILITY: 400,
    UNSUPPORTED_VERSION: 400,
}


class ProtocolError(Exception):
    """An error answered on the wire as a JSON-RPC error object."""

    def __init__(
        self, code: int, message: str, data: Any = None, *, log_detail: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.log_detail = log_detail

    def to_error(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


