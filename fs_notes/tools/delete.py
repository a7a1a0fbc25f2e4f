"""notes_delete: a deletion the user chooses and confirms, through a multi-round-trip request.

Round 1 (no requestState): authorize `delete` on the workspace, require form elicitation in this
request's capabilities, find the notes whose title matches, seal the candidates (id + identity)
with the principal, the argument digest, an expiry and a nonce, and return `input_required` with
the `delete_choice` form. Every deletion asks, even with one candidate.

Retry: re-authorize (the policy may have changed), open the sealed state through the request
state (fs_notes/rounds/request.py: every claim, the boot id included, checked there, and the
candidates parsed there, once; any failure: -32602 with one fixed message, the reason to the log),
decide from `inputResponses` (flow.py), and only for an accepted, confirmed choice among the sealed
candidates: re-check the id lexically, compare the live identity with the sealed one, claim the
nonce in the shared replay store (one winner across every instance, under the store's epoch that
the state was sealed with: confirm/spent.py), then delete through the one door for changes
(fs/changes.py `unlink_note`: the confined delete worker under `serve`), whose filesystem
layer checks the identity once more at the parent fd. The round is chosen from the parsed
params, and each step is one of the flow's transitions (fs_notes/rounds/phases.py).

Out of band (issue 30 item 1; fs_notes/approval/): the workspace's `approval` says what approves
a deletion: `form` (the client's form, as above), `out-of-band` (only the person, on the loopback
page or with `fs-notes approve`: a form accept alone changes nothing) or `either` (the form when
the client has one, else out of band). Out of band, round 1 records the deletion in the
approvals store under the sealed state's nonce and answers a URL-mode elicitation of the page
(a client that has URL mode) or, for a client with neither, a result that says in words what
the person must do and carries the state as `approval` for the retry. The retry deletes only
what the store says the person approved for that very nonce, through the same checks and
claim as a confirmed form.

A claim that succeeded followed by a failed deletion leaves the nonce spent (a confirmation is
single-use whatever happens); the unlink is atomic, so nothing is half-done, and the user starts
over with a fresh call. Every destructive decision is written to the audit log.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..approval.outofband import WAIT_S, OutOfBand, described
from ..confirm.audit import AuditLog
from ..confirm.flow import (
    ELICITATION_KEY,
    MAX_CANDIDATES,
    Candidate,
    Decision,
    Outcome,
    ResponseInvalid,
    ResponseMissing,
    candidate_claims,
    candidates_from_payload,
    decide,
    input_request,
)
from ..confirm.spent import (
    EpochChanged,
    PrincipalQuotaFull,
    ReplayStoreFull,
    SpentNonces,
    StoreUnavailable,
)
from ..fs import FsError, Identity
from ..fs.errors import NoteExists
from ..journal.door import KeptChanges
from ..lexical import LexicalError
from ..policy import Principal
from ..protocol.dispatch import Call
from ..protocol.errors import INVALID_PARAMS, ProtocolError
from ..protocol.meta import (
    require_form_elicitation,
    supports_form_elicitation,
    supports_url_elicitation,
)
from ..protocol.models import CallToolParams, CallToolResult, InputRequiredResult, TextContent
from ..render import shown, shown_id
from ..rounds.phases import DELETE, Event, Phase, Progress
from ..rounds.request import Binding, Echo, RequestState, Round
from ..rounds.seal import StateRejected, StateSealer, StateTooLarge, refuse_state
from .context import NotesEnv, Opened, ToolFailure, fs_message, guarded
from .loading import load_note, stat_key
from .registry import NOTE_ID, WORKSPACE_URI, MultiRound, ToolSpec

log = logging.getLogger("fs_notes.delete")

#: The input request of an out-of-band approval (a URL-mode elicitation of the loopback page).
APPROVAL_KEY = "delete_approval"
#: The folder's own trash, where it keeps one (Obsidian's name for it).
TRASH = ".trash"
MAX_TRASH_NAMES = 100


def _has_trash(ws: Opened) -> bool:
    """Whether the workspace keeps a `.trash/` folder (a real folder beneath it)."""
    try:
        next(iter(ws.root.iter_notes(TRASH, recursive=False)), None)
    except FsError:
        return False
    return True


#: The argument that carries the state back from a client without elicitation.
APPROVAL_ARG = "approval"

_UNAVAILABLE = (
    "the confirmation store cannot be reached, so no deletion can be confirmed now; nothing "
    "was deleted. Try again later"
)


@dataclass(frozen=True)
class _Spend:
    """What a claim spends: the state's nonce, its expiry and the store epoch it was sealed in."""

    nonce: str
    expires: float
    epoch: str | None


