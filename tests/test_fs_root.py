"""Layer 2 on its own: every escape case x both resolvers x both symlink policies x every operation.

Each case is built with the team's layout notation (tests/escape_cases.py: ``root/ws`` is the
workspace, ``root/outside/secret.md`` holds "SECRET"), time stamps are aged (see test_fs_support),
then one operation runs straight on the WorkspaceRoot, with no lexical layer in front. It must
raise exactly the expected FsError subclass, and afterwards the whole tree, inside and outside,
must be exactly as before: same entries, bytes, inodes, mtimes, ctimes and atimes (so nothing
outside was read, listed, written, created or deleted, and a refusal left no temp file behind).
The same checks then run over the shared table (escape_cases.CASES).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from escape_cases import CASES, SECRET, EscapeCase, build_layout
from test_fs_support import POLICIES, RESOLVERS, age_tree, identity_of, opened, tree_state

from fs_notes.fs import (
    Escape,
    FsError,
    Hardlinked,
    InvalidPath,
    NoteExists,
    NoteNotFound,
    NotRegular,
    SymlinkRefused,
    WorkspaceRoot,
)

OPS = ["read", "stat", "create", "update", "unlink", "list"]
KIND = {"read": "read", "stat": "read", "list": "read", "create": "write", "update": "write"}
KIND["unlink"] = "write"
Err = type[FsError] | None  # None: the operation succeeds (and must still change nothing outside)


@dataclass(frozen=True)
class Case:
    """``errors`` maps keys to the expected class; the most specific key wins:
    "policy:op", "policy:kind", "op", "kind", "policy", "*" (kind: "read" or "write")."""

    name: str
    layout: tuple[str, ...]
    path: str
    errors: dict[str, Err] = field(default_factory=dict)

    def expected(self, policy: str, op: str) -> Err:
        for key in (f"{policy}:{op}", f"{policy}:{KIND[op]}", op, KIND[op], policy, "*"):
            if key in self.errors:
                return self.errors[key]
        raise AssertionError(f"no expectation for {self.name} {policy} {op}")


def lexical(name: str, path: str, error: type[FsError], **more: Err) -> Case:
    return Case(name, ("ws/note.md", "ws/a/"), path, {"*": error, **more})


def final_link(name: str, layout: tuple[str, ...], path: str) -> Case:
    """The last component is a symlink leading out: 'within' follows it only for reads."""
    return Case(
        name, layout, path, {"deny": SymlinkRefused, "within": Escape, "write": SymlinkRefused}
    )


def folder_link(name: str, layout: tuple[str, ...], path: str) -> Case:
    """A folder on the way is a symlink leading out: refused for every operation."""
    return Case(name, layout, path, {"deny": SymlinkRefused, "within": Escape})


ROOT_ABS = "{root}"  # escape_cases substitutes the temp root's absolute path

TABLE: list[Case] = [
    lexical("dotdot", "../outside/secret.md", Escape),
    lexical("dotdot-alone", "..", Escape),
    lexical("dotdot-staying-inside", "a/../note.md", Escape),  # ids are canonical: '..' never
    lexical("absolute", ROOT_ABS + "/outside/secret.md", Escape),
    lexical("absolute-proc-root", "/proc/self/root" + ROOT_ABS + "/outside/secret.md", Escape),
    lexical("absolute-slash", "/", Escape),
    lexical("nul", "note.md\x00../../outside/secret.md", InvalidPath),
    lexical("empty", "", InvalidPath, list=None),  # iter_notes("") lists the workspace
    lexical("dot", "./note.md", InvalidPath),
    lexical("dot-alone", ".", InvalidPath),
    lexical("double-slash", "a//note.md", InvalidPath),
    lexical("trailing-slash", "note.md/", InvalidPath),
    lexical("long-component", "a" * 253 + ".md", InvalidPath),
    lexical("too-deep", "d/" * 32 + "x.md", InvalidPath),
    lexical("unencodable", "\ud800.md", InvalidPath),
    final_link("link-final-relative", ("ws/l.md => ../outside/secret.md",), "l.md"),
    final_link("link-final-absolute", ("ws/l.md => {root}/outside/secret.md",), "l.md"),
    final_link("link-final-deep", ("ws/a/b/l.md => ../../../outside/secret.md",), "a/b/l.md"),
    final_link(
        "link-chain",
        ("ws/a.md => b.md", "ws/b.md => c.md", "ws/c.md => ../outside/secret.md"),
        "a.md",
    ),
    final_link("magic-link-fd", ("ws/fd.md => /proc/self/fd/0",), "fd.md"),
    final_link("magic-link-self-exe", ("ws/exe.md => /proc/self/exe",), "exe.md"),
    final_link(
        "link-dangling-out", ("ws/new.md => ../outside/new.md",), "new.md"
    ),  # create must not make outside/new.md
    final_link(
        "link-final-inside-then-out",
        ("ws/sub/", "ws/sub/l.md => ../../outside/secret.md"),
        "sub/l.md",
    ),
    folder_link("link-folder-relative", ("ws/d => ../outside",), "d/secret.md"),
    folder_link("link-folder-absolute", ("ws/d => {root}/outside",), "d/secret.md"),
    folder_link(
        "link-folder-dotdot-target", ("ws/a/", "ws/a/up => ../.."), "a/up/outside/secret.md"
    ),
    folder_link(
        "link-folder-inside-then-out",
        ("ws/sub/", "ws/sub/up => ..", "ws/out => ../outside"),
        "sub/up/out/secret.md",
    ),
    folder_link("link-folder-dangling", ("ws/nd => ../outside/newdir",), "nd/x.md"),
    folder_link("magic-link-root", ("ws/root => /proc/self/root",), "root{root}/outside/secret.md"),
    folder_link("magic-link-cwd", ("ws/cwd => /proc/self/cwd",), "cwd/secret.md"),
    Case("link-loop", ("ws/a.md => b.md", "ws/b.md => a.md"), "a.md", {"*": SymlinkRefused}),
    Case("link-loop-folder", ("ws/loop => loop",), "loop/x.md", {"*": SymlinkRefused}),
    Case(
        "hardlink-to-outside",
        ("ws/h.md ~> outside/secret.md",),
        "h.md",
        {"*": Hardlinked, "create": NoteExists, "list": NoteNotFound},
    ),
    Case(
        "hardlink-in-folder",
        ("ws/a/", "ws/a/h.md ~> outside/secret.md"),
        "a/h.md",
        {"*": Hardlinked, "create": NoteExists, "list": NoteNotFound},
    ),
]


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


def _check(
    tmp_path: Path,
    layout: tuple[str, ...],
    path: str,
    resolver: str,
    policy: str,
    op: str,
    expected: Err,
) -> object:
    """Build, run ``op``, assert the outcome; returns the operation's result when it succeeded."""
    build_layout(tmp_path, layout)
    path = path.replace("{root}", str(tmp_path))
    age_tree(tmp_path)
    # unlink gets the identity an attacker could know best: the outside file's own.
    target = identity_of(tmp_path / "outside" / "secret.md")
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
    if expected is not None or op in ("read", "stat", "list"):
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        # A successful listing reads the workspace folders it lists: their atime may move.
        if expected is None and op == "list":
            changed = {k for k in changed if k.startswith("ws") and k in after}
            changed -= {k for k in changed if before[k][:4] == after[k][:4]}
        assert not changed, f"{op} changed {sorted(changed)}"
    assert (tmp_path / "outside" / "secret.md").read_bytes() == SECRET.encode()
    return result


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("case", TABLE, ids=lambda c: c.name)
def test_escape_case_is_refused_and_changes_nothing(
    tmp_path: Path, case: Case, resolver: str, policy: str, op: str
) -> None:
    expected = case.expected(policy, op)
    result = _check(tmp_path, case.layout, case.path, resolver, policy, op, expected)
    assert SECRET.encode() not in repr(result).encode()


