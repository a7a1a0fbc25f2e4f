"""The legacy sessions of the HTTP transport: `Mcp-Session-Id` -> session, bound to a principal.

Spec (2025-11-25 transports, "Session Management"): the id is assigned at `initialize`, is
cryptographically random and visible ASCII, and is presented on every later request. A session is
found only by the principal that opened it: another principal's bearer token with a valid id gets
the same "not found" as an unknown id, so a leaked session id gives nothing without its token.
Bounded per principal (issue 13): one principal holds at most `per_principal` sessions, each
expiring after `idle_seconds` without use; a principal at its bound that opens one more loses
its own least recently used idle session (its client, coming back, gets 404 and opens a new one,
as the spec says), never another principal's; if all of its sessions are busy, the new one is
refused (`TooManySessions`). The table as a whole is bounded by `per_principal` times the
policy's principals.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from ..limits import Limits
from .session import LegacySession

PER_PRINCIPAL = Limits.sessions_per_principal
IDLE_SECONDS = 3600.0


class TooManySessions(Exception):
    """The principal holds `per_principal` sessions, all of them busy."""


class SessionTable:
    def __init__(
        self,
        *,
        per_principal: int = PER_PRINCIPAL,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions: OrderedDict[str, tuple[LegacySession, float]] = OrderedDict()
        self.per_principal = per_principal
        self._idle = idle_seconds
        self._clock = clock

    def __len__(self) -> int:
        return len(self._sessions)

    def add(self, session: LegacySession) -> str:
        """Store `session` under a new random id and return the id (TooManySessions)."""
        self._expire()
        mine = [sid for sid, (s, _) in self._sessions.items() if s.principal == session.principal]
        if len(mine) >= self.per_principal:  # least recently used first
            victim = next((sid for sid in mine if not self._sessions[sid][0].busy), None)
            if victim is None:
                raise TooManySessions()
            self._drop(victim)
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = (session, self._clock())
        return sid

    def get(self, sid: str, principal: str) -> LegacySession | None:
        """The session `sid` if `principal` opened it and it has not expired."""
        self._expire()
        entry = self._sessions.get(sid)
        if entry is None or entry[0].principal != principal:
            return None
        self._sessions[sid] = (entry[0], self._clock())
        self._sessions.move_to_end(sid)
        return entry[0]

    def remove(self, sid: str, principal: str) -> bool:
        if self.get(sid, principal) is None:
            return False
        self._drop(sid)
        return True

    def stop(self) -> None:
        """The server is stopping: every session's requests in flight are cancelled."""
        for session, _ in list(self._sessions.values()):
            session.stop()

    def close(self) -> None:
        for sid in list(self._sessions):
            self._drop(sid)

    def _drop(self, sid: str) -> None:
        entry = self._sessions.pop(sid, None)
        if entry is not None:
            entry[0].close()

    def _expire(self) -> None:
        now = self._clock()
        while self._sessions:
            sid, (session, used) = next(iter(self._sessions.items()))
            if now - used < self._idle or session.busy:
                break
            self._drop(sid)