def _code(exc: Exception) -> str:
    """An audit reason code from an exception class: SymlinkRefused -> symlink-refused."""
    name = type(exc).__name__
    return "".join("-" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))


def _complete(text: str, structured: dict[str, Any]) -> dict[str, Any]:
    return CallToolResult(content=[TextContent(text=text)], structured_content=structured).wire()


def _sealed_candidates(phase: Phase, claims: Mapping[str, Any]) -> list[Candidate]:
    return candidates_from_payload(claims)


def find_candidates(env: NotesEnv, ws: Opened, title: str) -> list[Candidate]:
    """Notes whose title contains `title` (case-insensitive), exact matches first, by id."""
    wanted = title.strip().lower()
    exact: list[Candidate] = []
    partial: list[Candidate] = []
    workspace, cached = ws.workspace.name, env.cache.get
    for note_id, st in env.notes(ws):
        # Only the title is needed: a cache entry without its text (over the budget) will do.
        note = cached(workspace, note_id, stat_key(st))
        if note is None:
            try:
                note = load_note(env, ws, note_id, None)
            except FsError:
                continue
        note_title = note.title.lower()
        if wanted in note_title:
            bucket = exact if note_title == wanted else partial
            bucket.append(Candidate(note_id, Identity.of(st), note.title))
    return exact + partial


def note_by_id(env: NotesEnv, ws: Opened, raw_id: str) -> Candidate:
    """The one candidate of a deletion asked for by id: the note as `notes` would list it
    (the same id rules and filesystem checks), with its title; ToolFailure otherwise."""
    note_id = env.note_id(raw_id)
    st = env.note_entry(ws, note_id)
    if st is None:
        raise ToolFailure(f"note not found: {shown_id(note_id, 300)}")
    note = env.cache.get(ws.workspace.name, note_id, stat_key(st))
    if note is None:
        try:
            note = load_note(env, ws, note_id, None)
        except FsError as exc:
            raise ToolFailure(fs_message(exc, note_id)) from None
    return Candidate(note_id, Identity.of(st), note.title)


def _asked(args: dict[str, Any]) -> str:
    """What the user asked to delete, as the form names it: the title, or the id."""
    return str(args["title"] if "title" in args else args["id"])


