"""The protocol core: a parsed message and a principal in, a JSON-RPC response (or nothing) out.

No I/O happens here; the transports move bytes and authenticate, then call `Dispatcher.handle`.
Order of checks for a request: method known (-32601), `_meta` valid (-32602/-32022), params and
handler (which may raise -32602/-32021 or return a tool error). Any unexpected exception becomes a
bare -32603 on the wire; its traceback goes to the log only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from ..render import shown
from . import requestlog
from .cancel import Cancelled, Token
from .envelope import Notification, Request, error_response, result_response
from .errors import INTERNAL_ERROR, METHOD_NOT_FOUND, ProtocolError
from .meta import RESULT_META, RequestMeta, read_meta, unsupported_version
from .progress import Notify, Reporter, token_of

log = logging.getLogger("fs_notes.protocol")


class Principal(Protocol):
    @property
    def name(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Call:
    """Everything a handler may use: the request, its validated metadata, and who sent it."""

    request: Request
    meta: RequestMeta
    principal: Principal
    transport: str

    @property
    def params(self) -> dict[str, Any]:
        return self.request.params


Handler = Callable[[Call], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Method:
    handler: Handler
    blocking: bool = False  # touches the filesystem or a database: run it off the event loop


class Dispatcher:
    def __init__(self, methods: dict[str, Method], executor: Executor | None = None) -> None:
        self._methods = methods
        self._executor = executor
        #: workspace URI -> name, for the request log
        self.workspace_names: dict[str, str] = {}
        #: the name of the workspace a principal's call without workspaceUri uses, if any
        self.default_workspace: Callable[[Principal], str | None] = lambda _principal: None

    def method(self, name: str) -> Method | None:
        return self._methods.get(name)

    def asked(
        self, method: str, params: dict[str, Any], principal: Principal
    ) -> requestlog.Asked:
        """What a request asks, as its log line shows it (protocol/requestlog.py)."""
        return requestlog.asked(
            method, params, self.workspace_names.get, self.default_workspace(principal)
        )

    def handle(
        self,
        msg: Request | Notification,
        principal: Principal,
        transport: str,
        cancel: Token | None = None,
        *,
        notify: Notify | None = None,
        logged: bool = True,
    ) -> dict[str, Any] | None:
        """Answer one message. Notifications are never answered, nor is a request whose
        `cancel` token is cancelled (protocol/cancel.py). A request leaves its one log line
        (protocol/requestlog.py) unless `logged` is False (the legacy adapter logs its own);
        with `notify`, a request that carries a progress token is sent its progress
        notifications through it (protocol/progress.py)."""
        if isinstance(msg, Notification):
            log.debug("notification %s ignored", shown(msg.method, 200))
            return None
        started = time.monotonic()
        token = token_of(msg.params, explain=True) if notify is not None else None
        reporter = Reporter(token, notify) if token is not None and notify is not None else None
        bound = cancel.bind() if cancel is not None else None
        bound_progress = reporter.bind() if reporter is not None else None
        response: dict[str, Any] | None = None
        try:
            response = self._answer(msg, principal, transport)
        except Cancelled:
            why = cancel.why if cancel is not None else "cancelled"
            log.info("%s id=%r stopped: %s", shown(msg.method, 200), msg.id, why)
        finally:
            if reporter is not None and bound_progress is not None:
                reporter.close()
                Reporter.unbind(bound_progress)
            if bound is not None:
                Token.unbind(bound)
        if response is not None and cancel is not None and cancel.cancelled:
            log.info("%s id=%r cancelled; its answer is dropped", shown(msg.method, 200), msg.id)
            response = None
        if logged:
            requestlog.write(
                requestlog.outcome(response),
                started,
                transport=transport,
                protocol=requestlog.version_of(msg.params),
                principal=principal.name,
                what=self.asked(msg.method, msg.params, principal),
            )
        return response

    def _answer(self, msg: Request, principal: Principal, transport: str) -> dict[str, Any]:
        try:
            return result_response(msg.id, self._run(msg, principal, transport))
        except ProtocolError as err:
            if err.log_detail:
                log.warning("%s id=%r refused: %s", shown(msg.method, 200), msg.id, err.log_detail)
            return error_response(msg.id, err)
        except Exception:
            log.exception("internal error in %s id=%r", shown(msg.method, 200), msg.id)
            return error_response(msg.id, ProtocolError(INTERNAL_ERROR, "Internal error"))

    def _blocking(self, msg: Request | Notification) -> bool:
        """Whether answering `msg` may block (it then runs in the executor)."""
        if not isinstance(msg, Request):
            return False
        method = self._methods.get(msg.method)
        return method is not None and method.blocking

    async def handle_async(
        self,
        msg: Request | Notification,
        principal: Principal,
        transport: str,
        cancel: Token | None = None,
        *,
        notify: Notify | None = None,
        logged: bool = True,
    ) -> dict[str, Any] | None:
        """As `handle`; blocking methods run in the executor, so a slow call blocks no other."""
        answer = functools.partial(
            self.handle, msg, principal, transport, cancel, notify=notify, logged=logged
        )
        if self._blocking(msg):
            return await asyncio.get_running_loop().run_in_executor(self._executor, answer)
        return answer()

    def _run(self, req: Request, principal: Principal, transport: str) -> dict[str, Any]:
        method = self._methods.get(req.method)
        if method is None:
            if req.method == "initialize":
                # A legacy (handshake) client: name the versions we speak (spec: versioning).
                requested = req.params.get("protocolVersion")
                raise unsupported_version(requested if isinstance(requested, str) else "")
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {shown(req.method, 200)}")
        meta = read_meta(req.params)
        result = method.handler(Call(req, meta, principal, transport))
        if "resultType" not in result or "_meta" not in result:
            result = {"resultType": "complete", "_meta": RESULT_META, **result}
        return result


class LazyDispatcher(Dispatcher):
    """Answers the `early` methods (server/discover) at once and builds the full dispatcher on
    first need, or when `warm_up` is called. Keeps pydantic and the tool modules off the
    start-up path: a client's first request is answered before they are imported."""

    def __init__(self, early: dict[str, Method], build: Callable[[], Dispatcher]) -> None:
        super().__init__(early)
        self._early = early
        self._build = build
        self._full: Dispatcher | None = None
        self._lock = threading.Lock()

    def full(self) -> Dispatcher:
        with self._lock:
            if self._full is None:
                self._full = self._build()
            return self._full

    def warm_up(self, delay: float) -> None:
        """Build in a background thread after `delay` seconds (so it does not slow the first
        answer), unless a request needed it first."""
        timer = threading.Timer(delay, self.full)
        timer.daemon = True
        timer.start()

    def method(self, name: str) -> Method | None:
        return self._early.get(name) or self.full().method(name)

    def asked(
        self, method: str, params: dict[str, Any], principal: Principal
    ) -> requestlog.Asked:
        if method in self._early:
            return super().asked(method, params, principal)
        return self.full().asked(method, params, principal)

    def handle(
        self,
        msg: Request | Notification,
        principal: Principal,
        transport: str,
        cancel: Token | None = None,
        *,
        notify: Notify | None = None,
        logged: bool = True,
    ) -> dict[str, Any] | None:
        if isinstance(msg, Request) and msg.method not in self._early:
            full = self.full()
            return full.handle(msg, principal, transport, cancel, notify=notify, logged=logged)
        return super().handle(msg, principal, transport, cancel, notify=notify, logged=logged)

    async def _full_async(self) -> Dispatcher:
        full = self._full
        if full is None:  # built off the event loop: it imports pydantic and the tools
            full = await asyncio.get_running_loop().run_in_executor(None, self.full)
        return full

    async def handle_async(
        self,
        msg: Request | Notification,
        principal: Principal,
        transport: str,
        cancel: Token | None = None,
        *,
        notify: Notify | None = None,
        logged: bool = True,
    ) -> dict[str, Any] | None:
        if isinstance(msg, Request) and msg.method not in self._early:
            full = await self._full_async()
            return await full.handle_async(
                msg, principal, transport, cancel, notify=notify, logged=logged
            )
        return super().handle(msg, principal, transport, cancel, notify=notify, logged=logged)

