"""Forced changes the person approves: where a workspace's `force` is "out-of-band" (or, with
`out_of_band_after_hidden`, after the principal was given a note hiding text there), an update
or edit that the damage guard refuses (tools/versions.py) is not made on the caller's
`force: true` alone: the person approves that very change outside the client, on the loopback
page or with `fs-notes approve` (fs_notes/approval/), and the client's next identical call makes
it.

Guarantees:
- An approval is bound to the principal, the workspace, the note id, the version of the note it
  replaces and the SHA-256 of the bytes that replace it: its approvals row is keyed by their
  digest, so it approves nothing else (other bytes, the same bytes over a note changed since,
  another principal's or workspace's call).
- It serves once: its row is spent when the change is let through, and the write is then a
  compare-and-write of exactly the version approved (`versions.write_if`), so after it the note
  has another version and the same call is asked again.
- Nothing the client sends approves: no argument, form answer or header says "approved"; a
  forced change waits, with nothing written, until the store holds the person's approval.
- When no approval can be offered here (no loopback page and no state folder), a forced damaging
  change is refused, saying so (fail closed), never let through on the caller's word.

Does not: ask for a change that removes nothing (force is not needed for it), or for a note above
the read limit (it cannot be checked, so forcing it is refused); tell a person from a program
running as this user (docs/design.md, "What an approval proves").
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import time

from ..approval.outofband import OutOfBand
from ..notes.titles import title_of
from ..policy import Principal
from ..protocol.dispatch import Call
from ..render import shown, shown_id
from .context import NotesEnv, Opened, ToolFailure
from .versions import Current, PersonCheck

__all__ = ["FORCE_TTL_S", "ForcedChanges"]

log = logging.getLogger("fs_notes.tools")

#: Seconds a forced change waits for the person before it must be asked again.
FORCE_TTL_S = 600.0
#: What the page and the terminal show of the new text: its first lines, at most this much.
_AFTER_LINES, _AFTER_CHARS = 8, 2000


def change_digest(principal: str, workspace: str, note_id: str, version: str, after: bytes) -> str:
    """The key of one forced change: who, where, which note at which version, and what bytes."""
    fields = [
        "replace", principal, workspace, note_id.encode("utf-8", "surrogateescape").hex(), version,
        hashlib.sha256(after).hexdigest(),
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()


class ForcedChanges:
    """Who may force a damaging change in a workspace, and the asking of the person."""

    def __init__(self, env: NotesEnv, out_of_band: OutOfBand | None) -> None:
        self.env = env
        self.oob = out_of_band if out_of_band is not None and out_of_band.available else None

    def person(self, call: Call, ws: Opened, *, readable: bool) -> PersonCheck | None:
        """The check a forced change by this call must pass (None: the caller's force is enough
        here). `readable`: whether the principal may read the note (else its title, taken from
        its text, is not shown)."""
        principal = call.principal
        assert isinstance(principal, Principal)
        name = ws.workspace.name
        if ws.workspace.force != "out-of-band" and not self.env.has_read_hidden(
            principal.name, name
        ):
            return None

        def check(
            note_id: str, before: Current, after: bytes, losses: list[dict[str, str]]
        ) -> None:
            self._check(principal.name, ws, note_id, before, after, losses, readable)

        return check

    def _check(
        self,
        principal: str,
        ws: Opened,
        note_id: str,
        before: Current,
        after: bytes,
        losses: list[dict[str, str]],
        readable: bool,
    ) -> None:
        name = ws.workspace.name
        said = "; ".join(x["detail"] for x in losses)
        if self.oob is None:
            raise ToolFailure(
                f"refused: {shown_id(note_id, 300)}: {said}. Forcing such a change here needs "
                "the person's approval outside the client, and this server can offer none (no "
                "loopback page and no state folder for fs-notes approve); nothing was written",
                {"error": "noteDamaged", "id": note_id, "losses": losses},
            )
        nonce = change_digest(principal, name, note_id, before.version, after)
        got = self.oob.approved(nonce)
        if got is not None:
            self.oob.spend(nonce)  # once: the write that follows is of exactly this version
            self.env.forget_hidden(principal, name)
            log.warning(
                "forced change to %s in workspace %s for %s: approved on the %s",
                shown_id(note_id, 300), shown(name, 128), shown(principal, 128), got[1],
            )  # fmt: skip
            return
        text = before.data.decode("utf-8", "replace")
        title = title_of(text, posixpath.basename(note_id)) if readable else None
        new_lines = after.decode("utf-8", "replace").splitlines()[:_AFTER_LINES]
        asked = self.oob.ask(
            nonce=nonce, principal=principal, workspace=name, candidates=[(note_id, title)],
            expires=time.time() + FORCE_TTL_S, action="replace",
            detail={"losses": [x["detail"] for x in losses],
                    "after": "\n".join(new_lines)[:_AFTER_CHARS]},
        )  # fmt: skip
        raise ToolFailure(
            f"not yet written: {shown_id(note_id, 300)}: {said}. "
            + asked.words(shown_id(note_id, 200), "replace"),
            {"error": "approvalNeeded", "id": note_id, "losses": losses,
             "approval": asked.to_json()},
        )  # fmt: skip
