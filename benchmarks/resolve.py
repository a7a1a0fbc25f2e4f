"""How long it takes to stat a note three folders deep, per resolver, against the string check.

Rows (all in one run, same note, same warm caches):
  openat2   WorkspaceRoot(resolver="openat2").stat_note("a/b/c/note.md")
  walk      WorkspaceRoot(resolver="walk").stat_note("a/b/c/note.md")
  realpath  os.path.realpath(ws/rel) + os.path.commonpath check + os.stat  (the usual string check,
            which is racy: it is the baseline, not an alternative)
Targets: openat2 median <= 10 us and <= 0.2 x realpath. ``--check`` exits 1 when a target is missed.
Usage: python benchmarks/resolve.py [--iterations N] [--check]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fs_notes.fs import WorkspaceRoot, openat2_available

REL = "a/b/c/note.md"
TARGET_US = 10.0
TARGET_RATIO = 0.2


def _samples(call: Callable[[], object], iterations: int) -> list[float]:
    for _ in range(min(1000, iterations)):  # warm-up
        call()
    out: list[float] = []
    clock = time.perf_counter_ns
    for _ in range(iterations):
        start = clock()
        call()
        out.append((clock() - start) / 1000.0)
    return out


def _string_check(ws: str) -> Callable[[], object]:
    base = os.path.realpath(ws)

    def check() -> object:
        path = os.path.realpath(os.path.join(base, REL))
        if os.path.commonpath([base, path]) != base:
            raise PermissionError("outside")
        return os.stat(path)

    return check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    iterations = max(100, min(args.iterations, 1_000_000))  # bounded loop

    tmp = tempfile.mkdtemp(prefix="fs-notes-bench-")
    try:
        ws = os.path.join(tmp, "ws")
        os.makedirs(os.path.join(ws, "a", "b", "c"))
        Path(ws, REL).write_bytes(b"# note\n")
        rows: dict[str, list[float]] = {}
        resolvers: tuple[Literal["openat2", "walk"], ...] = ("openat2", "walk")
        for name in resolvers:
            if name == "openat2" and not openat2_available():
                print("openat2: not available on this host", file=sys.stderr)
                continue
            with WorkspaceRoot.open(ws, resolver=name) as root:
                rows[name] = _samples(partial(root.stat_note, REL), iterations)
        rows["realpath"] = _samples(_string_check(ws), iterations)
    finally:
        shutil.rmtree(tmp)

    base = statistics.median(rows["realpath"])
    print(f"stat of {REL!r}, {iterations} iterations, microseconds per call")
    print(f"{'method':<10} {'median':>8} {'p10':>8} {'p90':>8} {'x realpath':>11}")
    for method, values in rows.items():
        med = statistics.median(values)
        deciles = statistics.quantiles(values, n=10)
        print(f"{method:<10} {med:8.2f} {deciles[0]:8.2f} {deciles[-1]:8.2f} {med / base:11.2f}")
    met = "openat2" in rows and (
        statistics.median(rows["openat2"]) <= TARGET_US
        and statistics.median(rows["openat2"]) <= TARGET_RATIO * base
    )
    print(
        f"targets (openat2 <= {TARGET_US:g} us and <= {TARGET_RATIO:g} x realpath): "
        f"{'met' if met else 'MISSED'}"
    )
    return 0 if met or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