class DeleteTool:
    def __init__(
        self,
        env: NotesEnv,
        sealer: StateSealer,
        replay: SpentNonces,
        audit: AuditLog,
        changes: KeptChanges,
        out_of_band: OutOfBand | None = None,
    ) -> None:
        self.env, self.replay, self.audit, self.changes = env, replay, audit, changes
        self.oob = out_of_band if out_of_band is not None and out_of_band.available else None
        # The request state binds what the store's durability rests on: the boot id for SQLite
        # (its claims may not survive a power loss: a reboot must not revive a confirmation),
        # the store's epoch for a shared store (checked when the nonce is claimed).
        self.state = RequestState(
            sealer, DELETE, _sealed_candidates, bind_boot=replay.binds_boot, epoch=replay.epoch
        )

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_delete",
            title="Delete a note",
            description=(
                "Delete a note chosen by title or by id (give exactly one of them). The user is "
                "always asked which matching note to delete and to confirm: through a form, or "
                "outside the client (a page on this computer, or `fs-notes approve` in a "
                "terminal) as the workspace's policy says; nothing is deleted without that. "
                "When the answer says the person must approve outside the client, tell them "
                "exactly what it says, and once they have, call again with the same arguments "
                "and the approval it gave."
            ),
            properties={
                "workspaceUri": WORKSPACE_URI,
                "title": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 256,
                    "description": "Title (or part of it) of the note to delete; "
                    "case-insensitive. Give this or id, not both",
                },
                "id": {
                    **NOTE_ID,
                    "description": "Id of the note to delete, as notes_list and notes_search "
                    "return it (its path relative to the workspace). Give this or title, not both",
                },
                APPROVAL_ARG: {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 16384,
                    "description": "Only when an earlier notes_delete answer asked for the "
                    "person's approval outside the client: its structuredContent.approval.state, "
                    "passed back once the person approved (it approves nothing by itself)",
                },
            },
            required=(),
            read_only=False,
            destructive=True,
            idempotent=False,
            handler=MultiRound(guarded(self.run)),
        )

    def _record(
        self, call: Call, ws: str, note_id: str | None, outcome: str, reason: str | None
    ) -> OSError | None:
        """Write one audit record; the OSError if the log could not take it."""
        try:
            self.audit.record(
                principal=call.principal.name,
                workspace=ws,
                note_id=note_id,
                outcome=outcome,
                reason=reason,
            )
        except OSError as exc:
            return exc
        return None

    def _audit(
        self, call: Call, ws: str, note_id: str | None, outcome: str, reason: str | None = None
    ) -> None:
        """Record a decision before acting on it (or refusing); ToolFailure if the audit log
        cannot take it (a full disk, an I/O error): nothing is deleted then."""
        failed = self._record(call, ws, note_id, outcome, reason)
        if failed is not None:
            log.error("the audit log cannot be written (%s): nothing was deleted", failed)
            raise ToolFailure(
                "the audit log cannot be written, so nothing was deleted; try again later"
            )

    def _audit_quietly(
        self, call: Call, ws: str, note_id: str, outcome: str, reason: str | None = None
    ) -> None:
        """Record what already happened; a log that cannot take it is an error in our log (the
        `confirmed` record before it stands), never a wrong answer to the client."""
        failed = self._record(call, ws, note_id, outcome, reason)
        if failed is not None:
            log.error(
                "the audit log cannot be written (%s): outcome %s of %s not recorded",
                failed, outcome, shown_id(note_id, 300),
            )  # fmt: skip

    def _open(self, call: Call, uri: str | None) -> Opened:
        try:
            return self.env.open(call, uri, "delete")
        except ToolFailure:
            self._audit(call, (uri or "(workspaceUri left out)")[:300], None, "policy-refused")
            raise

    def run(self, call: Call, args: dict[str, Any], params: CallToolParams) -> dict[str, Any]:
        assert isinstance(call.principal, Principal)
        if ("title" in args) == ("id" in args):
            raise ToolFailure(
                "notes_delete takes exactly one of title and id: "
                + ("not both" if "title" in args else "give the title or the id of the note")
            )
        ws = self._open(call, args.get("workspaceUri"))
        passed = args.get(APPROVAL_ARG)
        args = {k: v for k, v in args.items() if k != APPROVAL_ARG}  # (not in the sealed digest)
        bind = Binding(call.principal.name, args, ws.workspace.name)
        echo = Echo.of(params)
        if echo is None and passed is not None:
            echo = Echo(passed, None)
        if echo is not None:
            return self._retry(call, args, ws, bind, echo)
        progress = Progress(DELETE)
        progress.fire(Event.BEGIN)
        out_of_band = self._out_of_band(ws, call)
        if not out_of_band:
            require_form_elicitation(call.meta.capabilities)
        refusal = self.changes.refusal(ws.workspace.name, "unlink_note")
        if refusal is not None:
            raise ToolFailure(f"deletion is refused in this workspace: {refusal}")
        candidates = self._candidates(ws, args)
        if len(candidates) > MAX_CANDIDATES:
            raise ToolFailure(
                f"{len(candidates)} notes match that title; give a more specific title "
                f"(at most {MAX_CANDIDATES} can be offered)"
            )
        try:
            token = self.state.seal(bind, progress, candidate_claims(candidates))
        except StateTooLarge:
            raise ToolFailure(
                "the matching note ids are too long to confirm; narrow the title"
            ) from None
        except StoreUnavailable as exc:  # a confirmation it could not record: do not ask
            log.error("replay store unavailable: %s", exc)
            self._audit(call, ws.workspace.name, None, "delete-failed", "replay-store")
            raise ToolFailure(_UNAVAILABLE) from None
        if out_of_band:
            return self._ask_person(call, args, ws, bind, candidates, token)
        return self._form(call, args, ws, candidates, token)

    def _approval(self, call: Call, ws: Opened) -> str:
        """What approves this principal's deletion here: the workspace's `approval`, or only
        the person, out of band, after it read a note hiding text (`out_of_band_after_hidden`)."""
        if self.env.has_read_hidden(call.principal.name, ws.workspace.name):
            return "out-of-band"
        return ws.workspace.approval

    def _out_of_band(self, ws: Opened, call: Call) -> bool:
        """Whether this deletion is approved out of band (the policy, and for `either` the
        client's capabilities); ToolFailure if it must be and this server cannot."""
        approval = self._approval(call, ws)
        if approval == "form" or (
            approval == "either" and supports_form_elicitation(call.meta.capabilities)
        ):
            return False
        if self.oob is None:
            if approval == "either":
                require_form_elicitation(call.meta.capabilities)
            raise ToolFailure(
                "deleting here needs the person's approval outside the client, and this server "
                "can offer none (no loopback page and no state folder for fs-notes approve); "
                "nothing was deleted"
            )
        return True

    def _ask_person(
        self,
        call: Call,
        args: dict[str, Any],
        ws: Opened,
        bind: Binding,
        candidates: list[Candidate],
        token: str,
    ) -> dict[str, Any]:
        """Round one out of band (and the same asked again): the deletion recorded for the
        person, then a URL-mode elicitation of the page, or the words for a client without."""
        assert self.oob is not None
        opened = self.state.open(bind, Echo(token, None))  # its nonce and expiry, as sealed
        asked = self.oob.ask(
            nonce=opened.nonce, principal=call.principal.name, workspace=ws.workspace.name,
            candidates=[(c.id, c.title) for c in candidates], expires=opened.expires,
        )  # fmt: skip
        words = asked.words(described(_asked(args), "id" in args))
        caps = call.meta.capabilities
        if asked.url is not None and supports_url_elicitation(caps):
            return InputRequiredResult(
                input_requests={APPROVAL_KEY: {"method": "elicitation/create", "params": {
                    "mode": "url", "url": asked.url, "message": words}}},
                request_state=token,
            ).wire()  # fmt: skip
        return _complete(
            words + f" (Then call notes_delete again with the same arguments and {APPROVAL_ARG} "
            "set to structuredContent.approval.state.)",
            {"deleted": None, "outcome": "approval-needed",
             "approval": {**asked.to_json(), "state": token}},
        )  # fmt: skip

    def _retry(
        self, call: Call, args: dict[str, Any], ws: Opened, bind: Binding, echo: Echo
    ) -> dict[str, Any]:
        name = ws.workspace.name
        try:
            opened = self.state.open(bind, echo)
        except StateRejected as exc:
            self._audit(call, name, None, "state-refused", "state")
            raise refuse_state(exc.reason) from None
        via: str | None = None
        person = self._person(call, ws, opened, echo)
        if isinstance(person, tuple):
            outcome, via = person
        elif person == "ask":
            opened.progress.fire(Event.UNANSWERED)
            return self._ask_person(call, args, ws, bind, opened.data, opened.token)
        else:
            try:
                outcome = decide(opened.data, echo.responses, title=_asked(args))
            except ResponseMissing:  # asked again, the same form under the same (unspent) state
                return self._ask_again(call, args, ws, opened)
            except ResponseInvalid as exc:
                raise ProtocolError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        opened.progress.fire(Event.FINISHED)
        nonce, expires = opened.nonce, opened.expires
        spend = _Spend(nonce, expires, opened.epoch)
        if self._spent(call, name, nonce):  # a clear answer early; the atomic claim comes later
            self._audit(call, name, None, "replay-refused")
            raise refuse_state("nonce already spent")
        if isinstance(outcome, Decision.Delete):
            return self._delete(call, name, ws, outcome, spend, via)
        # Declined or cancelled: what each spends and records is the decision table's
        # (confirm/flow.py): a decline spends the nonce, a cancel leaves it for a retry.
        if outcome.spends_nonce:
            self._claim(call, name, None, spend)
        reason = outcome.reason if isinstance(outcome, Decision.Declined) else None
        self._audit(call, name, None, outcome.audit_outcome, reason)
        return _complete(outcome.ending, {"deleted": None, "outcome": outcome.audit_outcome})

    def _person(
        self, call: Call, ws: Opened, opened: Round[list[Candidate]], echo: Echo
    ) -> tuple[Outcome, str] | str | None:
        """What the person decided out of band for this state: (the outcome, the audit reason
        naming how), "ask" (nothing yet: ask them again) or None (the form decides). Under
        `out-of-band`, a form answer decides nothing: the person is asked again."""
        approval = self._approval(call, ws)
        if approval == "form" or (approval == "either" and self.oob is None):
            return None
        if self.oob is None:  # only the person may approve, and this server cannot ask them
            raise ToolFailure(
                "deleting here needs the person's approval outside the client, and this server "
                "can offer none (no loopback page and no state folder for fs-notes approve); "
                "nothing was deleted"
            )
        responses = echo.responses or {}
        answer = responses.get(APPROVAL_KEY)
        got = self.oob.approved(opened.nonce)
        if got is None and isinstance(answer, dict) and answer.get("action") == "accept":
            # The person agreed to open the page: they may be on it now.
            got = self.oob.wait(opened.nonce, time.monotonic() + WAIT_S)
        if got is not None:
            note_id, how = got
            chosen = next(c for c in opened.data if c.id == note_id)  # one of the sealed
            return Decision.Delete(chosen.id, chosen.identity), f"approved-{how}"
        if isinstance(answer, dict) and answer.get("action") == "decline":
            return Decision.Declined("declined"), "out-of-band"
        if isinstance(answer, dict) and answer.get("action") == "cancel":
            return Decision.Cancelled(), "out-of-band"
        if approval == "either" and supports_form_elicitation(call.meta.capabilities):
            return None  # this client has the form: it decides (or is asked again)
        if ELICITATION_KEY in responses:
            log.warning(
                "notes_delete: a form answer for %s in workspace %s counts for nothing: this "
                "workspace takes only the person's approval outside the client",
                shown(call.principal.name, 128), shown(ws.workspace.name, 128),
            )  # fmt: skip
        return "ask"

    def _ask_again(
        self, call: Call, args: dict[str, Any], ws: Opened, opened: Round[list[Candidate]]
    ) -> dict[str, Any]:
        opened.progress.fire(Event.UNANSWERED)
        if self._spent(call, ws.workspace.name, opened.nonce):
            self._audit(call, ws.workspace.name, None, "replay-refused")
            raise refuse_state("nonce already spent")
        # The sealed candidates, each with its title as found now (titles are not sealed).
        try:
            found = self._candidates(ws, args)
        except ToolFailure:  # gone meanwhile: the sealed id is shown, its deletion will refuse
            found = []
        titles = {c.id: c.title for c in found}
        sealed = [replace(c, title=titles.get(c.id)) for c in opened.data]
        return self._form(call, args, ws, sealed, opened.token)

    def _form(
        self,
        call: Call,
        args: dict[str, Any],
        ws: Opened,
        candidates: list[Candidate],
        token: str,
    ) -> dict[str, Any]:
        """Round one's answer (and the same form asked again): the form and the state. Each
        option says when its note was changed only to a principal who may read there (a
        delete-only grant sees titles and ids, docs/policy.md)."""
        may_read = self.env.may_read(call, ws.uri) is not None
        return InputRequiredResult(
            input_requests=input_request(
                ws.uri, _asked(args), candidates, by_id="id" in args, modified=may_read,
                kept_days=self.env.policy.limits.undo_days,
            ),
            request_state=token,
        ).wire()

    def _candidates(self, ws: Opened, args: dict[str, Any]) -> list[Candidate]:
        """What the form offers: the notes matching the title, or the one note with the id
        (ToolFailure when there is none)."""
        if "id" in args:
            return [note_by_id(self.env, ws, args["id"])]
        candidates = find_candidates(self.env, ws, args["title"])
        if not candidates:
            raise ToolFailure(
                f'no note in this workspace has a title matching "{shown(args["title"], 256)}"'
                " (notes_delete also takes the note's id)"
            )
        return candidates

    def _spent(self, call: Call, ws: str, nonce: str) -> bool:
        try:
            return self.replay.is_spent(nonce)
        except (sqlite3.Error, StoreUnavailable) as exc:
            log.error("replay store could not be read: %s", exc)
            self._audit(call, ws, None, "delete-failed", "replay-store")
            raise ToolFailure(
                "the confirmation could not be checked; nothing was deleted"
            ) from None

    def _claim(self, call: Call, ws: str, note_id: str | None, spend: _Spend) -> None:
        try:
            won = self.replay.claim(spend.nonce, spend.expires, call.principal.name, spend.epoch)
        except PrincipalQuotaFull as exc:
            log.warning("replay store refused a claim of %s: %s", shown(call.principal.name), exc)
            self._audit(call, ws, note_id, "delete-failed", "quota")
            raise ToolFailure(
                "you have too many confirmations recorded at once; nothing was deleted. "
                "Try again once earlier ones have expired"
            ) from None
        except EpochChanged as exc:
            log.warning("replay store refused a claim: %s", exc)
            self._audit(call, ws, note_id, "state-refused", "epoch")
            raise ToolFailure(
                "this confirmation was asked for before the confirmation store restarted, so it "
                "cannot be checked; nothing was deleted. Start over with a new notes_delete call"
            ) from None
        except (ReplayStoreFull, StoreUnavailable, sqlite3.Error) as exc:
            log.error("replay store refused a claim: %s", exc)
            self._audit(call, ws, note_id, "delete-failed", "replay-store")
            raise ToolFailure(
                "the confirmation could not be recorded; nothing was deleted"
            ) from None
        if not won:
            self._audit(call, ws, note_id, "replay-refused")
            raise refuse_state("nonce already spent")

    def _spent_meanwhile(self, call: Call, ws: str, spend: _Spend) -> None:
        """The same confirmation retried at once (at two instances, say): the winner claims
        before it deletes, so a loser that finds the note gone or changed finds the nonce spent
        too, and gets the replay refusal, not a "changed" that would send the user looking."""
        if self._spent(call, ws, spend.nonce):
            self._audit(call, ws, None, "replay-refused")
            raise refuse_state("nonce already spent")

    def _delete(
        self,
        call: Call,
        name: str,
        ws: Opened,
        choice: Decision.Delete,
        spend: _Spend,
        via: str | None = None,
    ) -> dict[str, Any]:
        note_id = choice.note_id
        expected = choice.identity
        try:
            self.env.ids.note_id(note_id)
            live = ws.root.stat_note(note_id)
        except (LexicalError, FsError) as exc:
            self._spent_meanwhile(call, name, spend)
            self._audit(call, name, note_id, "identity-mismatch", _code(exc))
            raise ToolFailure(
                f"{shown_id(note_id, 300)} changed or moved since the form was shown; "
                "nothing was deleted"
            ) from None
        # The device number is not compared: a note is always on its workspace's filesystem
        # (stat_note refuses any other), and the number is each host's own name for it, so a
        # state sealed by another instance over shared storage (each NFS mount has its own
        # st_dev) carries another. Inode, size and both times must match; unlink_note checks
        # them again, with this host's device number, at the parent fd.
        expected = expected._replace(dev=live.dev)
        if live != expected:
            self._spent_meanwhile(call, name, spend)
            self._audit(call, name, note_id, "identity-mismatch", "identity")
            raise ToolFailure(
                f"{shown_id(note_id, 300)} changed since the form was shown; nothing was deleted"
            )
        # Asked again now, before the record and the claim: the layer may have gone since the
        # form was shown; refused so, the confirmation stays unspent for a retry.
        refusal = self.changes.refusal(name, "unlink_note")
        if refusal is not None:
            self._audit(call, name, note_id, "delete-failed", "os-layer")
            raise ToolFailure(f"deletion is refused in this workspace: {refusal}")
        self._audit(call, name, note_id, "confirmed", via)  # no deletion without its record first
        self._claim(call, name, note_id, spend)
        try:
            trashed = self._into_trash(ws, name, note_id, expected)
            if trashed is None:
                self.changes.unlink_note(name, note_id, expected)
        except FsError as exc:
            self._audit_quietly(call, name, note_id, "delete-failed", _code(exc))
            raise ToolFailure(
                fs_message(exc, note_id)
                + "; nothing was deleted. Start over with a new notes_delete call."
            ) from None
        self.env.cache.forget(name, note_id)
        self.env.unindex(ws, note_id)  # its words out of the index's files too (issue 27)
        self._audit_quietly(call, name, note_id, "deleted")
        if via is not None:  # the person approved: the next deletion is the policy's again
            self.env.forget_hidden(call.principal.name, name)
        if trashed is not None:
            return _complete(
                f"Deleted {shown_id(note_id, 300)}: moved to the folder's trash, as "
                f"{shown_id(trashed, 300)}.",
                {"deleted": note_id, "outcome": "deleted", "trashed": trashed},
            )
        return _complete(
            f"Deleted {shown_id(note_id, 300)}.", {"deleted": note_id, "outcome": "deleted"}
        )

    def _into_trash(
        self, ws: Opened, name: str, note_id: str, expected: Identity
    ) -> str | None:
        """The note moved into the folder's `.trash/` (through the door: kept as a deletion),
        under its name there, made unique as Obsidian does ("name 1.md", ...; a move never
        replaces anything); None where there is no trash (`trash = "journal"`, or the folder
        keeps none): then the caller removes it, its text kept in the journal."""
        if ws.workspace.trash != "auto" or not _has_trash(ws):
            return None
        if self.changes.refusal(name, "move_note") is not None:  # (Landlock without REFER)
            log.info("notes_delete: the folder's trash cannot be moved into here; the note is "
                     "removed, its text kept in the journal")  # fmt: skip
            return None
        base = note_id.rsplit("/", 1)[-1]
        stem = base[:-3] if base.endswith(".md") else base
        for n in range(MAX_TRASH_NAMES):
            candidate = f"{TRASH}/{base if n == 0 else f'{stem} {n}.md'}"
            try:
                self.changes.trash_note(name, note_id, candidate, expected)
            except NoteExists:
                continue
            return candidate
        raise NoteExists()
