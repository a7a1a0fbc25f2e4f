"""Comparing a run with the documented matrix, and printing it (text table or the JSON of
docs/interface.md: ``{"attacks": [{"name", "results": {...}}], "escapes_with_all_layers": int}``).

Guarantees: `differences` lists every cell that differs from what the matrix expects on this
host (`expected.expected_on` with the facts the run measured: the documented cell, or the one a
host condition states), each with the attack, the configuration, what was expected, what came
and why; cells a host condition decided are listed apart as `host_conditions` (with the
reason), and cells this host could not run for a reason no condition states (a root without
CAP_SYS_ADMIN) as `not_run_here` (under CI=true they count as differences, so CI fails rather
than skips). `passed` is true only with zero escapes in the
"all" column, no difference, (when a race ran) zero race escapes and (when the start-up class
ran: `startup.py`) every start-up case refused and every control started, and (when the trust
class ran: `trust.py`) every trust case held.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .classes import CLASSES
from .expected import EXPECTED, expected_on
from .runner import COLUMNS, Matrix

SHORT = {"escaped": "ESCAPED", "n/a": "n/a"}


@dataclass
class Verdict:
    escapes_with_all_layers: int
    differences: list[dict[str, str]] = field(default_factory=list)
    not_run_here: list[dict[str, str]] = field(default_factory=list)
    host_conditions: list[dict[str, str]] = field(default_factory=list)
    single_layer: list[str] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return not self.differences


def judge(matrix: Matrix) -> Verdict:
    strict = os.environ.get("CI", "").lower() == "true"
    verdict = Verdict(
        sum(matrix.results[a.name]["all"].result == "escaped" for a in matrix.attacks)
    )
    names = {a.name for a in matrix.attacks}
    for name in sorted(set(EXPECTED) - names):
        verdict.differences.append({"attack": name, "problem": "documented but not in the run"})
    for attack in matrix.attacks:
        row = matrix.results[attack.name]
        if attack.name not in EXPECTED:
            verdict.differences.append({"attack": attack.name, "problem": "not documented"})
            continue
        want = expected_on(attack.name, matrix.host)
        escaped = [c for c in COLUMNS[1:] if row[c].result == "escaped"]
        if len(escaped) == 1:
            verdict.single_layer.append(attack.name)
        for column in COLUMNS:
            got = row[column]
            expected, condition = want[column]
            if condition is not None:
                verdict.host_conditions.append(
                    {"attack": attack.name, "configuration": column, "expected": expected,
                     "condition": condition}
                )  # fmt: skip
            if got.result == expected:
                continue
            cell = {
                "attack": attack.name,
                "configuration": column,
                "expected": expected,
                "actual": got.result,
                "detail": got.why or got.detail,
            }
            if condition is not None:
                cell["condition"] = condition
            if got.host_limited and not strict:
                verdict.not_run_here.append(cell)
            else:
                verdict.differences.append(cell)
    return verdict


def passed(
    verdict: Verdict,
    race: dict[str, Any] | None,
    startup: dict[str, Any] | None = None,
    trust: dict[str, Any] | None = None,
) -> bool:
    race_ok = race is None or race.get("escapes") == 0
    startup_ok = startup is None or startup.get("passed") is True
    trust_ok = trust is None or trust.get("passed") is True
    return (
        verdict.escapes_with_all_layers == 0
        and verdict.matches
        and race_ok
        and startup_ok
        and trust_ok
    )


def to_json(
    matrix: Matrix,
    verdict: Verdict,
    race: dict[str, Any] | None,
    startup: dict[str, Any] | None = None,
    trust: dict[str, Any] | None = None,
) -> dict[str, Any]:
    attacks = []
    for attack in matrix.attacks:
        row = matrix.results[attack.name]
        entry: dict[str, Any] = {
            "name": attack.name,
            "class": attack.kind,
            "results": {c: row[c].result for c in COLUMNS},
        }
        why = {c: row[c].why for c in COLUMNS if row[c].result == "n/a" and row[c].why}
        if why:
            entry["why"] = why
        entry["detail"] = {c: row[c].detail for c in COLUMNS if row[c].detail}
        attacks.append(entry)
    out: dict[str, Any] = {
        "attacks": attacks,
        "escapes_with_all_layers": verdict.escapes_with_all_layers,
        "matches_documented": verdict.matches,
        "differences": verdict.differences,
        "not_run_here": verdict.not_run_here,
        "host_conditions": verdict.host_conditions,
        "host": matrix.host.to_json(),
        "single_layer": verdict.single_layer,
        "configurations": matrix.configs,
        "seconds": round(matrix.seconds, 2),
        "notes": matrix.notes,
        "passed": passed(verdict, race, startup, trust),
    }
    if race is not None:
        out["race"] = race
    if startup is not None:
        out["startup"] = startup
    if trust is not None:
        out["trust"] = trust
    return out


def _cell(result: str) -> str:
    return SHORT.get(result, result.removeprefix("blocked:"))


def to_text(
    matrix: Matrix,
    verdict: Verdict,
    race: dict[str, Any] | None,
    startup: dict[str, Any] | None = None,
    trust: dict[str, Any] | None = None,
) -> str:
    lines = [
        f"fs-notes exercises: {len(matrix.attacks)} attacks x {len(COLUMNS)} configurations "
        f"({matrix.seconds:.1f} s); {'; '.join(matrix.notes)}",
        "each cell: the layer that refused the attack, ESCAPED, or n/a (nothing to refuse)",
        "",
        f"  {'attack':28}" + "".join(f"{c:15}" for c in COLUMNS),
    ]
    wrong = {(d["attack"], d.get("configuration")) for d in verdict.differences}
    for kind in CLASSES:
        members = [a for a in matrix.attacks if a.kind == kind]
        if not members:
            continue
        lines.append(f"  [{kind}]")
        for attack in members:
            row = matrix.results[attack.name]
            cells = []
            for column in COLUMNS:
                text = _cell(row[column].result)
                cells.append(f"{text + ('!' if (attack.name, column) in wrong else ''):15}")
            lines.append(f"  {attack.name:28}" + "".join(cells).rstrip())
    lines.append("")
    lines.append(f"escapes with all layers: {verdict.escapes_with_all_layers}")
    if verdict.single_layer:
        lines.append(
            "stopped by one layer only (docs/design.md says why that is accepted): "
            + ", ".join(verdict.single_layer)
        )
    for attack in matrix.attacks:
        for column in COLUMNS:
            got = matrix.results[attack.name][column]
            if got.result == "n/a":
                lines.append(f"  n/a {attack.name} [{column}]: {got.why}")
    for cell in verdict.not_run_here:
        lines.append(f"not run on this host: {cell['attack']} [{cell['configuration']}]")
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for cell in verdict.host_conditions:  # one line per attack and condition
        key = (cell["attack"], cell["expected"], cell["condition"])
        grouped.setdefault(key, []).append(cell["configuration"])
    for (name, expected, condition), columns in grouped.items():
        lines.append(
            f"expected on this host: {name} [{', '.join(columns)}] {expected}: {condition}"
        )
    if verdict.differences:
        lines.append(f"DIFFERENT from the documented matrix ({len(verdict.differences)}):")
        lines += [f"  {line}" for line in difference_lines(verdict)]
    else:
        lines.append("matrix: as documented in docs/design.md, for this host")
    if race is not None:
        lines.append("")
        lines.append(race_text(race))
    if startup is not None:
        lines.append("")
        lines.append(startup_text(startup))
    if trust is not None:
        from .trust import trust_text

        lines.append("")
        lines.append(trust_text(trust))
    lines.append("")
    lines.append("PASSED" if passed(verdict, race, startup, trust) else "FAILED")
    return "\n".join(lines)


def difference_lines(verdict: Verdict) -> list[str]:
    """One line per cell that differs: attack [configuration]: expected, got (why)."""
    lines = []
    for d in verdict.differences:
        if "problem" in d:
            lines.append(f"{d['attack']}: {d['problem']}")
        else:
            lines.append(
                f"{d['attack']} [{d['configuration']}]: expected {d['expected']}, "
                f"got {d['actual']} ({d['detail']})"
            )
    return lines


def race_text(race: dict[str, Any]) -> str:
    ops = ", ".join(
        f"{kind} {c['attempts']} ({c['refused']} refused)"
        for kind, c in race["by_operation"].items()
    )
    control = race["control"]
    return (
        f"race (all layers, {race['attackers']} attacker processes swapping with "
        f"renameat2(RENAME_EXCHANGE), {race['swaps']} swaps): {race['attempts']} attempts "
        f"({ops}) in {race['seconds']:.1f} s, {race['refusals']} refused, "
        f"{race['moves']} notes_move calls ({race['moved']} done), {race['escapes']} escapes\n"
        f"race control (validate-then-use, same attackers, in-process): {control['attempts']} "
        f"attempts, {control['escapes']} escapes (reads {control['reads']['escapes']}, moves "
        f"{control['moves']['escapes']} of {control['moves']['attempts']}: the harness can see "
        "an escape)"
    )


def startup_text(startup: dict[str, Any]) -> str:
    """The start-up class (`startup.py`): one line per case, its result and its control's, then
    what each refusal said (or what went wrong) and a count."""
    cases = startup["cases"]
    lines = [
        f"start-up class ({len(cases)} cases, {startup['seconds']:.1f} s): the real fs-notes "
        "serve on each hostile layout, and on the same layout made right (the control), judged "
        "from outside (exit status, stdout, the notes and the state folder)",
        f"  [{startup['class']}]",
        f"  {'case':32}{'hostile':18}control",
    ]
    for case in cases:
        lines.append(f"  {case['name']:32}{_cell(case['result']):18}{case['control']}")
    for case in cases:
        lines.append(f"  {case['name']}: {case['detail']}")
        if case["control"] != "started":
            lines.append(f"  {case['name']} (control): {case['control_detail']}")
    lines.append(
        f"start-up: {startup['blocked']} of {len(cases)} refused, {startup['escapes']} escaped, "
        f"{startup['controls_started']} of {len(cases)} controls started"
    )
    return "\n".join(lines)
