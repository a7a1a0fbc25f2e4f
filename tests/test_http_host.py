"""The HTTP edge (issue 13 item 4): the Host check for forwarded and proxied setups, bind
errors as one fs-notes line with exit 2, IPv6 loopback, and a delete retry without an answer
asked again over HTTP (the stdio side is in test_delete_flow.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from wire import REPO, HttpServer, call_tool, child_env, write_secret

from fs_notes.transport.http import HostCheck, split_host

TOKEN = "host-token-0123456789ab"
FORM: dict[str, object] = {"elicitation": {"form": {}}}


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "plan.md").write_text("# Plan\n")
    write_secret(tmp_path / "token", TOKEN)
    return ws


def _list(server: HttpServer, host: str) -> httpx.Response:
    message = call_tool(1, "notes_list", {"workspaceUri": "file:///nowhere"})
    headers = server.headers_for(message)
    headers["Host"] = host
    return server.post_raw(json.dumps(message).encode(), headers)


def test_forwarded_hosts_are_accepted_only_when_allowed(notes: Path, tmp_path: Path) -> None:
    server = HttpServer(str(notes), "--token-file", str(tmp_path / "token"),
                        "--allow-host", "localhost:9000", "--allow-host", "notes.example",
                        tmp=tmp_path, token=TOKEN)  # fmt: skip
    try:
        port = server.port
        allowed = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST:9000",
                   "localhost:9000", "notes.example", "notes.example:443", "Notes.Example:8080"]
        refused = ["localhost:9001", "localhost", f"evil.example:{port}", "notes.example.evil",
                   f"127.0.0.1:{port}x", "", "localhost:", f"127.0.0.2:{port}"]  # fmt: skip
        got = {host: _list(server, host).status_code for host in allowed + refused}
    finally:
        server.close()
    assert {h: got[h] for h in allowed} == dict.fromkeys(allowed, 200)
    assert {h: got[h] for h in refused} == dict.fromkeys(refused, 403)


def test_host_values_parse_strictly() -> None:
    assert split_host("[::1]:8080") == ("[::1]", 8080)
    assert split_host("notes.example") == ("notes.example", None)
    for bad in ("", "a b", "h:0", "h:70000", "h:x", "[::1", "h:1:2"):
        with pytest.raises(ValueError):
            split_host(bad)
    check = HostCheck(["localhost:8765"])
    assert check.accepts("localhost:8765") and not check.accepts("localhost:8766")


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fs_notes", "serve", *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=child_env(), stdin=subprocess.DEVNULL)  # fmt: skip


def test_bind_errors_end_with_exit_2_and_one_line(notes: Path, tmp_path: Path) -> None:
    token = ("--token-file", str(tmp_path / "token"))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        in_use = _serve(str(notes), "--http", f"127.0.0.1:{port}", *token)
    finally:
        taken.close()
    foreign = _serve(str(notes), "--http", "192.0.2.1:8765", *token)  # TEST-NET-1: not here
    unknown = _serve(str(notes), "--http", "no-such-host.invalid:8765", *token)
    badhost = _serve(str(notes), "--http", "127.0.0.1:8765", *token, "--allow-host", "a b")
    for proc, says in (
        (in_use, f"fs-notes: --http 127.0.0.1:{port}: cannot listen there: Address already in use"),
        (foreign, "fs-notes: --http 192.0.2.1:8765: cannot listen there: Cannot assign requested "
                  "address"),
        (unknown, "fs-notes: --http no-such-host.invalid:8765: unknown host ("),
        (badhost, "fs-notes: --allow-host takes HOST[:PORT], got 'a b'"),
    ):  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(says), proc.stderr
        assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_ipv6_loopback_serves(notes: Path, tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "fs_notes", "serve", str(notes), "--http", f"[::1]:{port}",
         "--token-file", str(tmp_path / "token")],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO, env=child_env(),
    )  # fmt: skip
    try:
        message = call_tool(1, "notes_list", {"workspaceUri": notes.as_uri()})
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                   "Mcp-Name": "notes_list"}  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                response = httpx.post(f"http://[::1]:{port}/mcp", content=json.dumps(message),
                                      headers=headers, timeout=10)  # fmt: skip
                break
            except httpx.ConnectError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        server.terminate()
        server.communicate(timeout=15)
    assert response.status_code == 200
    ids = [n["id"] for n in response.json()["result"]["structuredContent"]["notes"]]
    assert ids == ["plan.md"]


def test_a_delete_retry_without_an_answer_is_asked_again_over_http(
    notes: Path, tmp_path: Path
) -> None:
    server = HttpServer(str(notes), "--token-file", str(tmp_path / "token"), tmp=tmp_path,
                        token=TOKEN)  # fmt: skip
    args = {"workspaceUri": notes.as_uri(), "title": "Plan"}
    try:
        first = server.ask(call_tool(1, "notes_delete", args, FORM))["result"]
        again = server.ask(call_tool(2, "notes_delete", args, FORM,
                                     requestState=first["requestState"]))["result"]  # fmt: skip
        choice = {"action": "accept", "content": {"note_id": "plan.md", "confirm": True}}
        done = server.ask(call_tool(3, "notes_delete", args, FORM,
                                    inputResponses={"delete_choice": choice},
                                    requestState=again["requestState"]))["result"]  # fmt: skip
    finally:
        server.close()
    assert again["resultType"] == "input_required"
    assert again["requestState"] == first["requestState"]
    assert done["structuredContent"] == {"deleted": "plan.md", "outcome": "deleted"}
    assert not (notes / "plan.md").exists()
