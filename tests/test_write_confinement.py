"""notes_create and notes_update go through a confined write worker, under the same fail-closed
rule as deletion (sandbox/confined.py, issue 5)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from inprocess import Wired
from oslayer import chroot_only, host_mode, make_layer, needed, nothing_enforceable, policy_for
from test_fs_support import one_note
from wire import REPO, StdioServer, call_tool, child_env, tool_text

from fs_notes.fs import Identity
from fs_notes.fs.errors import FsError, NoteExists, NoteNotFound, SymlinkRefused
from fs_notes.policy import Policy
from fs_notes.sandbox import probe as sandbox_probe
from fs_notes.sandbox.confined import ConfinedChanges, OsLayer


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    return one_note(tmp_path, outside=True)


def _wired(policy: Policy, layer: OsLayer, state: Path) -> Wired:
    """The tools wired as `serve` wires them, in this process, with a given OS layer."""
    return Wired(policy, ConfinedChanges(layer), state)


# -- through the worker ------------------------------------------------------------------------


def test_creates_and_updates_run_in_the_write_worker(notes: Path, os_layers: list[OsLayer]) -> None:
    mode = host_mode()
    layer = make_layer(policy_for(notes, "chroot"), allow_unconfined=False)
    os_layers.append(layer)
    writers = ConfinedChanges(layer)
    assert writers.refusal("notes", "create_note") is None
    ident = writers.create_note("notes", "sub/new.md", b"# New\n")
    assert (notes / "sub" / "new.md").read_bytes() == b"# New\n"
    assert ident == Identity.of(os.stat(notes / "sub" / "new.md"))
    with pytest.raises(NoteExists):
        writers.create_note("notes", "sub/new.md", b"again")
    assert (notes / "sub" / "new.md").read_bytes() == b"# New\n"
    after = writers.update_note("notes", "a.md", b"# A, revised\n")
    assert (notes / "a.md").read_bytes() == b"# A, revised\n"
    assert after == Identity.of(os.stat(notes / "a.md"))
    with pytest.raises(NoteNotFound):
        writers.update_note("notes", "missing.md", b"x")
    worker = layer.worker("notes", "write")
    assert worker.hello["kind"] == "write" and worker.hello["mode"] == mode
    assert worker.pid in [p.pid for p in psutil.Process().children()]


def test_a_write_through_the_worker_cannot_leave_the_workspace(
    notes: Path, os_layers: list[OsLayer]
) -> None:
    host_mode()
    layer = make_layer(policy_for(notes, "chroot"), allow_unconfined=False)
    os_layers.append(layer)
    writers = ConfinedChanges(layer)
    (notes / "link").symlink_to(notes.parent / "outside")
    with pytest.raises(FsError):
        writers.create_note("notes", "../outside/new.md", b"x")
    with pytest.raises(SymlinkRefused):
        writers.create_note("notes", "link/new.md", b"x")
    with pytest.raises(SymlinkRefused):
        writers.update_note("notes", "link/secret.md", b"x")
    assert sorted(os.listdir(notes.parent / "outside")) == ["secret.md"]
    assert (notes.parent / "outside" / "secret.md").read_text() == "# secret\n"


# -- fail closed --------------------------------------------------------------------------------


def test_without_an_enforceable_layer_writes_are_refused_and_nothing_is_written(
    notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, os_layers: list[OsLayer]
) -> None:
    monkeypatch.setattr(sandbox_probe, "probe", nothing_enforceable)
    layer = make_layer(policy_for(notes, "landlock"), allow_unconfined=False)
    os_layers.append(layer)
    server = _wired(policy_for(notes, "landlock"), layer, tmp_path)
    try:
        uri = notes.as_uri()
        created = server.call("notes_create", {"workspaceUri": uri, "id": "b.md", "content": "x"})
        updated = server.call("notes_update", {"workspaceUri": uri, "id": "a.md", "content": "x"})
    finally:
        server.close()
    refusal = (
        "writing is refused in this workspace: no OS containment layer can be enforced on this host"
    )
    assert created["isError"] is True and tool_text(created) == refusal
    assert updated["isError"] is True and tool_text(updated) == refusal
    assert not (notes / "b.md").exists()
    assert (notes / "a.md").read_text() == "# A\n"
    assert [p for p in psutil.Process().children() if "--kind" in p.cmdline()] == []


def test_allow_unconfined_lets_writes_run_in_an_unconfined_worker(
    notes: Path, monkeypatch: pytest.MonkeyPatch, os_layers: list[OsLayer]
) -> None:
    monkeypatch.setattr(sandbox_probe, "probe", nothing_enforceable)
    layer = make_layer(policy_for(notes, "none"), allow_unconfined=True)
    os_layers.append(layer)
    ConfinedChanges(layer).create_note("notes", "b.md", b"# B\n")
    assert (notes / "b.md").read_text() == "# B\n"
    assert layer.worker("notes", "write").hello["mode"] == "none"


def test_a_workspace_requiring_landlock_refuses_writes_on_a_chroot_only_host(
    notes: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, os_layers: list[OsLayer]
) -> None:
    monkeypatch.setattr(sandbox_probe, "probe", chroot_only)
    layer = make_layer(policy_for(notes, "landlock"), allow_unconfined=True)
    os_layers.append(layer)
    server = _wired(policy_for(notes, "landlock"), layer, tmp_path)
    try:
        created = server.call(
            "notes_create", {"workspaceUri": notes.as_uri(), "id": "b.md", "content": "x"}
        )
    finally:
        server.close()
    assert created["isError"] is True
    assert tool_text(created) == (
        'writing is refused in this workspace: the workspace policy requires sandbox "landlock", '
        'this host provides "chroot" (to accept chroot, the operator starts serve with '
        "--sandbox chroot)"
    )
    assert not (notes / "b.md").exists()


def test_a_chroot_only_host_writes_where_the_policy_accepts_chroot(
    notes: Path, monkeypatch: pytest.MonkeyPatch, os_layers: list[OsLayer]
) -> None:
    needed("chroot")
    monkeypatch.setattr(sandbox_probe, "probe", chroot_only)
    layer = make_layer(policy_for(notes, "chroot"), allow_unconfined=False)
    os_layers.append(layer)
    ConfinedChanges(layer).update_note("notes", "a.md", b"# A2\n")
    assert (notes / "a.md").read_text() == "# A2\n"
    assert layer.worker("notes", "write").hello["mode"] == "chroot"


# -- the real server ----------------------------------------------------------------------------


def test_serve_writes_through_its_write_worker(notes: Path) -> None:
    # `serve WORKSPACE` requires Landlock (the policy default): with Landlock hidden, writes are
    # refused like deletions, and nothing is written.
    mode = host_mode()
    uri = notes.as_uri()
    server = StdioServer("serve", str(notes))
    try:
        created = server.ask(
            call_tool(1, "notes_create", {"workspaceUri": uri, "id": "b.md", "content": "# B\n"})
        )
        updated = server.ask(
            call_tool(2, "notes_update", {"workspaceUri": uri, "id": "a.md", "content": "# A2\n"})
        )
        kinds = []
        for child in psutil.Process(server.proc.pid).children(recursive=True):
            cmd = child.cmdline()
            if "--kind" in cmd:
                kinds.append(cmd[cmd.index("--kind") + 1])
    finally:
        assert server.close() == 0
    if mode == "landlock":
        assert created["result"].get("isError") is not True, created
        assert updated["result"].get("isError") is not True, updated
        assert (notes / "b.md").read_text() == "# B\n"
        assert (notes / "a.md").read_text() == "# A2\n"
        assert "write" in kinds
    else:
        assert created["result"]["isError"] is True
        assert updated["result"]["isError"] is True
        assert not (notes / "b.md").exists()
        assert (notes / "a.md").read_text() == "# A\n"


FORM: dict[str, object] = {"elicitation": {"form": {}}}


def chroot_policy(tmp_path: Path, ws: Path, operations: list[str]) -> Path:
    """A policy file for the local user on `ws`, accepting chroot (so both CI passes write)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "w"\npath = "{ws}"\nsandbox = "chroot"\n\n'
        f'[[grant]]\nprincipal = "me"\nworkspace = "w"\noperations = {json.dumps(operations)}\n'
    )
    return policy


