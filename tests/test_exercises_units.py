"""The exercises' own parts, one at a time: verdicts, comparison, tracing, the naive stand-ins.

These are the rules the matrix run relies on; each test names the rule it pins down.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from pathlib import Path

import pytest

from fs_notes.exercises import command, layout
from fs_notes.exercises.catalogue import ATTACKS
from fs_notes.exercises.classes import CLASSES
from fs_notes.exercises.expected import (
    EXPECTED,
    HOST_CONDITIONS,
    expected_on,
    expected_results,
)
from fs_notes.exercises.host import DOCUMENTED, HostFacts, measure
from fs_notes.exercises.naive import NaiveRoot, naive_uri_parts
from fs_notes.exercises.report import difference_lines, judge, to_json, to_text
from fs_notes.exercises.runner import COLUMNS, Matrix, Outcome, _Run, _verdict
from fs_notes.exercises.steps import fill
from fs_notes.exercises.swap import exchange
from fs_notes.exercises.trace import Event, Trace
from fs_notes.exercises.tracing import TracingPolicy, TracingRoot
from fs_notes.fs import FsError, SymlinkRefused, WorkspaceRoot
from fs_notes.lexical import LexicalError
from fs_notes.policy import NotAuthorized, Policy, Principal

# -- verdicts ---------------------------------------------------------------------------------


def test_an_escape_wins_over_any_refusal() -> None:
    run = _Run(events=[Event("filesystem", "read: SymlinkRefused")], harm=["outside/x.md read"])
    assert _verdict(run).result == "escaped"


def test_the_first_refusal_by_a_layer_names_the_blocking_layer() -> None:
    events = [Event("other", "read: NoteNotFound"), Event("lexical", "x"), Event("policy", "y")]
    assert _verdict(_Run(events=events)).result == "blocked:lexical"


def test_without_a_refusal_or_harm_the_verdict_is_na_and_says_why() -> None:
    kernel = _verdict(_Run(events=[Event("kernel", "naive open/read: ELOOP")]))
    assert kernel.result == "n/a" and kernel.why is not None and "ELOOP" in kernel.why
    ok = {"result": {"content": [{"type": "text", "text": "x"}]}}
    inside = _verdict(_Run(responses=[ok]))
    assert inside.result == "n/a" and inside.why is not None and "inside" in inside.why


# -- comparison with the documented matrix ------------------------------------------------------


def _matrix(cell: Outcome) -> Matrix:
    from fs_notes.exercises.expected import expected_results

    results = {a.name: {c: Outcome(expected_results(a.name)[c]) for c in COLUMNS} for a in ATTACKS}
    results["dotdot-id"]["no-os"] = cell  # blocked:lexical in the documented matrix
    return Matrix(ATTACKS, results, "SECRET-x")


def test_a_cell_that_differs_is_a_difference_and_fails_the_run() -> None:
    verdict = judge(_matrix(Outcome("escaped")))
    assert [d["configuration"] for d in verdict.differences] == ["no-os"]
    assert verdict.escapes_with_all_layers == 0


def test_a_cell_this_host_cannot_run_is_apart_except_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limited = Outcome("n/a", why="no mount here", host_limited=True)
    monkeypatch.delenv("CI", raising=False)
    verdict = judge(_matrix(limited))
    assert verdict.differences == [] and len(verdict.not_run_here) == 1
    monkeypatch.setenv("CI", "true")
    assert len(judge(_matrix(limited)).differences) == 1


# -- tracing ----------------------------------------------------------------------------------


def test_a_trace_records_only_inside_collect_and_per_thread() -> None:
    trace = Trace()
    trace.record("os", "ignored")
    seen: dict[str, list[Event]] = {}

    def work(name: str) -> None:
        with trace.collect() as events:
            trace.record("filesystem", name)
            seen[name] = events

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": [Event("filesystem", "a")], "b": [Event("filesystem", "b")]}


def _policy(tmp_path: Path) -> Policy:
    (tmp_path / "notes").mkdir()
    return Policy.for_single_workspace(str(tmp_path / "notes"), "me", token_sha256=None)


def test_strict_policy_records_lexical_and_policy_refusals(tmp_path: Path) -> None:
    trace = Trace()
    policy = TracingPolicy.wrap(_policy(tmp_path), trace, naive_uris=False)
    me = Principal("me")
    with trace.collect() as events:
        with pytest.raises(LexicalError):
            policy.authorize(me, "file://evil" + str(tmp_path / "notes"), "read")
        with pytest.raises(NotAuthorized):
            policy.authorize(me, "file://" + str(tmp_path / "notes-evil"), "read")
    assert [e.layer for e in events] == ["lexical", "policy"]


def test_naive_uris_still_authorize_by_exact_components_only(tmp_path: Path) -> None:
    """Rule (ours): the no-lexical knock-out keeps authorization; a prefix sibling is refused."""
    policy = TracingPolicy.wrap(_policy(tmp_path), Trace(), naive_uris=True)
    me = Principal("me")
    base = "file://" + str(tmp_path)
    with pytest.raises(NotAuthorized):
        policy.authorize(me, base + "/notes-evil", "read")
    assert policy.authorize(me, "file://evil" + str(tmp_path / "notes"), "read")
    _, note = policy.locate(me, base + "/notes/%2e%2e/outside/x.md", "read")
    assert note == "../outside/x.md"  # reaches layer 2 unchecked, as intended


def test_naive_uri_parts_decode_once_and_drop_host_query_fragment() -> None:
    assert naive_uri_parts("file:///a/%2e%2e/b") == ("a", "..", "b")
    assert naive_uri_parts("file://evil/a/b?x=/../c#/d") == ("a", "b")
    assert naive_uri_parts("file:///a/%252e") == ("a", "%2e")
    assert naive_uri_parts("file:///a/%C0%AE") == ("a", "\ufffd\ufffd")


def test_the_tracing_root_reports_what_a_listing_left_out(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (tmp_path / "out.md").write_text("x")
    (ws / "ok.md").write_text("# ok")
    (ws / "link.md").symlink_to("../out.md")
    os.link(tmp_path / "out.md", ws / "sub" / "hard.md")
    os.mkfifo(ws / "f.md")
    trace = Trace()
    with WorkspaceRoot.open(ws) as real:
        root = TracingRoot(real, str(ws), trace)
        with trace.collect() as events:
            ids = [note for note, _ in root.iter_notes("")]
            with pytest.raises(SymlinkRefused):
                root.read_note("link.md")
    assert ids == ["ok.md"]
    left_out = events[0].detail
    assert "symlink link.md" in left_out and "hard link sub/hard.md" in left_out
    assert "special file f.md" in left_out
    assert events[1] == Event("filesystem", "read: SymlinkRefused")


def test_the_tracing_root_notices_a_replaced_workspace_path(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    trace = Trace()
    with WorkspaceRoot.open(ws) as real:
        root = TracingRoot(real, str(ws), trace)
        ws.rename(tmp_path / "moved")
        ws.symlink_to(tmp_path)
        with trace.collect() as events, pytest.raises(FsError):
            root.read_note("secret.md")
    assert events[0].layer == "filesystem" and "another folder" in events[0].detail


def test_the_naive_root_really_is_naive(tmp_path: Path) -> None:
    """Positive control: without layer 2, a symlink out of the workspace is simply followed."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "secret.md").write_text("SECRET")
    (tmp_path / "ws" / "l.md").symlink_to("../secret.md")
    trace = Trace()
    root = NaiveRoot(str(tmp_path / "ws"), trace)
    assert root.read_note("l.md")[0] == b"SECRET"
    with trace.collect() as events, pytest.raises(FsError):
        root.read_note("missing.md")
    assert events == [Event("kernel", "naive open/read: ENOENT")]


