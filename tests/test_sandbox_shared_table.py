"""The escape table (fs_notes/exercises/cases.py) against the OS layer alone.

For every case, the case's raw note id goes to the worker's `unlink_raw` (a bare os.unlink from
the workspace, no lexical or filesystem check). Under Landlock and under chroot, no path outside
the workspace may change, whatever the case. Positive control: the same requests in an
unconfined worker do reach the outside secret for the cases that can (climbing with '..', an
absolute path, a folder symlink, a /proc magic link), so the table really exercises layer 3.
"""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path

import pytest
from layers import requirement
from oslayer import layer_runs

from fs_notes.exercises.cases import CASES, EscapeCase
from fs_notes.exercises.layout import build
from fs_notes.exercises.rawworker import RawWorker
from fs_notes.sandbox.errors import OsRefused

CONFINED = ["landlock", "chroot"]
# Cases whose raw unlink reaches outside/secret.md when nothing confines the worker.
ESCAPE_WITHOUT_OS_LAYER = {
    "dotdot-id",
    "dotdot-deep",
    "absolute-id",
    "symlink-dir",
    "symlink-dir-absolute",
    "magic-link-root",
}

Snapshot = dict[str, tuple[str, bytes, int]]


def snapshot(root: Path, case: EscapeCase) -> Snapshot:
    """Kind, content and inode of every protected path outside the workspace."""
    state: Snapshot = {}
    for rel in case.protected:
        if rel.startswith("ws/"):
            continue  # inside the workspace: the OS layer lets the worker act there
        path = root / rel
        try:
            st = path.lstat()
        except FileNotFoundError:
            state[rel] = ("missing", b"", 0)
            continue
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        state[rel] = (oct(st.st_mode), content, st.st_ino)
    return state


def run_case(base: Path, case: EscapeCase, mode: str) -> tuple[str, Snapshot, Snapshot]:
    root = base / f"{mode}-{case.name}"
    build(root, case.layout)
    before = snapshot(root, case)
    with RawWorker(str(root / "ws"), "delete", mode) as worker:  # type: ignore[arg-type]
        try:
            worker.unlink_raw(case.note_id_in(root))
            outcome = "unlinked"
        except OsRefused as exc:
            outcome = f"refused:{os.strerror(exc.errno)}"
        except ValueError:
            outcome = "bad-request"  # e.g. a NUL byte: not even sent as a path
    return outcome, before, snapshot(root, case)


@pytest.fixture(scope="module")
def results(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[str, str], tuple[str, Snapshot, Snapshot]]:
    base = tmp_path_factory.mktemp("shared-table")
    modes = ["none"]
    for mode in CONFINED:
        if requirement(mode)[0] == "run":  # type: ignore[arg-type]
            modes.append(mode)
    jobs = [(case, mode) for case in CASES for mode in modes]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {(c.name, m): pool.submit(run_case, base, c, m) for c, m in jobs}
    return {key: future.result() for key, future in futures.items()}


@pytest.mark.parametrize("mode", CONFINED)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_no_path_outside_the_workspace_changes_under_the_os_layer_alone(
    results: dict[tuple[str, str], tuple[str, Snapshot, Snapshot]],
    case: EscapeCase,
    mode: str,
) -> None:
    if not layer_runs(mode):
        return
    outcome, before, after = results[case.name, mode]
    assert after == before, f"{case.name}: {outcome}"


def test_without_the_os_layer_the_table_does_reach_outside(
    results: dict[tuple[str, str], tuple[str, Snapshot, Snapshot]],
) -> None:
    escaped = {
        name
        for (name, mode), (_outcome, before, after) in results.items()
        if mode == "none" and before != after
    }
    assert escaped >= ESCAPE_WITHOUT_OS_LAYER
