"""An in-process fs-notes server for tests and benchmarks that need an injected clock or policy."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fs_notes.compose import ConfirmParts, Opened, compose
from fs_notes.confirm.audit import AuditLog
from fs_notes.confirm.replay import ReplayStore
from fs_notes.confirm.spent import SpentNonces
from fs_notes.fs import WorkspaceRoot
from fs_notes.fs.changes import InProcessChanges, NoteChanges
from fs_notes.policy import Policy, Principal
from fs_notes.protocol.dispatch import Dispatcher
from fs_notes.protocol.envelope import Request
from fs_notes.rounds.seal import KeyRing, StateSealer

FORM: dict[str, object] = {"elicitation": {"form": {}}}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
NO_CAPS: dict[str, object] = {"io.modelcontextprotocol/clientCapabilities": {}}


class _Made:
    """A door for `compose` made by a test from the root handles (the filesystem layer in this
    process, a door that records or refuses, or one made beforehand); closed by the test."""

    def __init__(self, make: Callable[[dict[str, WorkspaceRoot]], NoteChanges]) -> None:
        self._make = make

    def open(self, opened: Opened) -> tuple[NoteChanges, Callable[[], None]]:
        return self._make(opened.roots), _nothing


def _nothing() -> None:
    pass


class InProcess:
    def __init__(
        self,
        policy: Policy,
        state_dir: Path,
        *,
        keyring: KeyRing,
        clock: Callable[[], float],
        audit: Path | None = None,
        replay: SpentNonces | None = None,
        door: Callable[[dict[str, WorkspaceRoot]], NoteChanges] = InProcessChanges,
    ) -> None:
        """`replay`: a store to use (the caller's to close) instead of a SQLite file in
        `state_dir`; `door`: the door for changes, made from the root handles (the filesystem
        layer in this process, unless a test records or refuses)."""
        self._own_replay = replay is None
        self.replay = replay or ReplayStore(str(state_dir / "replay.db"), clock=clock)
        self.audit = AuditLog(str(audit) if audit else None)
        parts = ConfirmParts(
            StateSealer(keyring, clock=clock), self.replay, self.audit, state_dir=str(state_dir)
        )
        self._composed = compose(policy, parts, _Made(door))
        self.roots = self._composed.roots
        self.dispatcher: Dispatcher = self._composed.dispatcher
        self.env = self._composed.env
        self._ids = itertools.count(1)

    def call(
        self,
        principal: Principal,
        name: str,
        arguments: dict[str, Any],
        caps: dict[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        params = {
            "name": name,
            "arguments": arguments,
            **extra,
            "_meta": {**META, "io.modelcontextprotocol/clientCapabilities": caps or FORM},
        }
        response = self.dispatcher.handle(
            Request(next(self._ids), "tools/call", params), principal, "test"
        )
        assert response is not None
        return response

    def close(self) -> None:
        self._composed.close()
        if self._own_replay:
            self.replay.close()
        self.audit.close()


class Wired:
    """The tools wired as `serve` wires them, in this process, around a given door for changes
    (the real OS layer's `ConfinedChanges`, say): no injected clock or keys, an ephemeral ring,
    a replay database in `state`, no audit log."""

    def __init__(self, policy: Policy, changes: NoteChanges, state: Path) -> None:
        self.replay = ReplayStore(str(state / "replay.db"))
        self.changes = changes
        parts = ConfirmParts(StateSealer(KeyRing.ephemeral()), self.replay, AuditLog(None))
        self._composed = compose(policy, parts, _Made(lambda _roots: changes))
        self.roots = self._composed.roots
        self.dispatcher = self._composed.dispatcher
        self.env = self._composed.env

    def call(self, name: str, arguments: dict[str, Any], principal: str = "me") -> dict[str, Any]:
        """The `result` of one tools/call (2026-07-28, no client capabilities)."""
        params = {"name": name, "arguments": arguments, "_meta": {**META, **NO_CAPS}}
        response = self.dispatcher.handle(Request(1, "tools/call", params), Principal(principal),
                                          "t")  # fmt: skip
        assert response is not None
        result: dict[str, Any] = response["result"]
        return result

    def close(self) -> None:
        self._composed.close()
        self.replay.close()