def test_a_workspace_swapped_after_start_up_is_never_written_through_its_path(
    tmp_path: Path,
) -> None:
    # Issue 12: workers used to open the workspace by path when they first started, so a folder
    # swapped between start-up and the first write received the note (chroot mode). They get
    # serve's own fd now: the original folder, wherever it went, or a refusal; never the new one.
    mode = host_mode()
    ws = one_note(tmp_path)
    (ws / "victim.md").write_text("# Victim\n")
    policy = chroot_policy(tmp_path, ws, ["read", "write", "delete"])
    uri = ws.as_uri()
    server = StdioServer("serve", "--policy", str(policy), "--replay-db", str(tmp_path / "r.db"))
    try:
        listed = server.ask(call_tool(1, "notes_list", {"workspaceUri": uri}))
        assert listed["result"].get("isError") is not True
        os.rename(ws, tmp_path / "moved")  # the folder serve opened, now elsewhere
        ws.mkdir()  # and a stranger's folder at its path
        (ws / "a.md").write_text("# the replacement's own a.md\n")
        (ws / "victim.md").write_text("# the replacement's victim\n")
        replacement = {p.name: p.read_bytes() for p in ws.iterdir()}
        created = server.ask(
            call_tool(2, "notes_create", {"workspaceUri": uri, "id": "b.md", "content": "# B\n"})
        )
        updated = server.ask(
            call_tool(3, "notes_update", {"workspaceUri": uri, "id": "a.md", "content": "# A2\n"})
        )
        args = {"workspaceUri": uri, "title": "Victim"}
        first = server.ask(call_tool(4, "notes_delete", args, FORM))["result"]
        answer = {"action": "accept", "content": {"note_id": "victim.md", "confirm": True}}
        deleted = server.ask(
            call_tool(
                5,
                "notes_delete",
                args,
                FORM,
                inputResponses={"delete_choice": answer},
                requestState=first["requestState"],
            )
        )
    finally:
        assert server.close() == 0
    assert {p.name: p.read_bytes() for p in ws.iterdir()} == replacement  # untouched
    moved = tmp_path / "moved"
    for response in (created, updated, deleted):
        assert response["result"].get("isError") is not True, (mode, response)
    assert (moved / "b.md").read_text() == "# B\n"
    assert (moved / "a.md").read_text() == "# A2\n"
    assert not (moved / "victim.md").exists()


