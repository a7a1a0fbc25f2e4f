"""notes_summarize in process, with a scripted model answering its two sampling requests.

Rules: 2026-07-28 client/sampling and basic/patterns/mrtr (server requirements 4-7, error handling);
issue 7 (at most 3 candidate ids as a JSON array, strict validation, bounded bytes, a round limit,
includeContext "none", -32021 with {"sampling": {}}, changed arguments refused). Every response is
validated against the 2026-07-28 schema (wire.check_message); every test that refuses asserts the
note outside the workspace never reached a sampling request.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clock import Clock
from inprocess import InProcess
from policy_text import grant, principal, workspace, write_policy
from wire import check_message

from fs_notes.policy import Policy, Principal
from fs_notes.policy_file import load_policy
from fs_notes.rounds.seal import WIRE_MESSAGE, KeyRing
from fs_notes.tools import summarize

SAMPLING: dict[str, object] = {"sampling": {}}
KEYS = KeyRing([("k1", b"s" * 32)])



@dataclass
class World:
    ws: Path
    uri: str
    srv: InProcess
    me: Principal
    clock: Clock

    def call(
        self,
        query: str = "TPS report",
        caps: Any = SAMPLING,
        who: Principal | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        args = {"workspaceUri": self.uri, "query": query}
        response = self.srv.call(who or self.me, "notes_summarize", args, caps, **extra)
        check_message(response, "tools/call")
        assert "SECRET" not in json.dumps(response)
        return response


def _policy(tmp: Path, ws: Path) -> Policy:
    path = write_policy(
        tmp / "policy.toml",
        principal("me"),
        principal("eve", token_sha256="ab" * 32),
        workspace("notes", ws),
        grant("me", "notes", "read"),
        grant("eve", "notes", "read"),
    )
    return load_policy(str(path))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    ws = tmp_path / "notes"
    (ws / "projects").mkdir(parents=True)
    (ws / "projects" / "tps.md").write_text(
        "# TPS report\nThe old TPS report, cover sheet missing.\n"
    )
    (ws / "tps-2025.md").write_text("# TPS report 2025\nThe new report.\n")
    (ws / "memo.md").write_text("# Memo\nRemember the TPS cover sheets.\n")
    (ws / "groceries.md").write_text("# Groceries\nmilk, eggs\n")
    (tmp_path / "secret.md").write_text("# TPS report\nSECRET\n")
    clock = Clock()
    policy = _policy(tmp_path, ws)
    srv = InProcess(policy, tmp_path, keyring=KEYS, clock=clock)
    try:
        yield World(
            ws, "file://" + urllib.parse.quote(str(ws)), srv, policy.local_principal(), clock
        )
    finally:
        srv.close()


def _model(text: str, model: str = "scripted") -> dict[str, Any]:
    return {"role": "assistant", "content": {"type": "text", "text": text}, "model": model}


def _pick(world: World, answer: Any, state: str, **kw: Any) -> dict[str, Any]:
    return world.call(inputResponses={"pick_notes": answer}, requestState=state, **kw)


def _round1(world: World) -> dict[str, Any]:
    result: dict[str, Any] = world.call()["result"]
    assert result["resultType"] == "input_required"
    return result


def _candidates(request: dict[str, Any]) -> list[str]:
    text = request["params"]["messages"][0]["content"]["text"]
    return [json.loads(line)["id"] for line in text.splitlines() if line.startswith("{")]


def test_two_sampling_rounds_give_a_summary_with_the_chosen_ids(world: World) -> None:
    first = _round1(world)
    pick = first["inputRequests"]["pick_notes"]
    assert pick["method"] == "sampling/createMessage"
    params = pick["params"]
    assert params["includeContext"] == "none"
    assert [h["name"] for h in params["modelPreferences"]["hints"]]
    assert params["maxTokens"] > 0 and "JSON array" in params["systemPrompt"]
    # title hits first, then body hits; the unrelated note is not offered
    assert _candidates(pick) == ["projects/tps.md", "tps-2025.md", "memo.md"]
    second = _pick(world, _model('["projects/tps.md", "memo.md"]'), first["requestState"])["result"]
    assert second["resultType"] == "input_required"
    assert second["requestState"] != first["requestState"]
    ask = second["inputRequests"]["summarize_notes"]["params"]
    assert ask["includeContext"] == "none"
    text = ask["messages"][0]["content"]["text"]
    assert "cover sheet missing" in text and "Remember the TPS cover sheets" in text
    assert "The new report" not in text  # only the chosen notes are read out
    done = world.call(
        inputResponses={"summarize_notes": _model("The TPS report lacks its cover sheet.", "m-1")},
        requestState=second["requestState"],
    )["result"]
    assert done["resultType"] == "complete" and "isError" not in done
    assert done["structuredContent"] == {
        "query": "TPS report",
        "chosen": ["projects/tps.md", "memo.md"],
        "summary": "The TPS report lacks its cover sheet.",
        "model": "m-1",
    }


def test_a_fenced_array_is_accepted_and_an_empty_one_ends_without_a_second_round(
    world: World,
) -> None:
    state = _round1(world)["requestState"]
    fenced = _pick(world, _model('```json\n["memo.md"]\n```'), state)["result"]
    assert fenced["resultType"] == "input_required"
    empty = _pick(world, _model("[]"), state)["result"]
    assert empty["resultType"] == "complete"
    assert (
        empty["structuredContent"]["chosen"] == [] and empty["structuredContent"]["summary"] == ""
    )


@pytest.mark.parametrize(
    "text",
    [
        "projects/tps.md",  # not JSON
        '["projects/tps.md"',  # truncated JSON
        'Sure! Here you go: ["memo.md"]',  # prose around the array
        '{"ids": ["memo.md"]}',  # not an array
        '["memo.md", 3]',  # not all strings
        "[NaN]",
        '["memo.md", "memo.md"]',  # twice
        '["memo.md", "tps-2025.md", "projects/tps.md", "memo.md"]',
    ],
)
def test_an_answer_that_is_not_a_json_array_of_candidate_ids_is_32602(
    world: World, text: str
) -> None:
    state = _round1(world)["requestState"]
    refused = _pick(world, _model(text), state)
    assert refused["error"]["code"] == -32602
    assert text not in refused["error"]["message"]  # the model's text is never echoed


@pytest.mark.parametrize(
    "foreign",
    [
        "../secret.md",
        "/etc/passwd",
        "projects/../../secret.md",
        "groceries.md",  # a real note, but not offered as a candidate
        "projects/TPS.md",
        "projects/tps.md ",
    ],
)
def test_a_foreign_id_is_refused_and_never_read(world: World, foreign: str) -> None:
    state = _round1(world)["requestState"]
    refused = _pick(world, _model(json.dumps(["memo.md", foreign])), state)
    assert refused["error"]["code"] == -32602
    assert "not among the candidates" in refused["error"]["message"]


@pytest.mark.parametrize(
    "answer",
    [
        "[]",  # not an object
        {"role": "user", "content": {"type": "text", "text": "[]"}, "model": "m"},
        {"role": "assistant", "content": {"type": "text", "text": "[]"}},  # no model
        {
            "role": "assistant",
            "content": {"type": "image", "data": "AA==", "mimeType": "image/png"},
            "model": "m",
        },
        {"role": "assistant", "content": [], "model": "m"},
        {"role": "assistant", "content": {"type": "text", "text": " " * 5000 + "[]"}, "model": "m"},
    ],
)
def test_a_sampling_result_that_is_not_an_assistant_text_is_32602(
    world: World, answer: Any
) -> None:
    state = _round1(world)["requestState"]
    assert _pick(world, answer, state)["error"]["code"] == -32602


def test_text_blocks_in_a_list_are_joined(world: World) -> None:
    state = _round1(world)["requestState"]
    blocks = [{"type": "text", "text": '["me'}, {"type": "text", "text": 'mo.md"]'}]
    answer = {"role": "assistant", "content": blocks, "model": "m"}
    assert _pick(world, answer, state)["result"]["resultType"] == "input_required"


def test_without_sampling_the_answer_is_32021_naming_sampling(world: World) -> None:
    no_sampling: list[dict[str, object]] = [{}, {"elicitation": {"form": {}}}, {"sampling": True}]
    for caps in no_sampling:
        refused = world.call(caps=caps)
        assert refused["error"]["code"] == -32021
        assert refused["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}


def test_a_retry_without_answers_is_asked_again_until_the_round_limit(world: World) -> None:
    state = _round1(world)["requestState"]
    for round_no in range(2, summarize.MAX_ROUNDS + 1):
        again = world.call(requestState=state)["result"]
        assert again["resultType"] == "input_required", round_no
        assert "pick_notes" in again["inputRequests"]
        state = again["requestState"]
    refused = world.call(requestState=state)
    assert refused["error"]["code"] == -32602
    assert "rounds" in refused["error"]["message"]


def test_the_round_limit_counts_the_summarize_round_too(world: World) -> None:
    state = _round1(world)["requestState"]
    for _ in range(summarize.MAX_ROUNDS - 2):
        state = world.call(requestState=state)["result"]["requestState"]
    last = _pick(world, _model('["memo.md"]'), state)["result"]
    assert "summarize_notes" in last["inputRequests"]  # round MAX_ROUNDS
    assert world.call(requestState=last["requestState"])["error"]["code"] == -32602
    done = world.call(
        inputResponses={"summarize_notes": _model("ok")}, requestState=last["requestState"]
    )
    assert done["result"]["structuredContent"]["chosen"] == ["memo.md"]


@pytest.mark.parametrize(
    "change",
    [
        {"query": "TPS reports"},
        {"who": Principal("eve")},
    ],
)
def test_changed_arguments_or_another_principal_get_the_fixed_state_refusal(
    world: World, change: dict[str, Any]
) -> None:
    state = _round1(world)["requestState"]
    refused = _pick(world, _model('["memo.md"]'), state, **change)
    assert refused["error"] == {"code": -32602, "message": WIRE_MESSAGE}


def test_a_state_of_one_phase_is_refused_in_the_other(world: World) -> None:
    pick_state = _round1(world)["requestState"]
    swapped = world.call(
        inputResponses={"summarize_notes": _model("made up")}, requestState=pick_state
    )
    assert swapped["error"] == {"code": -32602, "message": WIRE_MESSAGE}
    summary_state = _pick(world, _model('["memo.md"]'), pick_state)["result"]["requestState"]
    replayed = _pick(world, _model('["projects/tps.md"]'), summary_state)
    assert replayed["error"] == {"code": -32602, "message": WIRE_MESSAGE}


def test_tampered_and_expired_states_are_refused(world: World) -> None:
    state = _round1(world)["requestState"]
    head, body, mac = state.rsplit(".", 2)
    tampered = f"{head}.{body[:-2]}AA.{mac}"
    assert _pick(world, _model('["memo.md"]'), tampered)["error"]["message"] == WIRE_MESSAGE
    world.clock.now += 301
    assert _pick(world, _model('["memo.md"]'), state)["error"]["message"] == WIRE_MESSAGE


def test_note_excerpts_are_bounded_per_note_and_in_total(world: World) -> None:
    for name in ("a.md", "b.md", "c.md"):
        (world.ws / name).write_text("# TPS report " + name + "\n" + "é" * 40_000)
    state = world.call()["result"]["requestState"]
    second = _pick(world, _model('["a.md", "b.md", "c.md"]'), state)["result"]
    text = second["inputRequests"]["summarize_notes"]["params"]["messages"][0]["content"]["text"]
    assert text.count("[truncated]") == 3
    sections = text.split("--- note ")[1:]
    excerpts = [s.split("---\n", 1)[1].rstrip("\n") for s in sections]
    sizes = [len(e.encode()) for e in excerpts]
    assert all(summarize.NOTE_BYTES - 2 <= n <= summarize.NOTE_BYTES for n in sizes[:2]), sizes
    assert summarize.TOTAL_BYTES - 4 <= sum(sizes) <= summarize.TOTAL_BYTES, sizes
    assert "\ufffd" not in text  # cut on a character boundary


def test_a_chosen_note_that_vanished_is_left_out(world: World) -> None:
    state = _round1(world)["requestState"]
    (world.ws / "memo.md").unlink()
    second = _pick(world, _model('["memo.md", "tps-2025.md"]'), state)["result"]
    text = second["inputRequests"]["summarize_notes"]["params"]["messages"][0]["content"]["text"]
    assert '"tps-2025.md"' in text and '"memo.md"' not in text
    (world.ws / "tps-2025.md").unlink()
    gone = _pick(world, _model('["memo.md", "tps-2025.md"]'), state)["result"]
    assert gone["isError"] is True


def test_a_query_no_note_mentions_is_a_tool_error(world: World) -> None:
    result = world.call(query="zebra")["result"]
    assert result["isError"] is True and "zebra" in result["content"][0]["text"]
