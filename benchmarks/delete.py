"""A full two-round notes_delete cycle (ask, then accepted retry), in-process and over stdio.

Targets (issue #4): <= 1 ms median in-process (layers 1 and 2, before the OS worker), <= 2 ms
median over stdio (the real server, whose deletion goes through the confined worker).
Run: .venv/bin/python benchmarks/delete.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

FORM = {"elicitation": {"form": {}}}


def _accept(note: str) -> dict[str, Any]:
    return {"delete_choice": {"action": "accept", "content": {"note_id": note, "confirm": True}}}


def in_process(rounds: int) -> list[float]:
    from inprocess import InProcess

    from fs_notes.confirm.state import KeyRing
    from fs_notes.policy import Policy

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "notes"
        ws.mkdir()
        for i in range(50):
            (ws / f"other-{i}.md").write_text(f"# Other {i}\n")
        policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
        me = policy.local_principal()
        srv = InProcess(policy, Path(tmp), keyring=KeyRing.ephemeral(), clock=time.time)
        uri = "file://" + urllib.parse.quote(str(ws))
        args = {"workspaceUri": uri, "title": "Target"}
        times = []
        try:
            for _ in range(rounds):
                (ws / "target.md").write_text("# Target\n")
                t0 = time.perf_counter()
                state = srv.call(me, "notes_delete", args)["result"]["requestState"]
                done = srv.call(
                    me,
                    "notes_delete",
                    args,
                    inputResponses=_accept("target.md"),
                    requestState=state,
                )
                times.append(time.perf_counter() - t0)
                assert done["result"]["structuredContent"]["deleted"] == "target.md", done
        finally:
            srv.close()
    return times


def over_stdio(rounds: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "notes"
        ws.mkdir()
        for i in range(50):
            (ws / f"other-{i}.md").write_text(f"# Other {i}\n")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fs_notes",
                "serve",
                str(ws),
                "--replay-db",
                str(Path(tmp) / "r.db"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
        )
        assert proc.stdin and proc.stdout
        uri = "file://" + urllib.parse.quote(str(ws))
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": FORM,
        }
        n = 0

        def ask(params: dict[str, Any]) -> dict[str, Any]:
            nonlocal n
            n += 1
            msg = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {**params, "_meta": meta},
            }
            proc.stdin.write(json.dumps(msg).encode() + b"\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            return json.loads(proc.stdout.readline())  # type: ignore[union-attr,no-any-return]

        base = {"name": "notes_delete", "arguments": {"workspaceUri": uri, "title": "Target"}}
        times = []
        try:
            for i in range(rounds + 5):
                (ws / "target.md").write_text("# Target\n")
                t0 = time.perf_counter()
                state = ask(base)["result"]["requestState"]
                done = ask({**base, "inputResponses": _accept("target.md"), "requestState": state})
                if i >= 5:  # the first rounds start the worker
                    times.append(time.perf_counter() - t0)
                assert done["result"]["structuredContent"]["deleted"] == "target.md", done
        finally:
            proc.stdin.close()
            proc.wait(30)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    rounds = parser.parse_args().rounds
    rows = [
        ("in-process two-round delete (50 notes)", in_process(rounds), 1.0),
        ("stdio two-round delete via confined worker", over_stdio(rounds), 2.0),
    ]
    print(f"{'measurement':46} {'median':>9} {'p90':>9} {'target':>9}  verdict")
    for name, times, target in rows:
        med = statistics.median(times) * 1e3
        p90 = sorted(times)[int(len(times) * 0.9)] * 1e3
        verdict = "PASS" if med <= target else "MISS"
        print(f"{name:46} {med:7.3f}ms {p90:7.3f}ms {target:7.1f}ms  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
