"""Streamable HTTP specifics: methods, authentication, Origin/Host, body limit, header checks.

Spec: basic/transports/streamable-http (Security, Sending Messages, Request Metadata, Server
Validation, Backward Compatibility) and docs/interface.md (bearer token from --token-file).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wire import HttpServer, call_tool, check_message, http_server, request, write_secret

TOKEN = "http-token-abcdefghijklmnop"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    tmp = tmp_path_factory.mktemp("http")
    ws = tmp / "notes"
    ws.mkdir()
    (ws / "résumé.md").write_text("# Résumé\n")
    (ws / "plain.md").write_text("# Plain\n")
    write_secret(tmp / "token", f"  {TOKEN}\n")
    with http_server(str(ws), "--token-file", str(tmp / "token"), tmp=tmp, token=TOKEN) as srv:
        srv.workspace = ws  # type: ignore[attr-defined]
        yield srv


def _discover() -> dict[str, Any]:
    return request(1, "server/discover")


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH"])
def test_only_post_is_allowed(server: HttpServer, method: str) -> None:
    response = server.client.request(
        method, server.url, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_missing_token_gets_401_with_a_bearer_challenge(server: HttpServer) -> None:
    headers = server.headers_for(_discover())
    del headers["Authorization"]
    response = server.post_raw(json.dumps(_discover()).encode(), headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="fs-notes"'


@pytest.mark.parametrize(
    "value", [f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer", f"Basic {TOKEN}", TOKEN]
)
def test_wrong_token_gets_401_and_the_handler_never_runs(server: HttpServer, value: str) -> None:
    response = server.post(
        call_tool(
            1,
            "notes_create",
            {
                "workspaceUri": "file://" + str(server.workspace),  # type: ignore[attr-defined]
                "id": "intruder.md",
                "content": "x",
            },
        ),
        {"Authorization": value},
    )
    assert response.status_code == 401
    assert "Bearer" in response.headers["www-authenticate"]
    assert not (server.workspace / "intruder.md").exists()  # type: ignore[attr-defined]


def test_the_trimmed_token_file_content_authenticates(server: HttpServer) -> None:
    assert server.post(_discover()).status_code == 200


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1:1"])
def test_a_foreign_origin_gets_403(server: HttpServer, origin: str) -> None:
    response = server.post(_discover(), {"Origin": origin})
    assert response.status_code == 403


def test_the_servers_own_loopback_origin_is_allowed(server: HttpServer) -> None:
    response = server.post(_discover(), {"Origin": f"http://127.0.0.1:{server.port}"})
    assert response.status_code == 200


def test_a_rebound_host_name_gets_403(server: HttpServer) -> None:
    response = server.post(_discover(), {"Host": f"attacker.example:{server.port}"})
    assert response.status_code == 403


def test_a_body_over_the_limit_gets_413(server: HttpServer) -> None:
    body = json.dumps(request(1, "server/discover", {"pad": "x" * (5 << 20)})).encode()
    response = server.post_raw(body, server.headers_for(_discover()))
    assert response.status_code == 413


def test_a_notification_gets_202_with_an_empty_body(server: HttpServer) -> None:
    response = server.post({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}})
    assert response.status_code == 202 and response.content == b""


@pytest.mark.parametrize(
    "override,why",
    [
        ({"MCP-Protocol-Version": None}, "missing version header"),
        ({"MCP-Protocol-Version": "2025-11-25"}, "version header differs from _meta"),
        ({"Mcp-Method": None}, "missing method header"),
        ({"Mcp-Method": "tools/list"}, "method header differs from body"),
        ({"Mcp-Name": None}, "missing name header"),
        ({"Mcp-Name": "notes_read"}, "name header differs from body"),
        ({"Mcp-Name": "=?base64?bm90ZXNfcmVhZA==?="}, "base64 name differs from body"),
        ({"Mcp-Name": "=?base64?!!!?="}, "invalid base64"),
    ],
)
def test_header_body_mismatch_is_400_with_32020(
    server: HttpServer, override: dict[str, Any], why: str
) -> None:
    message = call_tool(9, "notes_list", {"workspaceUri": "file://" + str(server.workspace)})  # type: ignore[attr-defined]
    response = server.post(message, override)
    assert response.status_code == 400, why
    body = response.json()
    check_message(body)
    assert body["error"]["code"] == -32020 and body["id"] == 9


def test_a_base64_sentinel_name_is_decoded_before_comparing(server: HttpServer) -> None:
    uri = "file://" + str(server.workspace / "résumé.md").replace("é", "%C3%A9")  # type: ignore[attr-defined]
    message = request(3, "resources/read", {"uri": uri})
    encoded = "=?base64?" + base64.b64encode(uri.encode()).decode() + "?="
    response = server.post(message, {"Mcp-Name": encoded})
    assert response.status_code == 200, response.text
    assert response.json()["result"]["contents"][0]["text"] == "# Résumé\n"


def test_status_codes_follow_the_error_codes(server: HttpServer) -> None:
    assert server.post(request(1, "nope/nope")).status_code == 404
    missing_caps = request(1, "server/discover")
    del missing_caps["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert server.post(missing_caps).status_code == 400


def test_session_headers_of_older_revisions_are_ignored(server: HttpServer) -> None:
    response = server.post(_discover(), {"Mcp-Session-Id": "abc", "Last-Event-ID": "5"})
    assert response.status_code == 200
    assert "mcp-session-id" not in response.headers


def test_serve_http_refuses_to_start_without_a_token_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", str(tmp_path), "--http", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "--token-file" in result.stderr and len(result.stderr.strip().splitlines()) == 1
