"""The `subscriptions/listen` streams of one stdio connection (spec: subscriptions, stdio).

On stdio every subscription shares the one output channel; its messages carry the listen id in
`_meta` (protocol/subscriptions.py builds them). A listen is opened in the thread that read it
(after it handed the reading on, like any request); it stays open until the client sends
`notifications/cancelled` naming its id (then nothing more is sent for it, not even a response),
or the connection ends (then each open one gets its graceful completion result, if the client
still reads).

Guarantees: a cancellation read after the listen request always ends it, even if it arrives
while the listen is still being opened (the cancellation marks the request's token first, the
opening checks it under the same lock it registers under); so does the end of the connection.
A second listen with the id of an open one is refused with -32600 (its notifications could not
be told apart). Does not: bound the listens (the `Listener` does, per principal).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

from ..protocol.cancel import InFlight, Token
from ..protocol.dispatch import Dispatcher, Principal
from ..protocol.envelope import Request, error_response
from ..protocol.errors import INVALID_REQUEST, ProtocolError
from ..protocol.subscriptions import Deliver, Subscription, open_listen


class StdioListens:
    def __init__(
        self, dispatcher: Dispatcher, principal: Principal, write: Deliver, inflight: InFlight
    ) -> None:
        self._dispatcher, self._principal = dispatcher, principal
        self._write, self._inflight = write, inflight
        self._open: dict[Hashable, Subscription | None] = {}  # None: being opened
        self._lock = threading.Lock()
        self._ending = False  # the connection ends: a listen still being opened ends too

    def open(self, msg: Request, token: Token) -> None:
        """Open the listen `msg` asks for (in a reading thread); its errors are answered."""
        try:
            with self._lock:
                taken = msg.id in self._open
                if not taken:
                    self._open[msg.id] = None
            if taken:
                err = ProtocolError(
                    INVALID_REQUEST,
                    "A subscription with this id is already open on this connection",
                )
                self._write(error_response(msg.id, err))
                return
            got = open_listen(self._dispatcher, msg, self._principal, "stdio", self._write)
            with self._lock:
                ending = self._ending
                if isinstance(got, dict) or token.cancelled or ending:
                    self._open.pop(msg.id, None)
                else:
                    self._open[msg.id] = got
            if isinstance(got, dict):
                if not token.cancelled:
                    self._write(got)
            elif token.cancelled or ending:
                got.close(graceful=not token.cancelled)
        finally:
            self._inflight.end(msg.id, token)

    def cancel(self, request_id: object) -> None:
        """`notifications/cancelled` named `request_id`: end its subscription if it is one."""
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return
        with self._lock:
            sub = self._open.get(request_id)
            if sub is not None:
                del self._open[request_id]
        if sub is not None:
            sub.close()

    def close_all(self) -> None:
        """The connection ends: every open subscription ends gracefully."""
        with self._lock:
            self._ending = True
            subs = [s for s in self._open.values() if s is not None]
            self._open.clear()
        for sub in subs:
            sub.close(graceful=True)
