"""Long race and throughput run for the confirmation machinery (not part of the test suite).

    .venv/bin/python benchmarks/confirm.py [--procs 4] [--nonces 2000]

P processes claim the same N nonces in lockstep on one replay database; every nonce must have
exactly one winner. Also times seal+open of a 20-candidate state. Exits 1 on any double spend.
"""

from __future__ import annotations

import argparse
import multiprocessing
import secrets
import sys
import tempfile
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path

from fs_notes.confirm.flow import Candidate, candidate_claims, candidates_from_payload
from fs_notes.confirm.replay import ReplayStore
from fs_notes.fs import Identity
from fs_notes.rounds.phases import DELETE, Phase, Progress
from fs_notes.rounds.request import Binding, Echo, RequestState
from fs_notes.rounds.seal import KeyRing, StateSealer


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--nonces", type=int, default=2000)
    opts = parser.parse_args()
    seal_open(2000)
    return 0 if race(opts.procs, opts.nonces) else 1


if __name__ == "__main__":
    sys.exit(main())
