"""Long race and throughput run for the confirmation machinery (not part of the test suite).

    .venv/bin/python benchmarks/confirm.py [--procs 4] [--nonces 2000] [--no-engine]
        [--claims 5000] [--rounds 300]

P processes claim the same N nonces in lockstep on one replay database; every nonce must have
exactly one winner. Also times seal+open of a 20-candidate state. Exits 1 on any double spend.

The engine (issue 18; skipped with --no-engine; needs Debian's redis-server and haproxy):
- claims per second, P processes each spending its own nonces, on one SQLite file and on one
  Redis server (the shared store), in the same run: the ratio is the cost of the network hop;
- the two-round notes_delete (round one, then the accepted retry), p50 and p99 over R rounds,
  through HAProxy in front of two instances sharing the Redis store (tests/cluster.py, the
  deployment of docs/deploy.md), against one instance on its own SQLite store reached directly,
  in the same run, the two taking turns in batches (this VM's speed drifts for minutes at a time).
"""

from __future__ import annotations

import argparse
import multiprocessing
import secrets
import statistics
import sys
import tempfile
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from fs_notes.confirm.flow import Candidate, candidate_claims, candidates_from_payload
from fs_notes.confirm.replay import ReplayStore
from fs_notes.fs import Identity
from fs_notes.rounds.phases import DELETE, Phase, Progress
from fs_notes.rounds.request import Binding, Echo, RequestState
from fs_notes.rounds.seal import KeyRing, StateSealer

REPO = Path(__file__).resolve().parent.parent


def _claimer(path: str, nonces: list[str], barrier: Barrier, out: str) -> None:
    with ReplayStore(path) as store:
        wins = []
        for n in nonces:
            barrier.wait()
            wins.append("1" if store.claim(n, time.time() + 300) else "0")
    Path(out).write_text("".join(wins))


def race(procs: int, count: int) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "replay.sqlite3")
        ReplayStore(path).close()
        nonces = [secrets.token_hex(16) for _ in range(count)]
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(procs)
        outs = [str(Path(tmp) / f"out{i}") for i in range(procs)]
        workers = [ctx.Process(target=_claimer, args=(path, nonces, barrier, o)) for o in outs]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - start
        results = [Path(o).read_text() for o in outs]
    winners = [sum(r[i] == "1" for r in results) for i in range(count)]
    bad = sum(w != 1 for w in winners)
    print(
        f"race: {procs} procs x {count} nonces in {elapsed:.2f}s,"
        f" nonces without exactly one winner: {bad}"
    )
    return bad == 0


def seal_open(rounds: int) -> None:
    state = RequestState(
        StateSealer(KeyRing.ephemeral()),
        DELETE,
        lambda _phase, claims: candidates_from_payload(claims),
        bind_boot=True,
    )
    args = {"workspaceUri": "file:///n", "title": "TPS report"}
    cands = [Candidate(f"dir/note-{i}.md", Identity(1, i, 2, 3, 4)) for i in range(20)]
    bind, progress = Binding("alice", args, "file:///n"), Progress(DELETE, Phase.CONFIRM, 1)
    data = candidate_claims(cands)
    start = time.perf_counter()
    for _ in range(rounds):
        state.open(bind, Echo(state.seal(bind, progress, data), None))
    per = (time.perf_counter() - start) / rounds * 1e6
    size = len(state.seal(bind, progress, data))
    print(f"seal+open (20 candidates, {size} chars): {per:.0f} us")


def _spender(kind: str, where: str, count: int, go: float, out: str) -> None:
    store: Any
    if kind == "sqlite":
        store = ReplayStore(where)
        epoch = None
    else:
        from fs_notes.confirm.location import parse_location
        from fs_notes.confirm.redis_store import RedisReplayStore

        store = RedisReplayStore(parse_location(where), max_rows=10_000_000)
        epoch = store.epoch()
    nonces = [secrets.token_hex(16) for _ in range(count)]
    while time.time() < go:
        time.sleep(0.001)
    start = time.perf_counter()
    won = sum(store.claim(n, time.time() + 300, "bench", epoch) for n in nonces)
    Path(out).write_text(f"{won} {time.perf_counter() - start}")
    store.close()


