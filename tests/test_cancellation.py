"""Cancellation (issue 13 item 4; spec basic/patterns/cancellation): over stdio a
`notifications/cancelled` naming a request in flight, over HTTP the client disconnecting, means
the request is never answered and a search or listing stops at its next note. The log line that
says the work "stopped" is the evidence that it did not run to the end (its positive control: the
same search, not cancelled, is answered)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from wire import HttpServer, StdioServer, call_tool, write_secret

TOKEN = "cancel-token-0123456789"


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("big") / "notes"
    ws.mkdir()
    for i in range(4000):
        (ws / f"n{i:05d}.md").write_text(f"# Note {i}\n\n" + "lorem ipsum dolor " * 40 + "\n")
    return ws


def _search(n: int, ws: Path) -> dict[str, object]:
    return call_tool(n, "notes_search", {"workspaceUri": ws.as_uri(), "query": "no such words"})


def _responses(server: StdioServer, seconds: float) -> list[dict[str, object]]:
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            got.append(server.recv(timeout=max(0.05, deadline - time.monotonic())))
        except (TimeoutError, AssertionError):
            break
    return got


def test_a_cancelled_stdio_request_is_never_answered_and_its_search_stops(big: Path) -> None:
    """The search is the server's first, so it builds the index (4,000 notes: long enough for
    the cancellation to land); the positive control is the same search answered afterwards."""
    server = StdioServer("--log-level", "info", "serve", str(big))
    try:
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 2, "reason": "the user gave up"}}  # fmt: skip
        server.send_raw(
            (json.dumps(_search(2, big)) + "\n" + json.dumps(cancel) + "\n").encode()
        )
        later = server.ask(call_tool(3, "notes_list", {"workspaceUri": big.as_uri(), "limit": 1}))
        assert later["id"] == 3 and later["result"].get("isError") is not True
        assert [r.get("id") for r in _responses(server, 1.0)] == []  # 2 never comes
        # A cancellation naming nothing in flight is ignored: no answer, no error.
        for request_id in (2, 99, "x", None, True):
            server.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": request_id}})  # fmt: skip
        server.expect_silence(0.3)
        control = server.ask(_search(4, big))  # positive control: answered when not cancelled
        assert control["result"]["structuredContent"]["matches"] == []
    finally:
        assert server.close() == 0
    assert "tools/call id=2 stopped: cancelled by the client" in server.stderr


def test_an_http_client_that_disconnects_cancels_its_request(big: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    write_secret(token_file, TOKEN)
    server = HttpServer(str(big), "--token-file", str(token_file), tmp=tmp_path, token=TOKEN,
                        top=("--log-level", "info"))  # fmt: skip
    try:
        body = json.dumps(_search(7, big)).encode()
        headers = server.headers_for(_search(7, big))
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        raw = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        s = socket.create_connection(("127.0.0.1", server.port))
        s.sendall(raw)
        time.sleep(0.02)
        s.close()  # the client gives up
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if "id=7 stopped: cancelled by the client" in server.log_path.read_text():
                break
            time.sleep(0.05)
        answered = server.post(_search(8, big))  # positive control: the same search, answered
        assert answered.status_code == 200
        assert answered.json()["result"]["structuredContent"]["matches"] == []
    finally:
        server.close()
    assert "tools/call id=7 stopped: cancelled by the client" in server.log_path.read_text()
