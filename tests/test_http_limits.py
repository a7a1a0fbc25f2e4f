"""Bounded resources over HTTP (issue 13 item 1): what anyone who reaches the port can hold, and
what one principal can hold, never stops another's authorized work.

Each test attacks a real server process and then asks it for authorized work that needs file
descriptors (a create through the write worker, a read); positive controls show the attack
really holds what it claims to (its connections stay open until the server closes them)."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from wire import HttpServer, call_tool

from fs_notes.policy import hash_token

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"


def _policy(tmp_path: Path, limits: str) -> Path:
    ws = tmp_path / "notes"
    ws.mkdir(exist_ok=True)
    (ws / "a.md").write_text("# A\n")
    policy = tmp_path / "policy.toml"
    lines = []
    for name, token in (("alice", ALICE), ("bob", BOB)):
        lines.append(
            f'[[principal]]\nname = "{name}"\ntoken_sha256 = "{hash_token(token)}"\n\n'
            f'[[grant]]\nprincipal = "{name}"\nworkspace = "notes"\n'
            'operations = ["read", "write", "delete"]\n'
        )
    lines.append(f'[[workspace]]\nname = "notes"\npath = "{ws}"\n\n[limits]\n{limits}\n')
    policy.write_text("\n".join(lines))
    return policy


def _slow_post(port: int) -> bytes:
    """A POST by Alice whose 1,000-byte body never comes (one byte of it does)."""
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {ALICE}\r\nContent-Length: 1000\r\n\r\n{{"
    ).encode()


def _open(port: int, n: int, payload: bytes) -> list[socket.socket]:
    held = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if payload:
            s.sendall(payload)
        held.append(s)
    return held


def _closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HttpServer]:
    policy = _policy(tmp_path, "max_connections = 200\nrequest_timeout = 2\n")
    # RLIMIT_NOFILE 256, as tight as the report's 1024 was for 1,074 connections: the
    # server keeps FD_RESERVE (128) of them for itself, so at most 128 connections are open.
    srv = HttpServer("--policy", str(policy), tmp=tmp_path, token=ALICE,
                     prefix=("prlimit", "--nofile=256:256"))  # fmt: skip
    try:
        yield srv
    finally:
        srv.close()


def _create(srv: HttpServer, n: int, token: str = ALICE) -> dict[str, object]:
    uri = (Path(srv.port_file).parent / "notes").as_uri()
    message = call_tool(n, "notes_create", {"workspaceUri": uri, "id": f"n{n}.md", "content": "x"})
    headers = srv.headers_for(message)
    headers["Authorization"] = f"Bearer {token}"
    response = srv.post_raw(json.dumps(message).encode(), headers)
    assert response.status_code == 200, response.text
    result: dict[str, object] = response.json()["result"]
    return result


def test_connections_that_never_send_a_request_cannot_starve_authorized_work(
    server: HttpServer, tmp_path: Path
) -> None:
    held = _open(server.port, 300, b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never ends
    try:
        # Beyond the budget, each new connection takes the place of the oldest that never had a
        # request answered; the newest 128 are held (the positive control: the attack is real
        # until the request timeout), and the create below gets in the same way.
        time.sleep(0.5)
        readable, _, _ = select.select(held, [], [], 0)
        refused = [s for s in readable if _closed_by_server(s, 0.1)]
        # 256 descriptors, 128 kept: about 128 connections held, the rest closed.
        assert 150 <= len(refused) <= 200, len(refused)
        result = _create(server, 1)  # needs a worker: descriptors were kept for it
        assert result.get("isError") is not True, result
        assert (tmp_path / "notes" / "n1.md").read_text() == "x"
        # Each held connection is closed once its request timeout (2 s) has passed.
        assert all(_closed_by_server(s, 10) for s in held)
    finally:
        for s in held:
            s.close()
    log = server.log_path.read_text()
    assert "at most 128 HTTP connections (not 200)" in log
    assert "connection closed to make room: 128 connections are open" in log


def test_a_request_body_that_never_ends_is_cut_off(server: HttpServer) -> None:
    head = _slow_post(server.port)
    (s,) = _open(server.port, 1, head)
    try:
        assert not _closed_by_server(s, 0.5)  # positive control: still open, mid-body
        started = time.monotonic()
        assert _closed_by_server(s, 10)
        assert time.monotonic() - started < 9
    finally:
        s.close()


def test_one_principal_with_every_slot_in_flight_does_not_delay_another(
    server: HttpServer,
) -> None:
    # Alice starts 16 requests whose bodies never arrive: her 17th gets 429 at once; Bob's
    # request is answered as if nothing happened.
    head = _slow_post(server.port)
    held = _open(server.port, 16, head)
    try:
        time.sleep(0.3)  # let the server take them in
        message = call_tool(7, "notes_list", {"workspaceUri": "file:///nowhere"})
        headers = server.headers_for(message)
        refused = server.post_raw(json.dumps(message).encode(), headers)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["error"]["message"] == (
            "Too many requests in flight for this principal (limit 16)"
        )
        result = _create(server, 2, token=BOB)
        assert result.get("isError") is not True, result
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    assert _create(server, 3).get("isError") is not True  # Alice's slots are hers again


def test_refused_requests_cannot_be_pipelined_to_stall_a_connection(server: HttpServer) -> None:
    # A reviewer's finding: unauthenticated POSTs pipelined on connections that never read kept
    # every slot busy, out of reach of eviction. A refusal now closes its connection.
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    ).encode()
    (s,) = _open(server.port, 1, request * 50)
    try:
        s.settimeout(10)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    finally:
        s.close()
    assert got.count(b"HTTP/1.1 401") == 1  # one answer, then the connection is closed
    assert b"connection: close" in got.lower()
