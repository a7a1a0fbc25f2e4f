"""Faults caused for real (issue 13 item 3): a full disk, a process SIGKILLed mid-write, a
replay database locked by another process, damaged state files, a replay database on FUSE.

What every test asserts: a note is its old or its new content, never a mix; no temporary file
is ever listed as a note; the client gets a clear error (or, where the answer was lost with the
process, the server starts and answers again); start-up refuses what it cannot vouch for with
exit 2 and one line. Mounts need root: as root (CI) these tests run, elsewhere they skip, and
under CI=true they fail rather than skip."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import mountns
import psutil
import pytest
from wire import REPO, StdioServer, call_tool, child_env

FORM: dict[str, object] = {"elicitation": {"form": {}}}


def _need_root() -> None:
    """Every test here that mounts is marked `mounts`: as a regular user, tests/conftest.py
    runs it in a user and mount namespace of its own, where it may mount."""
    assert mountns.can_mount(), "a test that mounts is not marked @pytest.mark.mounts"


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs: the disk that fills up."""
    _need_root()
    where = tmp_path / "tiny"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(where)],
                   check=True)  # fmt: skip
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture
def fuse(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(source, mounted): `mounted` is a FUSE filesystem (bindfs) showing `source`. Mounted
    here, in the fixture: as a regular user the test's body runs with no capability."""
    _need_root()
    source, mounted = tmp_path / "src", tmp_path / "fuse"
    source.mkdir()
    mounted.mkdir()
    # In the foreground, so the teardown can end it even where it cannot unmount (a regular
    # user's namespace, capabilities dropped): a daemon left behind would keep that namespace.
    daemon = subprocess.Popen(["bindfs", "-f", "--no-allow-other", str(source), str(mounted)])
    try:
        deadline = time.monotonic() + 10
        while not os.path.ismount(mounted):
            assert daemon.poll() is None, f"bindfs exited {daemon.returncode}"
            assert time.monotonic() < deadline, "bindfs did not mount in 10 s"
            time.sleep(0.02)
        yield source, mounted
    finally:
        subprocess.run(["umount", str(mounted)], check=False, capture_output=True)
        daemon.terminate()
        daemon.wait(timeout=10)


def _fill(folder: Path) -> None:
    """Fill the filesystem of `folder` to the last block."""
    fd = os.open(folder / ".filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)


def _notes_listed(server: StdioServer, ws: Path, n: int) -> list[str]:
    listed = server.ask(call_tool(n, "notes_list", {"workspaceUri": ws.as_uri()}))["result"]
    return [note["id"] for note in listed["structuredContent"]["notes"]]


def _leftovers(ws: Path) -> list[str]:
    return sorted(p.name for p in ws.iterdir() if p.name.startswith(".fs-notes-tmp-"))


@pytest.mark.mounts
def test_a_full_disk_leaves_every_note_whole_and_says_so(tiny: Path) -> None:
    ws = tiny / "notes"
    ws.mkdir()
    (ws / "a.md").write_text("# A\n\nold\n")
    server = StdioServer("serve", str(ws))
    try:
        _fill(tiny)
        big = "# A\n\n" + "new " * 50_000  # 200 KB: cannot fit
        updated = server.ask(call_tool(1, "notes_update",
                                       {"workspaceUri": ws.as_uri(), "id": "a.md", "content": big}))
        created = server.ask(call_tool(2, "notes_create",
                                       {"workspaceUri": ws.as_uri(), "id": "b.md", "content": big}))
        listed = _notes_listed(server, ws, 3)
    finally:
        assert server.close() == 0
    for response in (updated, created):
        result = response["result"]
        assert result["isError"] is True, response
        assert "no space left" in result["content"][0]["text"].lower(), result
    assert (ws / "a.md").read_text() == "# A\n\nold\n"
    assert not (ws / "b.md").exists()
    assert _leftovers(ws) == []
    assert listed == ["a.md"]
    assert "No space left on device" not in updated["result"]["content"][0]["text"].split(":")[0]


@pytest.mark.mounts
def test_an_audit_log_that_cannot_be_written_stops_the_deletion(tiny: Path, tmp_path: Path) -> None:
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "plan.md").write_text("# Plan\n")
    audit = tiny / "audit.jsonl"
    server = StdioServer("serve", str(ws), "--audit-log", str(audit),
                         "--replay-db", str(tmp_path / "state" / "r.db"))  # fmt: skip
    try:
        args = {"workspaceUri": ws.as_uri(), "title": "Plan"}
        first = server.ask(call_tool(1, "notes_delete", args, FORM))["result"]
        _fill(tiny)
        choice = {"action": "accept", "content": {"note_id": "plan.md", "confirm": True}}
        answer = {"delete_choice": choice}
        done = server.ask(call_tool(2, "notes_delete", args, FORM, inputResponses=answer,
                                    requestState=first["requestState"]))["result"]  # fmt: skip
    finally:
        assert server.close() == 0
    assert done["isError"] is True
    assert done["content"][0]["text"] == (
        "the audit log cannot be written, so nothing was deleted; try again later"
    )
    assert (ws / "plan.md").read_text() == "# Plan\n"
    assert "the audit log cannot be written" in server.stderr


def _write_worker(server: StdioServer) -> psutil.Process | None:
    for child in psutil.Process(server.proc.pid).children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.Error:
            continue
        if "--kind" in cmd and cmd[cmd.index("--kind") + 1] == "write":
            return child
    return None


def _wait_dead(process: psutil.Process) -> None:
    """Until a SIGKILLed process is gone or a zombie (its fds closed). A worker killed just
    after it answered is seen by the server only when the next request hits its closed end;
    sent while the kernel was still tearing it down, that request would fail instead (the
    supervisor does not retry what a worker may have received)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.005)
    raise AssertionError(f"worker {process.pid} still running 10 s after SIGKILL")


def test_a_worker_killed_mid_update_leaves_the_old_or_the_new_note(tmp_path: Path) -> None:
    ws = tmp_path / "notes"
    ws.mkdir()
    old = "# A\n\n" + "old " * 500_000  # 2 MB
    (ws / "a.md").write_text(old)
    rng = random.Random(13)
    server = StdioServer("serve", str(ws))
    seen: set[str] = set()
    try:
        warm = server.ask(call_tool(0, "notes_create",
                                    {"workspaceUri": ws.as_uri(), "id": "w.md", "content": "# W"}))
        assert warm["result"].get("isError") is not True
        for n in range(1, 16):
            new = f"# A\n\n{n} " + "new " * 500_000
            again = server.ask(call_tool(200 + n, "notes_update",  # (re)starts the worker
                                         {"workspaceUri": ws.as_uri(), "id": "w.md",
                                          "content": "# W"}))  # fmt: skip
            assert again["result"].get("isError") is not True, again
            worker = _write_worker(server)
            assert worker is not None  # positive control: there is a worker to kill
            server.send(call_tool(n, "notes_update",
                                  {"workspaceUri": ws.as_uri(), "id": "a.md", "content": new}))
            time.sleep(rng.uniform(0, 0.03))
            worker.send_signal(signal.SIGKILL)
            response = server.recv(timeout=20)
            _wait_dead(worker)  # its end of the channel closed: the next request starts afresh
            text = (ws / "a.md").read_text()
            assert text in (old, new), f"round {n}: a torn note ({len(text)} bytes)"
            seen.add("new" if text == new else "old")
            result = response["result"]
            if result.get("isError"):
                assert text == old or text == new  # refused: whole either way
            else:
                assert text == new  # acknowledged: on disk
            old = text
            assert _notes_listed(server, ws, 100 + n) == ["a.md", "w.md"]
    finally:
        assert server.close() == 0
    assert (ws / "a.md").read_text() == old


def test_the_server_killed_mid_update_leaves_the_old_or_the_new_note(tmp_path: Path) -> None:
    ws = tmp_path / "notes"
    ws.mkdir()
    old = "# A\n\n" + "old " * 500_000
    (ws / "a.md").write_text(old)
    rng = random.Random(7)
    for n in range(1, 6):
        new = f"# A\n\n{n} " + "new " * 500_000
        server = StdioServer("serve", str(ws))
        try:
            server.ask(call_tool(0, "notes_list", {"workspaceUri": ws.as_uri()}))
            server.send(call_tool(n, "notes_update",
                                  {"workspaceUri": ws.as_uri(), "id": "a.md", "content": new}))
            time.sleep(rng.uniform(0, 0.05))
            for proc in psutil.Process(server.proc.pid).children(recursive=True):
                # the server in its PID namespace: all of it (one killed first may take the
                # others with it: the namespace's init ends them all)
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.send_signal(signal.SIGKILL)
            server.proc.send_signal(signal.SIGKILL)
        finally:
            server.close()
        text = (ws / "a.md").read_text()
        assert text in (old, new), f"round {n}: a torn note"
        old = text
    again = StdioServer("serve", str(ws))  # it starts, and lists no temporary file as a note
    try:
        assert _notes_listed(again, ws, 1) == ["a.md"]
    finally:
        assert again.close() == 0


def test_a_replay_database_locked_by_another_process_refuses_clearly_then_works(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "plan.md").write_text("# Plan\n")
    db = tmp_path / "state" / "replay.db"
    server = StdioServer("serve", str(ws), "--replay-db", str(db))
    args = {"workspaceUri": ws.as_uri(), "title": "Plan"}
    answer = {"delete_choice": {"action": "accept",
                                "content": {"note_id": "plan.md", "confirm": True}}}  # fmt: skip
    try:
        first = server.ask(call_tool(1, "notes_delete", args, FORM))["result"]
        holder = sqlite3.connect(db, timeout=1, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        try:
            locked = server.ask(call_tool(2, "notes_delete", args, FORM, inputResponses=answer,
                                          requestState=first["requestState"]))  # fmt: skip
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert (ws / "plan.md").exists()
        done = server.ask(call_tool(3, "notes_delete", args, FORM, inputResponses=answer,
                                    requestState=first["requestState"]))  # fmt: skip
    finally:
        assert server.close() == 0
    assert "result" in locked, locked
    assert locked["result"]["isError"] is True
    assert locked["result"]["content"][0]["text"] == (
        "the confirmation could not be recorded; nothing was deleted"
    )
    assert done["result"].get("isError") is not True, done  # the nonce was never spent
    assert not (ws / "plan.md").exists()
    assert "replay store refused a claim" in server.stderr


def _start(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fs_notes", "serve", *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=child_env(), stdin=subprocess.DEVNULL)  # fmt: skip


def _refusal(stderr: str) -> str:
    """stderr without serve's INFO lines about the overflow uid, which it logs in a user
    namespace (the mount-namespace rerun of the regular-user pass) before it refuses."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not (line.startswith("fs-notes INFO fs_notes.compose: ")
                           and "(the overflow uid)" in line))  # fmt: skip


