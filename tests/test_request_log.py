"""One log line per request (issue 25 item 5): the exact line for a tool that succeeds, a tool
error, a protocol error, an unreadable line, a note id with a newline, a space and a bidi
control, a legacy (2025-11-25) session's request (one line, however many rounds inside), an HTTP
401 (the token nowhere in the log), and the same fields as a JSON object under
--log-format json. Every other record of the run is left alone: only `fs_notes.requests` lines
are compared, and each run must have exactly as many of them as requests sent."""

from __future__ import annotations

import json
import re
from pathlib import Path

from wire import HttpServer, StdioServer, call_tool, request, write_secret

PREFIX = "fs-notes INFO fs_notes.requests: request "


def _request_lines(stderr: str) -> list[str]:
    """The request lines, with the milliseconds (the one varying field) checked and blanked."""
    out = []
    for line in stderr.splitlines():
        if line.startswith(PREFIX):
            assert re.search(r" ms=\d+ ", line), line
            out.append(re.sub(r" ms=\d+ ", " ms=N ", line[len(PREFIX) :]))
    return out


def _folder(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nsecret body words\n")
    return notes


def test_each_stdio_request_leaves_its_exact_line(tmp_path: Path) -> None:
    notes = _folder(tmp_path)
    uri = notes.as_uri()
    server = StdioServer("serve", str(notes))
    try:
        ok = server.ask(call_tool(1, "notes_read", {"workspaceUri": uri, "id": "a.md"}))
        assert ok["result"].get("isError") is not True
        missing = server.ask(call_tool(2, "notes_read", {"workspaceUri": uri, "id": "gone.md"}))
        assert missing["result"]["isError"] is True
        unknown = server.ask(request(3, "no/such/method"))
        assert unknown["error"]["code"] == -32601
        evil = server.ask(call_tool(4, "notes_read", {"workspaceUri": uri, "id": "x y\n\u202e.md"}))
        assert evil["result"]["isError"] is True
        server.send_raw(b"{not json\n")
        assert server.recv()["error"]["code"] == -32700
        found = server.ask(call_tool(5, "notes_search", {"workspaceUri": uri, "query": "secret"}))
        assert found["result"].get("isError") is not True
        elsewhere = server.ask(call_tool(6, "notes_list", {"workspaceUri": "file:///etc"}))
        assert elsewhere["result"]["isError"] is True
    finally:
        assert server.close() == 0
    common = "ms=N transport=stdio protocol=2026-07-28 principal="
    principal = _request_lines(server.stderr)[0].split("principal=")[1].split(" ")[0]
    assert principal  # the zero-config principal (the user's name)
    who = f"{common}{principal}"
    assert _request_lines(server.stderr) == [
        f"outcome=ok {who} workspace=notes method=tools/call tool=notes_read id=a.md",
        f"outcome=isError {who} workspace=notes method=tools/call tool=notes_read id=gone.md",
        f"outcome=-32601 {who} workspace=- method=no/such/method tool=- id=-",
        f"outcome=isError {who} workspace=notes method=tools/call tool=notes_read "
        "id=x\\u0020y\\n\\u202e.md",
        f"outcome=-32700 ms=N transport=stdio protocol=- principal={principal} workspace=- "
        "method=- tool=- id=-",
        f"outcome=ok {who} workspace=notes method=tools/call tool=notes_search id=-",
        f"outcome=isError {who} workspace=? method=tools/call tool=notes_list id=-",
    ]
    # Never the query, the note's text or a path; never a raw control character.
    assert "secret" not in server.stderr
    ours = "\n".join(_request_lines(server.stderr))
    assert "/etc" not in ours and str(notes) not in ours and "file:" not in ours
    assert "\u202e" not in server.stderr


def test_a_legacy_request_leaves_one_line_with_its_version(tmp_path: Path) -> None:
    notes = _folder(tmp_path)
    server = StdioServer("serve", str(notes))
    try:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}}
        server.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        assert "result" in server.recv()
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        args = {"name": "notes_read", "arguments": {"workspaceUri": notes.as_uri(), "id": "a.md"}}
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": args})
        assert server.recv()["result"].get("isError") is not True
    finally:
        assert server.close() == 0
    lines = _request_lines(server.stderr)
    assert [re.sub(r"principal=\S+", "principal=P", line) for line in lines] == [
        "outcome=ok ms=N transport=stdio protocol=2025-11-25 principal=P workspace=- "
        "method=initialize tool=- id=-",
        "outcome=ok ms=N transport=stdio protocol=2025-11-25 principal=P workspace=notes "
        "method=tools/call tool=notes_read id=a.md",
    ]