# -- files ------------------------------------------------------------------------------------


def test_exchange_swaps_a_folder_and_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to("elsewhere")
    exchange(tmp_path / "dir", tmp_path / "link")
    assert (tmp_path / "dir").is_symlink() and (tmp_path / "link").is_dir()


def test_a_snapshot_never_counts_as_a_read(tmp_path: Path) -> None:
    path = tmp_path / "secret.md"
    path.write_text("SECRET")
    layout.prime_atime(path)
    first = layout.snapshot(path)
    assert layout.changed(first, layout.snapshot(path), reads=True) is None


def test_changed_names_each_kind_of_change(tmp_path: Path) -> None:
    path = tmp_path / "f.md"
    path.write_text("a")
    before = layout.snapshot(path)
    assert layout.changed(None, before, reads=True) == "created"
    assert layout.changed(before, None, reads=True) == "removed"
    path.write_text("b")
    assert layout.changed(before, layout.snapshot(path), reads=True) == "modified"


def test_every_catalogue_layout_builds(tmp_path: Path) -> None:
    assert len({a.name for a in ATTACKS}) == len(ATTACKS)
    assert {a.kind for a in ATTACKS} == set(CLASSES)
    for attack in ATTACKS:
        entries = tuple(e.replace("{leakfd}", "100") for e in attack.layout)
        try:
            layout.build(tmp_path / attack.name, entries, layout.secret_note("SECRET-test"))
        except layout.HostLimit:
            continue
        assert (tmp_path / attack.name / "outside" / "secret.md").read_text().startswith("# SECRET")