def test_created_notes_and_folders_keep_the_umask_and_an_update_keeps_the_mode(
    tmp_path: Path,
) -> None:
    # Review finding: umask 0 for the whole write worker made every created note and folder
    # world-writable. Only an update's temp file is made with umask 0 (the note's own mode).
    mode = host_mode()
    ws = one_note(tmp_path)
    os.chmod(ws / "a.md", 0o664)
    policy = chroot_policy(tmp_path, ws, ["read", "write"])
    old = os.umask(0o022)
    try:
        server = StdioServer("serve", "--policy", str(policy))
    finally:
        os.umask(old)
    uri = ws.as_uri()
    try:
        for n, (tool, note) in enumerate(
            (("notes_create", "sub/deep/new.md"), ("notes_update", "a.md"))
        ):
            r = server.ask(call_tool(n, tool, {"workspaceUri": uri, "id": note, "content": "# x"}))
            assert r["result"].get("isError") is not True, (mode, r)
    finally:
        assert server.close() == 0
    assert stat.S_IMODE(os.stat(ws / "sub").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(ws / "sub" / "deep").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(ws / "sub" / "deep" / "new.md").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(ws / "a.md").st_mode) == 0o664  # kept, not narrowed by the umask


def test_a_policy_names_the_user_the_workers_run_as(tmp_path: Path) -> None:
    # Issue 12 item 2: as root, a workspace's workers run as `worker_user` when the policy names
    # one (else as the folder's owner). "own" belongs to nobody: its note is created by nobody.
    # "roots" belongs to root, so nobody (with no capability left) cannot write in it: refused,
    # nothing created. Positive control: "plain" (root's, no worker_user) is written, by root.
    verdict = needed("root")
    mode = host_mode()
    folders = {name: tmp_path / name for name in ("own", "roots", "plain")}
    for folder in folders.values():
        folder.mkdir()
        os.chmod(folder, 0o755)
    if verdict == "unprivileged":
        _a_regular_user_cannot_name_another_worker_user(tmp_path, folders)
        return
    os.chown(folders["own"], 65534, 65534)
    lines = ['[[principal]]\nname = "me"\nlocal = true\n']
    for name, folder in folders.items():
        user = '\nworker_user = "65534"' if name != "plain" else ""
        lines.append(
            f'[[workspace]]\nname = "{name}"\npath = "{folder}"\nsandbox = "chroot"{user}\n\n'
            f'[[grant]]\nprincipal = "me"\nworkspace = "{name}"\noperations = ["read", "write"]\n'
        )
    policy = tmp_path / "policy.toml"
    policy.write_text("\n".join(lines))
    server = StdioServer("serve", "--policy", str(policy))
    try:
        results = {
            name: server.ask(
                call_tool(n, "notes_create",
                          {"workspaceUri": folder.as_uri(), "id": "n.md", "content": "# N\n"})
            )["result"]
            for n, (name, folder) in enumerate(folders.items())
        }  # fmt: skip
    finally:
        assert server.close() == 0
    assert results["own"].get("isError") is not True, (mode, results["own"])
    assert (folders["own"] / "n.md").stat().st_uid == 65534
    assert results["roots"].get("isError") is True
    assert os.listdir(folders["roots"]) == []
    assert results["plain"].get("isError") is not True
    assert (folders["plain"] / "n.md").stat().st_uid == 0