def test_a_damaged_replay_database_or_audit_log_stops_the_start(tmp_path: Path) -> None:
    ws = tmp_path / "notes"
    ws.mkdir()
    db = tmp_path / "state" / "replay.db"
    db.parent.mkdir()
    db.write_bytes(b"this is not a database, it is a note someone saved here\n" * 100)
    refused = _start(str(ws), "--replay-db", str(db))
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"fs-notes: the replay database {db} is damaged (")
    assert refused.stderr.endswith("; move it aside to start afresh (confirmations in flight are "
                                   "then lost)\n")  # fmt: skip
    assert len(refused.stderr.splitlines()) == 1
    fresh = tmp_path / "state2" / "replay.db"
    audit = tmp_path / "audit.jsonl"
    for damage in (b'{"time":"x","outcome":"deleted"}\n{"time":"y","outc', b"hello\n"):
        audit.write_bytes(damage)
        refused = _start(str(ws), "--replay-db", str(fresh), "--audit-log", str(audit))
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith(f"fs-notes: the audit log {audit}: ")
        assert audit.read_bytes() == damage  # nothing appended to it
    audit.write_bytes(b'{"time":"x","outcome":"deleted"}\n')  # positive control: a whole log
    server = StdioServer("serve", str(ws), "--replay-db", str(fresh), "--audit-log", str(audit))
    try:
        server.ask(call_tool(1, "notes_list", {"workspaceUri": ws.as_uri()}))
    finally:
        assert server.close() == 0


