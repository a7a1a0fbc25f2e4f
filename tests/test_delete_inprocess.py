"""notes_delete checks that need an injected clock or a policy that changes between rounds."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

from clock import Clock
from inprocess import InProcess

from fs_notes.policy import Policy, Principal, hash_token
from fs_notes.rounds.seal import KeyRing

KEYS = KeyRing([("k1", b"k" * 32)])



def _setup(tmp_path: Path) -> tuple[Path, str]:
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "tps.md").write_text("# TPS report\n")
    return ws, "file://" + urllib.parse.quote(str(ws))


def _accept(note: str) -> dict[str, Any]:
    return {"delete_choice": {"action": "accept", "content": {"note_id": note, "confirm": True}}}


def test_an_expired_state_is_refused_and_nothing_is_deleted(tmp_path: Path) -> None:
    ws, uri = _setup(tmp_path)
    clock = Clock()
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    me = policy.local_principal()
    srv = InProcess(policy, tmp_path, keyring=KEYS, clock=clock, audit=tmp_path / "audit.jsonl")
    try:
        args = {"workspaceUri": uri, "title": "TPS report"}
        state = srv.call(me, "notes_delete", args)["result"]["requestState"]
        clock.now += 300.0 + 1.0  # one second past the default five-minute expiry
        answer = srv.call(
            me, "notes_delete", args, inputResponses=_accept("tps.md"), requestState=state
        )
        assert answer["error"] == {"code": -32602, "message": "requestState is invalid or expired"}
        assert (ws / "tps.md").exists()
        outcomes = [
            json.loads(x)["outcome"] for x in (tmp_path / "audit.jsonl").read_text().splitlines()
        ]
        assert outcomes == ["state-refused"]
        clock.now -= 2.0  # still valid just before expiry
        done = srv.call(
            me, "notes_delete", args, inputResponses=_accept("tps.md"), requestState=state
        )
        assert done["result"]["structuredContent"]["deleted"] == "tps.md"
    finally:
        srv.close()


def test_a_grant_revoked_between_rounds_refuses_the_retry(tmp_path: Path) -> None:
    ws, uri = _setup(tmp_path)
    clock = Clock()
    token = "tok-0123456789abcdef"
    before = Policy.for_single_workspace(str(ws), "alice", token_sha256=hash_token(token))
    alice = before.authenticate_token(token)
    first = InProcess(before, tmp_path, keyring=KEYS, clock=clock)
    args = {"workspaceUri": uri, "title": "TPS report"}
    try:
        state = first.call(alice, "notes_delete", args)["result"]["requestState"]
    finally:
        first.close()
    # The operator restarts with a policy in which alice may only read.
    after = Policy(
        [Principal("alice")],
        before.workspaces,
        [type(g)(g.principal, g.workspace, frozenset({"read"})) for g in before.grants_for(alice)],
        token_hashes={"alice": hash_token(token)},
    )
    second = InProcess(after, tmp_path, keyring=KEYS, clock=clock)
    try:
        answer = second.call(
            alice, "notes_delete", args, inputResponses=_accept("tps.md"), requestState=state
        )
        assert answer["result"]["isError"] is True
        assert "not permitted" in answer["result"]["content"][0]["text"]
        assert (ws / "tps.md").exists()
    finally:
        second.close()


def test_a_state_sealed_before_a_reboot_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    """The replay store is not fsynced per claim; boot binding covers the power-loss case."""
    from fs_notes.rounds import request

    ws, uri = _setup(tmp_path)
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    me = policy.local_principal()
    srv = InProcess(policy, tmp_path, keyring=KEYS, clock=Clock())
    try:
        args = {"workspaceUri": uri, "title": "TPS report"}
        state = srv.call(me, "notes_delete", args)["result"]["requestState"]
        monkeypatch.setattr(request, "this_boot", lambda: "another-boot")
        answer = srv.call(
            me, "notes_delete", args, inputResponses=_accept("tps.md"), requestState=state
        )
        assert answer["error"] == {"code": -32602, "message": "requestState is invalid or expired"}
        assert (ws / "tps.md").exists()
    finally:
        srv.close()