def claims_per_second(kind: str, where: str, procs: int, count: int, tmp: str) -> float:
    ctx = multiprocessing.get_context("spawn")
    go = time.time() + 2.0
    outs = [str(Path(tmp) / f"{kind}-{i}") for i in range(procs)]
    workers = [ctx.Process(target=_spender, args=(kind, where, count, go, o)) for o in outs]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    results = [Path(o).read_text().split() for o in outs]
    if any(int(won) != count for won, _ in results):
        raise SystemExit(f"{kind}: a fresh nonce was refused")
    slowest = max(float(took) for _, took in results)
    return procs * count / slowest


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def delete_cycles(rounds: int, batches: int, tmp: Path) -> None:
    """p50/p99 of the two-round delete: two instances on Redis behind HAProxy vs one instance
    on SQLite, direct (see the module docstring)."""
    from cluster import TOKEN, Cluster
    from wire import HttpServer, call_tool

    form: dict[str, Any] = {"elicitation": {"form": {}}}
    (tmp / "cluster").mkdir()
    (tmp / "alone").mkdir(mode=0o700)
    with Cluster(tmp / "cluster", instances=2) as cluster:
        alone = HttpServer(
            "--policy", str(cluster.policy), "--replay-db", str(tmp / "alone" / "replay.db"),
            "--state-key-file", str(cluster.key_file), tmp=tmp, token=TOKEN,
        )  # fmt: skip
        try:
            uri = cluster.workspace_uri
            for i in range(rounds * 2):
                (cluster.notes / f"bench-{i:05d}.md").write_text(f"# Bench {i:05d}\n")
            servers = {"redis, 2 instances, HAProxy": cluster.lb, "sqlite, 1 instance": alone}
            times: dict[str, list[float]] = {name: [] for name in servers}
            medians: dict[str, list[float]] = {name: [] for name in servers}
            next_note = iter(range(rounds * 2))
            per_batch = max(1, rounds // batches)
            for _ in range(batches):
                for name, server in servers.items():
                    batch = []
                    for _ in range(per_batch):
                        i = next(next_note)
                        args = {"workspaceUri": uri, "title": f"Bench {i:05d}"}
                        choice = {"action": "accept",
                                  "content": {"note_id": f"bench-{i:05d}.md", "confirm": True}}
                        start = time.perf_counter()
                        first = server.ask(call_tool(1, "notes_delete", args, form))
                        done = server.ask(call_tool(
                            2, "notes_delete", args, form,
                            requestState=first["result"]["requestState"],
                            inputResponses={"delete_choice": choice},
                        ))  # fmt: skip
                        batch.append(time.perf_counter() - start)
                        if done["result"].get("structuredContent", {}).get("deleted") is None:
                            raise SystemExit(f"{name}: not deleted: {done}")
                    times[name] += batch
                    medians[name].append(statistics.median(batch))
            base = "sqlite, 1 instance"
            for name, values in times.items():
                p50, p99 = _percentile(values, 0.5), _percentile(values, 0.99)
                ratio = p50 / _percentile(times[base], 0.5)
                print(
                    f"two-round delete, {name}: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms,"
                    f" best batch median {min(medians[name]) * 1e3:.2f} ms"
                    f" ({len(values)} rounds; p50 {ratio:.2f}x the SQLite baseline)"
                )
        finally:
            alone.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--nonces", type=int, default=2000)
    parser.add_argument("--no-engine", action="store_true", help="skip Redis and HAProxy")
    parser.add_argument("--claims", type=int, default=5000, help="claims per process")
    parser.add_argument("--rounds", type=int, default=300, help="delete rounds per setup")
    parser.add_argument("--batches", type=int, default=6)
    opts = parser.parse_args()
    seal_open(2000)
    ok = race(opts.procs, opts.nonces)
    if opts.no_engine:
        return 0 if ok else 1
    sys.path.insert(0, str(REPO / "tests"))
    from redis_server import RedisServer

    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer(Path(tmp) / "redis")
        try:
            rates = {
                "sqlite (one file)": claims_per_second(
                    "sqlite", str(Path(tmp) / "claims.db"), opts.procs, opts.claims, tmp
                ),
                "redis (one server)": claims_per_second(
                    "redis", redis.url, opts.procs, opts.claims, tmp
                ),
            }
        finally:
            redis.close()
        base = rates["sqlite (one file)"]
        for name, rate in rates.items():
            print(
                f"claims/s, {opts.procs} processes, {name}: {rate:,.0f}"
                f" ({rate / base:.2f}x SQLite)"
            )
        delete_cycles(opts.rounds, opts.batches, Path(tmp))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
