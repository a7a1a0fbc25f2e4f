"""The exercises' start-up class (issue 27 item 5): `fs-notes exercises --startup-only` starts the
real `serve` on each hostile layout and on its control, and every case must be refused at
start-up (status 2, its exact line, nothing answered, the notes and the state folder as they
were) while every control starts and answers.

Each case also runs here in a folder of the test's own, so that the refusal is compared with the
exact line written out below and the disk is looked at again by the test itself. The judge is
shown to see an escape: a server that does start, judged as a hostile run, is "escaped".
As root the link above bob's workspace is given to another uid; a regular user cannot do that,
so there it lies in a folder others can write (both passes run every test: none skips).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from wire import REPO, child_env

from fs_notes.exercises.classes import CLASSES, STARTUP
from fs_notes.exercises.report import Verdict, passed, startup_text
from fs_notes.exercises.startup import (
    BLOCKED,
    Ended,
    judge_control,
    judge_hostile,
    note_state,
    run_case,
    serve,
)
from fs_notes.exercises.startup_cases import CASES, StartupCase, unused_uid

NAMES = [
    "symlinked-folder-above",
    "two-workspaces-one-folder",
    "workspace-inside-another",
    "workspace-holding-another",
    "state-folder-others-can-write",
    "replay-folder-others-can-write",
    "audit-folder-others-can-write",
]
NOT_TWO = "two workspaces must be two folders, neither inside the other"
FIX = "can be written by others (mode 0777; chmod go-w fixes it)"


def _refusal(name: str, root: Path) -> str:
    """The line serve must end with for case `name` built hostile in `root`."""
    alice = f'workspace "alice" ({root / "alice"})'
    if name == "symlinked-folder-above":
        where = f'fs-notes: workspace "bob" ({root / "bob" / "projects" / "notes"}):'
        if os.geteuid() == 0:
            return (
                f"{where} {root / 'bob' / 'projects'} is a symbolic link of uid {unused_uid()}, "
                "not of root, the folder's owner: its owner could make the path lead to another "
                "folder"
            )
        return f"{where} {root / 'bob'} {FIX}"
    if name == "two-workspaces-one-folder":
        bob = f'workspace "bob" ({root / "bob" / "projects" / "alice"})'
        return f"fs-notes: {bob} opens the same folder as {alice}: {NOT_TWO}"
    bob = f'workspace "bob" ({root / "bob" / "projects" / "archive"})'
    if name == "workspace-inside-another":
        return f"fs-notes: {bob} is inside {alice}: {NOT_TWO}"
    if name == "workspace-holding-another":
        return f"fs-notes: {alice} holds {bob}: {NOT_TWO}"
    if name == "state-folder-others-can-write":
        state = root / "state"
        return (
            f"fs-notes: --state-dir {state} can be written by the group or others (mode 0777); "
            f"fix it with: chmod go-w {state}"
        )
    if name == "replay-folder-others-can-write":
        shared = root / "shared"
        sticky = FIX.replace("0777", "1777")
        return f"fs-notes: the replay database {shared / 'replay.sqlite3'}: {shared} {sticky}"
    assert name == "audit-folder-others-can-write"
    logs = root / "logs"
    return f"fs-notes: --audit-log {logs / 'audit.jsonl'}: {logs} {FIX}"


@pytest.fixture(scope="module")
def run() -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "fs_notes", "exercises", "--json", "--startup-only"],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=child_env(),
    )  # fmt: skip
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"no JSON (exit {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
        )
    return proc.returncode, data, proc.stderr


def test_every_start_up_case_is_refused_and_every_control_starts(
    run: tuple[int, dict[str, Any], str],
) -> None:
    code, data, stderr = run
    startup = data["startup"]
    assert [c["name"] for c in startup["cases"]] == NAMES
    for case in startup["cases"]:
        assert case["class"] == STARTUP
        assert (case["result"], case["control"]) == (BLOCKED, "started"), case
        assert case["detail"].startswith("fs-notes: "), case
        assert case["control_detail"] == (
            "answered initialize, then ended with its input (status 0)"
        )
    counts = (startup["blocked"], startup["escapes"], startup["controls_started"])
    assert counts == (len(NAMES), 0, len(NAMES))
    assert startup["root"] is (os.geteuid() == 0)
    assert startup["passed"] is True and data["passed"] is True
    assert code == 0, stderr


def test_the_text_report_has_one_line_per_case_and_each_refusal(
    run: tuple[int, dict[str, Any], str],
) -> None:
    _, data, _ = run
    startup = data["startup"]
    lines = startup_text(startup).splitlines()
    assert lines[1] == f"  [{STARTUP}]"
    assert lines[2] == f"  {'case':32}{'hostile':18}control"
    assert lines[3 : 3 + len(NAMES)] == [f"  {n:32}{'start-up':18}started" for n in NAMES]
    details = [f"  {c['name']}: {c['detail']}" for c in startup["cases"]]
    assert lines[3 + len(NAMES) : 3 + 2 * len(NAMES)] == details
    n = len(NAMES)
    assert lines[-1] == f"start-up: {n} of {n} refused, 0 escaped, {n} of {n} controls started"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_case_refuses_with_its_exact_line_and_touches_nothing(
    case: StartupCase, tmp_path: Path
) -> None:
    outcome = run_case(case, tmp_path)
    root = tmp_path / case.name / "hostile"
    assert (outcome.result, outcome.detail) == (BLOCKED, _refusal(case.name, root))
    assert outcome.control == "started", outcome.control_detail
    # from outside again, by the test itself: the state folders are empty, the notes intact
    for folder in ("state", "xdg-state", "xdg-config"):
        assert os.listdir(root / folder) == [], folder
    if (root / "shared").exists():
        assert os.listdir(root / "shared") == []
    notes = sorted(p for p in root.rglob("*.md") if not p.is_symlink())
    assert notes, "the layout holds notes"
    for note in notes:
        assert note.read_text().startswith("# "), note
    control = tmp_path / case.name / "control"
    assert "replay.sqlite3" in os.listdir(
        control / ("shared" if (control / "shared").exists() else "state")
    )


def test_the_judge_sees_a_server_that_serves_as_an_escape(tmp_path: Path) -> None:
    """The positive control of the judge: a layout serve starts on, judged as a hostile run,
    is "escaped", naming the answer and the files it made."""
    case = CASES[NAMES.index("two-workspaces-one-folder")]
    layout = case.build(tmp_path, False)  # made right: serve starts
    notes = {p: note_state(p) for p in layout.kept}
    ended = serve(layout, tmp_path, 60.0)
    result, detail = judge_hostile(layout, tmp_path, notes, ended)
    assert result == "escaped"
    assert "it answered on stdout, serving the layout" in detail
    assert "state/ now holds " in detail and "replay.sqlite3" in detail


def test_the_judge_calls_each_harm_and_each_other_end_what_it_is(tmp_path: Path) -> None:
    case = CASES[NAMES.index("state-folder-others-can-write")]
    layout = case.build(tmp_path, True)
    note = layout.kept[0]
    notes = {note: note_state(note)}
    refused = Ended(2, "", layout.refusal)
    assert judge_hostile(layout, tmp_path, notes, refused) == (BLOCKED, layout.refusal)
    other = Ended(2, "", "fs-notes: something else")
    assert judge_hostile(layout, tmp_path, notes, other) == (
        "n/a",
        f"exited with status 2, not with the refusal expected ({layout.refusal}): "
        "fs-notes: something else",
    )
    hung = Ended(None, "", "did not end within 60 s (killed)")
    assert judge_hostile(layout, tmp_path, notes, hung)[0] == "n/a"
    assert judge_control(layout, tmp_path, notes, refused) == (
        "refused",
        f"exited with status 2 without answering: {layout.refusal}",
    )
    note.chmod(0o400)  # no mode a note is written with
    assert judge_hostile(layout, tmp_path, notes, refused) == (
        "escaped",
        "notes/a.md changed: mode",
    )
    assert judge_control(layout, tmp_path, notes, refused)[0] == "escaped"
    note.chmod(0o644)
    (layout.untouched[0] / "replay.sqlite3").write_bytes(b"")
    assert judge_hostile(layout, tmp_path, {note: note_state(note)}, refused) == (
        "escaped",
        "state/ now holds replay.sqlite3",
    )


def test_a_failed_start_up_class_fails_the_run_and_it_is_no_matrix_class() -> None:
    assert passed(Verdict(0), None, {"passed": True}) is True
    assert passed(Verdict(0), None, {"passed": False}) is False
    assert passed(Verdict(0), None) is True  # the class did not run
    assert STARTUP not in CLASSES  # nothing in it is knocked out: no row of the matrix
