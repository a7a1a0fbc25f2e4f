"""Pure translations between a handshake-era (2025-11-25 and older) session and the modern core.

No I/O. Inbound, a legacy request gets the per-request `_meta` of 2026-07-28 synthesized from what
the client declared at `initialize` (`modern_params`); whatever the client put under the reserved
`io.modelcontextprotocol/` prefix is dropped first, so a legacy client can never claim a capability
or a version it did not declare in the handshake. Outbound, modern-only result fields are removed
(`legacy_result`), and an input request embedded in an `input_required` result becomes the params
of a server-initiated request shaped for the negotiated version (`outbound_params`).

Guarantees: a server-initiated request is only ever built for `elicitation/create` (form mode) and
`sampling/createMessage`, and only when the session declared the matching capability
(`refusal` answers -32021 otherwise). `roots/list` is never forwarded: roots are not used here.
"""

from __future__ import annotations

import secrets
from typing import Any

from ..protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_CAPABILITY,
    RESOURCE_NOT_FOUND,
    ProtocolError,
)
from ..protocol.meta import (
    CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    NO_FORM_HELP,
    PROTOCOL_VERSION,
    SERVER_INFO_KEY,
    VERSION_KEY,
    supports_form_elicitation,
    supports_url_elicitation,
)
from .versions import has_titled_enums

RESERVED_PREFIX = "io.modelcontextprotocol/"
# Result fields that exist only in 2026-07-28 (harmless to older schemas, but not theirs).
MODERN_RESULT_KEYS = frozenset({"resultType", "ttlMs", "cacheScope"})
# Params a legacy client cannot send: the adapter alone fills them from its own round trips.
ADAPTER_PARAMS = frozenset({"inputResponses", "requestState"})
FALLBACK_SERVER_INFO: dict[str, Any] = {"name": "fs-notes", "version": "0"}


def modern_params(
    params: dict[str, Any], capabilities: dict[str, Any], client_info: dict[str, Any] | None
) -> dict[str, Any]:
    """`params` of a legacy request with the 2026-07-28 `_meta` of its session."""
    out = {k: v for k, v in params.items() if k not in ADAPTER_PARAMS}
    given = params.get("_meta")
    meta = (
        {k: v for k, v in given.items() if not k.startswith(RESERVED_PREFIX)}
        if isinstance(given, dict)
        else {}
    )
    meta[VERSION_KEY] = PROTOCOL_VERSION
    meta[CAPABILITIES_KEY] = capabilities
    if client_info is not None:
        meta[CLIENT_INFO_KEY] = client_info
    out["_meta"] = meta
    return out


def carries_modern_meta(params: dict[str, Any]) -> bool:
    """A request that names its protocol version in `_meta` is a modern one, whatever else."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and VERSION_KEY in meta


def legacy_result(result: dict[str, Any]) -> dict[str, Any]:
    """A modern result without its 2026-only fields (a new dict; `result` is left untouched)."""
    out = {k: v for k, v in result.items() if k not in MODERN_RESULT_KEYS and k != "_meta"}
    meta = result.get("_meta")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if not k.startswith(RESERVED_PREFIX)}
        if kept:
            out["_meta"] = kept
    return out


#: Spec 2025-11-25 server/resources, "Error Handling": resource not found is -32002 there;
#: 2026-07-28 made it -32602 (and asks clients to accept both).
LEGACY_RESOURCE_NOT_FOUND = -32002


def legacy_error(method: str, response: dict[str, Any]) -> dict[str, Any]:
    """A modern error response in the handshake-era revisions' codes (a new dict)."""
    error = response.get("error")
    if (
        method == "resources/read"
        and isinstance(error, dict)
        and error.get("code") == INVALID_PARAMS
        and error.get("message") == RESOURCE_NOT_FOUND
    ):
        return {**response, "error": {**error, "code": LEGACY_RESOURCE_NOT_FOUND}}
    return response


