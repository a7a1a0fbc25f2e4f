"""Multi-round requests (fs_notes/rounds): the one table of phases, and the request state.

Every step the table lacks raises and changes nothing (the positive control: every step it has
succeeds and lands where the table says); the round bound is exact; the boot-id claim is sealed
and checked by the request state, so a state from another boot, without the claim or with the
claim altered is refused with the one fixed wire error; the round is chosen from the parsed
params; the sealed candidates are parsed once per retry.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from inprocess import InProcess

from fs_notes.confirm.flow import Candidate, candidate_claims, candidates_from_payload
from fs_notes.fs import Identity
from fs_notes.policy import Policy
from fs_notes.protocol.errors import INVALID_PARAMS
from fs_notes.protocol.models import CallToolParams
from fs_notes.rounds import request
from fs_notes.rounds.boot import this_boot
from fs_notes.rounds.phases import (
    DELETE,
    FLOWS,
    LEGACY,
    SUMMARIZE,
    TRANSITIONS,
    Event,
    Flow,
    IllegalTransition,
    Phase,
    Progress,
    TooManyRounds,
)
from fs_notes.rounds.request import Binding, Echo, RequestState
from fs_notes.rounds.seal import WIRE_MESSAGE, KeyRing, StateRejected, StateSealer, refuse_state

KEYS = KeyRing([("k1", b"k" * 32)])
WS = "file:///home/alice/notes"
ARGS = {"workspaceUri": WS, "title": "TPS report"}
BIND = Binding("alice", ARGS, WS)
CANDIDATES = [Candidate("tps.md", Identity(1, 2, 3, 4, 5))]
ANSWER = {"delete_choice": {"action": "accept", "content": {"note_id": "tps.md", "confirm": True}}}


def _all_steps() -> list[tuple[Phase, Event]]:
    return [(p, e) for p in Phase for e in Event]


def _legal(flow: Flow, phase: Phase, event: Event) -> bool:
    return event in TRANSITIONS[flow.name].get(phase, {})


# --- the table ----------------------------------------------------------------------------------


@pytest.mark.parametrize("flow", FLOWS.values(), ids=list(FLOWS))
def test_every_step_missing_from_the_table_raises_and_changes_nothing(flow: Flow) -> None:
    illegal = [(p, e) for p, e in _all_steps() if not _legal(flow, p, e)]
    assert len(illegal) > len(Event)  # DONE alone has no way out on any event
    for phase, event in illegal:
        if phase not in TRANSITIONS[flow.name] and phase is not Phase.DONE:
            with pytest.raises(ValueError):  # a phase of another flow cannot even be entered
                Progress(flow, phase, 1)
            continue
        progress = Progress(flow, phase, 1)
        with pytest.raises(IllegalTransition) as info:
            progress.fire(event)
        assert (progress.phase, progress.rounds) == (phase, 1), (phase, event)
        assert (info.value.flow, info.value.phase, info.value.event) == (flow.name, phase, event)


@pytest.mark.parametrize("flow", FLOWS.values(), ids=list(FLOWS))
def test_every_step_in_the_table_succeeds_and_lands_where_the_table_says(flow: Flow) -> None:
    legal = [(p, e) for p, e in _all_steps() if _legal(flow, p, e)]
    assert legal
    for phase, event in legal:
        progress = Progress(flow, phase, 1)
        target = TRANSITIONS[flow.name][phase][event]
        assert progress.fire(event) is target
        assert progress.phase is target
        assert progress.rounds == 1 + (target in flow.counted)


def test_the_three_flows_walk_their_happy_paths() -> None:
    delete = Progress(DELETE)
    assert [delete.fire(e) for e in (Event.BEGIN, Event.UNANSWERED, Event.FINISHED)] == [
        Phase.CONFIRM, Phase.CONFIRM, Phase.DONE,
    ]  # fmt: skip
    summarize = Progress(SUMMARIZE)
    steps = (Event.BEGIN, Event.UNANSWERED, Event.ANSWERED, Event.FINISHED)
    assert [summarize.fire(e) for e in steps] == [
        Phase.PICK, Phase.PICK, Phase.SUMMARIZE, Phase.DONE,
    ]  # fmt: skip
    assert summarize.rounds == 3
    legacy = Progress(LEGACY)
    steps = (Event.BEGIN, Event.INPUT_REQUIRED, Event.ANSWERED, Event.FINISHED)
    assert [legacy.fire(e) for e in steps] == [
        Phase.HANDLING, Phase.ASKING, Phase.HANDLING, Phase.DONE,
    ]  # fmt: skip


@pytest.mark.parametrize("flow", [SUMMARIZE, LEGACY], ids=["summarize", "legacy"])
def test_the_round_bound_is_exact_and_passing_it_changes_nothing(flow: Flow) -> None:
    assert flow.max_rounds is not None
    again = Event.UNANSWERED if flow is SUMMARIZE else Event.ANSWERED
    progress = Progress(flow)
    progress.fire(Event.BEGIN)
    while progress.rounds < flow.max_rounds:
        if flow is LEGACY:
            progress.fire(Event.INPUT_REQUIRED)
        progress.fire(again)
    assert progress.rounds == flow.max_rounds  # the last round allowed was taken
    if flow is LEGACY:
        progress.fire(Event.INPUT_REQUIRED)
    before = (progress.phase, progress.rounds)
    with pytest.raises(TooManyRounds):
        progress.fire(again)
    assert (progress.phase, progress.rounds) == before
    if flow is SUMMARIZE:  # still usable: a step that counts no round is taken
        assert progress.fire(Event.FINISHED) is Phase.DONE


def test_the_table_cannot_be_changed_at_run_time() -> None:
    with pytest.raises(TypeError):
        TRANSITIONS["notes_delete"][Phase.CONFIRM][Event.BEGIN] = Phase.DONE  # type: ignore[index]
    with pytest.raises(TypeError):
        TRANSITIONS["evil"] = {}  # type: ignore[index]
    assert set(FLOWS) == set(TRANSITIONS) == {"notes_delete", "notes_summarize", "legacy"}


def test_the_asked_keys_are_the_wire_keys_the_tools_use() -> None:
    assert dict(DELETE.asks) == {Phase.CONFIRM: "delete_choice"}
    assert dict(SUMMARIZE.asks) == {Phase.PICK: "pick_notes", Phase.SUMMARIZE: "summarize_notes"}


# --- the request state: the boot-id claim ---------------------------------------------------


def _delete_state(sealer: StateSealer | None = None) -> RequestState[list[Candidate]]:
    return RequestState(
        sealer or StateSealer(KEYS),
        DELETE,
        lambda _phase, claims: candidates_from_payload(claims),
        bind_boot=True,
    )


def _sealed(state: RequestState[Any], **over: Any) -> str:
    payload = state.payload(BIND, Progress(DELETE, Phase.CONFIRM, 1), candidate_claims(CANDIDATES))
    payload.update(over)
    for name in [k for k, v in over.items() if v is None]:
        del payload[name]
    return state.sealer.seal(payload)


def _refused(state: RequestState[Any], token: object) -> tuple[str, dict[str, Any]]:
    """(reason, wire error) of a refused open."""
    with pytest.raises(StateRejected) as info:
        state.open(BIND, Echo(token, ANSWER))
    assert str(info.value) == WIRE_MESSAGE
    return info.value.reason, refuse_state(info.value.reason).to_error()


FIXED = {"code": INVALID_PARAMS, "message": WIRE_MESSAGE}


def _unb64u(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _claims(token: str) -> dict[str, Any]:
    """The payload of a token, opened with the test's key (it is encrypted: rounds/seal.py)."""
    version, kid, body, tag = token.split(".")
    claims: dict[str, Any] = json.loads(
        KEYS.open_box(kid, f"{version}.{kid}".encode(), _unb64u(body), _unb64u(tag))
    )
    return claims


