"""notes_delete over the real protocol: every checkpoint of the confirmation flow.

Spec: basic/patterns/mrtr, client/elicitation; issue #4. Each response is validated against the
official schema (wire.check_message); each refusal asserts that nothing was deleted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from policy_text import two_principals_share_notes
from trees import files
from wire import HttpServer, StdioServer, call_tool, child_env, http_server, stdio_server

FORM: dict[str, object] = {"elicitation": {"form": {}}}
KEY = "k1:" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVowMTIzNDU2Nzg5YWJjZGVm"  # 40+ bytes, base64


def _uri(ws: Path) -> str:
    return "file://" + urllib.parse.quote(str(ws))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    files(tmp_path, {"outside/secret.md": "# TPS report\nSECRET\n"})
    return files(tmp_path / "notes", {
        "old/tps.md": "# TPS report\nold\n",
        "tps-2025.md": "# TPS report 2025\nnew\n",
        "other.md": "# Groceries\n",
    })  # fmt: skip


@pytest.fixture
def keyfile(tmp_path: Path) -> Path:
    k = tmp_path / "state.key"
    k.write_text(KEY + "\n")
    k.chmod(0o600)
    return k


@pytest.fixture
def server(ws: Path, tmp_path: Path, keyfile: Path) -> Iterator[StdioServer]:
    with stdio_server(
        str(ws),
        "--state-key-file",
        str(keyfile),
        "--replay-db",
        str(tmp_path / "replay.db"),
        "--audit-log",
        str(tmp_path / "audit.jsonl"),
    ) as s:
        yield s


def _first(
    server: StdioServer | HttpServer,
    ws: Path,
    title: str = "TPS report",
    caps: Any = FORM,
    id: int = 1,
) -> dict[str, Any]:
    return server.ask(
        call_tool(id, "notes_delete", {"workspaceUri": _uri(ws), "title": title}, caps)
    )


def _retry(
    server: StdioServer | HttpServer,
    ws: Path,
    state: Any,
    response: Any,
    title: str = "TPS report",
    id: int = 2,
) -> dict[str, Any]:
    return server.ask(
        call_tool(
            id,
            "notes_delete",
            {"workspaceUri": _uri(ws), "title": title},
            FORM,
            inputResponses={"delete_choice": response},
            requestState=state,
        )
    )


def _accept(note_id: str, confirm: bool = True) -> dict[str, Any]:
    return {"action": "accept", "content": {"note_id": note_id, "confirm": confirm}}


def _audit(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_round_one_asks_with_a_form_naming_every_candidate(server: StdioServer, ws: Path) -> None:
    result = _first(server, ws)["result"]
    assert result["resultType"] == "input_required"
    request = result["inputRequests"]["delete_choice"]
    assert request["method"] == "elicitation/create"
    params = request["params"]
    assert params["mode"] == "form" and "TPS report" in params["message"]
    schema = params["requestedSchema"]
    assert set(schema["required"]) == {"note_id", "confirm"}
    ids = [o["const"] for o in schema["properties"]["note_id"]["oneOf"]]
    assert ids == ["old/tps.md", "tps-2025.md"]  # exact title first, never the outside file
    assert schema["properties"]["confirm"]["type"] == "boolean"
    assert isinstance(result["requestState"], str)
    assert (ws / "old" / "tps.md").exists() and (ws / "tps-2025.md").exists()


def test_even_a_single_candidate_is_asked_about(server: StdioServer, ws: Path) -> None:
    result = _first(server, ws, title="groceries")["result"]
    assert result["resultType"] == "input_required"
    assert (ws / "other.md").exists()


def test_accepted_confirmed_retry_deletes_exactly_the_chosen_note(
    server: StdioServer, ws: Path, tmp_path: Path
) -> None:
    state = _first(server, ws)["result"]["requestState"]
    done = _retry(server, ws, state, _accept("old/tps.md"))["result"]
    assert done["resultType"] == "complete" and done.get("isError") is not True
    assert done["structuredContent"] == {"deleted": "old/tps.md", "outcome": "deleted"}
    assert not (ws / "old" / "tps.md").exists()
    assert (ws / "tps-2025.md").exists() and (tmp_path / "outside" / "secret.md").exists()
    entry = _audit(tmp_path)[-1]
    assert entry["outcome"] == "deleted" and entry["note_id"] == "old/tps.md"
    assert "SECRET" not in (tmp_path / "audit.jsonl").read_text()


def test_a_spent_state_is_refused_the_second_time(
    server: StdioServer, ws: Path, tmp_path: Path
) -> None:
    state = _first(server, ws)["result"]["requestState"]
    _retry(server, ws, state, _accept("old/tps.md"))
    (ws / "old" / "tps.md").write_text("# TPS report\nrecreated\n")
    again = _retry(server, ws, state, _accept("tps-2025.md"), id=3)
    assert again["error"]["code"] == -32602
    assert again["error"]["message"] == "requestState is invalid or expired"
    assert (ws / "tps-2025.md").exists() and (ws / "old" / "tps.md").exists()


@pytest.mark.parametrize(
    "response,outcome",
    [
        ({"action": "decline"}, "declined"),
        (_accept("old/tps.md", confirm=False), "declined"),
    ],
)
def test_decline_is_a_complete_refusal_and_spends_the_nonce(
    server: StdioServer, ws: Path, response: Any, outcome: str
) -> None:
    state = _first(server, ws)["result"]["requestState"]
    done = _retry(server, ws, state, response)["result"]
    assert done["resultType"] == "complete" and done.get("isError") is not True
    assert done["structuredContent"]["outcome"] == outcome
    assert (ws / "old" / "tps.md").exists()
    again = _retry(server, ws, state, _accept("old/tps.md"), id=3)
    assert again["error"]["code"] == -32602
    assert (ws / "old" / "tps.md").exists()


def test_cancel_deletes_nothing_and_the_state_can_be_retried(server: StdioServer, ws: Path) -> None:
    state = _first(server, ws)["result"]["requestState"]
    cancelled = _retry(server, ws, state, {"action": "cancel"})["result"]
    assert cancelled["structuredContent"]["outcome"] == "cancelled"
    assert (ws / "old" / "tps.md").exists()
    done = _retry(server, ws, state, _accept("old/tps.md"), id=3)["result"]
    assert done["structuredContent"]["deleted"] == "old/tps.md"


@pytest.mark.parametrize(
    "response",
    [
        {},
        {"action": "accept"},
        {"action": "accept", "content": {}},
        {"action": "accept", "content": {"note_id": "old/tps.md"}},
        {"action": "accept", "content": {"note_id": "old/tps.md", "confirm": "yes"}},
        {"action": "accept", "content": {"note_id": "other.md", "confirm": True}},
        {"action": "accept", "content": {"note_id": "../outside/secret.md", "confirm": True}},
        {"action": "accept", "content": {"note_id": "old/tps.md", "confirm": True, "also": "x"}},
        {"action": "maybe"},
    ],
)
def test_missing_or_invalid_content_is_never_consent(
    server: StdioServer, ws: Path, tmp_path: Path, response: Any
) -> None:
    state = _first(server, ws)["result"]["requestState"]
    answer = _retry(server, ws, state, response)
    assert answer["error"]["code"] == -32602
    assert sorted(p.name for p in ws.rglob("*.md")) == ["other.md", "tps-2025.md", "tps.md"]
    assert (tmp_path / "outside" / "secret.md").exists()


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s[:-2] + ("A" if s[-2] != "A" else "B") + s[-1],
        lambda s: s[: len(s) // 2],
        lambda s: s + "x",
        lambda s: s.replace("v2.", "v3.", 1),
        lambda s: 12345,
        lambda s: "",
    ],
)
def test_a_tampered_state_is_refused_with_one_fixed_message(
    server: StdioServer, ws: Path, mutate: Any
) -> None:
    state = _first(server, ws)["result"]["requestState"]
    answer = _retry(server, ws, mutate(state), _accept("old/tps.md"))
    assert answer["error"] == {"code": -32602, "message": "requestState is invalid or expired"}
    assert (ws / "old" / "tps.md").exists()


def test_a_changed_title_cannot_reuse_the_confirmation(server: StdioServer, ws: Path) -> None:
    state = _first(server, ws)["result"]["requestState"]
    answer = _retry(server, ws, state, _accept("tps-2025.md"), title="TPS report 2025")
    assert answer["error"] == {"code": -32602, "message": "requestState is invalid or expired"}
    assert (ws / "tps-2025.md").exists()


@pytest.mark.parametrize("caps", [{}, {"sampling": {}}])
def test_without_elicitation_the_person_is_asked_outside_the_client(
    server: StdioServer, ws: Path, caps: Any
) -> None:
    """The default `approval = "either"`: a client without forms gets the out-of-band path
    (issue 30 item 1; tests/test_approval.py), in words, and nothing is deleted by asking."""
    answer = _first(server, ws, caps=caps)["result"]
    assert answer["structuredContent"]["outcome"] == "approval-needed"
    approval = answer["structuredContent"]["approval"]
    assert approval["url"].startswith("http://127.0.0.1:") and approval["command"].startswith(
        "fs-notes approve"
    )
    assert "an AI cannot give it" in answer["content"][0]["text"]
    assert (ws / "old" / "tps.md").exists() and (ws / "tps-2025.md").exists()


def test_a_client_with_url_elicitation_only_is_sent_to_the_approval_page(
    server: StdioServer, ws: Path
) -> None:
    answer = _first(server, ws, caps={"elicitation": {"url": {}}})["result"]
    assert answer["resultType"] == "input_required"
    params = answer["inputRequests"]["delete_approval"]["params"]
    assert params["mode"] == "url" and params["url"].startswith("http://127.0.0.1:")
    assert (ws / "old" / "tps.md").exists() and (ws / "tps-2025.md").exists()


@pytest.mark.parametrize("caps", [{"elicitation": {}}, {"elicitation": {"form": {}}}])
def test_empty_or_explicit_form_capability_is_accepted(
    server: StdioServer, ws: Path, caps: Any
) -> None:
    assert _first(server, ws, caps=caps)["result"]["resultType"] == "input_required"


def test_no_match_and_too_many_matches_are_tool_errors(server: StdioServer, ws: Path) -> None:
    none = _first(server, ws, title="nothing like this")["result"]
    assert none["isError"] is True
    for i in range(25):
        (ws / f"many-{i}.md").write_text("# Many\n")
    many = _first(server, ws, title="many", id=2)["result"]
    assert many["isError"] is True and "more specific" in many["content"][0]["text"]


def test_a_note_replaced_between_rounds_is_not_deleted(server: StdioServer, ws: Path) -> None:
    state = _first(server, ws)["result"]["requestState"]
    target = ws / "old" / "tps.md"
    target.unlink()
    target.write_text("# TPS report\nold\n")  # same name and content, another file
    answer = _retry(server, ws, state, _accept("old/tps.md"))["result"]
    assert answer["isError"] is True
    assert target.read_text() == "# TPS report\nold\n"


def test_a_note_swapped_for_a_symlink_to_outside_is_not_deleted(
    server: StdioServer, ws: Path, tmp_path: Path
) -> None:
    state = _first(server, ws)["result"]["requestState"]
    target = ws / "old" / "tps.md"
    target.unlink()
    target.symlink_to(tmp_path / "outside" / "secret.md")
    answer = _retry(server, ws, state, _accept("old/tps.md"))["result"]
    assert answer["isError"] is True
    assert (tmp_path / "outside" / "secret.md").read_text() == "# TPS report\nSECRET\n"
    assert target.is_symlink()


def test_a_folder_swapped_for_a_symlink_between_rounds_deletes_nothing(
    server: StdioServer, ws: Path, tmp_path: Path
) -> None:
    state = _first(server, ws)["result"]["requestState"]
    (ws / "old").rename(tmp_path / "moved")
    (tmp_path / "outside" / "tps.md").write_text("# TPS report\n")
    (ws / "old").symlink_to(tmp_path / "outside")
    answer = _retry(server, ws, state, _accept("old/tps.md"))["result"]
    assert answer["isError"] is True
    assert (tmp_path / "outside" / "tps.md").exists() and (tmp_path / "moved" / "tps.md").exists()


def test_another_principal_cannot_use_the_confirmation_over_http(
    ws: Path, tmp_path: Path, keyfile: Path
) -> None:
    import hashlib

    alice, bob = "alice-token-0123456789", "bob-token-0123456789ab"
    policy = tmp_path / "policy.toml"
    policy.write_text(
        two_principals_share_notes(
            ws, hashlib.sha256(alice.encode()).hexdigest(), hashlib.sha256(bob.encode()).hexdigest()
        )
    )
    args = (
        "--policy",
        str(policy),
        "--state-key-file",
        str(keyfile),
        "--replay-db",
        str(tmp_path / "r.db"),
    )
    with http_server(*args, tmp=tmp_path, token=alice) as srv:
        state = _first(srv, ws)["result"]["requestState"]
        srv.token = bob
        answer = _retry(srv, ws, state, _accept("old/tps.md"))
        assert answer["error"]["code"] == -32602
        assert (ws / "old" / "tps.md").exists()
        srv.token = alice
        done = _retry(srv, ws, state, _accept("old/tps.md"), id=3)["result"]
        assert done["structuredContent"]["deleted"] == "old/tps.md"


def test_a_state_sealed_by_one_instance_is_spent_for_all(
    ws: Path, tmp_path: Path, keyfile: Path
) -> None:
    common = ("--state-key-file", str(keyfile), "--replay-db", str(tmp_path / "shared.db"))
    with stdio_server(str(ws), *common) as a, stdio_server(str(ws), *common) as b:
        state = _first(a, ws)["result"]["requestState"]
        done = _retry(b, ws, state, _accept("tps-2025.md"))["result"]
        assert done["structuredContent"]["deleted"] == "tps-2025.md"
        (ws / "tps-2025.md").write_text("# TPS report 2025\nnew\n")
        again = _retry(a, ws, state, _accept("tps-2025.md"), id=3)
        assert again["error"]["code"] == -32602
        assert (ws / "tps-2025.md").exists()


ROUNDS = int(os.environ.get("FS_NOTES_RACE_ROUNDS", "200"))


def test_two_processes_racing_the_same_confirmation_delete_once(
    ws: Path, tmp_path: Path, keyfile: Path
) -> None:
    """The same accepted retry sent to two server processes at once, ROUNDS times.

    Each round must end with exactly one deletion."""
    common = ("--state-key-file", str(keyfile), "--replay-db", str(tmp_path / "race.db"))
    target = ws / "race.md"
    with stdio_server(str(ws), *common) as a, stdio_server(str(ws), *common) as b:
        for i in range(ROUNDS):
            target.write_text("# Race\n")
            state = _first(a, ws, title="Race", id=10 * i)["result"]["requestState"]
            message = call_tool(
                10 * i + 1,
                "notes_delete",
                {"workspaceUri": _uri(ws), "title": "Race"},
                FORM,
                inputResponses={"delete_choice": _accept("race.md")},
                requestState=state,
            )
            answers: list[dict[str, Any]] = []

            def send(
                srv: StdioServer, msg: dict[str, Any] = message, out: list[Any] = answers
            ) -> None:
                out.append(srv.ask(msg))

            threads = [threading.Thread(target=send, args=(srv,)) for srv in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            deleted = [
                x
                for x in answers
                if x.get("result", {}).get("structuredContent", {}).get("deleted")
            ]
            # The loser is refused either by the replay store (-32602) or, when the winner's unlink
            # came first, by the identity re-check (a tool error); never a second deletion.
            refused = [
                x
                for x in answers
                if x.get("error", {}).get("code") == -32602
                or x.get("result", {}).get("isError") is True
            ]
            assert len(deleted) == 1 and len(refused) == 1, answers
            assert not target.exists()


def test_the_server_keeps_working_after_the_delete_flow_and_exits_cleanly_on_eof(
    ws: Path, keyfile: Path, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", str(ws), "--replay-db", str(tmp_path / "x.db")],
        input=b"",
        capture_output=True,
        timeout=30,
        env=child_env(),
    )
    assert proc.returncode == 0 and proc.stdout == b""


@pytest.mark.parametrize("responses", [None, {}, {"delete": _accept("old/tps.md")}])
def test_a_retry_without_an_answer_is_asked_again_and_the_answer_then_counts_once(
    server: StdioServer, ws: Path, responses: Any
) -> None:
    # Spec (MRTR): a retry without the required inputResponses SHOULD get input_required again
    # (it used to get -32602). The same requestState stays valid: it was not spent.
    first = _first(server, ws)["result"]
    args = {"workspaceUri": _uri(ws), "title": "TPS report"}
    extra: dict[str, Any] = {"requestState": first["requestState"]}
    if responses is not None:
        extra["inputResponses"] = responses
    again = server.ask(call_tool(2, "notes_delete", args, FORM, **extra))["result"]
    assert again["resultType"] == "input_required"
    assert again["requestState"] == first["requestState"]
    form = again["inputRequests"]["delete_choice"]["params"]
    assert form["requestedSchema"] == first["inputRequests"]["delete_choice"]["params"][
        "requestedSchema"
    ]
    assert sorted(p.name for p in ws.rglob("*.md")) == ["other.md", "tps-2025.md", "tps.md"]
    done = _retry(server, ws, again["requestState"], _accept("old/tps.md"), id=3)
    assert done["result"].get("isError") is not True, done
    assert not (ws / "old" / "tps.md").exists()
    replay = _retry(server, ws, again["requestState"], _accept("old/tps.md"), id=4)
    assert replay["error"]["code"] == -32602  # spent: the answer counted once
    asked = server.ask(call_tool(5, "notes_delete", args, FORM, **extra))
    assert asked["error"]["code"] == -32602  # and a spent state is not asked again either
