"""The notes_delete confirmation form and decision table (fs_notes/confirm/flow.py).

The form is checked against the official 2026-07-28 schema; the retry table follows the spec's
three actions (client/elicitation, "Response Actions") and our rule that missing or malformed
content is never consent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from clock import Clock

from fs_notes.confirm.flow import (
    ELICITATION_KEY,
    MAX_CANDIDATES,
    Candidate,
    Decision,
    Outcome,
    ResponseInvalid,
    ResponseMissing,
    build_elicitation,
    candidate_claims,
    candidates_from_payload,
    decide,
    input_request,
    requested_schema,
)
from fs_notes.fs import Identity
from fs_notes.rounds.phases import DELETE, Event, Phase, Progress
from fs_notes.rounds.request import Binding, Echo, RequestState
from fs_notes.rounds.seal import KeyRing, StateRejected, StateSealer

SCHEMA_FILE = Path("/work/shared/mcp-schema/2026-07-28/schema.json")
DEFS: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())["$defs"]
WS = "file:///home/alice/notes"
TITLE = "TPS report"
MTIME = 1_767_323_045_123_456_789  # 2026-01-02T03:04:05Z
A = Candidate("projects/tps-report.md", Identity(66, 1001, 120, MTIME, MTIME + 7))
B = Candidate("archive/tps-report.md", Identity(66, 1002, 80, MTIME - 86_400 * 10**9, MTIME))
CANDIDATES = [A, B]
PAYLOAD: dict[str, Any] = {"candidates": [A.to_json(), B.to_json()], "phase": "confirm"}


def delete_state(sealer: StateSealer) -> RequestState[list[Candidate]]:
    """notes_delete's request state (as tools/delete.py builds it)."""
    return RequestState(
        sealer, DELETE, lambda _phase, claims: candidates_from_payload(claims), bind_boot=True
    )


def validate(value: object, definition: str) -> None:
    jsonschema.Draft202012Validator({"$ref": f"#/$defs/{definition}", "$defs": DEFS}).validate(
        value
    )


# --- the form --------------------------------------------------------------------------------


def test_the_form_is_valid_elicit_request_form_params_of_the_official_schema() -> None:
    params = build_elicitation(WS, TITLE, CANDIDATES)
    validate(params, "ElicitRequestFormParams")
    validate({"method": "elicitation/create", "params": params}, "ElicitRequest")
    validate(input_request(WS, TITLE, CANDIDATES, modified=True), "InputRequests")
    assert params["mode"] == "form"
    assert list(input_request(WS, TITLE, CANDIDATES, modified=True)) == [ELICITATION_KEY]


def test_note_id_is_a_titled_single_select_and_confirm_a_boolean_both_required() -> None:
    schema = build_elicitation(WS, TITLE, CANDIDATES)["requestedSchema"]
    note_id, confirm = schema["properties"]["note_id"], schema["properties"]["confirm"]
    validate(note_id, "TitledSingleSelectEnumSchema")
    validate(confirm, "BooleanSchema")
    # No keyword outside the official shapes (the schema itself does not forbid extras).
    assert set(note_id) <= set(DEFS["TitledSingleSelectEnumSchema"]["properties"])
    assert set(confirm) <= set(DEFS["BooleanSchema"]["properties"])
    assert set(schema["properties"]) == {"note_id", "confirm"}
    assert schema["required"] == ["note_id", "confirm"]
    assert [o["const"] for o in note_id["oneOf"]] == [A.id, B.id]


def test_each_option_is_labelled_title_id_and_modification_time() -> None:
    options = requested_schema(TITLE, CANDIDATES)["properties"]["note_id"]["oneOf"]
    assert (
        options[0]["title"]
        == '"TPS report" \u2014 projects/tps-report.md (modified 2026-01-02T03:04:05Z)'
    )
    assert options[1]["title"].endswith("(modified 2026-01-01T03:04:05Z)")


def test_for_a_principal_without_read_the_options_carry_no_time() -> None:
    """issue 27: a delete-only grant sees titles and ids in the form, no time of a note; the
    same answer is still accepted (the options' values do not change)."""
    form = input_request(WS, TITLE, CANDIDATES, modified=False)[ELICITATION_KEY]["params"]
    options = form["requestedSchema"]["properties"]["note_id"]["oneOf"]
    assert [o["title"] for o in options] == [
        '"TPS report" \u2014 projects/tps-report.md',
        '"TPS report" \u2014 archive/tps-report.md',
    ]
    assert "modified" not in json.dumps(form) and "2026" not in json.dumps(form)
    answer = {ELICITATION_KEY: {"action": "accept", "content": {"note_id": B.id, "confirm": True}}}
    assert decide(CANDIDATES, answer, title=TITLE) == Decision.Delete(B.id, B.identity)


def test_the_message_is_plain_text_naming_the_workspace_and_the_title() -> None:
    message = build_elicitation(WS, TITLE, CANDIDATES)["message"]
    assert WS in message and '"TPS report"' in message and "2 notes match" in message
    assert "\n" not in message and "<" not in message
    assert "1 note matches" in build_elicitation(WS, TITLE, [A])["message"]


