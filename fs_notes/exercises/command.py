"""`fs-notes exercises [--json] [--race] [--short] [--startup-only]`: run the matrix, the
start-up class (and the race), print, judge.

The arguments are declared in fs_notes/cli.py (so `fs-notes serve` never imports this package).
`--startup-only` runs the start-up class alone (`startup.py`), without the matrix.

Exit status: 0 when nothing escaped with every layer on, the matrix equals the documented one
(`expected.py`, docs/design.md), every start-up case was refused and every control of one
started, every case of the trust class held (`trust.py`) and, with --race, the race saw no
escape; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .client import TargetFailed
from .race import FULL_ATTEMPTS, SHORT_ATTEMPTS, RaceOptions, run_race
from .report import difference_lines, judge, passed, race_text, startup_text, to_json, to_text
from .runner import COLUMNS, Matrix, Options, run_matrix
from .startup import run_startup
from .trust import run_trust


def run(args: argparse.Namespace) -> tuple[Matrix, dict[str, Any] | None]:
    matrix = run_matrix(Options(short=args.short))
    race = None
    if args.race:
        attempts = args.race_attempts or (SHORT_ATTEMPTS if args.short else FULL_ATTEMPTS)
        race = run_race(
            RaceOptions(
                attempts=attempts,
                seconds=args.race_seconds,
                control_seconds=1.0 if args.short else 3.0,
            )
        )
    return matrix, race


def _startup_only(as_json: bool) -> int:
    startup = run_startup()
    ok = startup["passed"] is True
    if as_json:
        print(json.dumps({"startup": startup, "passed": ok}, indent=2, ensure_ascii=False))
    else:
        print(f"fs-notes exercises: {startup_text(startup)}\n\n{'PASSED' if ok else 'FAILED'}")
    return 0 if ok else 1


def exercises(args: argparse.Namespace) -> int:
    if args.startup_only:
        return _startup_only(args.json)
    try:
        matrix, race = run(args)
    except TargetFailed as exc:
        print(f"fs-notes exercises: the server failed: {exc}")
        return 1
    startup = run_startup()
    trust = run_trust()
    verdict = judge(matrix)
    if args.json:
        out = to_json(matrix, verdict, race, startup, trust)
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(to_text(matrix, verdict, race, startup, trust))
    return 0 if passed(verdict, race, startup, trust) else 1


def _cells(n: int) -> str:
    return f"{n} cell" if n == 1 else f"{n} cells"


def summary(short: bool = True) -> tuple[bool, str]:
    """One paragraph for the demo: whether the matrix passed, and what it showed."""
    matrix = run_matrix(Options(short=short))
    verdict = judge(matrix)
    blocked: dict[str, int] = {}
    for attack in matrix.attacks:
        result = matrix.results[attack.name]["all"].result
        blocked[result] = blocked.get(result, 0) + 1
    counts = ", ".join(f"{k.removeprefix('blocked:')} {v}" for k, v in sorted(blocked.items()))
    knocked = []
    for column in COLUMNS[1:]:
        hit = [a.name for a in matrix.attacks if matrix.results[a.name][column].result == "escaped"]
        knocked.append(f"{column}: {len(hit)}" + (f" ({', '.join(hit)})" if hit else ""))
    text = (
        f"{len(matrix.attacks)} attacks x {len(COLUMNS)} configurations in "
        f"{matrix.seconds:.1f} s. All layers: {verdict.escapes_with_all_layers} escapes "
        f"(first refused by {counts}). One layer knocked out, escapes: {'; '.join(knocked)}. "
        + (
            "Matrix as documented"
            + (
                f" (for this host: {_cells(len(verdict.host_conditions))} as its conditions "
                "state; fs-notes exercises lists them)."
                if verdict.host_conditions
                else "."
            )
            if verdict.matches
            else f"Matrix DIFFERENT from the documented one in {_cells(len(verdict.differences))}:"
        )
    )
    if not verdict.matches:
        text += "".join(f"\n  {line}" for line in difference_lines(verdict))
    return passed(verdict, None), text


__all__ = ["exercises", "race_text", "startup_text", "summary"]
