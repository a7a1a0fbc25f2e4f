"""A legacy session in process: the modern handlers behind it, a scripted 2025-era client in front.

Each test drives `LegacySession.handle` with the real dispatcher the composition root builds
(`compose`) and a scripted `send` that plays the client: it sees every server-initiated
request and answers (or not). Rules: 2025-11-25 client/elicitation and
basic/utilities/cancellation, 2026-07-28 basic/versioning; the capability and forwarding rules
are ours (fs_notes/legacy/session.py, translate.py). Every refusal asserts that the note, and
the file outside the workspace, are still there.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from inprocess import InProcess

from fs_notes.legacy import ClientResponse, LegacyAdapter, LegacySession
from fs_notes.policy import Policy, Principal
from fs_notes.protocol.envelope import Notification, Request
from fs_notes.rounds.seal import KeyRing

FORM_CAPS: dict[str, object] = {"elicitation": {"form": {}, "url": {}}}
Answer = Callable[[dict[str, Any]], ClientResponse | None]


@dataclass
class World:
    ws: Path
    outside: Path
    uri: str
    srv: InProcess
    me: Principal

    def session(
        self, caps: dict[str, Any], version: str = "2025-11-25", timeout: float = 5.0
    ) -> LegacySession:
        adapter = LegacyAdapter(self.srv.dispatcher, answer_timeout=timeout)
        init = {"protocolVersion": version, "capabilities": caps, "clientInfo": {"name": "t"}}
        return adapter.open(Request(0, "initialize", init), self.me, "test")

    def untouched(self) -> bool:
        return (self.ws / "tps.md").read_text() == "# TPS report\nold\n" and (
            self.outside.read_text() == "# TPS report\nSECRET\n"
        )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "tps.md").write_text("# TPS report\nold\n")
    (ws / "other.md").write_text("# Groceries\n")
    outside = tmp_path / "secret.md"
    outside.write_text("# TPS report\nSECRET\n")
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    srv = InProcess(policy, tmp_path, keyring=KeyRing.ephemeral(), clock=time.time)
    try:
        yield World(
            ws, outside, "file://" + urllib.parse.quote(str(ws)), srv, policy.local_principal()
        )
    finally:
        srv.close()


@dataclass
class Client:
    """Plays the legacy client: records what the server sends and answers its requests."""

    session: LegacySession
    answer: Answer
    sent: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        if "id" in message and "method" in message:
            reply = self.answer(message)
            if reply is not None:
                asyncio.get_running_loop().call_soon(self.session.deliver, reply)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [m for m in self.sent if "id" in m]


def _call(
    world: World, client: Client, id: int = 7, title: str = "TPS report", **extra: Any
) -> Any:
    params = {
        "name": "notes_delete",
        "arguments": {"workspaceUri": world.uri, "title": title},
        **extra,
    }
    return asyncio.run(
        client.session.handle(Request(id, "tools/call", params), world.me, client.send)
    )


def _accept(note: str) -> Answer:
    return lambda m: ClientResponse(
        m["id"], {"action": "accept", "content": {"note_id": note, "confirm": True}}, None
    )


def test_a_legacy_delete_asks_once_through_elicitation_create_then_deletes(world: World) -> None:
    session = world.session(FORM_CAPS)
    client = Client(session, _accept("tps.md"))
    response = _call(world, client)
    assert response["id"] == 7
    result = response["result"]
    assert result["structuredContent"] == {"deleted": "tps.md", "outcome": "deleted"}
    assert "resultType" not in result  # a 2025 result
    [ask] = client.requests
    assert ask["method"] == "elicitation/create" and isinstance(ask["id"], int)
    assert ask["params"]["mode"] == "form"
    options = ask["params"]["requestedSchema"]["properties"]["note_id"]["oneOf"]
    assert [o["const"] for o in options] == ["tps.md"]
    assert not (world.ws / "tps.md").exists()
    assert world.outside.read_text() == "# TPS report\nSECRET\n"
    assert not session.busy


@pytest.mark.parametrize(("action", "outcome"), [("decline", "declined"), ("cancel", "cancelled")])
def test_a_declined_or_cancelled_form_deletes_nothing(
    world: World, action: str, outcome: str
) -> None:
    client = Client(
        world.session(FORM_CAPS), lambda m: ClientResponse(m["id"], {"action": action}, None)
    )
    result = _call(world, client)["result"]
    assert result["structuredContent"]["outcome"] == outcome
    assert world.untouched()


@pytest.mark.parametrize("caps", [{}, {"sampling": {}}, {"roots": {"listChanged": True}}])
def test_without_elicitation_at_initialize_the_person_is_asked_and_nothing_is_sent(
    world: World, caps: dict[str, Any]
) -> None:
    """The default `approval = "either"`: no form, so the person approves outside the client
    (issue 30 item 1); the answer says so in words, and no request goes to the client."""
    client = Client(world.session(caps), _accept("tps.md"))
    response = _call(world, client)
    assert response["result"]["structuredContent"]["outcome"] == "approval-needed"
    assert client.sent == []
    assert world.untouched()


def test_a_url_only_client_is_sent_a_url_elicitation_named_as_its_revision_wants(
    world: World,
) -> None:
    client = Client(
        world.session({"elicitation": {"url": {}}}),
        lambda m: ClientResponse(m["id"], {"action": "decline"}, None),
    )
    response = _call(world, client)
    [asked] = client.requests
    params = asked["params"]
    assert asked["method"] == "elicitation/create" and params["mode"] == "url"
    assert params["url"].startswith("http://127.0.0.1:") and len(params["elicitationId"]) >= 16
    assert response["result"]["structuredContent"]["outcome"] == "declined"
    assert world.untouched()


def test_a_capability_claimed_in_request_meta_instead_of_the_handshake_is_ignored(
    world: World,
) -> None:
    client = Client(world.session({}), _accept("tps.md"))
    meta = {"io.modelcontextprotocol/clientCapabilities": FORM_CAPS}
    response = _call(world, client, _meta=meta)
    # Taken at its word, a form would have gone to the client; the handshake's (none) rule.
    assert response["result"]["structuredContent"]["outcome"] == "approval-needed"
    assert client.sent == [] and world.untouched()


def test_a_forged_request_state_from_a_legacy_client_never_reaches_the_handler(
    world: World,
) -> None:
    # A legacy client cannot send requestState/inputResponses: the handler starts a fresh form.
    client = Client(
        world.session(FORM_CAPS), lambda m: ClientResponse(m["id"], {"action": "decline"}, None)
    )
    forged = {
        "delete_choice": {"action": "accept", "content": {"note_id": "tps.md", "confirm": True}}
    }
    response = _call(world, client, requestState="v1.k.e30.AAAA", inputResponses=forged)
    assert response["result"]["structuredContent"]["outcome"] == "declined"
    assert len(client.requests) == 1
    assert world.untouched()


def test_the_answer_is_checked_by_the_modern_handler(world: World) -> None:
    client = Client(world.session(FORM_CAPS), _accept("../secret.md"))
    response = _call(world, client)
    assert response["error"]["code"] == -32602
    assert "note_id" in response["error"]["message"]
    assert world.untouched()


def test_a_client_error_instead_of_an_answer_is_a_tool_error_and_deletes_nothing(
    world: World,
) -> None:
    client = Client(
        world.session(FORM_CAPS),
        lambda m: ClientResponse(m["id"], None, {"code": -1, "message": "no UI"}),
    )
    result = _call(world, client)["result"]
    assert result["isError"] is True
    assert "refused elicitation/create" in result["content"][0]["text"]
    assert world.untouched()


def test_no_answer_in_time_withdraws_the_request_and_deletes_nothing(world: World) -> None:
    session = world.session(FORM_CAPS, timeout=0.2)
    client = Client(session, lambda m: None)
    result = _call(world, client)["result"]
    assert result["isError"] is True and "did not answer" in result["content"][0]["text"]
    [ask, withdrawn] = client.sent
    assert withdrawn == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": ask["id"], "reason": "timed out"},
    }
    assert world.untouched() and not session.busy


def test_an_answer_to_an_id_we_never_used_is_not_taken(world: World) -> None:
    session = world.session(FORM_CAPS, timeout=0.3)
    client = Client(session, lambda m: ClientResponse(m["id"] + 1000, {"action": "accept"}, None))
    result = _call(world, client)["result"]
    assert result["isError"] is True
    assert world.untouched()


def test_a_request_the_client_cancels_gets_no_response(world: World) -> None:
    session = world.session(FORM_CAPS)

    def cancel(message: dict[str, Any]) -> ClientResponse | None:
        note = Notification("notifications/cancelled", {"requestId": 7, "reason": "user"})
        asyncio.get_running_loop().create_task(session.handle(note, world.me, client.send))
        return None

    client = Client(session, cancel)
    assert _call(world, client) is None
    ask, withdrawn = client.sent
    assert withdrawn["method"] == "notifications/cancelled"
    assert withdrawn["params"]["requestId"] == ask["id"]
    assert world.untouched() and not session.busy


def test_closing_the_session_ends_every_wait_without_a_response(world: World) -> None:
    session = world.session(FORM_CAPS)

    def close(message: dict[str, Any]) -> ClientResponse | None:
        asyncio.get_running_loop().call_soon(session.close)
        return None

    client = Client(session, close)
    assert _call(world, client) is None
    assert world.untouched()


def test_a_2025_06_18_client_gets_its_own_form_shape_and_the_same_checks(world: World) -> None:
    client = Client(world.session(FORM_CAPS, version="2025-06-18"), _accept("tps.md"))
    result = _call(world, client)["result"]
    [ask] = client.requests
    assert "mode" not in ask["params"]
    note_id = ask["params"]["requestedSchema"]["properties"]["note_id"]
    assert note_id["enum"] == ["tps.md"] and len(note_id["enumNames"]) == 1
    assert result["structuredContent"]["deleted"] == "tps.md"


def test_another_principal_cannot_use_the_session(world: World) -> None:
    session = world.session(FORM_CAPS)
    client = Client(session, _accept("tps.md"))
    params = {
        "name": "notes_delete",
        "arguments": {"workspaceUri": world.uri, "title": "TPS report"},
    }
    response = asyncio.run(
        session.handle(Request(1, "tools/call", params), Principal("mallory"), client.send)
    )
    assert response is not None
    assert response["error"]["code"] == -32600
    assert client.sent == [] and world.untouched()


def test_ping_initialize_again_and_initialized(world: World) -> None:
    session = world.session(FORM_CAPS)
    client = Client(session, _accept("tps.md"))

    async def run() -> list[Any]:
        return [
            await session.handle(Request(1, "ping", {}), world.me, client.send),
            await session.handle(Request(2, "initialize", {}), world.me, client.send),
            await session.handle(
                Notification("notifications/initialized", {}), world.me, client.send
            ),
        ]

    ping, again, note = asyncio.run(run())
    assert ping == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert again["error"]["code"] == -32600
    assert note is None and session.initialized