def test_json_lines_carry_the_same_fields(tmp_path: Path) -> None:
    notes = _folder(tmp_path)
    server = StdioServer("--log-format", "json", "serve", str(notes))
    try:
        server.ask(call_tool(1, "notes_read", {"workspaceUri": notes.as_uri(), "id": "a\n.md"}))
    finally:
        assert server.close() == 0
    records = [json.loads(line) for line in server.stderr.splitlines()]
    lines = [r for r in records if r["logger"] == "fs_notes.requests"]
    assert len(lines) == 1
    entry = lines[0]
    assert isinstance(entry.pop("ms"), int)
    assert entry.pop("time")
    assert entry.pop("principal")
    assert entry == {
        "level": "INFO",
        "logger": "fs_notes.requests",
        "message": "request",
        "outcome": "isError",
        "transport": "stdio",
        "protocol": "2026-07-28",
        "workspace": "notes",
        "method": "tools/call",
        "tool": "notes_read",
        "id": "a\\n.md",
    }


TOKEN = "tok-" + "7" * 40


def test_an_http_401_leaves_one_line_without_the_token(tmp_path: Path) -> None:
    notes = _folder(tmp_path)
    write_secret(tmp_path / "token", TOKEN)
    token_file = str(tmp_path / "token")
    server = HttpServer(str(notes), "--token-file", token_file, tmp=tmp_path, token=TOKEN)
    try:
        wrong = "wrong-" + "9" * 30
        message = call_tool(1, "notes_read", {"workspaceUri": notes.as_uri(), "id": "a.md"})
        refused = server.post(message, {"Authorization": f"Bearer {wrong}"})
        assert refused.status_code == 401
        answered = server.post(message)
        assert answered.status_code == 200
        assert answered.json()["result"].get("isError") is not True
    finally:
        server.close()
    log = server.log_path.read_text()
    named = r"principal=(?!- )\S+ w"  # the zero-config principal is the login user's name
    lines = [re.sub(named, "principal=P w", line) for line in _request_lines(log)]
    assert lines == [
        "outcome=http-401 ms=N transport=http protocol=- principal=- workspace=- method=POST "
        "tool=- id=-",
        "outcome=ok ms=N transport=http protocol=2026-07-28 principal=P workspace=notes "
        "method=tools/call tool=notes_read id=a.md",
    ]
    assert wrong not in log and TOKEN not in log and "Bearer" not in log


def test_http_legacy_requests_and_unreadable_bodies_leave_one_line_each(tmp_path: Path) -> None:
    notes = _folder(tmp_path)
    write_secret(tmp_path / "token", TOKEN)
    token_file = str(tmp_path / "token")
    server = HttpServer(str(notes), "--token-file", token_file, tmp=tmp_path, token=TOKEN)
    base = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {TOKEN}",
    }
    try:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
        opened = server.post_raw(json.dumps(body).encode(), base)
        assert opened.status_code == 200
        session = {**base, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        session["MCP-Protocol-Version"] = "2025-11-25"
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert server.post_raw(json.dumps(done).encode(), session).status_code == 202
        args = {"name": "notes_read", "arguments": {"workspaceUri": notes.as_uri(), "id": "a.md"}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": args}
        answered = server.post_raw(json.dumps(call).encode(), session)
        assert answered.json()["result"].get("isError") is not True
        lost = {**session, "Mcp-Session-Id": "no-such-session"}
        assert server.post_raw(json.dumps(call).encode(), lost).status_code == 404
        assert server.post_raw(b"{not json", base).status_code == 400
    finally:
        server.close()
    lines = [
        re.sub(r"principal=(?!- )\S+ w", "principal=P w", line)
        for line in _request_lines(server.log_path.read_text())
    ]
    assert lines == [
        "outcome=ok ms=N transport=http protocol=2025-11-25 principal=P workspace=- "
        "method=initialize tool=- id=-",
        "outcome=ok ms=N transport=http protocol=2025-11-25 principal=P workspace=notes "
        "method=tools/call tool=notes_read id=a.md",
        "outcome=http-404 ms=N transport=http protocol=- principal=P workspace=- method=POST "
        "tool=- id=-",
        "outcome=-32700 ms=N transport=http protocol=- principal=P workspace=- method=- "
        "tool=- id=-",
    ]
