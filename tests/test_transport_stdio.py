"""stdio transport: interleaving, clean exits, no leftovers, oversized lines.

Spec: basic/transports/stdio."""

from __future__ import annotations

import signal
import time
import urllib.parse
from pathlib import Path

import psutil
import pytest
from wire import call_tool, request, stdio_server


def _uri(p: Path) -> str:
    return "file://" + urllib.parse.quote(str(p))


def test_a_slow_call_does_not_block_a_quick_one(tmp_path: Path) -> None:
    for i in range(4000):
        (tmp_path / f"n{i:04d}.md").write_text(f"# Note {i}\n" + "lorem ipsum " * 40)
    with stdio_server(str(tmp_path)) as server:
        server.send(
            call_tool("slow", "notes_search", {"workspaceUri": _uri(tmp_path), "query": "zzz"})
        )
        server.send(request("quick", "server/discover"))
        first, second = server.recv(30), server.recv(30)
        assert first["id"] == "quick" and second["id"] == "slow"


def _a_worker(processes: list[psutil.Process]) -> bool:
    """Whether one of `processes` is a confined worker (started `python -I -S ...`, not the
    relay or the server, which the started process now is a relay of: sandbox/session.py)."""
    for process in processes:
        try:
            if "-I" in process.cmdline()[1:3]:
                return True
        except psutil.Error:
            continue
    return False


@pytest.mark.parametrize("how", ["eof", "sigterm", "sigint"])
def test_the_server_exits_cleanly_and_leaves_no_child_behind(tmp_path: Path, how: str) -> None:
    (tmp_path / "a.md").write_text("# A\n")
    with stdio_server(str(tmp_path), "--replay-db", str(tmp_path / "r.db")) as server:
        # Start the confined deletion worker: ask to delete (round 1 waits for the OS layer).
        caps: dict[str, object] = {"elicitation": {"form": {}}}
        first = server.ask(
            call_tool(1, "notes_delete", {"workspaceUri": _uri(tmp_path), "title": "A"}, caps)
        )
        assert first["result"]["resultType"] == "input_required"
        parent = psutil.Process(server.proc.pid)
        deadline = time.monotonic() + 10
        children = parent.children(recursive=True)  # relays, the server, its workers
        while not _a_worker(children) and time.monotonic() < deadline:
            time.sleep(0.05)
            children = parent.children(recursive=True)
        assert _a_worker(children), "the confined worker should be running"
        if how == "eof":
            code = server.close()
        else:
            server.proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGINT)
            code = server.proc.wait(15)
        assert code == 0, server.stderr
        _gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"left behind: {alive}"


def test_an_oversized_line_is_refused_and_the_server_goes_on(tmp_path: Path) -> None:
    with stdio_server(str(tmp_path)) as server:
        server.send_raw(
            b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"' + b"x" * (9 << 20) + b'"}}\n'
        )
        answer = server.recv(30)
        assert answer["error"]["code"] == -32600 and "id" not in answer
        assert server.ask(request(2, "server/discover"))["result"]["resultType"] == "complete"


def test_a_lone_surrogate_in_a_request_does_not_silence_the_server(tmp_path: Path) -> None:
    with stdio_server(str(tmp_path)) as server:
        server.send_raw(
            b'{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///x/\\udcc0.md",'
            b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            b'"io.modelcontextprotocol/clientCapabilities":{}}}}\n'
        )
        assert server.recv()["error"]["code"] == -32602
        assert server.ask(request(2, "server/discover"))["result"]["resultType"] == "complete"


def test_the_first_discover_is_answered_before_pydantic_and_the_tools_load(tmp_path: Path) -> None:
    """Cold start (issue #2): server/discover needs no model building; the tools load after."""
    import subprocess
    import sys

    from wire import REPO, child_env

    line = (
        b'{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{'
        b'"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        b'"io.modelcontextprotocol/clientCapabilities":{}}}}\n'
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "fs_notes",
            "serve",
            str(tmp_path),
            "--replay-db",
            str(tmp_path / "r.db"),
        ],
        input=line,
        capture_output=True,
        timeout=60,
        cwd=REPO,
        env=child_env(),
    )
    assert proc.returncode == 0
    assert b'"supportedVersions"' in proc.stdout
    imported = proc.stderr.decode()
    assert "fs_notes.discovery" in imported
    assert "pydantic" not in imported and "fs_notes.tools.read_tools" not in imported
