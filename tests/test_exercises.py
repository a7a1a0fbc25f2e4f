"""`fs-notes exercises --json --short`: the whole catalogue against the real server, every layer
on and each knocked out in turn, must match the documented matrix with zero escapes.

One run (about 5 s) feeds every test here. A cell that depends on the host is expected as the
matrix's host condition states (expected.HOST_CONDITIONS: a regular user makes no bind mount and
gets no private view, a big interpreter, Yama); if this host cannot run an attack for any other
reason (a root without CAP_SYS_ADMIN), the cell is reported apart; under CI=true that is a
failure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from layers import requirement
from wire import REPO, child_env

from fs_notes.exercises.catalogue import ATTACKS
from fs_notes.exercises.classes import CLASSES
from fs_notes.exercises.expected import (
    COLUMNS,
    EXPECTED,
    HOST_CONDITIONS,
    NOTHING_TO_REFUSE,
    expected_results,
)

RESULT = re.compile(r"blocked:(policy|lexical|render|filesystem|os)|escaped|n/a")


@pytest.fixture(scope="module")
def run() -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "fs_notes", "exercises", "--json", "--short"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
        env=child_env(),
    )
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"no JSON (exit {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
        )
    return proc.returncode, data


def _by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in data["attacks"]}


def test_nothing_escapes_with_every_layer_on(run: tuple[int, dict[str, Any]]) -> None:
    _, data = run
    assert data["escapes_with_all_layers"] == 0
    by_host = {c["attack"]: c["expected"] for c in data["host_conditions"]
               if c["configuration"] == "all"}  # fmt: skip
    for attack in data["attacks"]:
        if attack["name"] in NOTHING_TO_REFUSE:  # e.g. served literally: nothing out
            assert attack["results"]["all"] == "n/a", attack
            continue
        if attack["name"] in by_host:  # not run here, as the matrix's host condition states
            assert attack["results"]["all"] == by_host[attack["name"]] == "n/a", attack
            continue
        assert attack["results"]["all"].startswith("blocked:"), attack


def test_the_matrix_is_the_documented_one_and_the_command_exits_0(
    run: tuple[int, dict[str, Any]],
) -> None:
    code, data = run
    assert data["differences"] == [], json.dumps(data["differences"], indent=1)
    assert data["matches_documented"] is True
    assert code == 0 and data["passed"] is True


def test_every_attack_ran_on_this_host(run: tuple[int, dict[str, Any]]) -> None:
    _, data = run
    if data["not_run_here"]:  # under CI=true these also count as differences
        why = f"not runnable on this host: {data['not_run_here']}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)


def test_the_json_has_the_contract_shape(run: tuple[int, dict[str, Any]]) -> None:
    _, data = run
    assert isinstance(data["escapes_with_all_layers"], int)
    for attack in data["attacks"]:
        assert isinstance(attack["name"], str)
        assert set(attack["results"]) == set(COLUMNS)
        for column, result in attack["results"].items():
            assert RESULT.fullmatch(result), (attack["name"], result)
            if result == "n/a":
                assert attack["why"][column], attack


def test_every_attack_class_of_the_issue_is_in_the_matrix(run: tuple[int, dict[str, Any]]) -> None:
    _, data = run
    assert {a["class"] for a in data["attacks"]} == set(CLASSES)
    assert [a["name"] for a in data["attacks"]] == [a.name for a in ATTACKS]


def test_each_configuration_really_replaced_its_layer(run: tuple[int, dict[str, Any]]) -> None:
    """Rule (ours): a knock-out proves itself; the target says what it runs."""
    _, data = run
    configs = data["configurations"]
    landlock = requirement("landlock")[0] == "run"
    assert configs["all"]["roots"] == "WorkspaceRoot"
    assert configs["all"]["ids"] == "lexical" and configs["all"]["uris"] == "lexical"
    assert configs["all"]["changes"] == "ConfinedChanges"
    assert configs["all"]["selfConfined"] is landlock
    assert configs["no-lexical"]["ids"] == "permissive"
    assert configs["no-lexical"]["uris"] == "naive"
    assert configs["no-lexical"]["roots"] == "WorkspaceRoot"
    assert configs["no-filesystem"]["roots"] == "NaiveRoot"
    assert configs["no-filesystem"]["changes"] == "RawChanges"
    assert configs["no-filesystem"]["ids"] == "lexical"
    assert configs["no-filesystem"]["selfConfined"] is landlock
    assert configs["no-os"]["selfConfined"] is False
    assert configs["no-os"]["changes"] == "InProcessChanges"
    assert configs["no-os"]["roots"] == "WorkspaceRoot"


def test_the_naive_root_does_escape_so_the_checks_can_see_an_escape(
    run: tuple[int, dict[str, Any]],
) -> None:
    _, data = run
    attacks = _by_name(data)
    escaped = [a for a in data["attacks"] if a["results"]["no-filesystem"] == "escaped"]
    assert escaped, "no attack escaped without layer 2: the harm checks would be untested"
    if attacks["mount-point-delete"]["results"]["no-filesystem"] != "n/a":
        detail = attacks["mount-point-delete"]["detail"]["no-filesystem"]
        assert "outside/victim.md deleted or changed" in detail
    assert "secret marker" in attacks["hardlink"]["detail"]["no-filesystem"]


def test_without_the_filesystem_layer_the_os_layer_refuses_symlink_escapes(
    run: tuple[int, dict[str, Any]],
) -> None:
    _, data = run
    attacks = _by_name(data)
    for name in ("symlink-final", "symlink-dir", "magic-link-root", "replaced-parent"):
        assert attacks[name]["results"]["no-filesystem"] == "blocked:os", attacks[name]
    # Before a deletion the journal of changes reads the note's bytes in this server, through
    # the naive roots: the server's own Landlock domain refuses the read beneath the moved
    # folder, and nothing is deleted that could not be kept (the worker's leaked fd itself:
    # test_sandbox_escapes.py).
    assert "EACCES" in attacks["fd-leak-worker"]["detail"]["no-filesystem"]


def _documented_matrix() -> dict[str, tuple[str, ...]]:
    text = (Path(REPO) / "docs" / "design.md").read_text(encoding="utf-8")
    rows: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        cells = [c.strip().strip("*`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in EXPECTED:
            rows[cells[0]] = tuple(cells[2:])
    return rows


def test_docs_design_md_shows_exactly_the_expected_matrix() -> None:
    assert _documented_matrix() == EXPECTED


def _documented_conditions() -> dict[str, tuple[str, ...]]:
    text = (Path(REPO) / "docs" / "design.md").read_text(encoding="utf-8")
    rows: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] in {c.name for c in HOST_CONDITIONS}:
            rows[cells[0]] = tuple(cells[1:])
    return rows


def test_docs_design_md_states_exactly_the_host_conditions_of_the_matrix() -> None:
    """Issue 25: the cells that depend on the host are documented with their condition."""
    documented = _documented_conditions()
    assert set(documented) == {c.name for c in HOST_CONDITIONS}
    for condition in HOST_CONDITIONS:
        attacks, columns, code, when = documented[condition.name]
        assert set(attacks.split(", ")) == condition.attacks
        want = "all four" if condition.columns == COLUMNS else ", ".join(condition.columns)
        assert columns == want and when == condition.when
        assert code == condition.code


def test_every_cell_a_host_condition_decided_is_listed_with_its_reason(
    run: tuple[int, dict[str, Any]],
) -> None:
    """Issue 25: on this host, the cells a condition decided carry the reason; none of them is
    a difference; the facts it was decided from are in the output."""
    _, data = run
    assert set(data["host"]) >= {"root", "interpreter_bytes", "read_limit", "ptrace_scope"}
    assert data["host"]["root"] is (os.geteuid() == 0)
    for cell in data["host_conditions"]:
        assert cell["condition"].split(":")[0] in {c.name for c in HOST_CONDITIONS}, cell
    big = data["host"]["interpreter_bytes"] > data["host"]["read_limit"]
    listed = {(c["attack"], c["configuration"]) for c in data["host_conditions"]}
    assert (("magic-link-self-exe", "no-filesystem") in listed) is big


def test_the_expected_matrix_covers_the_catalogue_and_blocks_everything_with_all_layers() -> None:
    assert set(EXPECTED) == {a.name for a in ATTACKS}
    for name in EXPECTED:
        if name in NOTHING_TO_REFUSE:
            assert set(EXPECTED[name]) == {"n/a"}, name
            continue
        assert expected_results(name)["all"].startswith("blocked:"), name


def test_serve_has_no_knockout_switch_and_never_loads_the_exercises() -> None:
    code = (
        "import sys, fs_notes.serve, fs_notes.cli; "
        "print([m for m in sys.modules if m.startswith('fs_notes.exercises')])"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert loaded.stdout.strip() == "[]", loaded.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", str(REPO), "--knockout", "filesystem"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=child_env(),
    )
    assert usage.returncode == 2 and "--knockout" in usage.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    ).stdout
    assert "knock" not in help_text.lower()


def test_the_trust_class_runs_with_the_matrix_and_every_case_holds(
    run: tuple[int, dict[str, Any]],
) -> None:
    _, data = run
    assert [c["result"] for c in data["trust"]["cases"]] == ["held"] * 6, data["trust"]
    assert data["trust"]["passed"] is True and data["passed"] is True
