"""One log line per request, at INFO on the `fs_notes.requests` logger: how it ended, how long it
took, over what, for whom, on which workspace, and what was asked - never what was said.

Fields, always in this order (text) or as keys of the JSON object (`--log-format json`):
  outcome    ok | isError (a tool error result) | input_required (a round of a multi-round
             request) | cancelled | a JSON-RPC error code (-32602) | http-NNN (an HTTP refusal
             before any JSON-RPC: 401, 403, 405, 413, 429, 400)
  ms         milliseconds from the request's arrival to its answer (integer)
  transport  stdio | http
  protocol   2026-07-28, or the legacy session's version (2025-11-25), or - when unknown
  principal  who sent it (the policy's name; - before authentication)
  workspace  the workspace's *name* from the policy (never its path); - when the request names
             none, ? when it names a URI that is no workspace
  method     the JSON-RPC method (- when the message could not be read)
  tool       tools/call's tool name (- otherwise)
  id         the note id a tool was given (`arguments.id`; - otherwise)

Guarantees: the call sites are the places every request passes (`Dispatcher.handle` for the
2026-07-28 core, `LegacySession.handle` and the two `initialize` paths for legacy sessions, and
each transport's refusals before dispatch: unreadable JSON, authentication and the HTTP edge
checks), so each request the server reads leaves exactly one line; the legacy adapter's own calls
of the dispatcher are not logged again. Every client-supplied value is escaped by
`render.shown` (control, bidi and invisible characters as `\\n`, `\\u202e`, ...; backslash
doubled) and a space inside a value is written `\\u0020`, so a value can neither start a line nor
pose as another field; long values are cut at `MAX_VALUE_CHARS`. There is no field for note text,
a search query, a title, arguments other than `id`, headers, tokens or the request state.

Does not: log notifications (they are not requests), or a request the transport cannot read at
all (a line over the size limit is one line with method -).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..render import shown
from .meta import VERSION_KEY

log = logging.getLogger("fs_notes.requests")

MAX_VALUE_CHARS = 200
NONE = "-"
UNKNOWN_WORKSPACE = "?"


@dataclass(frozen=True, slots=True)
class Asked:
    """What a request asked, as the log shows it (raw values: escaped when written)."""

    method: str = NONE
    tool: str = NONE
    workspace: str = NONE
    note: str = NONE


def asked(
    method: str,
    params: Mapping[str, Any],
    names: Callable[[str], str | None],
    default: str | None = None,
) -> Asked:
    """The loggable part of a request. `names` maps a workspace URI to its name (None: no
    such workspace); `default` is the name of the workspace a call without a URI uses (the
    principal's only one), if any."""
    if method != "tools/call":
        return Asked(method)
    tool = params.get("name")
    arguments = params.get("arguments")
    arguments = arguments if isinstance(arguments, dict) else {}
    uri = arguments.get("workspaceUri")
    # Without a URI: the principal's default workspace, if it has one.
    workspace = (names(uri) or UNKNOWN_WORKSPACE) if isinstance(uri, str) else default or NONE
    note = arguments.get("id")
    return Asked(
        method,
        tool if isinstance(tool, str) else NONE,
        workspace,
        note if isinstance(note, str) else NONE,
    )


def version_of(params: Mapping[str, Any]) -> str:
    """The protocol version a 2026-07-28 request names in its `_meta` (- if none)."""
    meta = params.get("_meta")
    version = meta.get(VERSION_KEY) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else NONE


def outcome(response: Mapping[str, Any] | None) -> str:
    """ok / isError / input_required / the error code / cancelled (no response)."""
    if response is None:
        return "cancelled"
    error = response.get("error")
    if isinstance(error, dict):
        return str(error.get("code"))
    result = response.get("result")
    if isinstance(result, dict):
        if result.get("isError") is True:
            return "isError"
        if result.get("resultType") == "input_required":
            return "input_required"
    return "ok"


def since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def value(raw: object) -> str:
    """One field's value as written in the text line: escaped, no space, cut."""
    return shown(str(raw), MAX_VALUE_CHARS).replace(" ", "\\u0020")


def write(
    result: str,
    started: float,
    *,
    transport: str,
    protocol: str = NONE,
    principal: str = NONE,
    what: Asked | None = None,
) -> None:
    """Log the one line of a request that ended with `result`, begun at `started`
    (time.monotonic())."""
    if not log.isEnabledFor(logging.INFO):
        return
    what = what or Asked()
    fields: dict[str, str | int] = {
        "outcome": result,
        "ms": since(started),
        "transport": transport,
        "protocol": protocol,
        "principal": principal,
        "workspace": what.workspace,
        "method": what.method,
        "tool": what.tool,
        "id": what.note,
    }
    line = "request " + " ".join(f"{k}={value(v)}" for k, v in fields.items())
    # `escaped`: the line is already escaped field by field (logline.LineFormatter writes it as
    # it is); `fields`: the raw values, for the JSON formatter.
    log.info(line, extra={"escaped": True, "fields": fields})
