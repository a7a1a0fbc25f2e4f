"""The notes_delete confirmation: the form it shows and the decision table of the retry.

Pure functions, no I/O. Round 1 builds the form (`build_elicitation`) and the candidates' claims
to seal (`candidate_claims`; fs_notes.rounds.request seals them with every other claim). On the
retry, `candidates_from_payload` (the one parser of the sealed candidates, run once by the
request state) gives them back typed, and `decide` rebuilds the exact requestedSchema from them and
maps the client's ``inputResponses`` to one outcome:

    action   content                                   outcome            nonce
    accept   valid, confirm true                       Decision.Delete    spent
    accept   valid, confirm false                      Decision.Declined  spent
    decline  (ignored)                                 Decision.Declined  spent
    cancel   (ignored)                                 Decision.Cancelled not spent (retry ok)
    accept   missing, or not matching the schema       ResponseInvalid    not spent (-32602)
    no inputResponses, or no answer under the key      ResponseMissing    not spent (asked again)
    unknown action / not an object                     ResponseInvalid    not spent (-32602)

Guarantees: `Decision.Delete` is returned only for an explicit ``accept`` whose content has exactly
the two required fields, ``note_id`` one of the sealed candidate ids and ``confirm`` the JSON
boolean true; missing content is never consent. The identity returned is the sealed one.
Text shown to the user (titles, ids, the workspace URI) goes through `fs_notes.render`: control,
format and invisible characters escaped, so a file name or title cannot forge lines, hide a
character or reorder text in the dialog. Each option shows its own note's title and id; options
whose ids look alike (`render.skeleton`: NFD twins, case, Cyrillic look-alikes, invisible
characters) are marked and their ids spelled out character by character, so no two options look
identical.

Not guaranteed here: that the token was authentic (`fs_notes.rounds.request` opens it first),
single use (`replay.py`), or that the note is still the same file (the caller compares the live
identity with `Decision.Delete.identity` right before unlinking).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Final

from fs_notes.fs.identity import Identity
from fs_notes.render import isolated, shown, shown_id, skeleton, spelled
from fs_notes.rounds.phases import DELETE, Phase
from fs_notes.rounds.seal import StateRejected

__all__ = [
    "ELICITATION_KEY",
    "MAX_CANDIDATES",
    "Candidate",
    "Decision",
    "Outcome",
    "ResponseInvalid",
    "ResponseMissing",
    "build_elicitation",
    "candidate_claims",
    "candidates_from_payload",
    "decide",
    "input_request",
    "requested_schema",
]

ELICITATION_KEY: Final = DELETE.asks[Phase.CONFIRM]  # "delete_choice", from the flow's table
# Bounds what one form can offer, and keeps the sealed state under its size limit
# (rounds/seal.py MAX_TOKEN_CHARS).
MAX_CANDIDATES: Final = 20
_DISPLAY_TITLE_CHARS = 120
_DISPLAY_ID_CHARS = 200


@dataclass(frozen=True)
class Candidate:
    """A note offered in the form: its id and the identity it had when the form was built
    (sealed), and its title (shown in the form only, never sealed: absent on the retry)."""

    id: str
    identity: Identity
    title: str | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "identity": list(self.identity)}


class ResponseInvalid(ValueError):
    """The retry's inputResponses do not answer the form (-32602 upstream).

    The message is safe for the wire: it names fields, never echoes client values.
    """


class ResponseMissing(ResponseInvalid):
    """The retry carries no answer to the form at all: the server asks again (the spec's
    SHOULD for a retry without the required inputResponses), with the same requestState."""


class Decision:
    """The three outcomes of a well-formed retry (a namespace; see the module table)."""

    @dataclass(frozen=True)
    class Delete:
        note_id: str
        identity: Identity
        spends_nonce: ClassVar[bool] = True

    @dataclass(frozen=True)
    class Declined:
        reason: str  # "declined" (action decline) or "not-confirmed" (accept, confirm false)
        spends_nonce: ClassVar[bool] = True
        audit_outcome: ClassVar[str] = "declined"
        ending: ClassVar[str] = "Not deleted: the user declined."

    @dataclass(frozen=True)
    class Cancelled:
        spends_nonce: ClassVar[bool] = False
        audit_outcome: ClassVar[str] = "cancelled"
        ending: ClassVar[str] = (
            "Cancelled: nothing was deleted. "
            "The same confirmation can be retried until it expires."
        )


Outcome = Decision.Delete | Decision.Declined | Decision.Cancelled


def _middle(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters in the middle (the end of an id tells most)."""
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[: keep // 2] + "\u2026" + text[len(text) - (keep - keep // 2) :]


def _iso_time(ns: int) -> str:
    try:
        moment = datetime.fromtimestamp(ns // 1_000_000_000, UTC)
    except (OverflowError, OSError, ValueError):
        return "unknown time"
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _check_candidates(candidates: Sequence[Candidate]) -> None:
    if not candidates:
        raise ValueError("a confirmation needs at least one candidate")
    if len(candidates) > MAX_CANDIDATES:
        raise ValueError(f"at most {MAX_CANDIDATES} candidates fit one confirmation")
    if len({c.id for c in candidates}) != len(candidates):
        raise ValueError("candidate ids must be unique")


def requested_schema(
    title: str, candidates: Sequence[Candidate], *, modified: bool = True
) -> dict[str, Any]:
    """The flat form schema: a titled single-select `note_id` and a boolean `confirm`.
    ``modified``: each option shows when its note was last changed (what tells notes of one
    title apart); off for a principal who may not read there (issue 27: a grant without read
    learns no time of a note)."""
    _check_candidates(candidates)
    alike = Counter(skeleton(c.id) for c in candidates)
    labels: list[str] = []
    for c in candidates:
        label = shown(" ".join((c.title if c.title is not None else title).split()))
        label = '"' + _middle(label.replace('"', '\\"'), _DISPLAY_TITLE_CHARS) + '"'
        if alike[skeleton(c.id)] > 1:
            note = _middle(spelled(c.id), _DISPLAY_ID_CHARS) + " [look-alike name, spelled out]"
        else:
            note = _middle(shown_id(c.id), _DISPLAY_ID_CHARS)
        when = f" (modified {_iso_time(c.identity.mtime_ns)})" if modified else ""
        labels.append(f"{isolated(label)} \u2014 {isolated(note)}{when}")
    seen = Counter(labels)
    options = [
        # Cut ids can still coincide: then the option's position tells them apart.
        {"const": c.id, "title": label if seen[label] == 1 else f"{label} [option {i}]"}
        for i, (c, label) in enumerate(zip(candidates, labels, strict=True), 1)
    ]
    return {
        "type": "object",
        "properties": {
            "note_id": {
                "type": "string",
                "title": "Note to delete",
                "description": "Which of the matching notes to delete.",
                "oneOf": options,
            },
            "confirm": {
                "type": "boolean",
                "title": "Delete it permanently",
                "description": "The chosen note is deleted and cannot be recovered.",
                "default": False,
            },
        },
        "required": ["note_id", "confirm"],
    }


def build_elicitation(
    workspace_uri: str,
    title: str,
    candidates: Sequence[Candidate],
    *,
    by_id: bool = False,
    modified: bool = True,
    kept_days: int = 0,
) -> dict[str, Any]:
    """The ``elicitation/create`` params (form mode) for choosing and confirming a deletion.
    ``by_id``: the note was asked for by its id (``title`` is then that id, and the one
    candidate is that note): the same form, with one option."""
    count = len(candidates)
    if by_id:
        asked = f"the note {isolated(_middle(shown_id(title), _DISPLAY_ID_CHARS))} was asked for"
    else:
        asked = (
            f"{count} note{'s match' if count != 1 else ' matches'} the title "
            f'"{isolated(shown(title, _DISPLAY_TITLE_CHARS))}"'
        )
    message = (
        f"Delete a note from the workspace {shown(workspace_uri, _DISPLAY_ID_CHARS)}. "
        f"{asked[0].upper()}{asked[1:]}. Choose the note to delete and confirm; "
        + (
            f"its text is kept for up to {kept_days} days so that it can be restored."
            if kept_days > 0
            else "deletion is permanent."
        )
    )
    return {
        "mode": "form",
        "message": message,
        "requestedSchema": requested_schema(title, candidates, modified=modified),
    }


def input_request(
    workspace_uri: str,
    title: str,
    candidates: Sequence[Candidate],
    *,
    by_id: bool = False,
    modified: bool,
    kept_days: int = 0,
) -> dict[str, Any]:
    """The ``inputRequests`` map of round 1: one ``elicitation/create`` under `ELICITATION_KEY`.
    ``modified`` has no default: the tool says whether its principal may see the times."""
    return {
        ELICITATION_KEY: {
            "method": "elicitation/create",
            "params": build_elicitation(
                workspace_uri, title, candidates, by_id=by_id, modified=modified,
                kept_days=kept_days,
            ),
        }
    }


def candidate_claims(candidates: Sequence[Candidate]) -> dict[str, Any]:
    """The data claims of round 1: the candidates, id and identity (titles are not sealed)."""
    _check_candidates(candidates)
    return {"candidates": [c.to_json() for c in candidates]}


def candidates_from_payload(payload: Mapping[str, Any]) -> list[Candidate]:
    """The sealed candidates, typed: the one parser of them, which the request state runs once
    on the retry; a malformed list (a server bug) is a StateRejected, fail closed."""
    raw = payload.get("candidates")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_CANDIDATES:
        raise StateRejected("candidates missing or out of bounds")
    candidates: list[Candidate] = []
    for item in raw:
        if not (isinstance(item, dict) and set(item) == {"id", "identity"}):
            raise StateRejected("candidate malformed")
        note_id, identity = item["id"], item["identity"]
        if not (isinstance(note_id, str) and note_id):
            raise StateRejected("candidate id malformed")
        try:  # the one parser of an identity (fs/identity.py): five ints within their ranges
            parsed = Identity.from_json(identity)
        except ValueError:
            raise StateRejected("candidate identity malformed") from None
        candidates.append(Candidate(note_id, parsed))
    if len({c.id for c in candidates}) != len(candidates):
        raise StateRejected("candidate ids repeated")
    return candidates


def _property_check(prop: Mapping[str, Any]) -> Callable[[object], bool]:
    """The acceptance test for one property of the schema we built (allowlist of shapes)."""
    if "oneOf" in prop:
        allowed = frozenset(option["const"] for option in prop["oneOf"])
        return lambda value: isinstance(value, str) and value in allowed
    if prop.get("type") == "boolean":
        return lambda value: isinstance(value, bool)
    raise ValueError("requestedSchema property of an unsupported shape")


def _validated_content(content: object, schema: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(content, dict):
        raise ResponseInvalid(f"{ELICITATION_KEY}.content must be an object")
    properties: Mapping[str, Mapping[str, Any]] = schema["properties"]
    if not set(content) <= set(properties):
        raise ResponseInvalid(f"{ELICITATION_KEY}.content has fields the form did not ask for")
    for name in schema["required"]:
        if name not in content:
            raise ResponseInvalid(f"{ELICITATION_KEY}.content.{name} is missing")
    for name, value in content.items():
        if not _property_check(properties[name])(value):
            raise ResponseInvalid(
                f"{ELICITATION_KEY}.content.{name} does not match the requested schema"
            )
    return content


def _on_accept(
    response: Mapping[str, Any], candidates: Sequence[Candidate], schema: Mapping[str, Any]
) -> Outcome:
    if response.get("content") is None:
        raise ResponseInvalid(f"{ELICITATION_KEY}: accept without content is not a confirmation")
    content = _validated_content(response["content"], schema)
    if content["confirm"] is not True:
        return Decision.Declined("not-confirmed")
    chosen = next(c for c in candidates if c.id == content["note_id"])
    return Decision.Delete(chosen.id, chosen.identity)


def _on_decline(
    response: Mapping[str, Any], candidates: Sequence[Candidate], schema: Mapping[str, Any]
) -> Outcome:
    return Decision.Declined("declined")


def _on_cancel(
    response: Mapping[str, Any], candidates: Sequence[Candidate], schema: Mapping[str, Any]
) -> Outcome:
    return Decision.Cancelled()


_Transition = Callable[[Mapping[str, Any], Sequence[Candidate], Mapping[str, Any]], Outcome]

# The decision table: elicitation action -> transition. Anything else is ResponseInvalid.
ACTIONS: Final[Mapping[str, _Transition]] = {
    "accept": _on_accept,
    "decline": _on_decline,
    "cancel": _on_cancel,
}


def decide(candidates: Sequence[Candidate], input_responses: object, *, title: str) -> Outcome:
    """Map the retry's ``inputResponses`` to an outcome (table in the module docstring).

    `candidates` are the sealed ones (`candidates_from_payload`); `title` is the retry's
    (digest-bound) title argument, used to rebuild the exact schema that was sent. Raises
    ResponseInvalid (ResponseMissing when nothing answers the form).
    """
    schema = requested_schema(title, candidates)
    if input_responses is None:
        raise ResponseMissing("no inputResponses")
    if not isinstance(input_responses, dict):
        raise ResponseInvalid("inputResponses must be an object")
    response = input_responses.get(ELICITATION_KEY)
    if response is None:
        raise ResponseMissing(f"no inputResponses.{ELICITATION_KEY}")
    if not isinstance(response, dict):
        raise ResponseInvalid(f"inputResponses.{ELICITATION_KEY} is not an object")
    action = response.get("action")
    transition = ACTIONS.get(action) if isinstance(action, str) else None
    if transition is None:
        raise ResponseInvalid(f"inputResponses.{ELICITATION_KEY}.action is not a known action")
    return transition(response, candidates, schema)
