"""A raw MCP client over stdio for the exercises: one server process, JSON lines, timeouts.

Guarantees: `ask` returns the response whose id matches, or raises `TargetFailed` after the
timeout or when the server has exited (its stderr tail in the message); `close` ends the server
(EOF, then SIGKILL after a grace period) and reaps it.
Does not: validate responses against the MCP schema (the test suite does that elsewhere).
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

PROTOCOL_VERSION = "2026-07-28"
CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}}
CLIENT_INFO = {"name": "fs-notes-exercises", "version": "1"}


class TargetFailed(Exception):
    """The server did not answer (timeout, or it exited)."""


def meta(extra_capabilities: Mapping[str, Any] | None = None) -> dict[str, Any]:
    caps = {**CAPABILITIES, **(extra_capabilities or {})}
    return {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }


class TargetClient:
    def __init__(self, command: Sequence[str], stderr_path: Path, cwd: Path) -> None:
        self._stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=cwd,
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True).start()
        self._next = 0
        self._lock = threading.Lock()

    def _pump(self, stream: BinaryIO) -> None:
        for line in iter(stream.readline, b""):
            self._lines.put(line)
        self._lines.put(None)

    def stderr_tail(self, lines: int = 5) -> str:
        try:
            text = self._stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def ask(self, method: str, params: Mapping[str, Any], timeout: float = 20.0) -> dict[str, Any]:
        with self._lock:
            self._next += 1
            rid = self._next
            message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": dict(params)}
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(json.dumps(message).encode() + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                raise TargetFailed(f"the server has exited: {self.stderr_tail()}") from None
            while True:
                try:
                    line = self._lines.get(timeout=timeout)
                except queue.Empty:
                    raise TargetFailed(f"no answer within {timeout:.0f} s") from None
                if line is None:
                    self._lines.put(None)
                    raise TargetFailed(f"the server has exited: {self.stderr_tail()}")
                response: dict[str, Any] = json.loads(line)
                if response.get("id") == rid:
                    return response

    def close(self, grace: float = 10.0) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = None
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        return code
