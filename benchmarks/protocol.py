"""Protocol throughput and cold start of the real server (issue 2; not part of the test suite).

    .venv/bin/python benchmarks/protocol.py [--quick]

Measures, against `python -m fs_notes serve DIR` as a child process:
  - stdio calls/s for server/discover and tools/list: strictly sequential (send one, wait for its
    answer) and pipelined with a window of 32 outstanding requests;
  - HTTP calls/s (one keep-alive connection, sequential) with http.client and with httpx;
  - the in-process dispatcher rate (parse + handle + dumps, no transport), for comparison;
  - cold start: spawn to the first server/discover response on stdio (median of N runs), with
    a primed private bytecode cache (PYTHONPYCACHEPREFIX, like an installed package) and without
    one (this host sets PYTHONDONTWRITEBYTECODE=1); then `python -c pass` and the import of
    pydantic, asyncio and the server modules alone, to show where the start-up time goes.
The "note" column gives client and server CPU time per call (psutil), which says whether the
client or the server limits a rate: on 2 cores both share the machine.
Every loop is bounded by a call count and a time cap; every response is checked (right id, a
`result`, no `error`). Prints a table (value, target, PASS/MISS); exits 1 on any MISS.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # in-process numbers use the same tree as the spawned servers
    sys.path.insert(1, str(REPO))
PROTOCOL_VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}
CHEAP_METHODS = ("server/discover", "tools/list")
WINDOW = 32


def request(rid: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": method,
        "params": {**(params or {}), "_meta": META},
    }


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def checked(raw: bytes, rid: int) -> dict[str, Any]:
    """The parsed response; raises unless it answers `rid` with a result."""
    message: dict[str, Any] = json.loads(raw)
    if message.get("id") != rid or "result" not in message:
        raise RuntimeError(f"unexpected response to id {rid}: {raw[:300]!r}")
    return message


def child_env(pycache: Path | None = None) -> dict[str, str]:
    """The environment of a server child. With ``pycache``, bytecode is cached there (as after
    `pip install`, which compiles), instead of recompiling every module that has no up-to-date
    .pyc beside it (this host sets PYTHONDONTWRITEBYTECODE=1)."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


