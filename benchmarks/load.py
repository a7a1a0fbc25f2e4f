"""Load: many clients at once, under abuse, and nothing lost (issue 13 item 5).

    .venv/bin/python benchmarks/load.py [--seconds 60] [--notes 10000] [--clients 32]
                                        [--idle 1000] [--json]

Builds a workspace of --notes notes and starts two real servers on it, sharing one replay
database: `fs-notes serve --policy P --http 127.0.0.1:0` (four principals with tokens) and
`fs-notes serve --policy P` over stdio. Then, for --seconds:
  - --clients HTTP clients (threads, one keep-alive connection each, spread over the four
    principals) loop over a mix of notes_list, notes_read, notes_search, notes_create,
    notes_update and the two-round notes_delete, each on notes of its own for the writes;
    one deletion in ten is answered a second time with the same confirmation, which must fail;
  - one stdio client pipelines the same mix (up to 8 requests in flight);
  - --idle unauthenticated connections are held open against the HTTP port (a request's first
    header line, never finished), reopened as the server closes them.
First, before any load, a baseline: the same mix from one HTTP client alone.

Reports, per operation: calls, p50 and p99 (ms) under load and the ratio of the loaded p50 to
the baseline p50 measured in the same run; throughput; errors (must be 0: any JSON-RPC error,
tool error or transport failure, except the refused second answers, which are counted apart);
lost writes (every acknowledged create or update must be on disk with its content: must be 0);
double deletions (a second answer that deleted again: must be 0); the HTTP server's memory
(RSS of its processes) at the start and the end; idle connections opened and closed by the
server. Exits 1 if errors, lost writes or double deletions are not 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from fs_notes.policy import hash_token  # noqa: E402

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}
OPS = ("list", "read", "search", "create", "update", "delete")
WEIGHTS = (3, 6, 2, 2, 2, 1)
WORDS = ("alpha", "bravo", "delta", "echo", "golf", "hotel", "kilo", "lima", "oscar", "tango")
PRINCIPALS = 4


def _call(n: int, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments, "_meta": META, **extra}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)
    written: dict[str, str] = field(default_factory=dict)  # id -> content acknowledged
    deleted: set[str] = field(default_factory=set)
    second_refused: int = 0
    double_deletions: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def took(self, op: str, seconds: float) -> None:
        with self.lock:
            self.latencies[op].append(seconds)

    def error(self, what: str) -> None:
        with self.lock:
            if len(self.errors) < 1000:
                self.errors.append(what[:300])


class Mix:
    """One client's view: its own notes for writes; the shared ones for reads."""

    def __init__(self, name: str, ws: Path, notes: int, rng: random.Random) -> None:
        self.name, self.uri, self.notes, self.rng = name, ws.as_uri(), notes, rng
        self.mine: list[str] = []
        self.count = 0

    def next_op(self) -> str:
        op = self.rng.choices(OPS, WEIGHTS)[0]
        if op in ("update", "delete") and not self.mine:
            return "create"
        return op

    def arguments(self, op: str) -> tuple[str, dict[str, Any]]:
        if op == "list":
            return "notes_list", {"workspaceUri": self.uri, "limit": 50}
        if op == "read":
            note_id = f"n{self.rng.randrange(self.notes):05d}.md"
            return "notes_read", {"workspaceUri": self.uri, "id": note_id}
        if op == "search":
            return "notes_search", {"workspaceUri": self.uri, "query": self.rng.choice(WORDS)}
        raise ValueError(op)

    def new_note(self) -> tuple[str, str]:
        self.count += 1
        note_id = f"{self.name}/c{self.count}.md"
        # A title no other note's contains ("h3 c5 end" is not in "h3 c55 end").
        return note_id, f"# {self.name} c{self.count} end\n\n{self.rng.random()}\n"


def _check(response: dict[str, Any], tally: Tally, what: str) -> dict[str, Any] | None:
    if "error" in response:
        tally.error(f"{what}: JSON-RPC {response['error']}")
        return None
    result: dict[str, Any] = response["result"]
    if result.get("isError"):
        tally.error(f"{what}: {result['content'][0]['text']}")
        return None
    return result


# -- HTTP clients ---------------------------------------------------------------------------------