def test_fill_replaces_placeholders_in_nested_strings_only() -> None:
    value = {"uri": "{ws}/a", "list": ["{root}"], "n": 3}
    assert fill(value, {"ws": "file:///w", "root": "/r"}) == {
        "uri": "file:///w/a",
        "list": ["/r"],
        "n": 3,
    }


# -- cells that depend on the host (issue 25) ---------------------------------------------------


def _facts(**changes: object) -> HostFacts:
    return dataclasses.replace(DOCUMENTED, **changes)  # type: ignore[arg-type]


HOST_ATTACKS = frozenset().union(*(c.attacks for c in HOST_CONDITIONS))
REGULAR_USER = {"root": False, "mount": "no private bind mount here", "view": "needs CAP_SYS_ADMIN"}


def test_an_interpreter_over_the_read_limit_expects_n_a_in_that_one_cell_only() -> None:
    """Debian's python3.11 is 6.5 MiB, the read limit 4 MiB: the naive root refuses it whole."""
    big = expected_on("magic-link-self-exe", _facts(interpreter_bytes=6_831_736))
    assert big["no-filesystem"][0] == "n/a"
    assert "read limit" in (big["no-filesystem"][1] or "")
    others = {big[c][0] for c in ("all", "no-lexical", "no-os")}
    assert others == {"blocked:filesystem"}
    small = expected_on("magic-link-self-exe", _facts(interpreter_bytes=4 << 20))
    assert small["no-filesystem"] == ("escaped", None)  # at the limit: served, so it escapes


