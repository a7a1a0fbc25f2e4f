"""Layer 2 on its own: every escape case x both resolvers x both symlink policies x every operation.

The cases are the one table (fs_notes/exercises/cases.py), built with its layout notation
(fs_notes/exercises/layout.py: ``root/ws`` is the workspace, ``root/outside/secret.md`` holds
"SECRET"); time stamps are aged (see test_fs_support), then one operation runs straight on the
WorkspaceRoot, with no lexical layer in front. It must raise exactly the FsError subclass the
case's ``layer2`` field names for that policy and operation, or succeed where it says None.
Afterwards the whole tree must be exactly as before: same entries, bytes, inodes, mtimes, ctimes
and atimes (so nothing outside was read, listed, written, created or deleted, and a refusal left
no temp file behind); only a successful operation may have acted inside the workspace, and a
successful read-only one only on access and change times there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_fs_support import (
    POLICIES,
    RESOLVERS,
    Entry,
    age_tree,
    identity_of,
    opened,
    tree_state,
)

from fs_notes.exercises.cases import CASES, OPS, EscapeCase
from fs_notes.exercises.layout import SECRET, build
from fs_notes.fs import FsError, SymlinkRefused, WorkspaceRoot

READ_ONLY = ("read", "stat", "list")


def _run(root: WorkspaceRoot, op: str, path: str, expected_id: object) -> object:
    if op == "read":
        return root.read_note(path)
    if op == "stat":
        return root.stat_note(path)
    if op == "create":
        return root.create_note(path, b"PWNED")
    if op == "update":
        return root.update_note(path, b"PWNED")
    if op == "unlink":
        assert expected_id is not None
        root.unlink_note(path, expected_id)  # type: ignore[arg-type]
        return None
    if op == "list":
        return list(root.iter_notes(path))
    raise AssertionError(op)


def _inside(key: str) -> bool:
    return key == "ws" or key.startswith("ws/")


def _atime_only(before: Entry | None, after: Entry | None) -> bool:
    """Whether an entry changed at most in its access time (field 4 of test_fs_support.Entry)."""
    return (
        before is not None
        and after is not None
        and before[:4] + before[5:] == after[:4] + after[5:]
    )


def _check(tmp_path: Path, case: EscapeCase, resolver: str, policy: str, op: str) -> object:
    """Build, run ``op``, assert the outcome; returns the operation's result when it succeeded."""
    expected = case.layer2_error(policy, op)
    build(tmp_path, case.layout)
    path = case.note_id_in(tmp_path)
    age_tree(tmp_path)
    # unlink gets the identity an attacker could know best: the outside file's own (a control,
    # its own note's, so that its unlink really succeeds).
    target = identity_of(tmp_path / ("ws/" + path if case.expect == "ok" else "outside/secret.md"))
    before = tree_state(tmp_path)
    with opened(tmp_path / "ws", resolver, policy) as root:
        if expected is None:
            result = _run(root, op, path, target)
        else:
            with pytest.raises(FsError) as info:
                _run(root, op, path, target)
            assert type(info.value) is expected, f"{op} raised {type(info.value).__name__}"
            assert str(tmp_path) not in str(info.value)
            result = None
    after = tree_state(tmp_path)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    if expected is None:  # it succeeded: inside the workspace it may have acted
        acted = {k for k in changed if _inside(k)}
        if op in READ_ONLY:  # ... but only read there: access times may move, nothing else
            acted = {k for k in acted if _atime_only(before.get(k), after.get(k))}
        changed -= acted
    assert not changed, f"{op} changed {sorted(changed)}"
    assert (tmp_path / "outside" / "secret.md").read_bytes() == SECRET.encode()
    return result


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_escape_case_gives_exactly_its_layer_two_outcome_and_changes_nothing_outside(
    tmp_path: Path, case: EscapeCase, resolver: str, policy: str, op: str
) -> None:
    result = _check(tmp_path, case, resolver, policy, op)
    assert SECRET.encode() not in repr(result).encode()


def test_reading_a_refused_case_returns_no_bytes_from_outside_even_under_within(
    tmp_path: Path,
) -> None:
    """Control for the table: the same layout with an inside target is served under 'within'."""
    build(tmp_path, ("ws/note.md: hello", "ws/l.md => note.md", "ws/d => ."))
    for resolver in RESOLVERS:
        with opened(tmp_path / "ws", resolver, "within") as root:
            assert root.read_note("l.md")[0] == b"hello"
            assert root.read_note("d/d/note.md")[0] == b"hello"
        with opened(tmp_path / "ws", resolver, "deny") as root, pytest.raises(SymlinkRefused):
            root.read_note("l.md")