# --- the team's shared table (tests/escape_cases.py) under the default 'deny' policy ------------

# What layer 2 alone raises for each shared case the lexical layer lets through. Cases added to the
# shared table later and not named here are still run: they must raise some FsError.
SHARED_ERRORS: dict[str, dict[str, Err]] = {
    "hardlink-to-outside": {"*": Hardlinked, "create": NoteExists, "list": NoteNotFound},
    "fifo-as-note": {"*": NotRegular, "create": NoteExists, "list": NoteNotFound},
    "socket-as-note": {"*": NotRegular, "create": NoteExists, "list": NoteNotFound},
    "folder-named-x.md": {"*": NotRegular, "create": NoteExists, "list": None},
}
SHARED_OK: dict[str, Err] = {"*": None, "create": NoteExists, "list": NoteNotFound}


def _shared_expected(case: EscapeCase, op: str) -> Err | type[Exception]:
    if case.expect == "ok":
        errors = SHARED_OK
    elif case.name in SHARED_ERRORS:
        errors = SHARED_ERRORS[case.name]
    elif case.name.startswith(("symlink-", "magic-link-", "dangling-")):
        errors = {"*": SymlinkRefused}
    else:
        return FsError
    return errors.get(op, errors["*"])


def _outside_state(tmp_path: Path, case: EscapeCase) -> dict[str, object]:
    """The protected paths layer 2 answers for (the ones outside the workspace)."""
    out: dict[str, object] = {}
    for rel in case.protected:
        if rel.startswith("ws/"):
            continue  # e.g. ws/.git/config.md: hidden names are the lexical layer's policy
        path = tmp_path / rel
        out[rel] = tree_state(path.parent).get(path.name, "missing")
    return out


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("resolver", RESOLVERS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_shared_escape_case_through_layer_two_alone(
    tmp_path: Path, case: EscapeCase, resolver: str, op: str
) -> None:
    build_layout(tmp_path, case.layout)
    note_id = case.note_id_in(tmp_path)
    age_tree(tmp_path)
    target = identity_of(tmp_path / "outside" / "secret.md")
    if case.expect == "ok" and op == "unlink":
        target = identity_of(tmp_path / "ws" / note_id)
    before = _outside_state(tmp_path, case)
    expected = _shared_expected(case, op)
    result: object = None
    with opened(tmp_path / "ws", resolver) as root:
        if case.lexical == "refused":  # layer 2 may accept some of these; it must not leak
            try:
                result = _run(root, op, note_id, target)
            except FsError as exc:
                assert str(tmp_path) not in str(exc)
        elif expected is None:
            result = _run(root, op, note_id, target)
        else:
            with pytest.raises(FsError) as info:
                _run(root, op, note_id, target)
            if expected is not FsError:
                assert type(info.value) is expected, f"{op}: {type(info.value).__name__}"
    assert _outside_state(tmp_path, case) == before
    assert SECRET.encode() not in repr(result).encode()


def test_every_shared_case_the_lexical_layer_passes_has_an_exact_expectation() -> None:
    """So a new shared case is noticed here, not just run with a loose 'some FsError'."""
    loose = [
        c.name
        for c in CASES
        if c.lexical == "ok" and c.expect == "refused" and _shared_expected(c, "read") is FsError
    ]
    assert loose == []


def test_reading_a_refused_case_returns_no_bytes_from_outside_even_under_within(
    tmp_path: Path,
) -> None:
    """Control for the table: the same layout with an inside target is served under 'within'."""
    build_layout(tmp_path, ("ws/note.md: hello", "ws/l.md => note.md", "ws/d => ."))
    for resolver in RESOLVERS:
        with opened(tmp_path / "ws", resolver, "within") as root:
            assert root.read_note("l.md")[0] == b"hello"
            assert root.read_note("d/d/note.md")[0] == b"hello"
        with opened(tmp_path / "ws", resolver, "deny") as root, pytest.raises(SymlinkRefused):
            root.read_note("l.md")
