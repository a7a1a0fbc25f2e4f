"""Round trip of one deletion through the Landlock-confined worker vs a raw unlinkat.

Usage: .venv/bin/python benchmarks/sandbox.py [--iterations N] [--batches K]
       [--mode landlock|chroot|none]

All loops delete freshly created files in the same temporary workspace; the worker path is the
full thing (binary request over the socketpair, openat2 resolution, identity check, unlinkat,
reply). A third loop runs the same WorkspaceRoot.unlink_note in process, so the sandbox's own
share (worker - in process) is visible apart from layer 2's. (Layer 2 no longer fsyncs the
folder after an unlink: that fsync, a durability and not a containment property, cost 0.1-4 ms
per deletion on this VM's disk and dominated every earlier run.) Targets: median <= 100 us and
<= 15x the raw unlink. The floor is a ping-pong over the socketpair between two Python processes
(~15 us here) plus layer 2 in the worker (~15-25 us); the wire format and the supervisor add
~5 us (no poll, fcntl or waitpid per request: see sandbox/protocol.py). On a shared 2-core
machine the medians move by +-20 us from run to run, and by more in the minutes when the host
is slow; so the loops run in K batches (raw, in-process, worker taking turns): the time target
is judged on the batch with the lowest worker median (interference only adds time), the ratio on
the median over batches of worker / raw within a batch. Every batch is printed.

A last loop (reference, no target) waits 1 ms before each deletion, as a server does between
requests: the worker then wakes on a CPU that has been idle, and on this nested-virtualisation
host that alone costs ~150 us (caches and TLB are cold after the vCPU halts; pinning both
processes to one CPU does not help). It is the number to expect inside `serve`.
The system-call filter's own cost (sandbox/seccomp.py, in every worker and in the server) is
measured apart, in two children: the same create + unlinkat loop before and after loading the
delete worker's deny-list program alone (the filter before the allow-lists), then its whole
filter (deny-list and default-deny allow-list, sandbox/allowed.py), each as a ratio against its
own child's unfiltered loop (no target: it is reported).
Exits 1 when a target is missed, 2 when the mode cannot run here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fs_notes.fs import Identity, WorkspaceRoot
from fs_notes.sandbox.errors import SandboxError
from fs_notes.sandbox.kinds import Mode
from fs_notes.sandbox.supervisor import ConfinedWorker

TARGET_US = 100.0
TARGET_RATIO = 15.0


def _make(dir_fd: int, name: str) -> Identity:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dir_fd)
    os.write(fd, b"# note\n")
    os.close(fd)
    return Identity.of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))


def bench_raw(dir_fd: int, n: int) -> list[float]:
    samples = []
    for i in range(n):
        name = f"raw-{i}.md"
        _make(dir_fd, name)
        t0 = time.perf_counter_ns()
        os.unlink(name, dir_fd=dir_fd)
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return samples


def bench_in_process(root: WorkspaceRoot, dir_fd: int, n: int) -> list[float]:
    samples = []
    for i in range(n):
        name = f"ip-{i}.md"
        ident = _make(dir_fd, name)
        t0 = time.perf_counter_ns()
        root.unlink_note(name, ident)
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return samples


def bench_worker(
    worker: ConfinedWorker, dir_fd: int, n: int, pause: float = 0.0, tag: str = "w"
) -> list[float]:
    samples = []
    for i in range(n):
        name = f"{tag}-{i}.md"
        ident = _make(dir_fd, name)
        if pause:
            time.sleep(pause)
        t0 = time.perf_counter_ns()
        worker.unlink_note(name, ident)
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return samples


_FILTER_COST = r"""
import os, sys, tempfile, time
from statistics import median
from fs_notes.sandbox import seccomp
n, batches, which = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
d = os.open(tempfile.mkdtemp(), os.O_RDONLY | os.O_DIRECTORY)
def loop():
    out = []
    for i in range(n):
        t = time.perf_counter_ns()
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=d))
        os.unlink("f", dir_fd=d)
        out.append((time.perf_counter_ns() - t) / 1000)
    return median(out)