def test_control_and_bidi_characters_are_escaped_in_what_the_user_reads_not_in_the_value() -> None:
    sly = Candidate("notes/\u202etxt.exe\n[x] confirm.md", A.identity)
    params = build_elicitation(WS, "Q3\nAlso delete everything\u200b", [sly])
    option = params["requestedSchema"]["properties"]["note_id"]["oneOf"][0]
    assert option["const"] == sly.id
    for shown in (option["title"], params["message"]):
        assert "\n" not in shown and "\u202e" not in shown and "\u200b" not in shown
    assert "\\u202e" in option["title"] and "\\n" in params["message"]


@pytest.mark.parametrize(
    "candidates",
    [[], [A, A], [Candidate(f"n{i}.md", A.identity) for i in range(MAX_CANDIDATES + 1)]],
    ids=["none", "duplicate", "too many"],
)
def test_a_form_needs_one_to_max_unique_candidates(candidates: list[Candidate]) -> None:
    with pytest.raises(ValueError):
        build_elicitation(WS, TITLE, candidates)
    with pytest.raises(ValueError):
        candidate_claims(candidates)


def test_max_candidates_with_long_ids_still_fit_in_a_sealed_state() -> None:
    many = [Candidate(f"{i:02d}" + "n" * 250 + ".md", A.identity) for i in range(MAX_CANDIDATES)]
    args = {"workspaceUri": WS, "title": TITLE}
    sealed = delete_state(StateSealer(KeyRing.ephemeral())).seal(
        Binding("alice", args, WS), Progress(DELETE, Phase.CONFIRM, 1), candidate_claims(many)
    )
    assert len(sealed) < 16 * 1024


def test_file_identity_is_taken_from_a_stat_result(tmp_path: Path) -> None:
    note = tmp_path / "a.md"
    note.write_text("# A\n")
    st = note.stat()
    ident = Identity.of(st)
    assert ident == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# --- the decision table ------------------------------------------------------------------------


def accept(content: object) -> dict[str, Any]:
    return {ELICITATION_KEY: {"action": "accept", "content": content}}


YES_A = {"note_id": A.id, "confirm": True}
YES_B = {"note_id": B.id, "confirm": True}
KEY = ELICITATION_KEY

DELETE_A = Decision.Delete(A.id, A.identity)
DECLINED = Decision.Declined("declined")

DECISIONS: list[tuple[str, object, Outcome]] = [
    ("accept, confirm, first", accept(YES_A), DELETE_A),
    ("accept, confirm, second", accept(YES_B), Decision.Delete(B.id, B.identity)),
    (
        "accept, confirm false",
        accept({**YES_A, "confirm": False}),
        Decision.Declined("not-confirmed"),
    ),
    ("decline", {KEY: {"action": "decline"}}, DECLINED),
    ("decline, confirming content", {KEY: {"action": "decline", "content": YES_A}}, DECLINED),
    ("cancel", {KEY: {"action": "cancel"}}, Decision.Cancelled()),
    (
        "cancel, confirming content",
        {KEY: {"action": "cancel", "content": YES_A}},
        Decision.Cancelled(),
    ),
    ("other responses ignored", {**accept(YES_A), "other": {"action": "accept"}}, DELETE_A),
]


@pytest.mark.parametrize(("case", "responses", "outcome"), DECISIONS, ids=[d[0] for d in DECISIONS])
def test_a_well_formed_retry_maps_to_exactly_one_outcome(
    case: str, responses: dict[str, Any], outcome: Outcome
) -> None:
    validate(responses[ELICITATION_KEY], "ElicitResult")
    assert decide(CANDIDATES, responses, title=TITLE) == outcome


def test_decline_spends_the_nonce_and_cancel_leaves_a_retry_possible() -> None:
    assert Decision.Delete.spends_nonce is True
    assert Decision.Declined.spends_nonce is True
    assert Decision.Cancelled.spends_nonce is False
    assert (Decision.Declined.audit_outcome, Decision.Cancelled.audit_outcome) == (
        "declined",
        "cancelled",
    )


NOT_A_NOTE = "note_id does not match"
NOT_A_BOOL = "confirm does not match"

