"""Handshake-era clients (MCP 2025-11-25, 2025-06-18, 2025-03-26) served by the modern handlers.

A client that opens with `initialize` gets a session (stdio: the process; HTTP: `Mcp-Session-Id`)
whose requests are re-issued to the same 2026-07-28 dispatcher with synthesized per-request
`_meta`; MRTR `input_required` results become server-initiated `elicitation/create` and
`sampling/createMessage` requests, and the answers go back to the handler with its own sealed
`requestState`. The modern handlers know nothing of this package.

Guarantees: every legacy request passes the very checks a modern one does (the handlers are the
same, with the capabilities declared at `initialize`); a server-initiated request is sent only for
a declared capability; client roots are never used; an HTTP session is usable only by the principal
that opened it. Not guaranteed: resumable SSE streams, a standalone GET stream, server
notifications outside a request (none are sent), or any legacy feature the modern server lacks
(prompts, subscriptions, logging).

The HTTP binding (`fs_notes.legacy.http.HttpLegacy`) is imported on its own: it needs Starlette.
"""

from .adapter import LegacyAdapter
from .messages import ClientResponse, read_message
from .session import LegacySession
from .sessions import SessionTable
from .stdio import StdioLegacy
from .versions import LEGACY_VERSIONS, negotiate

__all__ = [
    "LEGACY_VERSIONS",
    "ClientResponse",
    "LegacyAdapter",
    "LegacySession",
    "SessionTable",
    "StdioLegacy",
    "negotiate",
    "read_message",
]