def test_worker_user_needs_serve_to_run_as_root_or_as_that_user(tmp_path: Path) -> None:
    ws = tmp_path / "notes"
    ws.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "w"\npath = "{ws}"\nworker_user = "no-such-user-here"\n\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "w"\noperations = ["read"]\n'
    )
    import subprocess
    import sys

    from wire import REPO, child_env

    proc = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy)],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no such user on this host: 'no-such-user-here'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _a_regular_user_cannot_name_another_worker_user(
    tmp_path: Path, folders: dict[str, Path]
) -> None:
    """What a regular user gets instead: serve refuses to start (exit 2, the workspace and
    user named), before it makes anything; naming themselves is allowed (the control)."""
    def policy(user: str) -> Path:
        path = tmp_path / f"policy-{user}.toml"
        path.write_text(
            '[[principal]]\nname = "me"\nlocal = true\n\n'
            f'[[workspace]]\nname = "own"\npath = "{folders["own"]}"\nsandbox = "chroot"\n'
            f'worker_user = "{user}"\n\n'
            '[[grant]]\nprincipal = "me"\nworkspace = "own"\noperations = ["read", "write"]\n'
        )
        return path

    import pwd

    # another user than this one (the pass may run as nobody itself: setpriv --reuid 65534)
    other = 65534 if os.geteuid() != 65534 else next(
        p.pw_uid for p in pwd.getpwall() if p.pw_uid not in (0, os.geteuid())
    )
    state = tmp_path / "state"
    refused = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy(str(other))),
         "--state-dir", str(state)],
        input="", capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    named = pwd.getpwuid(other).pw_name  # the policy's uid, as the message names it
    assert refused.stderr.strip().splitlines()[-1] == (
        f'fs-notes: workspace "own": worker_user = "{named}" needs serve to run as root (or as '
        "that user)"
    ), refused.stderr
    assert os.listdir(folders["own"]) == [] and not state.exists()
    me = str(os.geteuid())
    allowed = StdioServer("serve", "--policy", str(policy(me)), "--state-dir", str(state))
    try:
        made = allowed.ask(call_tool(1, "notes_create", {"workspaceUri": folders["own"].as_uri(),
                                                         "id": "n.md", "content": "# N\n"}))
    finally:
        assert allowed.close() == 0
    assert made["result"].get("isError") is not True, made
    assert (folders["own"] / "n.md").stat().st_uid == os.geteuid()
