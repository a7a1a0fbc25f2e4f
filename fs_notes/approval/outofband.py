"""The out-of-band approval as the tools use it: one change asked of the person (a deletion:
tools/delete.py; a forced replacement: tools/forced.py), with the words that tell them where
(the loopback page, `fs-notes approve`), and the wait for it.

Guarantees: each ask records the change in the store (store.py) under its nonce and names only
what this server can offer (a page it serves, a command that reaches its store); `wait`
returns the approved note only when the store has one for that nonce.
Does not: judge anything the client says (the delete tool decides what a form answer counts
for, by the workspace's `approval`), or change anything.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Any

from ..render import shown, shown_id
from .page import ApprovalPage
from .store import Action, Approvals, Via

__all__ = ["WAIT_S", "Asked", "OutOfBand"]

#: How long a retry after the client opened the URL waits for the person, before asking again.
WAIT_S = 20.0
_POLL_S = 0.25


@dataclass(frozen=True)
class Asked:
    """Where the person approves one change."""

    code: str
    url: str | None
    command: str | None

    def words(self, asked: str, action: Action = "delete") -> str:
        where = []
        if self.url is not None:
            where.append(f"open {self.url} in a browser on this computer")
        if self.command is not None:
            where.append(f"type `{self.command} {self.code}` in a terminal")
        if action == "replace":
            return (
                f"Forcing this change to {asked} needs the person's approval outside this "
                f"client (an AI cannot give it): {' or '.join(where)}, check what it removes, "
                "and approve it. Nothing is written until then; then call the tool again "
                "with exactly the same arguments."
            )
        return (
            f"Deleting {asked} needs the person's approval outside this client (an AI cannot "
            f"give it): {' or '.join(where)}, check the note, and approve it. Nothing is "
            "deleted until then; then ask the client to go on."
        )

    def to_json(self) -> dict[str, str]:
        out = {"code": self.code}
        if self.url is not None:
            out["url"] = self.url
        if self.command is not None:
            out["command"] = f"{self.command} {self.code}"
        return out


@dataclass
class OutOfBand:
    """The approvals store, the page that serves it (None: no loopback page) and the command
    that reaches it (None: a store in memory, which no other process sees)."""

    approvals: Approvals
    page: ApprovalPage | None
    command: str | None

    @classmethod
    def of(cls, approvals: Approvals, page: ApprovalPage | None, state_dir: str | None,
           default_state: str) -> OutOfBand:  # fmt: skip
        command = None
        if approvals.path != ":memory:" and state_dir is not None:
            command = "fs-notes approve"
            if state_dir != default_state:
                command += f" --state-dir {shlex.quote(state_dir)}"
        return cls(approvals, page, command)

    @property
    def available(self) -> bool:
        return self.page is not None or self.command is not None

    def ask(
        self,
        *,
        nonce: str,
        principal: str,
        workspace: str,
        candidates: list[tuple[str, str | None]],
        expires: float,
        action: Action = "delete",
        detail: dict[str, Any] | None = None,
    ) -> Asked:
        code, token = self.approvals.ask(
            nonce=nonce, principal=principal, workspace=workspace, candidates=candidates,
            expires=expires, action=action, detail=detail,
        )  # fmt: skip
        url = self.page.url(token) if self.page is not None else None
        return Asked(code, url, self.command)

    def approved(self, nonce: str) -> tuple[str, Via] | None:
        return self.approvals.approved(nonce)

    def spend(self, nonce: str) -> None:
        self.approvals.spend(nonce)

    def wait(self, nonce: str, until: float) -> tuple[str, Via] | None:
        """The approval of `nonce`, waited for until `until` (a time.monotonic value)."""
        while True:
            got = self.approvals.approved(nonce)
            if got is not None or time.monotonic() >= until:
                return got
            time.sleep(_POLL_S)


def described(asked_for: str, by_id: bool) -> str:
    return shown_id(asked_for, 200) if by_id else f'the note titled "{shown(asked_for, 120)}"'