class HttpClient:
    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=60, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
        })  # fmt: skip
        self.n = 0

    def ask(self, name: str, arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
        self.n += 1
        message = _call(self.n, name, arguments, **extra)
        response = self.client.post(self.url, content=json.dumps(message).encode(),
                                    headers={"Mcp-Method": "tools/call", "Mcp-Name": name})
        if response.status_code != 200:
            return {"error": {"status": response.status_code, "body": response.text[:200]}}
        body: dict[str, Any] = response.json()
        return body


def _one(mix: Mix, ask: Any, tally: Tally) -> None:
    op = mix.next_op()
    started = time.perf_counter()
    if op in ("list", "read", "search"):
        name, args = mix.arguments(op)
        _check(ask(name, args), tally, op)
    elif op == "create":
        note_id, content = mix.new_note()
        if _check(ask("notes_create", {"workspaceUri": mix.uri, "id": note_id, "content": content}),
                  tally, op) is not None:  # fmt: skip
            mix.mine.append(note_id)
            with tally.lock:
                tally.written[note_id] = content
    elif op == "update":
        note_id = mix.rng.choice(mix.mine)
        content = f"# {note_id} updated\n\n{mix.rng.random()}\n"
        if _check(ask("notes_update", {"workspaceUri": mix.uri, "id": note_id, "content": content}),
                  tally, op) is not None:  # fmt: skip
            with tally.lock:
                tally.written[note_id] = content
    else:
        _delete(mix, ask, tally, mix.mine.pop(mix.rng.randrange(len(mix.mine))))
    tally.took(op, time.perf_counter() - started)


def _delete(mix: Mix, ask: Any, tally: Tally, note_id: str) -> None:
    args = {"workspaceUri": mix.uri, "title": _title_of(tally, note_id)}
    first = _check(ask("notes_delete", args), tally, "delete round 1")
    if first is None:
        return
    if first.get("resultType") != "input_required":
        tally.error(f"delete round 1: {first}")
        return
    choice = {"action": "accept", "content": {"note_id": note_id, "confirm": True}}
    answer = {"delete_choice": choice}
    done = _check(ask("notes_delete", args, inputResponses=answer,
                      requestState=first["requestState"]), tally, "delete round 2")  # fmt: skip
    if done is None:
        return
    with tally.lock:
        tally.deleted.add(note_id)
        tally.written.pop(note_id, None)
    if mix.rng.random() < 0.1:  # the same confirmation again: must not delete again
        again = ask("notes_delete", args, inputResponses=answer, requestState=first["requestState"])
        if "error" in again:
            with tally.lock:
                tally.second_refused += 1
        else:
            with tally.lock:
                tally.double_deletions += 1


def _title_of(tally: Tally, note_id: str) -> str:
    content = tally.written.get(note_id, "")
    first = content.splitlines()[0] if content else ""
    return first[2:] if first.startswith("# ") else note_id


def _http_worker(url: str, token: str, name: str, ws: Path, notes: int, deadline: float,
                 tally: Tally, seed: int) -> None:  # fmt: skip
    client = HttpClient(url, token)
    mix = Mix(name, ws, notes, random.Random(seed))
    (ws / name).mkdir(exist_ok=True)
    try:
        while time.monotonic() < deadline:
            try:
                _one(mix, client.ask, tally)
            except httpx.HTTPError as exc:
                tally.error(f"http: {type(exc).__name__}: {exc}")
    finally:
        client.client.close()


# -- the stdio client (pipelined) ---------------------------------------------------------------


def _stdio_worker(proc: subprocess.Popen[bytes], ws: Path, notes: int, deadline: float,
                  tally: Tally) -> None:  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    mix = Mix("stdio", ws, notes, random.Random(99))
    (ws / "stdio").mkdir(exist_ok=True)
    pending: dict[int, tuple[str, float, str | None, str | None]] = {}
    n = 0
    while time.monotonic() < deadline or pending:
        while len(pending) < 8 and time.monotonic() < deadline:
            n += 1
            op = mix.rng.choice(("list", "read", "search", "create", "update"))
            target = content = None
            if op == "update" and not mix.mine:
                op = "create"
            if op in ("list", "read", "search"):
                name, args = mix.arguments(op)
            elif op == "create":
                target, content = mix.new_note()  # updated only once acknowledged
                name, args = "notes_create", {"workspaceUri": mix.uri, "id": target,
                                              "content": content}  # fmt: skip
            else:
                target = mix.rng.choice(mix.mine)
                content = f"# {target} updated\n\n{mix.rng.random()}\n"
                name, args = "notes_update", {"workspaceUri": mix.uri, "id": target,
                                              "content": content}  # fmt: skip
            pending[n] = (op, time.perf_counter(), target, content)
            proc.stdin.write((json.dumps(_call(n, name, args)) + "\n").encode())
            proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            tally.error("stdio: the server closed stdout")
            return
        response = json.loads(line)
        op, started, target, content = pending.pop(response["id"])
        tally.took(f"stdio {op}", time.perf_counter() - started)
        if _check(response, tally, f"stdio {op}") is not None and target is not None:
            with tally.lock:
                tally.written[target] = str(content)
            if op == "create":
                mix.mine.append(target)


# -- idle unauthenticated connections -----------------------------------------------------------


def _idle(port: int, count: int, stop: threading.Event, seen: dict[str, int]) -> None:
    held: list[socket.socket] = []
    while not stop.is_set():
        alive = []
        for s in held:
            try:
                s.setblocking(False)
                if s.recv(1) == b"":
                    s.close()
                    seen["closed by the server"] += 1
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                seen["closed by the server"] += 1
                continue
            alive.append(s)
        held = alive
        while len(held) < count and not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                held.append(s)
                seen["opened"] += 1
            except OSError:
                seen["refused at connect"] += 1
                break
        stop.wait(0.5)
    for s in held:
        s.close()


# -- the run ------------------------------------------------------------------------------------


def _workspace(base: Path, notes: int) -> Path:
    ws = base / "notes"
    ws.mkdir()
    rng = random.Random(1)
    for i in range(notes):
        body = " ".join(rng.choice(WORDS) for _ in range(60))
        (ws / f"n{i:05d}.md").write_text(f"# Note {i}\n\n{body}\n")
    return ws


def _policy(base: Path, ws: Path, tokens: list[str]) -> Path:
    lines = ['[[principal]]\nname = "local"\nlocal = true\n']
    for i, token in enumerate(tokens):
        lines.append(f'[[principal]]\nname = "p{i}"\ntoken_sha256 = "{hash_token(token)}"\n')
    lines.append(f'[[workspace]]\nname = "notes"\npath = "{ws}"\n')
    for name in ["local", *(f"p{i}" for i in range(len(tokens)))]:
        lines.append(f'[[grant]]\nprincipal = "{name}"\nworkspace = "notes"\n'
                     'operations = ["read", "write", "delete"]\n')  # fmt: skip
    lines.append("[limits]\nmax_connections = 512\nrequests_per_principal = 16\n")
    policy = base / "policy.toml"
    policy.write_text("\n".join(lines))
    return policy


def _rss(pid: int) -> int:
    proc = psutil.Process(pid)
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--notes", type=int, default=10_000)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--idle", type=int, default=1000)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="fs-notes-load-"))
    ws = _workspace(base, a.notes)
    tokens = [f"load-token-{i}-{os.urandom(8).hex()}" for i in range(PRINCIPALS)]
    policy = _policy(base, ws, tokens)
    env = {**os.environ, "XDG_STATE_HOME": str(base / "state")}
    replay = str(base / "state" / "replay.db")
    port_file = base / "port"
    http = subprocess.Popen(
        [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy), "--http",
         "127.0.0.1:0", "--port-file", str(port_file), "--replay-db", replay],
        stdin=subprocess.DEVNULL, stderr=open(base / "http.log", "wb"), cwd=REPO  # noqa: SIM115, env=env,
    )  # fmt: skip
    stdio = subprocess.Popen(
        [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy), "--replay-db", replay],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(base / "stdio.log", "wb"),  # noqa: SIM115
        cwd=REPO, env=env,
    )  # fmt: skip
    while not port_file.exists():
        if http.poll() is not None:
            print((base / "http.log").read_text(), file=sys.stderr)
            return 2
        time.sleep(0.05)
    port = int(port_file.read_text())
    url = f"http://127.0.0.1:{port}/mcp"
    # Baseline: one client alone, the same mix, a tenth of the time (at least 5 s).
    baseline = Tally()
    _http_worker(url, tokens[0], "base", ws, a.notes,
                 time.monotonic() + max(5.0, a.seconds / 10), baseline, 7)  # fmt: skip
    time.sleep(1)
    rss_start = _rss(http.pid)
    tally = Tally()
    stop = threading.Event()
    idle_seen: dict[str, int] = defaultdict(int)
    idler = threading.Thread(target=_idle, args=(port, a.idle, stop, idle_seen), daemon=True)
    idler.start()
    time.sleep(1)
    deadline = time.monotonic() + a.seconds
    started = time.monotonic()
    threads = [
        threading.Thread(target=_http_worker, args=(url, tokens[i % PRINCIPALS], f"h{i}", ws,
                                                    a.notes, deadline, tally, 100 + i))
        for i in range(a.clients)
    ]  # fmt: skip
    threads.append(threading.Thread(target=_stdio_worker,
                                    args=(stdio, ws, a.notes, deadline, tally)))  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    stop.set()
    idler.join(5)
    rss_end = _rss(http.pid)
    http.terminate()
    assert stdio.stdin is not None
    stdio.stdin.close()
    http.wait(30)
    stdio.wait(30)
    lost = [nid for nid, content in {**baseline.written, **tally.written}.items()
            if not (ws / nid).is_file() or (ws / nid).read_text() != content]  # fmt: skip
    still = [nid for nid in tally.deleted | baseline.deleted if (ws / nid).exists()]
    calls = sum(len(v) for v in tally.latencies.values())
    rows = []
    for op in sorted(tally.latencies):
        loaded = tally.latencies[op]
        base_op = baseline.latencies.get(op.removeprefix("stdio "))
        ratio = (median(loaded) / median(base_op)) if base_op else None
        rows.append({"op": op, "calls": len(loaded), "p50_ms": round(_pct(loaded, 0.5), 2),
                     "p99_ms": round(_pct(loaded, 0.99), 2),
                     "p50_vs_alone": round(ratio, 2) if ratio else None})  # fmt: skip
    report = {
        "seconds": round(elapsed, 1), "notes": a.notes, "http_clients": a.clients,
        "stdio_clients": 1, "idle_connections_wanted": a.idle, "idle": dict(idle_seen),
        "throughput_calls_per_s": round(calls / elapsed, 1), "operations": rows,
        "errors": len(tally.errors) + len(baseline.errors),
        "first_errors": (baseline.errors + tally.errors)[:5],
        "lost_writes": len(lost), "deleted_but_present": len(still),
        "second_answers_refused": tally.second_refused + baseline.second_refused,
        "double_deletions": tally.double_deletions + baseline.double_deletions,
        "http_server_rss_mb": {"start": round(rss_start / 2**20, 1),
                               "end": round(rss_end / 2**20, 1)},
        "acknowledged_writes_checked": len({**baseline.written, **tally.written}),
    }  # fmt: skip
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['seconds']} s, {a.notes} notes, {a.clients} HTTP clients + 1 pipelined "
              f"stdio client, {a.idle} idle connections wanted ({dict(idle_seen)})")  # fmt: skip
        print(f"{'op':<16}{'calls':>8}{'p50 ms':>10}{'p99 ms':>10}{'p50 / alone':>13}")
        for r in rows:
            shown = f"{r['p50_vs_alone']:.2f}x" if r["p50_vs_alone"] else "-"
            print(f"{r['op']:<16}{r['calls']:>8}{r['p50_ms']:>10}{r['p99_ms']:>10}{shown:>13}")
        print(f"throughput {report['throughput_calls_per_s']} calls/s; errors {report['errors']}; "
              f"lost writes {report['lost_writes']}; deleted but present "
              f"{report['deleted_but_present']}; double deletions {report['double_deletions']} "
              f"({report['second_answers_refused']} second answers refused); "
              f"checked {report['acknowledged_writes_checked']} acknowledged writes")  # fmt: skip
        print(f"HTTP server RSS {report['http_server_rss_mb']['start']} MB at the start, "
              f"{report['http_server_rss_mb']['end']} MB at the end")  # fmt: skip
        for e in report["first_errors"]:
            print("  error:", e)
    bad = report["errors"] or report["lost_writes"] or report["double_deletions"] or still
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