def test_the_boot_id_is_sealed_into_every_delete_state() -> None:
    state = _delete_state()
    claims = _claims(_sealed(state))
    assert claims["boot"] == this_boot()
    assert state.expectation(BIND, None).boot == this_boot()
    opened = state.open(BIND, Echo(_sealed(state), ANSWER))  # positive control
    assert opened.data == CANDIDATES and opened.phase is Phase.CONFIRM


def test_a_state_from_another_boot_is_refused_by_the_request_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = _delete_state()
    token = _sealed(state)
    monkeypatch.setattr(request, "this_boot", lambda: "another-boot")
    assert _refused(state, token) == ("boot mismatch", FIXED)


@pytest.mark.parametrize("boot", [None, "forged-boot", ""], ids=["missing", "other", "empty"])
def test_a_state_without_this_boot_claim_is_refused(boot: str | None) -> None:
    state = _delete_state()
    assert _refused(state, _sealed(state, boot=boot)) == ("boot mismatch", FIXED)


def test_a_boot_claim_altered_in_the_token_is_refused() -> None:
    state = _delete_state()
    token = _sealed(state)
    version, kid, _body, tag = token.split(".")
    claims = _claims(token)
    claims["boot"] = "another-boot"
    text = json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()
    # encrypted again under a key the server does not hold, with the genuine token's tag
    box, _ = KeyRing([(kid, b"m" * 32)]).seal_box(kid, f"{version}.{kid}".encode(), text)
    forged = base64.urlsafe_b64encode(box).rstrip(b"=").decode()
    assert _refused(state, f"{version}.{kid}.{forged}.{tag}") == ("bad mac", FIXED)