class StdioClient:
    """`python -m fs_notes serve ...` on pipes, read and written from this thread only."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fs_notes", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=child_env(),
            cwd=REPO,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in: IO[bytes] = self.proc.stdin
        self._out: IO[bytes] = self.proc.stdout
        self._next_id = 0

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def send(self, message: dict[str, Any]) -> None:
        self._in.write(encode(message))
        self._in.flush()

    def recv_raw(self) -> bytes:
        line = self._out.readline()
        if not line:
            raise RuntimeError("server closed stdout")
        return line

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        rid = self.new_id()
        self.send(request(rid, method, params))
        return checked(self.recv_raw(), rid)

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.call("tools/call", {"name": name, "arguments": arguments})[
            "result"
        ]
        if result.get("isError"):
            raise RuntimeError(f"{name} failed: {result['content']}")
        return result

    def close(self) -> None:
        self._in.close()
        try:
            self.proc.wait(15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._out.close()


@dataclass(frozen=True)
class Rate:
    calls: int
    seconds: float
    client_cpu: float = 0.0  # CPU seconds this process spent in the loop
    server_cpu: float | None = None  # CPU seconds the server process spent, when known

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds

    def note(self) -> str:
        """CPU microseconds per call, client and server: who is the bottleneck."""
        text = f"client {self.client_cpu / self.calls * 1e6:.0f} us"
        if self.server_cpu is not None:
            text += f", server {self.server_cpu / self.calls * 1e6:.0f} us CPU/call"
        return text


class Meter:
    """Wall time, this process's CPU time and (optionally) a child's CPU time over a loop."""

    def __init__(self, pid: int | None = None) -> None:
        self._proc = psutil.Process(pid) if pid is not None else None
        self.start = time.perf_counter()
        self._cpu = time.process_time()
        self._server = self._server_cpu()

    def _server_cpu(self) -> float:
        if self._proc is None:
            return 0.0
        times = self._proc.cpu_times()
        return float(times.user + times.system)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def rate(self, calls: int) -> Rate:
        wall = self.elapsed()
        server = self._server_cpu() - self._server if self._proc is not None else None
        return Rate(calls, wall, time.process_time() - self._cpu, server)


def stdio_sequential(client: StdioClient, method: str, max_calls: int, cap: float) -> Rate:
    template = encode(request(0, method)).replace(b'"id":0', b'"id":%d')  # id patched per call
    meter = Meter(client.proc.pid)
    done = 0
    while done < max_calls and meter.elapsed() < cap:
        rid = client.new_id()
        client._in.write(template % rid)
        client._in.flush()
        checked(client.recv_raw(), rid)
        done += 1
    return meter.rate(done)


def stdio_windowed(
    client: StdioClient, method: str, max_calls: int, cap: float, window: int = WINDOW
) -> Rate:
    """Keep `window` requests outstanding; answers may come in any order."""
    template = encode(request(0, method)).replace(b'"id":0', b'"id":%d')
    outstanding: set[int] = set()
    sent = done = 0
    meter = Meter(client.proc.pid)

    def send_one() -> None:
        nonlocal sent
        rid = client.new_id()
        outstanding.add(rid)
        client._in.write(template % rid)
        sent += 1

    for _ in range(min(window, max_calls)):
        send_one()
    client._in.flush()
    while outstanding:
        message = json.loads(client.recv_raw())
        rid = message.get("id")
        if rid not in outstanding or "result" not in message:
            raise RuntimeError(f"unexpected response: {str(message)[:300]}")
        outstanding.discard(rid)
        done += 1
        if sent < max_calls and meter.elapsed() < cap:
            send_one()
            client._in.flush()
    return meter.rate(done)


class HttpTarget:
    """`fs-notes serve DIR --http 127.0.0.1:0`; the bound port comes from --port-file."""

    def __init__(self, workspace: Path, tmp: Path) -> None:
        self.token = secrets.token_urlsafe(24)
        token_file = tmp / "token"
        token_file.write_text(self.token)
        token_file.chmod(0o600)  # the server refuses a token file others can read
        port_file = tmp / f"port-{time.monotonic_ns()}"
        args = ["--http", "127.0.0.1:0", "--token-file", str(token_file)]
        port_arg = ["--port-file", str(port_file)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fs_notes", "serve", str(workspace), *args, *port_arg],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=child_env(),
            cwd=REPO,
        )
        deadline = time.monotonic() + 20
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("HTTP server did not start")
            time.sleep(0.02)
        self.port = int(port_file.read_text())

    def headers(self, method: str) -> dict[str, str]:
        return {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {self.token}",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
            "Mcp-Method": method,
        }

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def http_client_rate(target: HttpTarget, method: str, max_calls: int, cap: float) -> Rate:
    conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=20)
    headers = target.headers(method)
    try:
        meter = Meter(target.proc.pid)
        done = 0
        while done < max_calls and meter.elapsed() < cap:
            rid = done + 1
            conn.request("POST", "/mcp", body=encode(request(rid, method)), headers=headers)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {body[:300]!r}")
            checked(body, rid)
            done += 1
        return meter.rate(done)
    finally:
        conn.close()


def httpx_rate(target: HttpTarget, method: str, max_calls: int, cap: float) -> Rate:
    import httpx

    url = f"http://127.0.0.1:{target.port}/mcp"
    headers = target.headers(method)
    with httpx.Client(timeout=20) as client:
        meter = Meter(target.proc.pid)
        done = 0
        while done < max_calls and meter.elapsed() < cap:
            rid = done + 1
            response = client.post(url, content=encode(request(rid, method)), headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
            checked(response.content, rid)
            done += 1
        return meter.rate(done)


class InProcess:
    """The server's dispatcher built in this process exactly as `fs-notes serve WORKSPACE` builds
    it (same argument parser, policy, roots, confirmation parts), without a transport, and with
    the tools acting in this process (`InThisProcess`: no workers)."""

    def __init__(self, workspace: Path, state_dir: Path) -> None:
        from fs_notes.cli import _parser
        from fs_notes.compose import InThisProcess, compose
        from fs_notes.config import ServeConfig

        args = _parser().parse_args(
            ["serve", str(workspace), "--replay-db", str(state_dir / "replay.sqlite3")]
        )
        config = ServeConfig.from_args(args)
        self.policy = config.policy
        self.principal = self.policy.local_principal()
        self._composed = compose(self.policy, config.state, InThisProcess())
        self.dispatcher, self.env = self._composed.dispatcher, self._composed.env

    def handle_raw(self, raw: bytes) -> bytes:
        """One request line in, the response bytes out (parse + dispatch + dumps)."""
        from fs_notes.protocol.envelope import dumps, parse

        response = self.dispatcher.handle(parse(raw), self.principal, "stdio")
        assert response is not None
        return dumps(response)

    def close(self) -> None:
        self._composed.close()


def in_process_rate(server: InProcess, method: str, max_calls: int, cap: float) -> Rate:
    """parse + Dispatcher.handle + dumps in this process: the cost below any transport."""
    raw = encode(request(1, method))
    meter = Meter()
    done = 0
    while done < max_calls and meter.elapsed() < cap:
        checked(server.handle_raw(raw), 1)
        done += 1
    return meter.rate(done)


def cold_start_once(workspace: Path, pycache: Path | None) -> float:
    """Seconds from Popen to the first byte-complete server/discover response line."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fs_notes", "serve", str(workspace)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=child_env(pycache),
        cwd=REPO,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(encode(request(1, "server/discover")))
        proc.stdin.flush()
        line = proc.stdout.readline()
        elapsed = time.perf_counter() - start
        checked(line, 1)
        return elapsed
    finally:
        proc.stdin.close()
        try:
            proc.wait(15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def python_c_times(code: str, runs: int, pycache: Path) -> list[float]:
    """Wall times of `python -c CODE`: the interpreter floor and the import cost."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=child_env(pycache), cwd=REPO)
        times.append(time.perf_counter() - start)
    return times


def _spread(times: list[float]) -> str:
    return f"min {min(times):.3f} s, max {max(times):.3f} s"


def cold_start_rows(ws: Path, pycache: Path, runs: int) -> list[Row]:
    """Spawn-to-first-response, with a primed bytecode cache (the target) and as this host's
    environment runs it; then the import floor, to show where the time goes."""
    cold_start_once(ws, pycache)  # prime the bytecode cache
    cached = [cold_start_once(ws, pycache) for _ in range(runs)]
    as_env = [cold_start_once(ws, None) for _ in range(runs)]
    rows = [
        Row(
            f"cold start, median of {runs}",
            statistics.median(cached),
            "s",
            0.3,
            False,
            note=_spread(cached) + "; bytecode cached",
        ),
        Row(
            "cold start, no bytecode cache",
            statistics.median(as_env),
            "s",
            note=_spread(as_env) + "; PYTHONDONTWRITEBYTECODE as on this host",
        ),
    ]
    for code in [
        "pass",
        "import asyncio",
        "from pydantic import BaseModel",
        "import fs_notes.protocol.models",
        "import fs_notes.serve, fs_notes.transport.stdio",
    ]:
        label = f"python -c {code.split(',')[0]!r}"
        times = python_c_times(code, max(3, runs // 2), pycache)
        rows.append(Row(label, statistics.median(times), "s", note=_spread(times)))
    return rows


def make_workspace(root: Path) -> Path:
    ws = root / "notes"
    (ws / "projects").mkdir(parents=True)
    (ws / "projects" / "plan.md").write_text("# Plan\n\nShip it.\n")
    (ws / "inbox.md").write_text("# Inbox\n\n- [ ] read mail\n")
    return ws


@dataclass(frozen=True)
class Row:
    name: str
    value: float
    unit: str
    target: float | None = None  # None: informational
    higher_is_better: bool = True
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        ok = self.value >= self.target if self.higher_is_better else self.value <= self.target
        return "PASS" if ok else "MISS"


def _formatter(unit: str) -> Callable[[float], str]:
    if unit == "s":  # milliseconds show to the microsecond, longer times to the millisecond
        return lambda v: f"{v * 1e3:.2f} ms" if v < 1 else f"{v:.3f} s"
    if unit == "calls/s":
        return lambda v: f"{v:,.0f} {unit}"
    return lambda v: f"{v:.3f} {unit}"


def print_table(title: str, rows: list[Row]) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n{title}  (load average at the end: {load}; {os.cpu_count()} CPUs)")
    width = max(len(r.name) for r in rows)
    print(f"{'measurement':<{width}}  {'value':>14}  {'target':>16}  verdict  note")
    for r in rows:
        fmt = _formatter(r.unit)
        target = (
            "" if r.target is None else ((">= " if r.higher_is_better else "<= ") + fmt(r.target))
        )
        print(f"{r.name:<{width}}  {fmt(r.value):>14}  {target:>16}  {r.verdict:<7}  {r.note}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short loops (a few seconds)")
    opts = parser.parse_args()
    calls, cap, cold_runs = (2_000, 1.0, 5) if opts.quick else (20_000, 3.0, 11)
    warmup = 200
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fs-notes-bench-") as tmp_name:
        tmp = Path(tmp_name)
        ws = make_workspace(tmp)

        client = StdioClient(str(ws))
        try:
            client.call("server/discover")
            for method in CHEAP_METHODS:
                stdio_sequential(client, method, warmup, cap)
                rate = stdio_sequential(client, method, calls, cap)
                name = f"stdio {method} sequential"
                rows.append(Row(name, rate.per_second, "calls/s", 5000, note=rate.note()))
                rate = stdio_windowed(client, method, calls, cap)
                name = f"stdio {method} window {WINDOW}"
                rows.append(Row(name, rate.per_second, "calls/s", 5000, note=rate.note()))
        finally:
            client.close()

        target = HttpTarget(ws, tmp)
        try:
            for method in CHEAP_METHODS:
                runners: list[tuple[str, Callable[[HttpTarget, str, int, float], Rate]]] = [
                    ("http.client", http_client_rate),
                    ("httpx", httpx_rate),
                ]
                for label, runner in runners:
                    runner(target, method, warmup, cap)
                    rate = runner(target, method, calls // 4, cap)
                    # httpx spends more CPU per call than the server does: its rows are
                    # client-bound on 2 cores, so only the stdlib client's rows carry the target.
                    goal = 1000 if label == "http.client" else None
                    name = f"HTTP {method} {label}"
                    rows.append(Row(name, rate.per_second, "calls/s", goal, note=rate.note()))
        finally:
            target.close()

        server = InProcess(ws, tmp)
        try:
            for method in CHEAP_METHODS:
                rate = in_process_rate(server, method, calls, cap)
                name = f"in-process {method} (no transport)"
                rows.append(Row(name, rate.per_second, "calls/s", note=rate.note()))
        finally:
            server.close()

        rows += cold_start_rows(ws, tmp / "pycache", cold_runs)

    print_table("fs-notes protocol benchmark" + (" (quick)" if opts.quick else ""), rows)
    return 1 if any(r.verdict == "MISS" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
