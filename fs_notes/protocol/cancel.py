"""Cancellation of a request in flight (spec: basic/patterns/cancellation).

A transport gives each request it is answering a `Token` (`InFlight.begin`), and cancels it when
the client says so: over stdio a `notifications/cancelled` naming the request id, over HTTP the
client closing the connection before the answer. `Dispatcher.handle` then never answers that
request (spec: "Not send a response for the cancelled request"), and work that can stop does:
every listing of notes (tools/context.py `NotesEnv.notes`) passes a `checkpoint()`, which raises
`Cancelled` in the thread answering a cancelled request, and so does every note a search
index build indexes (tools/indexed.py).

A server that is stopping (SIGINT, SIGTERM) cancels every request it is answering
(`InFlight.stop`): long work (a first index build of a large folder) stops at its next
checkpoint instead of holding the exit up, and a request that arrives after that is cancelled
from the start. A cancelled build keeps what it committed (search/index.py): the next start
indexes only the rest.

Guarantees: a cancelled request gets no response, whether its work stopped or finished first;
a cancellation naming an id that is not in flight (unknown, or answered already) is ignored.
Does not: undo work that completed (a note created before the cancellation stays created), or
interrupt a single filesystem call or a worker's operation once begun.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Hashable

_current: contextvars.ContextVar[Token | None] = contextvars.ContextVar(
    "fs_notes_cancel", default=None
)


class Cancelled(BaseException):
    """The client cancelled the request being answered: stop, and send nothing. A
    BaseException (as asyncio.CancelledError is), so no `except Exception` on the way, in a
    tool or in the dispatcher's internal-error net, can turn it into an answer."""


#: Why a token was cancelled (`Token.why`), for the log line of the request it stopped.
BY_CLIENT = "cancelled by the client"
STOPPING = "the server is stopping"


class Token:
    def __init__(self) -> None:
        self._event = threading.Event()
        self.why = BY_CLIENT

    def cancel(self, why: str = BY_CLIENT) -> None:
        if not self._event.is_set():
            self.why = why
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def bind(self) -> contextvars.Token[Token | None]:
        """Make this the token `checkpoint` sees in this thread (undo with `unbind`)."""
        return _current.set(self)

    @staticmethod
    def unbind(previous: contextvars.Token[Token | None]) -> None:
        _current.reset(previous)


def checkpoint() -> None:
    """Raise Cancelled if the request this thread is answering was cancelled."""
    token = _current.get()
    if token is not None and token.cancelled:
        raise Cancelled()


class InFlight:
    """The requests of one connection being answered, by id (thread-safe)."""

    def __init__(self) -> None:
        self._tokens: dict[Hashable, Token] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def begin(self, request_id: Hashable) -> Token:
        """The token of a request now being answered; already cancelled once `stop` ran."""
        token = Token()
        with self._lock:
            if self._stopped:
                token.cancel(STOPPING)
            self._tokens[request_id] = token
        return token

    def stop(self) -> int:
        """The server is stopping: cancel every request in flight, and each one begun from now
        on. How many were in flight."""
        with self._lock:
            self._stopped = True
            tokens = list(self._tokens.values())
        for token in tokens:
            token.cancel(STOPPING)
        return len(tokens)

    def end(self, request_id: Hashable, token: Token) -> None:
        with self._lock:
            if self._tokens.get(request_id) is token:
                del self._tokens[request_id]

    def cancel(self, request_id: object) -> bool:
        """Cancel `request_id` if it is in flight; whether it was."""
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return False
        with self._lock:
            token = self._tokens.get(request_id)
        if token is None:
            return False
        token.cancel()
        return True
