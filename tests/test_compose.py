"""The composition root is one function, `compose`: everything that builds a server calls it,
it opens its parts in order and closes them in reverse, and a step that fails leaves nothing
open. Judged from outside: the process's open files (/proc/self/fd) and the files made."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from fs_notes.compose import Composed, InThisProcess, Opened, compose
from fs_notes.config import StatePaths
from fs_notes.errors import ConfigError
from fs_notes.fs.changes import NoteChanges
from fs_notes.policy import Policy

REPO = Path(__file__).resolve().parent.parent


def _open_files() -> dict[int, str]:
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own fd, closed by now
            continue
    return found


def _folder(tmp_path: Path) -> tuple[Policy, StatePaths, Path]:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n")
    policy = Policy.for_single_workspace(str(notes), "me", token_sha256=None)
    state = StatePaths(replay_db=str(tmp_path / "state" / "replay.db"))
    return policy, state, notes


class _Door:
    """The filesystem layer here, and a record of what it saw open when opened and closed;
    `fail` makes opening it refuse, as a layer that cannot be enforced does."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.seen_at_open: dict[int, str] = {}
        self.seen_at_close: dict[int, str] = {}

    def open(self, opened: Opened) -> tuple[NoteChanges, Callable[[], None]]:
        self.seen_at_open = _open_files()
        if self.fail:
            raise ConfigError("the door cannot be opened")
        changes, _ = InThisProcess().open(opened)

        def close() -> None:
            self.seen_at_close = _open_files()

        return changes, close


def test_a_step_that_fails_leaves_nothing_open(tmp_path: Path) -> None:
    """The door refuses after the root handles and the replay database are open: compose
    raises that refusal and closes both. The control: the door saw them open."""
    policy, state, notes = _folder(tmp_path)
    before = _open_files()
    door = _Door(fail=True)
    with pytest.raises(ConfigError, match=r"^the door cannot be opened$"):
        compose(policy, state, door)
    opened = set(door.seen_at_open.values()) - set(before.values())
    assert str(notes) in opened and str(tmp_path / "state" / "replay.db") in opened  # control
    assert _open_files() == before


def test_the_parts_are_closed_in_reverse_order_of_opening(tmp_path: Path) -> None:
    """The door is closed while the root handles and the replay database are still open (its
    workers are stopped before the handles they were given); after close, nothing is open."""
    policy, state, notes = _folder(tmp_path)
    before = _open_files()
    door = _Door()
    served = compose(policy, state, door)
    assert isinstance(served, Composed)
    listed = served.dispatcher.method("tools/list")
    assert listed is not None  # the tools are built, eagerly when not lazy
    assert served.env.roots.keys() == {policy.workspaces[0].name}
    served.close()
    at_close = set(door.seen_at_close.values())
    assert str(notes) in at_close and str(tmp_path / "state" / "replay.db") in at_close
    assert _open_files() == before


def _calls_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


@pytest.mark.parametrize(
    "builder",
    [
        "fs_notes/serve.py",
        "fs_notes/exercises/target.py",
        "tests/inprocess.py",
        "benchmarks/protocol.py",
    ],
)
def test_whatever_builds_a_server_calls_the_one_composition_root(builder: str) -> None:
    """`serve` (and `demo`, which runs it), the knock-out target, the in-process tests and the
    benchmarks call `compose`, and none of them opens the root handles, the confirmation state,
    the OS layer or self-confinement itself."""
    calls = _calls_of(REPO / builder)
    assert "compose" in calls
    # the control: the scan sees those steps where they are called, in the composition root
    assert {"open_roots", "open_confirm_parts", "confine_server", "OsLayer",
            "claim_and_prune"} <= _calls_of(REPO / "fs_notes/compose.py")  # fmt: skip
    steps = {"open_roots", "open_confirm_parts", "confine_server", "OsLayer", "ConfinedChanges",
             "InProcessChanges", "build_dispatcher", "claim_and_prune"}  # fmt: skip
    assert calls & steps == set()