MISSING = {"input responses missing", "delete_choice missing", "delete_choice under another key"}
INVALID: list[tuple[str, object, str]] = [
    ("input responses missing", None, "no inputResponses"),
    ("input responses a list", [accept(YES_A)], "inputResponses must be an object"),
    ("delete_choice missing", {}, "no inputResponses.delete_choice"),
    ("delete_choice under another key", {"delete": {"action": "accept"}}, "no inputResponses.d"),
    ("delete_choice a string", {KEY: "accept"}, "not an object"),
    ("action missing", {KEY: {"content": YES_A}}, "action"),
    ("action unknown", {KEY: {"action": "approve"}}, "action"),
    ("action upper case", {KEY: {"action": "ACCEPT"}}, "action"),
    ("action not a string", {KEY: {"action": ["accept"]}}, "action"),
    ("accept without content", {KEY: {"action": "accept"}}, "without content"),
    ("accept with null content", accept(None), "without content"),
    ("content a list", accept([A.id, True]), "must be an object"),
    ("content a string", accept("yes"), "must be an object"),
    ("content empty", accept({}), "content.note_id is missing"),
    ("confirm missing", accept({"note_id": A.id}), "content.confirm is missing"),
    ("note_id missing", accept({"confirm": True}), "content.note_id is missing"),
    ("extra key", accept({**YES_A, "also": "x.md"}), "did not ask"),
    ("note_id not a candidate", accept({**YES_A, "note_id": "secret.md"}), NOT_A_NOTE),
    ("note_id escapes", accept({**YES_A, "note_id": "../outside.md"}), NOT_A_NOTE),
    ("note_id an int", accept({**YES_A, "note_id": 0}), NOT_A_NOTE),
    ("note_id a list", accept({**YES_A, "note_id": [A.id]}), NOT_A_NOTE),
    ("note_id null", accept({**YES_A, "note_id": None}), NOT_A_NOTE),
    ("confirm a string", accept({**YES_A, "confirm": "true"}), NOT_A_BOOL),
    ("confirm an int", accept({**YES_A, "confirm": 1}), NOT_A_BOOL),
    ("confirm null", accept({**YES_A, "confirm": None}), NOT_A_BOOL),
    ("refused choice", accept({"note_id": "secret.md", "confirm": False}), NOT_A_NOTE),
]


@pytest.mark.parametrize(("case", "responses", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_a_malformed_retry_is_response_invalid_never_a_deletion(
    case: str, responses: object, message: str
) -> None:
    with pytest.raises(ResponseInvalid, match=message) as info:
        decide(CANDIDATES, responses, title=TITLE)
    assert "secret.md" not in str(info.value) and "outside" not in str(info.value)
    # No answer at all (nothing under the form's key) is asked again; anything else is invalid.
    assert isinstance(info.value, ResponseMissing) is (case in MISSING)


@pytest.mark.parametrize(
    "content",
    [
        {"note_id": "secret.md", "confirm": True},
        {"note_id": 0, "confirm": True},
        {"note_id": A.id, "confirm": "true"},
        {"note_id": A.id},
    ],
)
def test_content_our_table_rejects_is_also_invalid_under_the_requested_schema(
    content: dict[str, Any],
) -> None:
    # The table and the schema sent to the client agree (the schema has no additionalProperties,
    # so extra keys are ours alone to refuse).
    schema = requested_schema(TITLE, CANDIDATES)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(content)
    with pytest.raises(ResponseInvalid):
        decide(CANDIDATES, accept(content), title=TITLE)


# --- sealed candidates ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "candidates",
    [
        None,
        [],
        "a.md",
        [{"id": "a.md"}],
        [{"id": "a.md", "identity": [1, 2, 3, 4]}],
        [{"id": "a.md", "identity": [1, 2, 3, 4, True]}],
        [{"id": "a.md", "identity": [1, 2, 3, 4, 5.0]}],
        [{"id": "", "identity": [1, 2, 3, 4, 5]}],
        [{"id": "a.md", "identity": [1, 2, 3, 4, 5], "extra": 1}],
        [{"id": "a.md", "identity": [1, 2, 3, 4, 5]}] * 2,
        [{"id": f"{i}.md", "identity": [1, 2, 3, 4, 5]} for i in range(MAX_CANDIDATES + 1)],
    ],
)
def test_malformed_sealed_candidates_fail_closed_as_state_rejected(candidates: object) -> None:
    with pytest.raises(StateRejected):
        candidates_from_payload({"candidates": candidates})
    state, bind = delete_state(StateSealer(KeyRing.ephemeral())), Binding("alice", {}, WS)
    token = state.sealer.seal(
        state.payload(bind, Progress(DELETE, Phase.CONFIRM, 1), {"candidates": candidates})
    )
    with pytest.raises(StateRejected):  # the request state parses them, once, on open
        state.open(bind, Echo(token, accept({"note_id": "a.md", "confirm": True})))


def test_candidates_round_trip_through_the_payload() -> None:
    assert candidates_from_payload(PAYLOAD) == CANDIDATES


# --- both rounds together -----------------------------------------------------------------------



def test_round_one_seals_what_the_retry_opens_and_decides_on() -> None:
    state = delete_state(StateSealer(KeyRing.ephemeral(), clock=Clock()))
    args = {"workspaceUri": WS, "title": TITLE}
    progress = Progress(DELETE)
    progress.fire(Event.BEGIN)
    token = state.seal(Binding("alice", args, WS), progress, candidate_claims(CANDIDATES))
    answer = accept({"note_id": B.id, "confirm": True})
    opened = state.open(Binding("alice", args, WS), Echo(token, answer))
    outcome = decide(opened.data, answer, title=args["title"])
    assert outcome == Decision.Delete(B.id, B.identity)
    other_title = {**args, "title": "Other"}
    with pytest.raises(StateRejected) as info:
        state.open(Binding("alice", other_title, WS), Echo(token, answer))
    assert info.value.reason == "args mismatch"
