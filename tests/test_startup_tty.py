"""A server started in a terminal says what it waits for (issue 25 item 5): with stdin a
terminal (a pty here), `serve` over stdio writes on stderr that it waits for an MCP client on
stdin and that Ctrl-D or Ctrl-C stops it, and Ctrl-D (end of input on the terminal) does stop it
(exit 0). With stdin a pipe, as an MCP client starts it, the line is not written."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from test_fs_support import one_note
from wire import REPO, child_env

from fs_notes.transport.stdio import WAITING


def test_a_terminal_is_told_the_server_waits_and_ctrl_d_stops_it(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fs_notes", "serve", str(one_note(tmp_path))],
        stdin=slave,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=child_env(),
        cwd=REPO,
    )
    os.close(slave)
    try:
        assert proc.stderr is not None
        seen = b""
        deadline = time.monotonic() + 30
        while WAITING.encode() not in seen and time.monotonic() < deadline:
            chunk = proc.stderr.readline()
            if not chunk:
                break
            seen += chunk
        assert WAITING.encode() in seen, seen.decode(errors="replace")
        assert "Ctrl-D or Ctrl-C stops it" in WAITING and "MCP client on stdin" in WAITING
        os.write(master, b"\x04")  # Ctrl-D on an empty line: end of input
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        os.close(master)


def test_a_pipe_is_not_told(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", str(one_note(tmp_path))],
        input=b"",
        capture_output=True,
        env=child_env(),
        cwd=REPO,
        timeout=30,
    )
    assert done.returncode == 0
    assert b"fs-notes INFO fs_notes.stdio: stdio transport closed" in done.stderr  # it ran
    assert WAITING.encode() not in done.stderr and b"waiting for an MCP client" not in done.stderr
