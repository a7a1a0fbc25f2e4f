"""Move, append, edit and init in this process (the dispatcher as `serve` builds it, tools acting
in-process): the same outcomes the subprocess tests see, where coverage can measure them."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from inprocess import InProcess

from fs_notes.cli import main
from fs_notes.policy import Policy
from fs_notes.policy_file import load_policy
from fs_notes.rounds.seal import KeyRing

KEYS = KeyRing([("k1", bytes(range(32)))])
STALE = "v1:" + "0" * 32


@pytest.fixture
def srv(tmp_path: Path) -> Any:
    ws = tmp_path / "notes"
    (ws / "projects").mkdir(parents=True)
    (ws / "plan.md").write_text("# Plan\n\nSee [[board]] and [[board|the board]].\n")
    (ws / "projects" / "board.md").write_text("# Board\n\n- one\n- two\n")
    (tmp_path / "outside.md").write_text("# Outside\n")
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    (tmp_path / "state").mkdir()
    server: Any = InProcess(policy, tmp_path / "state", keyring=KEYS, clock=time.time)
    server.ws = ws
    server.me = policy.local_principal()
    yield server
    server.close()


def _call(srv: Any, name: str, **args: Any) -> dict[str, Any]:
    result: dict[str, Any] = srv.call(srv.me, name, {"workspaceUri": srv.ws.as_uri(), **args})
    answer: dict[str, Any] = result["result"]
    return answer


def test_a_move_renames_rewrites_wikilinks_and_never_overwrites(srv: Any, tmp_path: Path) -> None:
    ws = srv.ws
    before = os.stat(ws / "projects" / "board.md")
    moved = _call(srv, "notes_move", id="projects/board.md", newId="done/board.md",
                  updateLinks=True)  # fmt: skip
    assert moved.get("isError") is not True, moved
    assert not (ws / "projects" / "board.md").exists()
    assert os.stat(ws / "done" / "board.md").st_ino == before.st_ino
    assert (ws / "plan.md").read_text() == (
        "# Plan\n\nSee [[done/board]] and [[done/board|the board]].\n"
    )
    assert moved["structuredContent"]["backlinks"] == [
        {"id": "plan.md", "wikilinks": 2, "updated": True}
    ]
    onto = _call(srv, "notes_move", id="plan.md", newId="done/board.md")
    assert onto["isError"] is True and "already exists" in onto["content"][0]["text"]
    assert (ws / "plan.md").exists() and (ws / "done" / "board.md").read_text().startswith("# B")
    out = _call(srv, "notes_move", id="plan.md", newId="../outside.md")
    assert out["isError"] is True
    assert (tmp_path / "outside.md").read_text() == "# Outside\n" and (ws / "plan.md").exists()


def test_append_and_edit_with_versions(srv: Any) -> None:
    path = srv.ws / "projects" / "board.md"
    version = _call(srv, "notes_read", id="projects/board.md")["structuredContent"]["version"]
    appended = _call(srv, "notes_append", id="projects/board.md", content="- three\n",
                     expectedVersion=version)  # fmt: skip
    assert appended.get("isError") is not True, appended
    assert path.read_text() == "# Board\n\n- one\n- two\n- three\n"
    stale = _call(srv, "notes_edit", id="projects/board.md", expectedVersion=version,
                  edits=[{"oldText": "one", "newText": "1"}])  # fmt: skip
    assert stale["isError"] is True
    assert stale["structuredContent"]["error"] == "versionMismatch"
    ambiguous = _call(srv, "notes_edit", id="projects/board.md",
                      edits=[{"oldText": "- ", "newText": "* "}])  # fmt: skip
    assert ambiguous["isError"] is True and "edits[0]" in ambiguous["content"][0]["text"]
    dry = _call(srv, "notes_edit", id="projects/board.md", dryRun=True,
                edits=[{"oldText": "- two", "newText": "- 2"}])  # fmt: skip
    assert "\n-- two\n+- 2\n" in dry["structuredContent"]["diff"]
    assert path.read_text() == "# Board\n\n- one\n- two\n- three\n"  # a dry run writes nothing
    done = _call(srv, "notes_edit", id="projects/board.md",
                 edits=[{"oldText": "- two", "newText": "- 2"}])  # fmt: skip
    assert done.get("isError") is not True, done
    assert path.read_text() == "# Board\n\n- one\n- 2\n- three\n"


def test_init_in_process_writes_a_policy_serve_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    cfg = tmp_path / "cfg"
    assert main(["init", str(notes), "--config-dir", str(cfg), "--name", "me"]) == 0
    printed = capsys.readouterr().out
    assert "bearer token (shown only now" in printed
    assert stat.S_IMODE((cfg / "policy.toml").stat().st_mode) == 0o600
    assert [ws.path for ws in load_policy(str(cfg / "policy.toml")).workspaces] == [str(notes)]
    assert KeyRing.from_file(cfg / "state.keys").kids
    assert main(["init", str(notes), "--config-dir", str(cfg)]) == 2  # never over a file
    assert "already exists" in capsys.readouterr().err
    assert main(["init", "--example", "single-user"]) == 0
    assert capsys.readouterr().out.startswith("# fs-notes policy for one person")


def test_a_write_only_principal_cannot_read_a_note_through_edit_append_or_versions(
    tmp_path: Path,
) -> None:
    """A reviewer's finding: notes_edit's diff (even a dry run) and match counts, and the
    versions, showed a note to a principal granted write but not read."""
    ws = tmp_path / "notes"
    ws.mkdir()
    secret = ws / "payroll.md"
    secret.write_text("# Payroll\nbob: 95000\n")
    policy_file = tmp_path / "p.toml"
    policy_file.write_text(
        '[[principal]]\nname = "bot"\nlocal = true\n\n'
        f'[[workspace]]\nname = "notes"\npath = "{ws}"\n\n'
        '[[grant]]\nprincipal = "bot"\nworkspace = "notes"\noperations = ["write"]\n'
    )
    policy = load_policy(str(policy_file))
    (tmp_path / "state").mkdir()
    srv: Any = InProcess(policy, tmp_path / "state", keyring=KEYS, clock=time.time)
    srv.ws, srv.me = ws, policy.local_principal()
    try:
        refused = [
            _call(srv, "notes_edit", id="payroll.md", dryRun=True,
                  edits=[{"oldText": "bob", "newText": "bob?"}]),
            _call(srv, "notes_edit", id="payroll.md", edits=[{"oldText": "\n", "newText": ""}]),
            _call(srv, "notes_append", id="payroll.md", content=""),
            _call(srv, "notes_update", id="payroll.md", content="x", expectedVersion=STALE),
            _call(srv, "notes_move", id="payroll.md", newId="p.md", expectedVersion=STALE),
        ]  # fmt: skip
        for result in refused:
            assert result["isError"] is True
            text = result["content"][0]["text"]
            assert text == (
                'operation "read" is not permitted in this workspace; the workspaces you may '
                f'use: "notes" {srv.ws.as_uri()} (write)'
            )
            assert "95000" not in str(result) and "structuredContent" not in result
        assert secret.read_text() == "# Payroll\nbob: 95000\n" and not (ws / "p.md").exists()
        # positive control: what write alone allows still works
        replaced = _call(srv, "notes_update", id="payroll.md", content="# Payroll\n")
        assert replaced.get("isError") is not True, replaced
        assert secret.read_text() == "# Payroll\n"
    finally:
        srv.close()


def _principal_server(tmp_path: Path, operations: str) -> Any:
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "payroll.md").write_text("# Payroll\nbob: 95000\n")
    policy_file = tmp_path / "p.toml"
    policy_file.write_text(
        '[[principal]]\nname = "bot"\nlocal = true\n\n'
        f'[[workspace]]\nname = "notes"\npath = "{ws}"\n\n'
        f'[[grant]]\nprincipal = "bot"\nworkspace = "notes"\noperations = {operations}\n'
    )
    policy = load_policy(str(policy_file))
    (tmp_path / "state").mkdir()
    srv: Any = InProcess(policy, tmp_path / "state", keyring=KEYS, clock=time.time)
    srv.ws, srv.me = ws, policy.local_principal()
    return srv


@pytest.mark.parametrize("may_read", [False, True])
def test_a_principal_without_read_learns_no_size_version_or_identity_from_a_write(
    tmp_path: Path, may_read: bool
) -> None:
    """Issue 27 item 3: notes_move told a write-only principal the exact size of a note it
    cannot read, and create/update a version (the inode hashed with the bytes: the inode, to
    whoever wrote the bytes). Without read they carry neither; with read (the control), both."""
    srv = _principal_server(tmp_path, '["read", "write"]' if may_read else '["write"]')
    try:
        size = len("# Payroll\nbob: 95000\n")
        moved = _call(srv, "notes_move", id="payroll.md", newId="p.md")
        made = _call(srv, "notes_create", id="new.md", content="# New\n")
        updated = _call(srv, "notes_update", id="new.md", content="# Newer\n")
        for result in (moved, made, updated):
            assert result.get("isError") is not True, result
        if may_read:
            assert moved["structuredContent"]["size"] == size
            assert f"({size} bytes)" in moved["content"][0]["text"]
            assert made["structuredContent"]["version"].startswith("v1:")
            assert updated["structuredContent"]["size"] == len("# Newer\n")
            return
        assert moved["structuredContent"] == {
            "id": "payroll.md", "newId": "p.md", "backlinks": None, "linksUpdated": False,
        }  # fmt: skip
        assert moved["content"][0]["text"] == (
            "moved payroll.md to p.md\n"
            "links to it: not examined (no read permission in this workspace)"
        )
        assert made["structuredContent"] == {"id": "new.md", "size": len("# New\n")}
        assert made["content"][0]["text"] == f"created new.md ({len('# New')+1} bytes)"
        assert updated["structuredContent"] == {"id": "new.md", "size": len("# Newer\n")}
        ino = str((srv.ws / "p.md").stat().st_ino)
        for result in (moved, made, updated):
            assert str(size) not in str(result) and ino not in str(result)
        assert (srv.ws / "new.md").read_text() == "# Newer\n"  # the writes were made
    finally:
        srv.close()


def test_a_delete_only_principal_cannot_read_the_identities_in_the_request_state(
    tmp_path: Path,
) -> None:
    """Issue 27 item 3: round one's requestState carried each candidate's device, inode, size
    and nanosecond times, signed but readable. Now it is encrypted: none of them, nor the
    principal or the workspace, is in the token or in any base64 decoding of its parts. The
    control: the form still names the candidate, which the grant needs."""
    import base64

    srv = _principal_server(tmp_path, '["delete"]')
    try:
        st = (srv.ws / "payroll.md").stat()
        first = srv.call(
            srv.me, "notes_delete", {"workspaceUri": srv.ws.as_uri(), "title": "Payroll"},
            caps={"elicitation": {"form": {}}},
        )["result"]  # fmt: skip
        assert first["resultType"] == "input_required"
        schema = first["inputRequests"]["delete_choice"]["params"]["requestedSchema"]
        assert [o["const"] for o in schema["properties"]["note_id"]["oneOf"]] == ["payroll.md"]
        token = first["requestState"]
        parts = token.split(".")
        assert parts[0] == "v2"
        seen = token
        for part in parts:
            seen += base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode("latin-1")
        # the nanosecond times (19 digits: never there by chance) and the claims' names, which
        # the old token's payload showed as JSON in base64
        for secret in (st.st_mtime_ns, st.st_ctime_ns):
            assert str(secret) not in seen
        for name in ("principal", "payroll", "identity", "candidates", str(srv.ws)):
            assert name not in seen
    finally:
        srv.close()


@pytest.mark.parametrize("may_read", [False, True])
def test_the_delete_form_shows_a_principal_without_read_no_time_of_a_note(
    tmp_path: Path, may_read: bool
) -> None:
    """Reviewer's find (issue 27 item 3): each option of the form said "(modified <time>)",
    a note's time to a delete-only principal. Now only a principal who may read sees it (the
    control); the deletion goes ahead the same either way."""
    srv = _principal_server(tmp_path, '["read", "delete"]' if may_read else '["delete"]')
    try:
        args = {"workspaceUri": srv.ws.as_uri(), "title": "Payroll"}
        caps: dict[str, Any] = {"elicitation": {"form": {}}}
        first = srv.call(srv.me, "notes_delete", args, caps=caps)["result"]
        schema = first["inputRequests"]["delete_choice"]["params"]["requestedSchema"]
        (label,) = [o["title"] for o in schema["properties"]["note_id"]["oneOf"]]
        if may_read:
            assert label.startswith('"Payroll" \u2014 payroll.md (modified 20')
        else:
            assert label == '"Payroll" \u2014 payroll.md'
        chosen = {"note_id": "payroll.md", "confirm": True}
        answer = {"delete_choice": {"action": "accept", "content": chosen}}
        token = first["requestState"]
        done = srv.call(
            srv.me, "notes_delete", args, caps=caps, inputResponses=answer, requestState=token
        )["result"]
        assert done["structuredContent"]["deleted"] == "payroll.md", done
        assert not (srv.ws / "payroll.md").exists()
    finally:
        srv.close()