def initialize_result(version: str, discover: dict[str, Any]) -> dict[str, Any]:
    """The InitializeResult for `version`, built from the modern `server/discover` result."""
    meta = discover.get("_meta")
    info = meta.get(SERVER_INFO_KEY) if isinstance(meta, dict) else None
    result: dict[str, Any] = {
        "protocolVersion": version,
        "capabilities": _legacy_capabilities(discover.get("capabilities")),
        "serverInfo": dict(info) if isinstance(info, dict) else dict(FALLBACK_SERVER_INFO),
    }
    if isinstance(discover.get("instructions"), str):
        result["instructions"] = discover["instructions"]
    return result


def _legacy_capabilities(modern: object) -> dict[str, Any]:
    """The modern capabilities as a legacy session has them: resource change notifications
    come only through `subscriptions/listen` (tools/live.py), which the adapter does not serve
    (no `resources/subscribe`), so a 2025-11-25 client is not promised them."""
    out = dict(modern) if isinstance(modern, dict) else {}
    resources = out.get("resources")
    if isinstance(resources, dict):
        out["resources"] = {
            k: v for k, v in resources.items() if k not in ("listChanged", "subscribe")
        }
    return out


def refusal(method: object, params: object, capabilities: dict[str, Any]) -> ProtocolError | None:
    """Why this input request cannot go to the client (None when it may)."""
    if method == "elicitation/create":
        mode = params.get("mode", "form") if isinstance(params, dict) else None
        if mode == "url":  # the person sent to fs-notes' approval page (tools/delete.py)
            if supports_url_elicitation(capabilities):
                return None
            return ProtocolError(
                MISSING_CAPABILITY,
                "Missing required client capability: elicitation (url mode)",
                {"requiredCapabilities": {"elicitation": {"url": {}}}},
            )
        if mode != "form":
            return ProtocolError(INTERNAL_ERROR, "Internal error", log_detail="not a form")
        if not supports_form_elicitation(capabilities):
            return ProtocolError(
                MISSING_CAPABILITY,
                f"Missing required client capability: {NO_FORM_HELP}",
                {"requiredCapabilities": {"elicitation": {"form": {}}}},
            )
        return None
    if method == "sampling/createMessage":
        if not isinstance(capabilities.get("sampling"), dict):
            return ProtocolError(
                MISSING_CAPABILITY,
                "Missing required client capability: sampling",
                {"requiredCapabilities": {"sampling": {}}},
            )
        return None
    return ProtocolError(
        INTERNAL_ERROR, "Internal error", log_detail=f"input request {method!r} is not forwarded"
    )


def _untitled_enum(prop: dict[str, Any]) -> dict[str, Any]:
    """A 2025-11-25 titled single-select (`oneOf` of const/title) as a 2025-06-18 EnumSchema."""
    options = prop["oneOf"]
    out = {k: v for k, v in prop.items() if k in ("title", "description", "default")}
    out["type"] = "string"
    out["enum"] = [o["const"] for o in options]
    out["enumNames"] = [o["title"] for o in options]
    return out


def outbound_params(method: str, params: dict[str, Any], version: str) -> dict[str, Any]:
    """The params of the server-initiated request, shaped for the negotiated `version`.

    Before 2025-11-25 an elicitation has no `mode` and enums are `enum` + `enumNames`; the answer
    is the chosen value either way, so the modern handler checks it unchanged.
    """
    if method == "elicitation/create" and params.get("mode") == "url":
        # 2025-11-25 names each URL elicitation (notifications/elicitation/complete would);
        # the answer is only accept, decline or cancel, so the id is never looked up.
        return {**params, "elicitationId": secrets.token_urlsafe(12)}
    if method != "elicitation/create" or has_titled_enums(version):
        return params
    schema = params["requestedSchema"]
    props = {
        name: _untitled_enum(p) if isinstance(p.get("oneOf"), list) else p
        for name, p in schema["properties"].items()
    }
    out = {k: v for k, v in params.items() if k != "mode"}
    out["requestedSchema"] = {**schema, "properties": props}
    return out