before = [loop() for _ in range(batches)]
if which == "deny":  # the first program alone: the deny-list over a default of allow
    first = seccomp._deny_program(seccomp._library(), seccomp.denied_for("delete"), "none")[0]
    first.load()
else:  # the whole filter: the deny-list and the default-deny allow-list (sandbox/allowed.py)
    seccomp.install("delete")
after = [loop() for _ in range(batches)]
print(min(before), min(after))
"""


def filter_cost(n: int, batches: int, which: str) -> tuple[float, float] | None:
    """(us per create + unlink without, with the delete worker's filter), best batch each;
    `which`: "deny" (its deny-list program alone) or "all" (deny-list and allow-list)."""
    import subprocess

    repo = str(Path(__file__).resolve().parent.parent)
    proc = subprocess.run(
        [sys.executable, "-c", _FILTER_COST, str(n), str(batches), which],
        capture_output=True, text=True, cwd=repo, timeout=300,
    )  # fmt: skip
    if proc.returncode != 0:
        print(f"filter cost not measured: {proc.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    before, after = (float(x) for x in proc.stdout.split())
    return before, after


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--mode", choices=["landlock", "chroot", "none"], default="landlock")
    args = parser.parse_args()
    n = max(10, min(args.iterations, 100_000))  # bounded
    batches = max(1, min(args.batches, 50))
    per = max(10, n // batches)
    mode: Mode = args.mode
    rows: list[tuple[float, float, float]] = []  # per batch: raw, in-process, worker medians
    with tempfile.TemporaryDirectory(prefix="fs-notes-bench-") as tmp:
        dir_fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                worker = ConfinedWorker(tmp, "delete", mode)
            except SandboxError as exc:
                print(f"cannot start a {mode} worker here: {exc}", file=sys.stderr)
                return 2
            with worker, WorkspaceRoot.open(tmp) as root:
                bench_worker(worker, dir_fd, min(200, n), tag="warm")
                bench_raw(dir_fd, min(200, n))
                for b in range(batches):
                    raw = bench_raw(dir_fd, per)
                    in_process = bench_in_process(root, dir_fd, per)
                    through = bench_worker(worker, dir_fd, per, tag=f"w{b}")
                    rows.append((median(raw), median(in_process), median(through)))
                paced = bench_worker(worker, dir_fd, min(n, 500), pause=0.001, tag="p")
        finally:
            os.close(dir_fd)
    # Time: the batch with the lowest worker median (interference only adds time). Ratio: the
    # median over batches of worker / raw in the same batch (noise moves both, either way).
    raw_med, ip_med, med = min(rows, key=lambda row: row[2])
    ratio = median(w / r for r, _, w in rows)
    print(f"iterations          {per} x {batches} batches")
    print(f"raw unlinkat                     median {raw_med:8.1f} us  (best batch)")
    print(f"unlink_note in process (layer 2) median {ip_med:8.1f} us  (resolve, verify, unlink)")
    print(f"{mode:8} worker delete           median {med:8.1f} us")
    print(f"sandbox overhead (worker - in process)  {med - ip_med:8.1f} us")
    print(f"ratio worker / raw, median of batches   {ratio:8.1f}x")
    print(
        f"{mode:8} worker, idle 1 ms before    median {median(paced):8.1f} us"
        "  (reference: what a server sees)"
    )
    shown = ", ".join(f"{w:.0f}/{r:.1f}={w / r:.1f}x" for r, _, w in rows)
    print(f"batches (worker us / raw us): {shown}")
    for which, what in (("deny", "deny-list alone"), ("all", "deny-list + allow-list")):
        cost = filter_cost(per, batches, which)
        if cost is not None:
            before, after = cost
            print(
                f"seccomp filter ({what:22}): create+unlink {before:.2f} us -> {after:.2f} us"
                f" ({after / before:.2f}x)"
            )
    ok = med <= TARGET_US and ratio <= TARGET_RATIO
    print(f"targets (<= {TARGET_US:.0f} us, <= {TARGET_RATIO:.0f}x): {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