@pytest.mark.mounts
def test_a_replay_database_on_fuse_is_refused_at_start_up(
    tmp_path: Path, fuse: tuple[Path, Path]
) -> None:
    source, mounted = fuse
    ws = tmp_path / "notes"
    ws.mkdir()
    refused = _start(str(ws), "--replay-db", str(mounted / "replay.db"))
    assert refused.returncode == 2
    assert _refusal(refused.stderr) == (
        f"fs-notes: the replay database {mounted / 'replay.db'}: it is on a FUSE filesystem, "
        "where SQLite's locks are not reliable (two servers could accept one confirmation "
        "twice); use a local folder\n"
    )
    assert list(source.iterdir()) == []  # nothing was created there


@pytest.mark.mounts
def test_a_state_folder_on_fuse_beside_a_shared_store_is_refused_at_start_up(
    tmp_path: Path, fuse: tuple[Path, Path]
) -> None:
    """With a shared replay store the state folder holds only SQLite search indexes, which a
    network or FUSE filesystem would serve with unreliable locks (issue 18)."""
    source, mounted = fuse
    keys = tmp_path / "keys"
    keys.write_text("k" * 44)
    keys.chmod(0o600)
    ws = tmp_path / "notes"
    ws.mkdir()
    store = ["--replay-store", "redis://127.0.0.1:9/0", "--state-key-file", str(keys)]
    refused = _start(str(ws), *store, "--state-dir", str(mounted / "state"))
    assert refused.returncode == 2
    assert _refusal(refused.stderr) == (
        f"fs-notes: --state-dir {mounted / 'state'} is on a FUSE filesystem: each instance "
        "needs a state folder of its own on a local disk (docs/deploy.md)\n"
    )
    assert list((source / "state").iterdir()) == []  # made (0700), nothing in it
    # the control: the same line with a local folder starts (and warns of the store)
    local = tmp_path / "local"
    started = subprocess.Popen(
        [sys.executable, "-m", "fs_notes", "serve", str(ws), *store, "--state-dir", str(local)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
        env=child_env(), text=True,
    )  # fmt: skip
    _out, err = started.communicate("", timeout=60)  # stdin EOF: it stops
    assert started.returncode == 0, err
    assert "deletions are refused until it answers" in err
    assert "replay store: Redis redis://127.0.0.1:9/0, no password, shared" in err


def test_state_files_that_are_not_regular_files_stop_the_start_without_hanging(
    tmp_path: Path,
) -> None:
    # A reviewer's findings: a FIFO as the audit log hung the whole server once its buffer
    # filled; a FIFO as the key file hung the start for ever.
    ws = tmp_path / "notes"
    ws.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    db = str(tmp_path / "state" / "r.db")
    audit = _start(str(ws), "--replay-db", db, "--audit-log", str(fifo))
    assert audit.returncode == 2
    assert audit.stderr == f"fs-notes: the audit log {fifo}: it is not a regular file\n"
    key = _start(str(ws), "--replay-db", db, "--state-key-file", str(fifo))
    assert key.returncode == 2
    says = f"fs-notes: --state-key-file {fifo}: not a regular file\n"
    assert key.stderr == says
    device = _start(str(ws), "--replay-db", db, "--audit-log", "/dev/zero")
    assert device.returncode == 2 and "not a regular file" in device.stderr


@pytest.mark.mounts
def test_a_full_disk_never_leaves_half_an_audit_record(tiny: Path, tmp_path: Path) -> None:
    from fs_notes.confirm.audit import AuditLog

    log = AuditLog(tiny / "audit.jsonl")
    try:
        log.record(principal="p", workspace="w", note_id="n.md", outcome="declined")
        before = (tiny / "audit.jsonl").read_bytes()
        _fill(tiny)
        with pytest.raises(OSError):
            for _ in range(1000):  # the filler left at most a few bytes: one record tears
                log.record(principal="p" * 400, workspace="w", note_id="n.md", outcome="deleted")
    finally:
        log.close()
    after = (tiny / "audit.jsonl").read_bytes()
    assert after.endswith(b"\n") and after.startswith(before)
    (tiny / ".filler").unlink()
    AuditLog(tiny / "audit.jsonl").close()  # it opens again: no torn last line


@pytest.mark.mounts
def test_a_replay_database_reached_through_a_symlink_into_fuse_is_refused(
    tmp_path: Path, fuse: tuple[Path, Path]
) -> None:
    source, mounted = fuse
    link = tmp_path / "replay.db"
    link.symlink_to(mounted / "replay.db")
    ws = tmp_path / "notes"
    ws.mkdir()
    refused = _start(str(ws), "--replay-db", str(link))
    assert refused.returncode == 2
    assert "it is on a FUSE filesystem" in refused.stderr
    assert list(source.iterdir()) == []
