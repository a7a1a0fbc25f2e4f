"""Per-request protocol metadata (`params._meta`) and the client-capability gate.

Spec: basic/index "Per-request protocol fields", basic/versioning. Every request of the 2026-07-28
revision carries its protocol version and the client's capabilities; nothing is remembered between
requests, so the gate reads only the capabilities of the request in hand. `clientInfo` is
self-reported: it is kept for display and logs and never used for a decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import __version__
from .errors import INVALID_PARAMS, MISSING_CAPABILITY, UNSUPPORTED_VERSION, ProtocolError

PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_VERSIONS: tuple[str, ...] = (PROTOCOL_VERSION,)

VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
LOG_LEVEL_KEY = "io.modelcontextprotocol/logLevel"
#: Spec: server/utilities/logging, "Log Levels" (RFC 5424). fs-notes sends no log messages; it
#: still refuses a level it does not recognise, as the spec says it SHOULD.
LOG_LEVELS = frozenset(
    {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}
)

# Plain data (no pydantic) so that answering server/discover needs no model building at start-up;
# protocol/models.py checks that its Implementation model dumps to exactly this.
SERVER_INFO: dict[str, Any] = {"name": "fs-notes", "version": __version__, "title": "fs-notes"}
RESULT_META: dict[str, Any] = {SERVER_INFO_KEY: SERVER_INFO}


@dataclass(frozen=True, slots=True)
class RequestMeta:
    protocol_version: str
    capabilities: dict[str, Any]
    client_info: dict[str, Any] | None


def unsupported_version(requested: str) -> ProtocolError:
    return ProtocolError(
        UNSUPPORTED_VERSION,
        "Unsupported protocol version",
        {"supported": list(SUPPORTED_VERSIONS), "requested": requested},
    )


def read_meta(params: dict[str, Any]) -> RequestMeta:
    """Validate `params._meta`; raise -32602 for missing fields, -32022 for a foreign version."""
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise ProtocolError(
            INVALID_PARAMS, "Invalid params: _meta is required and must be an object"
        )
    version = meta.get(VERSION_KEY)
    if not isinstance(version, str):
        raise ProtocolError(
            INVALID_PARAMS, f"Invalid params: _meta[{VERSION_KEY!r}] must be a string"
        )
    if version not in SUPPORTED_VERSIONS:
        raise unsupported_version(version)
    caps = meta.get(CAPABILITIES_KEY)
    if not isinstance(caps, dict):
        raise ProtocolError(
            INVALID_PARAMS, f"Invalid params: _meta[{CAPABILITIES_KEY!r}] must be an object"
        )
    level = meta.get(LOG_LEVEL_KEY, "debug")
    if not (isinstance(level, str) and level in LOG_LEVELS):
        raise ProtocolError(
            INVALID_PARAMS, f"Invalid params: _meta[{LOG_LEVEL_KEY!r}] is not a log level"
        )
    info = meta.get(CLIENT_INFO_KEY)
    return RequestMeta(version, caps, info if isinstance(info, dict) else None)



def _missing(required: dict[str, Any], what: str) -> ProtocolError:
    return ProtocolError(
        MISSING_CAPABILITY,
        f"Missing required client capability: {what}",
        {"requiredCapabilities": required},
    )


def supports_form_elicitation(caps: dict[str, Any]) -> bool:
    """`elicitation: {}` (form implied) or `elicitation: {form: {...}}`; URL-only is not enough."""
    elicitation = caps.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    if not elicitation:
        return True
    return isinstance(elicitation.get("form"), dict)


def supports_url_elicitation(caps: dict[str, Any]) -> bool:
    """`elicitation: {url: {...}}` (2025-11-25 on): the client can send the person to a URL."""
    elicitation = caps.get("elicitation")
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


#: What a client without form elicitation is told (notes_delete's -32021, here and in the legacy
#: adapter): in words, that it cannot show the confirmation form, and what can (docs/clients.md).
NO_FORM_HELP = (
    "elicitation (form mode). This client cannot show a confirmation form, and a note is "
    "deleted only when the user chooses and confirms it in one; nothing was deleted. Use a "
    "client that can show forms: Claude Code (the command line), VS Code, Cursor, the MCP "
    "Inspector 2, or a program on the official Python or TypeScript SDK with an elicitation "
    "handler (docs/clients.md says which clients can)"
)


def require_form_elicitation(caps: dict[str, Any]) -> None:
    """-32021 unless ``caps`` declare form elicitation; the spec's exact `data`, and a message
    that says in words what is missing and what to use (`NO_FORM_HELP`)."""
    if not supports_form_elicitation(caps):
        raise _missing({"elicitation": {"form": {}}}, NO_FORM_HELP)


def require_sampling(caps: dict[str, Any]) -> None:
    if not isinstance(caps.get("sampling"), dict):
        raise _missing({"sampling": {}}, "sampling")