def test_the_interpreter_measured_is_the_file_the_target_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture fakes a large interpreter (a 5 MiB file as sys.executable); no switch."""
    fake = tmp_path / "python3.11"
    fake.write_bytes(b"\0" * (5 << 20))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
    (tmp_path / "python3").symlink_to("python3.11")
    facts = measure(mount="", view="", atime="")
    assert facts.interpreter == str(fake) and facts.interpreter_bytes == 5 << 20
    assert expected_on("magic-link-self-exe", facts)["no-filesystem"][0] == "n/a"
    assert facts.root is (os.geteuid() == 0)


def test_a_regular_user_expects_the_mount_and_view_rows_not_run_and_root_does_not() -> None:
    user = _facts(**REGULAR_USER)
    for name in ("mount-point-read", "move-across-mount", "device-note", "compromised-server-stat"):
        row = expected_on(name, user)
        assert {r for r, _ in row.values()} == {"n/a"}, name
        assert all(why for _, why in row.values()), name
    # Root that cannot bind or build a view: no condition (not run here, a difference under CI).
    root = _facts(mount="no private bind mount here", view="needs CAP_SYS_ADMIN")
    assert expected_on("mount-point-read", root)["no-filesystem"] == ("escaped", None)
    assert expected_on("device-note", root)["all"] == ("blocked:filesystem", None)
    # Nothing of fs-notes' own layers changes for a regular user.
    for name in EXPECTED:
        if name in HOST_ATTACKS:
            continue
        assert {c: r for c, (r, _) in expected_on(name, user).items()} == expected_results(name)


def test_yama_makes_the_kernel_refuse_ptrace_without_the_os_layer() -> None:
    assert (
        expected_on("compromised-server-ptrace", _facts(ptrace_scope=1, root=False))["no-os"][0]
        == "blocked:os"
    )
    assert expected_on("compromised-server-ptrace", _facts(ptrace_scope=1))["no-os"] == (
        "escaped",
        None,
    )  # fmt: skip  (root has CAP_SYS_PTRACE)
    assert expected_on("compromised-write-ptrace", _facts(ptrace_scope=3))["no-os"][0] == (
        "blocked:os"
    )
    assert expected_on("compromised-write-ptrace", _facts(ptrace_scope=0, root=False))["no-os"] == (
        "escaped",
        None,
    )


def test_without_legacy_tiocsti_the_kernel_refuses_tty_injection_without_the_os_layer() -> None:
    user = _facts(legacy_tiocsti=False, root=False)
    for where in ("server", "delete", "write"):
        name = f"compromised-{where}-tiocsti"
        cell, why = expected_on(name, user)["no-os"]
        assert cell == "blocked:os" and why is not None and why.startswith("no-legacy-tiocsti: ")
        assert expected_on(name, user)["all"] == ("blocked:os", None)
        # root has CAP_SYS_ADMIN, which TIOCSTI needs there; with the switch on, anyone may
        assert expected_on(name, _facts(legacy_tiocsti=False))["no-os"] == ("escaped", None)
        assert expected_on(name, _facts(root=False))["no-os"] == ("escaped", None)


def test_the_condition_rows_are_the_catalogues_own_host_limited_attacks() -> None:
    by_name = {c.name: c.attacks for c in HOST_CONDITIONS}
    assert by_name["no-bind-mount"] == {a.name for a in ATTACKS if a.needs_mount}
    assert by_name["no-private-view"] == {a.name for a in ATTACKS if a.needs_view}


def _host_matrix(facts: HostFacts, cell: Outcome) -> Matrix:
    matrix = _matrix(Outcome("blocked:lexical"))
    matrix.results["magic-link-self-exe"]["no-filesystem"] = cell
    matrix.host = facts
    return matrix


def test_a_cell_a_host_condition_states_is_no_difference_even_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "true")
    big = _facts(interpreter_bytes=7 << 20)
    verdict = judge(_host_matrix(big, Outcome("n/a", why="exe.md is 6.5 MiB, above")))
    assert verdict.differences == [] and verdict.matches
    assert [(c["attack"], c["configuration"]) for c in verdict.host_conditions] == [
        ("magic-link-self-exe", "no-filesystem")
    ]
    # The same cell on the documented host is a difference, named.
    verdict = judge(_host_matrix(DOCUMENTED, Outcome("n/a", why="exe.md is 6.5 MiB, above")))
    assert verdict.differences == [
        {
            "attack": "magic-link-self-exe",
            "configuration": "no-filesystem",
            "expected": "escaped",
            "actual": "n/a",
            "detail": "exe.md is 6.5 MiB, above",
        }
    ]


def test_every_differing_cell_is_named_in_the_text_the_json_and_the_demo_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    matrix = _matrix(Outcome("escaped", detail="outside/secret.md read"))
    verdict = judge(matrix)
    line = "dotdot-id [no-os]: expected blocked:lexical, got escaped (outside/secret.md read)"
    assert difference_lines(verdict) == [line]
    assert f"  {line}" in to_text(matrix, verdict, None).splitlines()
    out = to_json(matrix, verdict, None)
    assert out["differences"][0]["attack"] == "dotdot-id" and out["passed"] is False
    assert {"attacks", "escapes_with_all_layers"} <= set(out)
    monkeypatch.setattr(command, "run_matrix", lambda options: matrix)
    ok, text = command.summary()
    assert not ok and text.endswith(f"in 1 cell:\n  {line}")
