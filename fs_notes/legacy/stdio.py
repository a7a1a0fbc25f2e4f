"""The legacy side of one stdio connection: at most one session, opened by `initialize`.

Routing (spec 2026-07-28 basic/versioning, "dual-era server"): `initialize` opens the session, which
then lasts as long as the process; from then on a message without a modern `_meta` protocol
version, and every JSON-RPC response, belongs to the session. A message carrying the modern `_meta`
still goes to the modern handlers, so both eras work on one connection. Before `initialize`,
nothing here changes what the modern side answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..protocol import requestlog
from ..protocol.dispatch import Principal
from ..protocol.envelope import Notification, Request, error_response, parse
from ..protocol.errors import INVALID_REQUEST, ProtocolError
from .adapter import LegacyAdapter
from .messages import ClientResponse, read_message
from .session import LegacySession
from .translate import carries_modern_meta

log = logging.getLogger("fs_notes.legacy")

Message = Request | Notification | ClientResponse


class StdioLegacy:
    def __init__(
        self,
        adapter: LegacyAdapter,
        principal: Principal,
        write: Callable[[dict[str, Any]], None],
    ) -> None:
        self._adapter = adapter
        self._principal = principal
        self._write = write
        self.session: LegacySession | None = None

    def read(self, raw: bytes) -> Message:
        """Parse a line; responses are read only once a legacy session exists (EnvelopeError)."""
        return read_message(raw) if self.session is not None else parse(raw)

    def takes(self, msg: Request | Notification) -> bool:
        """Whether `msg` is the legacy side's to answer (otherwise the modern dispatcher's).

        Every ClientResponse is the legacy side's too (`read` returns one only in a session).
        """
        if isinstance(msg, Request) and msg.method == "initialize":
            return True
        return self.session is not None and not carries_modern_meta(msg.params)

    async def _send(self, message: dict[str, Any]) -> None:
        self._write(message)

    async def handle(self, msg: Message) -> dict[str, Any] | None:
        if isinstance(msg, ClientResponse):
            if self.session is not None:
                self.session.deliver(msg)
            return None
        if isinstance(msg, Request) and msg.method == "initialize" and self.session is None:
            started = time.monotonic()
            try:
                session = self._adapter.open(msg, self._principal, "stdio")
            except ProtocolError as err:
                response = error_response(msg.id, err)
            else:
                self.session = session
                response = await self._adapter.welcome(session, msg, self._principal)
                if "error" in response:
                    self.session = None
            requestlog.write(
                requestlog.outcome(response),
                started,
                transport="stdio",
                protocol=self.session.version if self.session is not None else requestlog.NONE,
                principal=self._principal.name,
                what=requestlog.Asked("initialize"),
            )
            return response
        if self.session is None:  # `takes` said no to anything else; be explicit all the same
            rid = msg.id if isinstance(msg, Request) else None
            return error_response(rid, ProtocolError(INVALID_REQUEST, "Invalid Request"))
        return await self.session.handle(msg, self._principal, self._send)

    def stop(self) -> None:
        """The server is stopping: the session's requests in flight are cancelled."""
        if self.session is not None:
            self.session.stop()

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
