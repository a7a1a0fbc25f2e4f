"""`subscriptions/listen` on the wire (spec: basic/patterns/subscriptions): the filter a client
asks for, the messages of a subscription stream, and the one door a transport opens one through.

A transport that can keep a request open (stdio, and Streamable HTTP answering with an SSE
stream) hands a `subscriptions/listen` request to `open_listen` with a `Deliver` callable (it
writes one message to that client, from any thread). The method table holds a `ListenMethod`,
whose `Listener` (tools/live.py for the notes) checks the filter, sends the acknowledgment through
`Deliver` and returns the open `Subscription`; the transport keeps it until the client cancels
(stdio: `notifications/cancelled` naming the listen id; HTTP: the stream closing), and then
calls `close()`. A listen sent where nothing can stay open (`Dispatcher.handle`) is refused.

Guarantees (for every `Listener` that builds its messages here):
- the acknowledgment is the first message of a subscription, and every message of it (the
  acknowledgment, each notification, the graceful completion result) carries the listen
  request's id under `_meta["io.modelcontextprotocol/subscriptionId"]`;
- the acknowledged filter holds only what the client asked for *and* the server honours
  (`SUPPORTED`): a type asked for and not supported is left out, never added;
- a malformed filter is refused with -32602 before anything is opened; an unexpected failure
  is a bare -32603 (the traceback goes to the log only).
Does not: decide what a subscriber may watch (the `Listener` authorizes every URI), or bound
anything (the `Listener` does, per principal).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from . import requestlog
from .dispatch import Call, Dispatcher, Method, Principal
from .envelope import Request, error_response
from .errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, ProtocolError
from .meta import RESULT_META, read_meta

log = logging.getLogger("fs_notes.protocol")

LISTEN = "subscriptions/listen"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
RESOURCE_UPDATED = "notifications/resources/updated"
RESOURCES_LIST_CHANGED = "notifications/resources/list_changed"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

#: The filter fields fs-notes honours (the tool list never changes; there are no prompts).
SUPPORTED = ("resourcesListChanged", "resourceSubscriptions")
_BOOLEAN_FIELDS = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")

RequestId = str | int
Deliver = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Wanted:
    """What a client asked to be told, as far as fs-notes honours it."""

    resources_list_changed: bool
    resource_uris: tuple[str, ...]  # as the client wrote them, duplicates removed, in order

    def agreed(self) -> dict[str, Any]:
        """The acknowledged filter: only the supported types the client asked for."""
        out: dict[str, Any] = {}
        if self.resources_list_changed:
            out["resourcesListChanged"] = True
        if self.resource_uris:
            out["resourceSubscriptions"] = list(self.resource_uris)
        return out


def read_filter(params: dict[str, Any]) -> Wanted:
    """The `notifications` filter of a listen request; -32602 if it is malformed."""
    raw = params.get("notifications")
    if not isinstance(raw, dict):
        raise ProtocolError(INVALID_PARAMS, "Invalid params: notifications must be an object")
    for name in _BOOLEAN_FIELDS:
        if name in raw and not isinstance(raw[name], bool):
            raise ProtocolError(
                INVALID_PARAMS, f"Invalid params: notifications.{name} must be a boolean"
            )
    uris = raw.get("resourceSubscriptions", [])
    if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
        raise ProtocolError(
            INVALID_PARAMS,
            "Invalid params: notifications.resourceSubscriptions must be an array of strings",
        )
    return Wanted(raw.get("resourcesListChanged") is True, tuple(dict.fromkeys(uris)))


def _meta(sub_id: RequestId) -> dict[str, Any]:
    return {SUBSCRIPTION_ID: sub_id}


def acknowledged(sub_id: RequestId, wanted: Wanted) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": ACKNOWLEDGED,
        "params": {"_meta": _meta(sub_id), "notifications": wanted.agreed()},
    }


def resource_updated(sub_id: RequestId, uri: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": RESOURCE_UPDATED,
        "params": {"_meta": _meta(sub_id), "uri": uri},
    }


def resources_list_changed(sub_id: RequestId) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": RESOURCES_LIST_CHANGED, "params": {"_meta": _meta(sub_id)}}


def completed(sub_id: RequestId) -> dict[str, Any]:
    """The listen request's own response: the server ended the subscription gracefully."""
    return {
        "jsonrpc": "2.0",
        "id": sub_id,
        "result": {"resultType": "complete", "_meta": {**RESULT_META, **_meta(sub_id)}},
    }


class Subscription(Protocol):
    def close(self, *, graceful: bool = False) -> None:
        """Stop delivering and free what the subscription holds; idempotent. `graceful`: the
        server ends it, so its completion result (`completed`) is delivered first."""
        ...


class Listener(Protocol):
    def open(self, call: Call, wanted: Wanted, deliver: Deliver) -> Subscription:
        """Open a subscription (its id is `call.request.id`): deliver the acknowledgment before
        anything else, then the notifications. ProtocolError if it cannot be opened."""
        ...


def _needs_a_stream(call: Call) -> dict[str, Any]:
    raise ProtocolError(
        INVALID_REQUEST, "subscriptions/listen needs a transport that keeps the request open"
    )


@dataclass(frozen=True, slots=True)
class ListenMethod(Method):
    """The method-table entry of `subscriptions/listen`: transports open it with `open_listen`."""

    listener: Listener | None = None


def listen_method(listener: Listener) -> ListenMethod:
    return ListenMethod(_needs_a_stream, blocking=True, listener=listener)


def open_listen(
    dispatcher: Dispatcher, msg: Request, principal: Principal, transport: str, deliver: Deliver
) -> Subscription | dict[str, Any]:
    """Open the subscription `msg` asks for, or the error response to send instead. Its one
    log line (protocol/requestlog.py) is written when it opens (or is refused)."""
    started = time.monotonic()
    got = _open_listen(dispatcher, msg, principal, transport, deliver)
    requestlog.write(
        requestlog.outcome(got) if isinstance(got, dict) else "ok",
        started,
        transport=transport,
        protocol=requestlog.version_of(msg.params),
        principal=principal.name,
        what=requestlog.Asked(LISTEN),
    )
    return got


def _open_listen(
    dispatcher: Dispatcher, msg: Request, principal: Principal, transport: str, deliver: Deliver
) -> Subscription | dict[str, Any]:
    try:
        method = dispatcher.method(LISTEN)
        if not isinstance(method, ListenMethod) or method.listener is None:
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {LISTEN}")
        meta = read_meta(msg.params)
        wanted = read_filter(msg.params)
        return method.listener.open(Call(msg, meta, principal, transport), wanted, deliver)
    except ProtocolError as err:
        if err.log_detail:
            log.warning("%s id=%r refused: %s", LISTEN, msg.id, err.log_detail)
        return error_response(msg.id, err)
    except Exception:
        log.exception("internal error in %s id=%r", LISTEN, msg.id)
        return error_response(msg.id, ProtocolError(INTERNAL_ERROR, "Internal error"))
