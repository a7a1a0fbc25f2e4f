"""Golden raw-JSON tests for every protocol rule, on both transports (stdio and Streamable HTTP).

One table drives both; each row says what is sent and exactly what must come back (the JSON-RPC
error code and data, the HTTP status, or silence). Every message the server sends is validated
against the official 2026-07-28 schema. Rules: spec basic/index, basic/versioning,
server/discover, server/tools, transports/streamable-http.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from wire import (
    TOOLS,
    HttpServer,
    StdioServer,
    check_legacy,
    check_message,
    http_server,
    meta,
    request,
    stdio_server,
    write_secret,
)

TOKEN = "test-token-0123456789abcdef"


@dataclass(frozen=True)
class Golden:
    name: str
    send: Any  # a dict/list is sent as JSON; bytes are sent raw
    code: int | None = None  # expected JSON-RPC error code; None = a result (or silence)
    data: Any = None  # expected error data, exactly (when not None)
    status: int = 200  # expected HTTP status
    silent: bool = False  # a notification: no JSON-RPC response at all
    id_echo: bool = True  # the error response carries the request id
    extra: dict[str, Any] = field(default_factory=dict)
    tool_error: str | None = None  # a result with isError: true whose text starts so


def _req(method: str, params: dict[str, Any] | None = None, id: Any = 1) -> dict[str, Any]:
    return request(id, method, params)


def _bare(**fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", **fields}


GOLDEN = [
    Golden("invalid-json", b'{"jsonrpc": "2.0", "id": 1,', -32700, status=400, id_echo=False),
    Golden("not-utf8-json", b"\xff\xfe{}", -32700, status=400, id_echo=False),
    Golden("batch-array", [_req("server/discover")], -32600, status=400, id_echo=False),
    Golden("empty-batch", [], -32600, status=400, id_echo=False),
    Golden("scalar", 42, -32600, status=400, id_echo=False),
    Golden("wrong-jsonrpc", {**_req("server/discover"), "jsonrpc": "1.0"}, -32600, status=400),
    Golden(
        "missing-jsonrpc",
        {k: v for k, v in _req("server/discover").items() if k != "jsonrpc"},
        -32600,
        status=400,
    ),
    Golden(
        "id-null",
        _bare(id=None, method="server/discover", params={"_meta": meta()}),
        -32600,
        status=400,
        id_echo=False,
    ),
    Golden(
        "id-float",
        _bare(id=1.5, method="server/discover", params={"_meta": meta()}),
        -32600,
        status=400,
        id_echo=False,
    ),
    Golden(
        "id-bool",
        _bare(id=True, method="server/discover", params={"_meta": meta()}),
        -32600,
        status=400,
        id_echo=False,
    ),
    Golden(
        "id-object",
        _bare(id={"a": 1}, method="server/discover", params={"_meta": meta()}),
        -32600,
        status=400,
        id_echo=False,
    ),
    Golden(
        "method-not-string", _bare(id=1, method=5, params={"_meta": meta()}), -32600, status=400
    ),
    Golden("params-array", _bare(id=1, method="server/discover", params=[1]), -32600, status=400),
    Golden("a-response", _bare(id=1, result={}), -32600, status=400),
    Golden("unknown-method", _req("notes/frobnicate"), -32601, status=404),
    Golden("meta-missing", _bare(id=1, method="server/discover", params={}), -32602, status=400),
    Golden(
        "meta-not-object",
        _bare(id=1, method="server/discover", params={"_meta": []}),
        -32602,
        status=400,
    ),
    Golden(
        "version-missing",
        _bare(
            id=1,
            method="server/discover",
            params={"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}},
        ),
        -32602,
        status=400,
    ),
    Golden(
        "version-not-string",
        _bare(
            id=1,
            method="server/discover",
            params={
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": 20260728,
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
            },
        ),
        -32602,
        status=400,
    ),
    Golden(
        "version-unsupported",
        _bare(
            id=7,
            method="server/discover",
            params={
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "1900-01-01",
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
            },
        ),
        -32022,
        data={"supported": ["2026-07-28"], "requested": "1900-01-01"},
        status=400,
    ),
    Golden(
        "version-legacy",
        _bare(
            id="v",
            method="tools/list",
            params={
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2025-11-25",
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
            },
        ),
        -32022,
        data={"supported": ["2026-07-28"], "requested": "2025-11-25"},
        status=400,
    ),
    Golden(
        "capabilities-missing",
        _bare(
            id=1,
            method="server/discover",
            params={"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
        ),
        -32602,
        status=400,
    ),
    Golden(
        "capabilities-not-object",
        _bare(
            id=1,
            method="server/discover",
            params={
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": "all",
                }
            },
        ),
        -32602,
        status=400,
    ),
    Golden(
        "notification",
        _bare(method="notifications/cancelled", params={"requestId": 1}),
        silent=True,
        status=202,
    ),
    Golden("notification-unknown", _bare(method="notifications/whatever"), silent=True, status=202),
    Golden("discover", _req("server/discover")),
    Golden("tools-list", _req("tools/list")),
    Golden("tools-list-bad-cursor", _req("tools/list", {"cursor": "nope"}), -32602, status=400),
    Golden(
        "call-unknown-tool",
        _req("tools/call", {"name": "rm_rf", "arguments": {}}),
        -32602,
        status=400,
    ),
    Golden(
        "call-missing-argument",
        _req("tools/call", {"name": "notes_read", "arguments": {"workspaceUri": "file:///x"}}),
        tool_error="Invalid arguments for notes_read: ",
        extra={"message_has": "'id'"},
    ),
    Golden(
        "call-extra-argument",
        _req(
            "tools/call",
            {
                "name": "notes_read",
                "arguments": {"workspaceUri": "file:///x", "id": "a.md", "force": True},
            },
        ),
        tool_error="Invalid arguments for notes_read: ",
        extra={"message_has": "'force'"},
    ),
    Golden(
        "call-wrong-type",
        _req(
            "tools/call",
            {"name": "notes_read", "arguments": {"workspaceUri": "file:///x", "id": 5}},
        ),
        tool_error="Invalid arguments for notes_read: ",
        extra={"message_has": "'id'"},
    ),
    Golden(
        "call-arguments-not-object",
        _req("tools/call", {"name": "notes_read", "arguments": [1]}),
        -32602,
        status=400,
    ),
    Golden("call-name-missing", _req("tools/call", {"arguments": {}}), -32602, status=400),
    # Spec (server/utilities/logging, "Error Handling"): an unrecognised level SHOULD be -32602.
    Golden(
        "log-level-unknown",
        _req("tools/list", {"_meta": {**meta(), "io.modelcontextprotocol/logLevel": "loud"}}),
        -32602,
        status=400,
        extra={"message_has": "is not a log level"},
    ),
    Golden(
        "log-level-not-a-string",
        _req("tools/list", {"_meta": {**meta(), "io.modelcontextprotocol/logLevel": ["debug"]}}),
        -32602,
        status=400,
    ),
    Golden(
        "log-level-known",
        _req("tools/list", {"_meta": {**meta(), "io.modelcontextprotocol/logLevel": "notice"}}),
    ),
]

# `initialize` used to be refused with -32022 (the golden case "initialize-legacy"); since issue 7
# it opens a legacy session, so it has its own test below, on a fresh connection of each transport.
LEGACY_INITIALIZE = _bare(
    id=1,
    method="initialize",
    params={
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "old", "version": "1"},
    },
)


def _expected_id(case: Golden) -> Any:
    return case.send.get("id") if isinstance(case.send, dict) else None


def _check_answer(case: Golden, answer: dict[str, Any]) -> None:
    check_message(answer, case.send.get("method") if isinstance(case.send, dict) else None)
    if case.tool_error is not None:  # spec: input validation errors are tool execution errors
        result = answer["result"]
        assert result["isError"] is True, answer
        text = result["content"][0]["text"]
        assert text.startswith(case.tool_error) and case.extra["message_has"] in text, text
        return
    if case.code is None:
        assert "result" in answer, answer
        assert answer["id"] == _expected_id(case)
        result = answer["result"]
        assert result["resultType"] == "complete"
        assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "fs-notes"
        return
    assert answer["error"]["code"] == case.code, answer
    if case.data is not None:
        assert answer["error"]["data"] == case.data
    if case.id_echo:
        assert answer.get("id") == _expected_id(case)
    else:
        assert "id" not in answer
    if "message_has" in case.extra:
        assert case.extra["message_has"] in answer["error"]["message"]


def _encode(case: Golden) -> bytes:
    return case.send if isinstance(case.send, bytes) else json.dumps(case.send).encode()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    (ws / "hello.md").write_text("# Hello\n\nworld\n")
    return ws


@pytest.fixture(scope="module")
def stdio(workspace: Path) -> Iterator[StdioServer]:
    with stdio_server(str(workspace)) as server:
        yield server


@pytest.fixture(scope="module")
def http(workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    tmp = tmp_path_factory.mktemp("http")
    token_file = tmp / "token"
    write_secret(token_file, TOKEN + "\n")
    with http_server(
        str(workspace), "--token-file", str(token_file), tmp=tmp, token=TOKEN
    ) as server:
        yield server


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: c.name)
def test_golden_over_stdio(stdio: StdioServer, case: Golden) -> None:
    stdio.send_raw(_encode(case) + b"\n")
    if case.silent:
        stdio.expect_silence()
        return
    _check_answer(case, stdio.recv())


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: c.name)
def test_golden_over_http(http: HttpServer, case: Golden) -> None:
    response = http.post_raw(_encode(case), http.headers_for(case.send))
    assert response.status_code == case.status, response.text
    if case.silent:
        assert response.content == b""
        return
    assert response.headers["content-type"].startswith("application/json")
    _check_answer(case, response.json())


def test_discover_advertises_tools_and_resources_never_roots(stdio: StdioServer) -> None:
    result = stdio.ask(_req("server/discover"))["result"]
    assert result["supportedVersions"] == ["2026-07-28"]
    # Resource list changes and subscriptions: subscriptions/listen (issue 17, tools/live.py).
    assert result["capabilities"] == {
        "tools": {},
        "resources": {"listChanged": True, "subscribe": True},
    }
    # The instructions name this principal's workspaces (issue 25): a private answer.
    assert result["ttlMs"] > 0 and result["cacheScope"] == "private"


def test_tools_list_is_byte_identical_across_calls_and_instances(
    stdio: StdioServer, http: HttpServer, workspace: Path
) -> None:
    first = stdio.ask(_req("tools/list", id=1))["result"]
    second = stdio.ask(_req("tools/list", id=2))["result"]
    over_http = http.ask(_req("tools/list", id=1))["result"]
    with stdio_server(str(workspace)) as other:
        third = other.ask(_req("tools/list", id=1))["result"]
    dumps = {json.dumps(r, sort_keys=False) for r in (first, second, over_http, third)}
    assert len(dumps) == 1
    names = {t["name"] for t in first["tools"]}
    assert names == TOOLS
    for tool in first["tools"]:
        schema = tool["inputSchema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(tool["annotations"]) >= {"readOnlyHint", "destructiveHint", "idempotentHint"}
    assert first["cacheScope"] == "public" and first["ttlMs"] > 0


def test_stdio_answers_interleaved_requests_by_id(stdio: StdioServer) -> None:
    stdio.send_raw(
        b"".join(json.dumps(_req("tools/list", id=f"r{i}")).encode() + b"\n" for i in range(20))
    )
    ids = {stdio.recv()["id"] for _ in range(20)}
    assert ids == {f"r{i}" for i in range(20)}


def _check_legacy_initialize(answer: dict[str, Any]) -> None:
    check_legacy(answer, "initialize")
    assert answer["id"] == 1
    result = answer["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"]["name"] == "fs-notes"
    assert result["capabilities"] == {"tools": {}, "resources": {}}
    assert "resultType" not in result


def test_initialize_opens_a_legacy_session_on_both_transports(
    workspace: Path, http: HttpServer
) -> None:
    with stdio_server(str(workspace)) as fresh:
        fresh.send(LEGACY_INITIALIZE)
        _check_legacy_initialize(fresh.recv())
    headers = {  # what a 2025-11-25 client sends: no MCP-Protocol-Version on initialize
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {TOKEN}",
    }
    response = http.post_raw(json.dumps(LEGACY_INITIALIZE).encode(), headers)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert len(response.headers["mcp-session-id"]) >= 32
    _check_legacy_initialize(response.json())
