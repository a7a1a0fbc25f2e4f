"""Cancellation (issue 13 item 4; spec basic/patterns/cancellation): over stdio a
`notifications/cancelled` naming a request in flight, over HTTP the client disconnecting, means
the request is never answered and a search or listing stops at its next note. The log line that
says the work "stopped" is the evidence that it did not run to the end (its positive control: the
same search, not cancelled, is answered)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
from pathlib import Path

import pytest
from wire import HttpServer, StdioServer, call_tool, child_env, write_secret

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


# -- stopping the server during a first index build (issue 25 follow-up) ----------------------

BUILD_NOTES = 4000
STOP_WITHIN = 3.0  # seconds from the signal to the exit; the whole build takes longer here


@pytest.fixture(scope="module")
def heavy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4,000 notes of 12 KB of varied words: a first build of several seconds (about 6 on the
    2-core test host), so a signal sent at its first note lands well inside it."""
    ws = tmp_path_factory.mktemp("heavy") / "heavy"
    ws.mkdir()
    for i in range(BUILD_NOTES):
        words = " ".join(f"word{(i * 7919 + k * 104729) % 5000}" for k in range(1300))
        (ws / f"n{i:05d}.md").write_text(f"# Note {i}\n\n{words} pangolin\n")
    return ws


def _index_counts(state: Path, ws: Path) -> tuple[str, int, int]:
    """(integrity_check, notes in doc, rows in fts) of the workspace's index file."""
    import sqlite3

    from fs_notes.statefolder import index_name

    path = state / "fs-notes" / index_name(ws.name, str(ws.resolve()))
    conn = sqlite3.connect(path)
    try:
        check = conn.execute("PRAGMA integrity_check").fetchone()[0]
        docs = conn.execute("SELECT count(*) FROM doc").fetchone()[0]
        fts = conn.execute("SELECT count(*) FROM fts").fetchone()[0]
    finally:
        conn.close()
    return str(check), int(docs), int(fts)


def _progress_search(n: int, ws: Path) -> dict[str, object]:
    from wire import meta

    m = meta()
    m["progressToken"] = f"build-{n}"
    args = {"workspaceUri": ws.as_uri(), "query": "pangolin"}
    return call_tool(n, "notes_search", args, _meta=m)


def _restart_answers(ws: Path, state: Path) -> None:
    """A new server on the same state folder answers the search: the index is completed."""
    server = StdioServer("serve", str(ws), env=child_env(XDG_STATE_HOME=str(state)))
    try:
        args = {"workspaceUri": ws.as_uri(), "query": "pangolin"}
        server.send(call_tool(1, "notes_search", args))
        answer = server.recv(timeout=120)
        assert answer["id"] == 1 and answer["result"].get("isError") is not True, answer
        assert answer["result"]["structuredContent"]["matches"]
    finally:
        assert server.close() == 0
    assert _index_counts(state, ws) == ("ok", BUILD_NOTES, BUILD_NOTES)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_first_index_build_stops_stdio_serve_promptly(
    heavy: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    """Ctrl-C (or SIGTERM) while the first search builds the index: the server exits 0 within
    STOP_WITHIN seconds instead of finishing the build (it waited for the whole build before),
    the search is never answered, the index file is consistent and holds less than the whole
    folder (the proof the build was abandoned), and a restart completes it and answers."""
    state = tmp_path / "state"
    server = StdioServer("serve", str(heavy), env=child_env(XDG_STATE_HOME=str(state)))
    try:
        server.send(_progress_search(1, heavy))
        first = server.recv(timeout=60)  # the build's first note: it is under way
        assert first["method"] == "notifications/progress", first
        sent = time.monotonic()
        server.proc.send_signal(sig)
        code = server.proc.wait(STOP_WITHIN + 10)
        took = time.monotonic() - sent
    finally:
        server.close()
    assert code == 0, server.stderr
    assert took < STOP_WITHIN, (took, server.stderr)
    assert "stopping: 1 request(s) in flight cancelled" in server.stderr
    assert "tools/call id=1 stopped: the server is stopping" in server.stderr
    assert "notes indexed in" not in server.stderr  # the build did not run to its end
    check, docs, fts = _index_counts(state, heavy)
    assert check == "ok" and docs == fts and docs < BUILD_NOTES
    _restart_answers(heavy, state)


def test_sigint_during_a_legacy_sessions_first_index_build_stops_serve_promptly(
    heavy: Path, tmp_path: Path
) -> None:
    """A 2025-11-25 client (initialize) over stdio: its search's build is cancelled by SIGINT
    too (its session's requests are cancelled), the exit is prompt and 0, the index consistent;
    a restart completes it."""
    state = tmp_path / "state"
    server = StdioServer("serve", str(heavy), env=child_env(XDG_STATE_HOME=str(state)))
    try:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}}
        server.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        server.recv(timeout=30)
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        params = {"name": "notes_search",
                  "arguments": {"workspaceUri": heavy.as_uri(), "query": "pangolin"},
                  "_meta": {"progressToken": 7}}  # fmt: skip
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
        first = server.recv(timeout=60)
        assert first["method"] == "notifications/progress", first
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGINT)
        code = server.proc.wait(STOP_WITHIN + 10)
        took = time.monotonic() - sent
    finally:
        server.close()
    assert code == 0, server.stderr
    assert took < STOP_WITHIN, (took, server.stderr)
    assert "legacy request 2: the server is stopping" in server.stderr
    assert "notes indexed in" not in server.stderr
    assert "Traceback" not in server.stderr and "internal error" not in server.stderr
    check, docs, fts = _index_counts(state, heavy)
    assert check == "ok" and docs == fts and docs < BUILD_NOTES
    _restart_answers(heavy, state)


def test_sigint_during_the_first_index_build_stops_http_serve_promptly(
    heavy: Path, tmp_path: Path
) -> None:
    """The same over Streamable HTTP: the search's SSE stream has begun (its first progress
    event), SIGINT ends the server with exit 0 within STOP_WITHIN seconds (uvicorn no longer
    re-raises the signal: it exited 1 on SIGINT and died of SIGTERM before), and a restart
    completes the index."""
    import threading

    import httpx

    state = tmp_path / "state"
    token_file = tmp_path / "token"
    write_secret(token_file, TOKEN)
    server = HttpServer(str(heavy), "--token-file", str(token_file), tmp=tmp_path, token=TOKEN,
                        env=child_env(XDG_STATE_HOME=str(state)))  # fmt: skip
    started = threading.Event()
    message = _progress_search(1, heavy)

    def stream() -> None:
        headers = server.headers_for(message)
        with contextlib.suppress(httpx.HTTPError), httpx.stream(
            "POST", server.url, content=json.dumps(message).encode(), headers=headers,
            timeout=60,
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and "notifications/progress" in line:
                    started.set()

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    try:
        assert started.wait(60), server.log_path.read_text()
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGINT)
        code = server.proc.wait(STOP_WITHIN + 10)
        took = time.monotonic() - sent
    finally:
        server.close()
    log = server.log_path.read_text()
    assert code == 0, log
    assert took < STOP_WITHIN, (took, log)
    assert "tools/call id=1 stopped: the server is stopping" in log
    assert "notes indexed in" not in log
    check, docs, fts = _index_counts(state, heavy)
    assert check == "ok" and docs == fts and docs < BUILD_NOTES
    _restart_answers(heavy, state)