def test_summarize_states_carry_no_boot_claim_and_are_not_asked_for_one() -> None:
    state = RequestState(StateSealer(KEYS), SUMMARIZE, lambda _p, c: c.get("chosen"))
    assert "boot" not in state.payload(BIND, Progress(SUMMARIZE, Phase.PICK, 1), {})
    assert state.expectation(BIND, None).boot is None


# --- the request state: phase, round and data claims --------------------------------------------


def test_own_claims_cannot_be_set_by_a_tool_and_states_are_sealed_only_while_asking() -> None:
    state = _delete_state()
    with pytest.raises(ValueError):
        state.payload(BIND, Progress(DELETE, Phase.CONFIRM, 1), {"boot": "mine"})
    with pytest.raises(ValueError):
        state.payload(BIND, Progress(DELETE, Phase.DONE, 1), candidate_claims(CANDIDATES))


def test_the_answer_names_the_phase_expected() -> None:
    state = RequestState(StateSealer(KEYS), SUMMARIZE, lambda _p, c: c.get("chosen"))
    expect = state.expectation
    assert expect(BIND, None).phase == frozenset({"pick", "summarize"})
    assert expect(BIND, {"other": 1}).phase == frozenset({"pick", "summarize"})
    assert expect(BIND, {"summarize_notes": {}}).phase == frozenset({"summarize"})
    assert expect(BIND, {"pick_notes": {}, "summarize_notes": {}}).phase == frozenset({"pick"})


@pytest.mark.parametrize("rounds", [0, 5, "1", None])
def test_a_round_claim_out_of_bounds_is_refused(rounds: object) -> None:
    state = RequestState(StateSealer(KEYS), SUMMARIZE, lambda _p, c: c.get("chosen"))
    payload = state.payload(BIND, Progress(SUMMARIZE, Phase.PICK, 1), {"candidates": ["a.md"]})
    assert state.open(BIND, Echo(state.sealer.seal(payload), None)).progress.rounds == 1
    payload["round"] = rounds
    with pytest.raises(StateRejected) as info:
        state.open(BIND, Echo(state.sealer.seal(payload), None))
    assert info.value.reason == "round out of bounds"


def test_the_data_is_parsed_once_per_open() -> None:
    calls: list[tuple[Phase, Mapping[str, Any]]] = []

    def parse(phase: Phase, claims: Mapping[str, Any]) -> list[Candidate]:
        calls.append((phase, claims))
        return candidates_from_payload(claims)

    state = RequestState(StateSealer(KEYS), DELETE, parse, bind_boot=True)
    opened = state.open(BIND, Echo(_sealed(_delete_state(state.sealer)), ANSWER))
    assert len(calls) == 1 and calls[0][0] is Phase.CONFIRM
    assert opened.data == CANDIDATES and opened.answer == ANSWER["delete_choice"]


# --- the round is chosen from the parsed params ------------------------------------------------


def test_the_round_is_chosen_from_the_parsed_params() -> None:
    first = CallToolParams.model_validate({"name": "notes_delete", "inputResponses": ANSWER})
    assert Echo.of(first) is None  # answers without a state: a first round
    null = CallToolParams.model_validate({"name": "notes_delete", "requestState": None})
    assert Echo.of(null) == Echo(None, None)  # named, whatever its value: a retry (refused)
    retry = CallToolParams.model_validate(
        {"name": "notes_delete", "requestState": "v1.x", "inputResponses": ANSWER}
    )
    assert Echo.of(retry) == Echo("v1.x", ANSWER)


# --- through the tool ----------------------------------------------------------------------------


def test_a_delete_parses_its_sealed_candidates_once_per_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fs_notes.tools import delete

    parsed: list[object] = []

    def counting(payload: Mapping[str, Any]) -> list[Candidate]:
        parsed.append(payload)
        return candidates_from_payload(payload)

    monkeypatch.setattr(delete, "candidates_from_payload", counting)
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "tps.md").write_text("# TPS report\n")
    uri = "file://" + urllib.parse.quote(str(ws))
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    me = policy.local_principal()
    srv = InProcess(policy, tmp_path, keyring=KEYS, clock=lambda: 1_800_000_000.0)
    try:
        args = {"workspaceUri": uri, "title": "TPS report"}
        state = srv.call(me, "notes_delete", args)["result"]["requestState"]
        assert parsed == []
        again = srv.call(me, "notes_delete", args, requestState=state)["result"]
        assert again["resultType"] == "input_required" and len(parsed) == 1
        done = srv.call(me, "notes_delete", args, inputResponses=ANSWER, requestState=state)
        assert done["result"]["structuredContent"]["deleted"] == "tps.md"
        assert len(parsed) == 2
        null = srv.call(me, "notes_delete", args, requestState=None)
        assert null["error"] == FIXED
    finally:
        srv.close()
