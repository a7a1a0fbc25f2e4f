"""Handshake-era clients on the wire: raw JSON against the real server, on stdio and on HTTP.

Every message the server sends to a legacy client is validated against the official 2025-11-25
schema (tests/data/mcp-schema-2025-11-25.json); every modern message beside it against 2026-07-28
(wire.check_message). Rules: 2025-11-25 basic/lifecycle, basic/transports (sessions, SSE, 202s),
client/elicitation, client/sampling; 2026-07-28 basic/versioning (a dual-era server serves both);
docs/interface.md (the delete flow and its checks, the bearer token).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from policy_text import two_principals_share_notes
from wire import (
    HttpServer,
    StdioServer,
    call_tool,
    check_legacy,
    check_message,
    http_server,
    sse_messages,
    stdio_server,
)

from fs_notes.policy import hash_token

DATA = Path(__file__).parent / "data"
TOKEN = "legacy-token-0123456789abcdef"
OTHER_TOKEN = "other-token-0123456789abcdefgh"
FORM: dict[str, object] = {"elicitation": {"form": {}, "url": {}}}
ACCEPT_TPS = {"action": "accept", "content": {"note_id": "tps.md", "confirm": True}}


def _uri(ws: Path) -> str:
    return "file://" + urllib.parse.quote(str(ws))


def _init(caps: dict[str, Any], version: str = "2025-11-25", id: int = 1) -> dict[str, Any]:
    params = {"protocolVersion": version, "capabilities": caps, "clientInfo": {"name": "old"}}
    return {"jsonrpc": "2.0", "id": id, "method": "initialize", "params": params}


def _req(id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def _tool(rid: int, name: str, **arguments: Any) -> dict[str, Any]:
    return _req(rid, "tools/call", {"name": name, "arguments": arguments})


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "tps.md").write_text("# TPS report\nold\n")
    (ws / "groceries.md").write_text("# Groceries\nmilk\n")
    (tmp_path / "secret.md").write_text("# TPS report\nSECRET\n")
    return ws


def _outside_untouched(ws: Path) -> bool:
    return (ws.parent / "secret.md").read_text() == "# TPS report\nSECRET\n"


# -- stdio -------------------------------------------------------------------------------------


class LegacyStdio:
    def __init__(self, server: StdioServer, caps: dict[str, Any], version: str = "2025-11-25"):
        self.server = server
        self.welcome = self.ask(_init(caps, version))
        server.send(INITIALIZED)
        server.expect_silence()

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.server.send(message)
        return self.recv(message["method"])

    def recv(self, method: str | None = None) -> dict[str, Any]:
        answer = self.server.recv()
        check_legacy(answer, method)
        return answer


@pytest.fixture
def stdio(ws: Path, tmp_path: Path) -> Iterator[StdioServer]:
    with stdio_server(str(ws), "--replay-db", str(tmp_path / "replay.db")) as server:
        yield server


def test_a_legacy_stdio_client_lists_reads_and_deletes_with_confirmation(
    stdio: StdioServer, ws: Path
) -> None:
    client = LegacyStdio(stdio, FORM)
    assert client.welcome["result"]["protocolVersion"] == "2025-11-25"
    tools = client.ask(_req(2, "tools/list"))["result"]
    again = client.ask(_req(2, "tools/list"))["result"]
    assert json.dumps(tools) == json.dumps(again)
    assert [t["name"] for t in tools["tools"]][-2:] == ["notes_delete", "notes_summarize"]
    listed = client.ask(_req(3, "resources/list", {}))["result"]
    assert sorted(r["name"] for r in listed["resources"]) == ["groceries.md", "tps.md"]
    read = client.ask(_req(4, "resources/read", {"uri": _uri(ws) + "/groceries.md"}))
    assert read["result"]["contents"][0]["text"] == "# Groceries\nmilk\n"
    note = client.ask(_tool(5, "notes_read", workspaceUri=_uri(ws), id="tps.md"))["result"]
    assert note["structuredContent"]["content"] == "# TPS report\nold\n"
    escape = client.ask(_tool(6, "notes_read", workspaceUri=_uri(ws), id="../secret.md"))
    assert escape["result"]["isError"] is True
    assert "SECRET" not in json.dumps(escape)

    stdio.send(_tool(7, "notes_delete", workspaceUri=_uri(ws), title="TPS report"))
    ask = client.recv()
    assert ask["method"] == "elicitation/create" and "id" in ask
    assert (ws / "tps.md").exists()  # nothing happens before the answer
    stdio.send({"jsonrpc": "2.0", "id": ask["id"], "result": ACCEPT_TPS})
    done = client.recv("tools/call")
    assert done["id"] == 7
    assert done["result"]["structuredContent"] == {"deleted": "tps.md", "outcome": "deleted"}
    assert not (ws / "tps.md").exists() and _outside_untouched(ws)


def test_a_pipelined_handshake_is_read_in_order(stdio: StdioServer) -> None:
    """initialize, initialized and a request in one write: the request is parsed only after
    initialize opened the session, so it is the legacy session's (no modern -32602 for the
    missing _meta), exactly as if the client had waited for each answer."""
    lines = [_init(FORM, "2025-11-25"), INITIALIZED, _req(2, "tools/list")]
    stdio.send_raw(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    welcome, tools = stdio.recv(), stdio.recv()
    check_legacy(welcome, "initialize")
    check_legacy(tools, "tools/list")
    assert welcome["result"]["protocolVersion"] == "2025-11-25"
    assert tools["id"] == 2 and "notes_delete" in [t["name"] for t in tools["result"]["tools"]]
    stdio.expect_silence()


def test_modern_requests_keep_working_beside_a_legacy_stdio_session(
    stdio: StdioServer, ws: Path
) -> None:
    client = LegacyStdio(stdio, FORM)
    modern = stdio.ask(
        call_tool(10, "notes_delete", {"workspaceUri": _uri(ws), "title": "TPS"}, FORM)
    )
    assert modern["result"]["resultType"] == "input_required"  # MRTR, not a server request
    discover = stdio.ask(call_tool(11, "notes_list", {"workspaceUri": _uri(ws)}))
    assert discover["result"]["resultType"] == "complete"
    legacy = client.ask(_tool(12, "notes_list", workspaceUri=_uri(ws)))
    assert len(legacy["result"]["structuredContent"]["notes"]) == 2
    retry = stdio.ask(
        call_tool(
            13,
            "notes_delete",
            {"workspaceUri": _uri(ws), "title": "TPS"},
            FORM,
            inputResponses={"delete_choice": ACCEPT_TPS},
            requestState=modern["result"]["requestState"],
        )
    )
    assert retry["result"]["structuredContent"]["deleted"] == "tps.md"
    assert _outside_untouched(ws)


@pytest.mark.parametrize(
    ("asked", "spoken"),
    [("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"), ("2024-11-05", "2025-11-25")],
)
def test_older_clients_get_their_version_or_our_latest(
    stdio: StdioServer, asked: str, spoken: str
) -> None:
    assert LegacyStdio(stdio, {}, asked).welcome["result"]["protocolVersion"] == spoken


def test_a_legacy_client_without_elicitation_is_told_where_the_person_approves(
    stdio: StdioServer, ws: Path
) -> None:
    client = LegacyStdio(stdio, {"roots": {"listChanged": True}})
    asked = client.ask(_tool(2, "notes_delete", workspaceUri=_uri(ws), title="TPS report"))
    assert asked["result"]["structuredContent"]["outcome"] == "approval-needed"
    assert "fs-notes approve" in asked["result"]["content"][0]["text"]
    stdio.expect_silence()  # no server request went out
    assert (ws / "tps.md").exists()


def test_notes_summarize_reaches_a_legacy_client_through_sampling_create_message(
    stdio: StdioServer, ws: Path
) -> None:
    client = LegacyStdio(stdio, {"sampling": {}})
    stdio.send(_tool(2, "notes_summarize", workspaceUri=_uri(ws), query="TPS report"))
    pick = client.recv()
    assert pick["method"] == "sampling/createMessage"
    assert pick["params"]["includeContext"] == "none"
    assert "SECRET" not in json.dumps(pick)
    text = {"type": "text", "text": '["tps.md"]'}
    stdio.send(
        {
            "jsonrpc": "2.0",
            "id": pick["id"],
            "result": {"role": "assistant", "content": text, "model": "m"},
        }
    )
    summarize = client.recv()
    assert summarize["method"] == "sampling/createMessage" and summarize["id"] != pick["id"]
    assert "# TPS report\nold" in summarize["params"]["messages"][0]["content"]["text"]
    text = {"type": "text", "text": "An old TPS report."}
    stdio.send(
        {
            "jsonrpc": "2.0",
            "id": summarize["id"],
            "result": {"role": "assistant", "content": text, "model": "m"},
        }
    )
    done = client.recv("tools/call")["result"]
    assert done["structuredContent"] == {
        "query": "TPS report",
        "chosen": ["tps.md"],
        "summary": "An old TPS report.",
        "model": "m",
    }


# -- HTTP --------------------------------------------------------------------------------------


def _policy(tmp: Path, ws: Path) -> Path:
    policy = tmp / "policy.toml"
    policy.write_text(two_principals_share_notes(ws, hash_token(TOKEN), hash_token(OTHER_TOKEN)))
    return policy


@pytest.fixture
def http(ws: Path, tmp_path: Path) -> Iterator[HttpServer]:
    policy = _policy(tmp_path, ws)
    with http_server(
        "--policy",
        str(policy),
        "--replay-db",
        str(tmp_path / "replay.db"),
        tmp=tmp_path,
        token=TOKEN,
    ) as server:
        yield server


class LegacyHttp:
    def __init__(
        self,
        server: HttpServer,
        caps: dict[str, Any],
        token: str = TOKEN,
        version: str = "2025-11-25",
    ) -> None:
        self.server, self.token, self.version = server, token, version
        opened = server.post_raw(json.dumps(_init(caps, version)).encode(), self.headers(None))
        assert opened.status_code == 200, opened.text
        self.welcome = opened.json()
        check_legacy(self.welcome, "initialize")
        self.sid = opened.headers["mcp-session-id"]
        assert self.post(INITIALIZED).status_code == 202

    def headers(self, sid: str | None, **extra: str) -> dict[str, str]:
        h = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {self.token}",
        }
        if sid is not None:
            h["Mcp-Session-Id"] = sid
            h["MCP-Protocol-Version"] = self.version
        h.update(extra)
        return h

    def post(self, message: dict[str, Any], **headers: str) -> httpx.Response:
        h = {**self.headers(self.sid), **headers}
        return self.server.post_raw(json.dumps(message).encode(), h)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        response = self.post(message)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        answer: dict[str, Any] = response.json()
        check_legacy(answer, message["method"])
        return answer

    def stream(self, message: dict[str, Any]) -> Any:
        return self.server.client.stream(
            "POST",
            self.server.url,
            content=json.dumps(message).encode(),
            headers=self.headers(self.sid),
        )


def test_a_legacy_http_client_deletes_through_an_sse_elicitation(
    http: HttpServer, ws: Path
) -> None:
    client = LegacyHttp(http, FORM)
    assert client.welcome["result"]["protocolVersion"] == "2025-11-25"
    first = client.post(_req(2, "tools/list"))
    second = client.post(_req(2, "tools/list"))
    assert first.content == second.content  # byte-identical
    check_legacy(first.json(), "tools/list")
    with client.stream(_tool(3, "notes_delete", workspaceUri=_uri(ws), title="TPS report")) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = sse_messages(r)
        ask = next(events)
        check_legacy(ask)
        assert ask["method"] == "elicitation/create"
        assert (ws / "tps.md").exists()
        answered = client.post({"jsonrpc": "2.0", "id": ask["id"], "result": ACCEPT_TPS})
        assert answered.status_code == 202 and answered.content == b""
        done = next(events)
        check_legacy(done, "tools/call")
        assert list(events) == []  # the stream ends after the response
    assert done["id"] == 3
    assert done["result"]["structuredContent"] == {"deleted": "tps.md", "outcome": "deleted"}
    assert not (ws / "tps.md").exists() and _outside_untouched(ws)


def test_legacy_http_errors_keep_status_200_and_answers_without_input_need_no_stream(
    http: HttpServer, ws: Path
) -> None:
    client = LegacyHttp(http, {})
    asked = client.ask(_tool(2, "notes_delete", workspaceUri=_uri(ws), title="TPS report"))
    assert asked["result"]["structuredContent"]["outcome"] == "approval-needed"
    unknown = client.ask(_req(3, "prompts/list"))
    assert unknown["error"]["code"] == -32601
    assert (ws / "tps.md").exists()


def test_legacy_http_session_rules(http: HttpServer, ws: Path) -> None:
    client = LegacyHttp(http, FORM)
    listing = _req(2, "tools/list")
    body = json.dumps(listing).encode()
    no_session = http.post_raw(body, client.headers(None, **{"MCP-Protocol-Version": "2025-11-25"}))
    assert no_session.status_code == 400
    unknown = http.post_raw(body, client.headers("not-a-session"))
    assert unknown.status_code == 404
    other = LegacyHttp(http, FORM, token=OTHER_TOKEN)
    stolen = http.post_raw(body, other.headers(client.sid))  # bob's token, alice's session id
    assert stolen.status_code == 404
    # Another supported handshake-era revision in the header is accepted (the 2025-11-25 text
    # refuses only invalid or unsupported ones; the conformance scenario
    # server-sse-multiple-streams sends one); an unsupported one is 400.
    for version in ("2025-06-18", "2025-03-26"):
        assert client.post(listing, **{"MCP-Protocol-Version": version}).status_code == 200
    wrong_version = client.post(listing, **{"MCP-Protocol-Version": "2024-01-01"})
    assert wrong_version.status_code == 400
    stray = client.post({"jsonrpc": "2.0", "id": 99, "result": {"action": "accept"}})
    assert stray.status_code == 400  # an answer nothing waits for
    get = http.client.get(http.url, headers=client.headers(client.sid))
    assert get.status_code == 405  # no standalone SSE stream
    assert http.client.delete(http.url, headers=other.headers(client.sid)).status_code == 404
    assert client.post(listing).status_code == 200
    assert http.client.delete(http.url, headers=client.headers(client.sid)).status_code == 200
    assert client.post(listing).status_code == 404


def test_a_legacy_session_gets_its_own_revision_s_code_for_a_missing_resource(
    http: HttpServer, ws: Path
) -> None:
    # 2025-11-25 server/resources: resource not found is -32002 (2026-07-28 made it -32602).
    client = LegacyHttp(http, FORM)
    missing = client.ask(_req(5, "resources/read", {"uri": _uri(ws) + "/no-such-note.md"}))
    assert missing["error"] == {
        "code": -32002,
        "message": "Resource not found",
        "data": {"uri": _uri(ws) + "/no-such-note.md"},
    }
    assert (ws / "tps.md").exists()


def test_modern_and_legacy_clients_delete_side_by_side_on_one_http_server(
    http: HttpServer, ws: Path
) -> None:
    legacy = LegacyHttp(http, FORM)
    modern_first = http.ask(
        call_tool(1, "notes_delete", {"workspaceUri": _uri(ws), "title": "Groceries"}, FORM)
    )
    assert modern_first["result"]["resultType"] == "input_required"
    with_stray_session = http.post(
        call_tool(2, "notes_list", {"workspaceUri": _uri(ws)}), {"Mcp-Session-Id": legacy.sid}
    )
    assert with_stray_session.status_code == 200
    check_message(with_stray_session.json(), "tools/call")  # still a modern answer
    with legacy.stream(_tool(3, "notes_delete", workspaceUri=_uri(ws), title="TPS report")) as r:
        events = sse_messages(r)
        ask = next(events)
        assert (
            legacy.post({"jsonrpc": "2.0", "id": ask["id"], "result": ACCEPT_TPS}).status_code
            == 202
        )
        done = next(events)
    assert done["result"]["structuredContent"]["deleted"] == "tps.md"
    choice = {"action": "accept", "content": {"note_id": "groceries.md", "confirm": True}}
    modern_done = http.ask(
        call_tool(
            4,
            "notes_delete",
            {"workspaceUri": _uri(ws), "title": "Groceries"},
            FORM,
            inputResponses={"delete_choice": choice},
            requestState=modern_first["result"]["requestState"],
        )
    )
    assert modern_done["result"]["structuredContent"]["deleted"] == "groceries.md"
    assert sorted(p.name for p in ws.iterdir()) == [] and _outside_untouched(ws)


def test_a_legacy_version_header_on_a_modern_body_gets_the_modern_refusal(http: HttpServer) -> None:
    message = call_tool(1, "notes_list", {"workspaceUri": "file:///x"})
    message["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2025-11-25"
    response = http.post(message)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32022


def test_a_client_that_drops_the_sse_stream_abandons_the_request_and_nothing_is_deleted(
    http: HttpServer, ws: Path
) -> None:
    # Ours, against a 2025-11-25 SHOULD NOT: without resumable streams the result could never
    # reach the client, so a destructive call whose stream is gone is abandoned (fail closed).
    client = LegacyHttp(http, FORM)
    with client.stream(_tool(2, "notes_delete", workspaceUri=_uri(ws), title="TPS report")) as r:
        ask = next(sse_messages(r))
    time.sleep(0.3)  # let the server see the closed connection
    late = client.post({"jsonrpc": "2.0", "id": ask["id"], "result": ACCEPT_TPS})
    assert late.status_code == 400  # nothing waits for that answer any more
    assert (ws / "tps.md").exists()


def test_a_2025_03_26_client_without_a_version_header_is_found_by_its_session(
    http: HttpServer, ws: Path
) -> None:
    client = LegacyHttp(http, {}, version="2025-03-26")
    assert client.welcome["result"]["protocolVersion"] == "2025-03-26"
    headers = client.headers(client.sid)
    del headers["MCP-Protocol-Version"]  # that revision had no such header
    listed = http.post_raw(
        json.dumps(_tool(2, "notes_list", workspaceUri=_uri(ws))).encode(), headers
    )
    assert listed.status_code == 200
    check_legacy(listed.json(), "tools/call")
    assert len(listed.json()["result"]["structuredContent"]["notes"]) == 2
    broken = http.post_raw(b'{"jsonrpc": "2.0", "id": 3,', headers)
    assert broken.status_code == 400 and broken.json()["error"]["code"] == -32700
