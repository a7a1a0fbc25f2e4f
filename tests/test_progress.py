"""MCP progress notifications while a request waits on a first index build (issue 25 item 5):
a folder of 3,000 small generated notes; a notes_search carrying `_meta.progressToken` receives
`notifications/progress` (valid against the schema of its revision) with strictly increasing
progress and the total, ending at total, all before its result - over stdio (2026-07-28 and a
2025-11-25 session) and over HTTP (an SSE response). Without a token, the same cold build sends
none (positive control of the count: the same build with a token sends some)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wire import (
    HttpServer,
    StdioServer,
    call_tool,
    check_legacy,
    check_message,
    meta,
    write_secret,
)

NOTES = 3000


def _folder(tmp_path: Path, name: str) -> Path:
    notes = tmp_path / name
    notes.mkdir()
    for i in range(NOTES):
        (notes / f"n{i:04d}.md").write_text(f"# Note {i}\n\nword{i % 7} pangolin\n")
    return notes


def _search(uri: str, rid: int | str, token: str | int | None) -> dict[str, Any]:
    m = meta()
    if token is not None:
        m["progressToken"] = token
    return call_tool(rid, "notes_search", {"workspaceUri": uri, "query": "pangolin"}, _meta=m)


def _until_answer(server: StdioServer, rid: int | str) -> tuple[list[dict[str, Any]], Any]:
    before: list[dict[str, Any]] = []
    while True:
        message = server.recv(timeout=60)
        if message.get("id") == rid:
            return before, message
        before.append(message)


def _check_progress(notes: list[dict[str, Any]], token: str | int) -> None:
    assert len(notes) >= 2, notes  # the first note and the last are always reported
    values = [n["params"]["progress"] for n in notes]
    assert all(n["method"] == "notifications/progress" for n in notes)
    assert all(n["params"]["progressToken"] == token for n in notes)
    assert all(n["params"]["total"] == NOTES for n in notes)
    assert values == sorted(set(values)) and values[-1] == NOTES
    assert notes[-1]["params"]["message"] == (
        f"indexing the workspace's notes: {NOTES} of {NOTES}"
    )


def test_stdio_search_with_a_token_gets_progress_before_its_result(tmp_path: Path) -> None:
    quiet, told = _folder(tmp_path, "quiet"), _folder(tmp_path, "told")
    for folder, token in ((quiet, None), (told, "tok-1")):
        server = StdioServer("serve", str(folder))
        try:
            server.send(_search(folder.as_uri(), 1, token))
            before, answer = _until_answer(server, 1)
            check_message(answer, "tools/call")
            assert answer["result"].get("isError") is not True
            if token is None:
                assert before == []
            else:
                for note in before:
                    check_message(note, "notifications/progress")
                _check_progress(before, token)
            server.send(_search(folder.as_uri(), 2, "tok-2"))  # warm: no build, no progress
            before, _ = _until_answer(server, 2)
            assert before == []
        finally:
            assert server.close() == 0


def test_a_legacy_session_gets_progress_too(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "legacy")
    server = StdioServer("serve", str(folder))
    try:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}}
        server.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        server.recv()
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        params = {
            "name": "notes_search",
            "arguments": {"workspaceUri": folder.as_uri(), "query": "pangolin"},
            "_meta": {"progressToken": 7},
        }
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
        before, answer = _until_answer(server, 2)
        assert answer["result"].get("isError") is not True
        for note in before:
            check_legacy(note, "notifications/progress")
        _check_progress(before, 7)
    finally:
        assert server.close() == 0


TOKEN = "tok-" + "5" * 40


def _events(body: str) -> list[dict[str, Any]]:
    out = []
    for block in body.split("\n\n"):
        data = [line[6:] for line in block.splitlines() if line.startswith("data: ")]
        if data:
            out.append(json.loads("".join(data)))
    return out


def test_http_search_with_a_token_is_an_sse_stream_of_progress_then_the_result(
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path, "http")
    write_secret(tmp_path / "token", TOKEN)
    token_file = str(tmp_path / "token")
    server = HttpServer(str(folder), "--token-file", token_file, tmp=tmp_path, token=TOKEN)
    try:
        response = server.post(_search(folder.as_uri(), 1, "h-1"))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        *before, answer = _events(response.text)
        assert answer["id"] == 1 and answer["result"].get("isError") is not True
        for note in before:
            check_message(note, "notifications/progress")
        _check_progress(before, "h-1")
        warm = server.post(_search(folder.as_uri(), 2, "h-2"))  # no build: plain JSON
        assert warm.headers["content-type"].startswith("application/json")
        assert warm.json()["id"] == 2
    finally:
        server.close()


def test_an_oversized_token_gets_no_progress_and_its_request_is_answered(tmp_path: Path) -> None:
    """A progressToken is echoed in every notification: one of more than 256 characters (here
    1 MB) or an integer past 64 bits gets none (the spec lets a server send no progress; the
    schema sets no size, so refusing the request would fail a valid one), its search is
    answered as usual, and one DEBUG line per request says why. Positive control: a token of
    exactly 256 characters, on the same kind of cold build, gets its progress."""
    cases: list[tuple[str | int, bool]] = [
        ("x" * (1 << 20), False), ("y" * 257, False), (1 << 63, False), ("z" * 256, True),
        (-(1 << 63), True),
    ]  # fmt: skip
    for n, (token, told) in enumerate(cases):
        folder = _folder(tmp_path, f"case{n}")
        server = StdioServer("--log-level", "debug", "serve", str(folder))
        try:
            server.send(_search(folder.as_uri(), 1, token))
            before, answer = _until_answer(server, 1)
            check_message(answer, "tools/call")
            assert answer["result"].get("isError") is not True
            assert answer["result"]["structuredContent"]["matches"]
            if told:
                _check_progress(before, token)
            else:
                assert before == []
        finally:
            assert server.close() == 0
        refusals = [line for line in server.stderr.splitlines() if "progressToken" in line]
        if told:
            assert refusals == []
        elif isinstance(token, str):
            assert refusals == [
                f"fs-notes DEBUG fs_notes.protocol: progressToken of {len(token)} characters "
                "(over 256): no progress is sent"
            ]
        else:
            assert refusals == [
                "fs-notes DEBUG fs_notes.protocol: progressToken outside the 64-bit integer "
                "range: no progress is sent"
            ]


def test_an_oversized_token_over_http_is_plain_json_not_a_stream(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "http-big")
    write_secret(tmp_path / "token", TOKEN)
    server = HttpServer(str(folder), "--token-file", str(tmp_path / "token"), tmp=tmp_path,
                        token=TOKEN)  # fmt: skip
    try:
        response = server.post(_search(folder.as_uri(), 1, "h" * 4096))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        body = response.json()
        check_message(body, "tools/call")
        assert body["id"] == 1 and body["result"]["structuredContent"]["matches"]
    finally:
        server.close()
