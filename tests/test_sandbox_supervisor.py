"""The supervisor: real note operations through the worker, failures, restarts, and no leftovers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fs_notes.fs import (
    FsError,
    Identity,
    IdentityChanged,
    NoteExists,
    NoteNotFound,
    SymlinkRefused,
    TooLarge,
)
from sandbox import landlock_abi as ll
from sandbox.confine import DELETE_RIGHTS
from sandbox.errors import ConfinementError, WorkerFailed
from sandbox.protocol import MAX_REQUEST
from sandbox.supervisor import ConfinedWorker, DebugOptions, Mode, _Holder
from sandbox.testing import requirement

MODES = ["landlock", "chroot", "none"]
REPO = Path(__file__).resolve().parent.parent


def layer_runs(mode: str) -> bool:
    """Fail, skip or go on per sandbox.testing; False when Landlock is hidden (after proving
    that a landlock worker then refuses to start)."""
    if mode not in ("landlock", "chroot"):
        return True
    verdict, why = requirement(mode)  # type: ignore[arg-type]
    if verdict == "fail":
        pytest.fail(why)
    if verdict == "skip":
        pytest.skip(why)
    if verdict == "hidden":
        with pytest.raises(ConfinementError):
            ConfinedWorker(os.getcwd(), "delete", "landlock")
        return False
    return True


def worker_for(mode: str, workspace: Path, kind: str = "delete") -> ConfinedWorker | None:
    if not layer_runs(mode):
        return None
    options = DebugOptions(hide_landlock=mode == "chroot")
    return ConfinedWorker(str(workspace), kind, mode, debug=options)  # type: ignore[arg-type]


def no_zombie_children() -> bool:
    return all(c.status() != psutil.STATUS_ZOMBIE for c in psutil.Process().children())


def gone(pid: int) -> bool:
    """The process no longer runs (exited, or a zombie of some other reaper)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_bytes(b"secret")
    (ws / "link").symlink_to("../outside")
    return ws


def note(workspace: Path, name: str, data: bytes = b"# a note\n") -> Identity:
    path = workspace / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Identity.of(os.stat(path, follow_symlinks=False))


@pytest.fixture
def debug_worker(workspace: Path) -> Iterator[ConfinedWorker]:
    mode: Mode = "landlock" if requirement("landlock")[0] == "run" else "none"
    with ConfinedWorker(str(workspace), "delete", mode, debug=DebugOptions()) as worker:
        yield worker


# -- real operations, every mode ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_delete_removes_the_note_only_while_it_is_the_expected_file(
    workspace: Path, mode: str
) -> None:
    worker = worker_for(mode, workspace)
    if worker is None:
        return
    with worker:
        ident = note(workspace, "sub/a.md")
        stale = note(workspace, "b.md")
        (workspace / "b.md").write_bytes(b"changed since the form was shown")
        with pytest.raises(IdentityChanged):
            worker.delete("b.md", stale)
        assert (workspace / "b.md").exists()
        with pytest.raises(NoteNotFound):
            worker.delete("missing.md", ident)
        with pytest.raises(SymlinkRefused):
            worker.delete("link/secret.md", ident)
        worker.delete("sub/a.md", ident)
        assert not (workspace / "sub" / "a.md").exists()
        assert (workspace.parent / "outside" / "secret.md").read_bytes() == b"secret"


@pytest.mark.parametrize("mode", MODES)
def test_create_and_update_through_a_write_worker(workspace: Path, mode: str) -> None:
    worker = worker_for(mode, workspace, kind="write")
    if worker is None:
        return
    with worker:
        created = worker.create("new/n.md", b"one")
        assert created == Identity.of(os.stat(workspace / "new" / "n.md"))
        with pytest.raises(NoteExists):
            worker.create("new/n.md", b"never overwritten")
        updated = worker.update("new/n.md", b"two", expected=created)
        assert (workspace / "new" / "n.md").read_bytes() == b"two"
        with pytest.raises(IdentityChanged):
            worker.update("new/n.md", b"three", expected=created)
        assert (workspace / "new" / "n.md").read_bytes() == b"two"
        assert worker.update("new/n.md", b"four") != updated
        assert sorted(os.listdir(workspace / "new")) == ["n.md"]  # no temp file left


def _status(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    raise AssertionError(f"{name} not in /proc/{pid}/status")


@pytest.mark.parametrize(("kind", "caps"), [("delete", 0b1010), ("write", 0b1011)])
def test_the_landlock_worker_keeps_only_the_capabilities_the_chroot_worker_keeps(
    workspace: Path, kind: str, caps: int
) -> None:
    # Landlock binds root's file access, not what other capabilities reach (a kernel module,
    # raw I/O, owners and modes of files outside). As root the worker keeps CAP_DAC_OVERRIDE and
    # CAP_FOWNER (the write worker also CAP_CHOWN), in the bounding set too; otherwise nothing.
    if not layer_runs("landlock"):
        return
    with ConfinedWorker(str(workspace), kind, "landlock") as worker:  # type: ignore[arg-type]
        pid = worker.pid
        assert pid is not None
        expected = caps if os.geteuid() == 0 else 0
        for field in ("CapEff", "CapPrm"):
            assert int(_status(pid, field), 16) == expected, field
        if os.geteuid() == 0:
            assert int(_status(pid, "CapBnd"), 16) == caps
        assert int(_status(pid, "CapInh"), 16) == 0
        assert int(_status(pid, "CapAmb"), 16) == 0
        assert worker.hello["confinement"]["effective_caps"] == expected


@pytest.mark.parametrize("mode", MODES)
def test_the_worker_is_single_threaded_with_no_new_privs_and_an_empty_environment(
    workspace: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FS_NOTES_TEST_SECRET", "token-value")
    worker = worker_for(mode, workspace)
    if worker is None:
        return
    with worker:
        assert worker.pid is not None
        proc = psutil.Process(worker.pid)
        assert proc.num_threads() == 1
        status = Path(f"/proc/{worker.pid}/status").read_text()
        assert "NoNewPrivs:\t1" in status
        environ = Path(f"/proc/{worker.pid}/environ").read_bytes()
        assert b"token-value" not in environ
        assert worker.hello["mode"] == mode


def test_a_delete_worker_refuses_write_operations(workspace: Path) -> None:
    with (
        ConfinedWorker(str(workspace), "delete", "none") as worker,
        pytest.raises(ValueError, match="rejected"),
    ):
        worker.create("x.md", b"data")
    assert not (workspace / "x.md").exists()


def test_an_oversized_request_is_refused_before_it_reaches_the_worker(workspace: Path) -> None:
    with ConfinedWorker(str(workspace), "write", "none") as worker:
        pid = worker.pid
        with pytest.raises(TooLarge):
            worker.create("big.md", b"x" * (MAX_REQUEST * 3 // 4 + 1024))
        assert worker.pid == pid  # the channel stayed in step: same worker
        worker.create("small.md", b"x")
    assert not (workspace / "big.md").exists()


def test_the_workspace_itself_may_not_be_a_symlink(workspace: Path) -> None:
    alias = workspace.parent / "alias"
    alias.symlink_to(workspace)
    with pytest.raises(FsError):
        ConfinedWorker(str(alias), "delete", "none")
    assert no_zombie_children()


def test_debug_ops_do_not_exist_without_the_debug_flag(workspace: Path) -> None:
    secret = workspace.parent / "outside" / "secret.md"
    with ConfinedWorker(str(workspace), "delete", "none") as worker:
        with pytest.raises(RuntimeError):
            worker.unlink_raw(str(secret))
        # Even a hand-made request is refused by the worker itself.
        with pytest.raises(ValueError, match="rejected"):
            worker._call({"op": "unlink_raw", "path": str(secret)}, 5.0)
    assert secret.read_bytes() == b"secret"


# -- failures: kill, timeout, death, restart ------------------------------------------------


def test_a_worker_killed_mid_request_raises_worker_failed_then_a_fresh_one_serves(
    workspace: Path, debug_worker: ConfinedWorker
) -> None:
    old = debug_worker.pid
    assert old is not None
    threading.Timer(0.3, os.kill, (old, signal.SIGKILL)).start()
    started = time.monotonic()
    with pytest.raises(WorkerFailed):
        debug_worker.sleep(4.0, timeout=10.0)
    assert time.monotonic() - started < 3.0
    assert gone(old)
    assert no_zombie_children()
    ident = note(workspace, "after.md")
    debug_worker.delete("after.md", ident)
    assert not (workspace / "after.md").exists()
    assert debug_worker.pid not in (None, old)


def test_a_timed_out_request_kills_and_reaps_the_worker(
    workspace: Path, debug_worker: ConfinedWorker
) -> None:
    old = debug_worker.pid
    assert old is not None
    started = time.monotonic()
    with pytest.raises(WorkerFailed):
        debug_worker.sleep(5.0, timeout=0.3)
    assert time.monotonic() - started < 2.0
    assert gone(old)
    assert no_zombie_children()
    debug_worker.sleep(0.0)  # a fresh worker answers
    assert debug_worker.pid != old


def test_a_worker_that_died_while_idle_is_restarted(
    workspace: Path, debug_worker: ConfinedWorker
) -> None:
    old = debug_worker.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    assert wait_gone(old)
    ident = note(workspace, "x.md")
    debug_worker.delete("x.md", ident)  # may not fail: the dead worker was idle
    assert not (workspace / "x.md").exists()
    assert debug_worker.pid != old
    assert no_zombie_children()


def test_close_stops_and_reaps_the_worker_and_later_calls_fail(workspace: Path) -> None:
    worker = ConfinedWorker(str(workspace), "delete", "none")
    pid = worker.pid
    assert pid is not None
    worker.close()
    worker.close()  # idempotent
    assert gone(pid)
    assert no_zombie_children()
    with pytest.raises(WorkerFailed):
        worker.delete("x.md", Identity(0, 0, 0, 0, 0))


def test_concurrent_callers_share_one_worker_safely(workspace: Path) -> None:
    idents = {f"n{i}.md": note(workspace, f"n{i}.md") for i in range(16)}
    errors: list[BaseException] = []
    with ConfinedWorker(str(workspace), "delete", "none") as worker:

        def delete(name: str) -> None:
            try:
                worker.delete(name, idents[name])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=delete, args=(n,)) for n in idents]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert not any((workspace / n).exists() for n in idents)


def test_a_landlock_worker_never_starts_when_landlock_is_hidden(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fail closed: no silent fallback to an unconfined worker.
    monkeypatch.setenv("FS_NOTES_HIDE_LANDLOCK", "1")
    before = {c.pid for c in psutil.Process().children()}
    with pytest.raises(ConfinementError):
        ConfinedWorker(str(workspace), "delete", "landlock")
    assert {c.pid for c in psutil.Process().children()} <= before
    assert no_zombie_children()


def _owner_script(workspace: Path, ending: str) -> str:
    return textwrap.dedent(
        f"""
        import os, sys, time
        sys.path.insert(0, {str(REPO)!r})
        from sandbox.supervisor import ConfinedWorker, DebugOptions
        w = ConfinedWorker({str(workspace)!r}, "delete", "none", debug=DebugOptions())
        print(w.pid, flush=True)
        {ending}
        """
    )


@pytest.mark.parametrize(
    ("ending", "how"),
    [
        # The worker is busy (it would not notice EOF): only PR_SET_PDEATHSIG can stop it.
        ("w.sleep(30, timeout=60)", "killed"),
        ("sys.exit(0)", "exits"),  # owner exits without close(): the exit hook
    ],
)
def test_nothing_is_left_behind_when_the_owner_goes_away(
    workspace: Path, ending: str, how: str
) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _owner_script(workspace, ending)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
        assert not gone(pid)
        if how == "killed":
            time.sleep(0.2)  # let the sleep request reach the worker
            owner.kill()
        owner.wait(timeout=10)
        assert wait_gone(pid, seconds=3.0)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()


def test_a_worker_outlives_the_short_lived_thread_that_started_it(workspace: Path) -> None:
    # PR_SET_PDEATHSIG fires when the *thread* that forked the child exits; workers are forked
    # by a long-lived spawner thread, so a request thread ending must not kill them.
    box: list[ConfinedWorker] = []
    t = threading.Thread(
        target=lambda: box.append(ConfinedWorker(str(workspace), "delete", "none"))
    )
    t.start()
    t.join()
    with box[0] as worker:
        pid = worker.pid
        time.sleep(0.3)
        assert pid is not None and not gone(pid)
        ident = note(workspace, "x.md")
        worker.delete("x.md", ident)
        assert worker.pid == pid


# -- the hello check: a worker is accepted only if it reports what was asked for -------------


def _checker(mode: Mode) -> ConfinedWorker:
    worker = ConfinedWorker.__new__(ConfinedWorker)  # no process: only _check_hello is used
    worker.kind = "delete"
    worker.mode = mode
    worker._debug = None
    worker._holder = _Holder(workspace_fd=10)
    return worker


def _good_hello(mode: Mode) -> dict[str, object]:
    confinement: dict[str, object] = {}
    if mode == "landlock":
        confinement = {
            "abi": 7,
            "allowed": [DELETE_RIGHTS],
            "handled_fs": ll.fs_rights(7),
            "handled_net": ll.net_rights(7),
            "scoped": ll.scopes(7),
            "effective_caps": 0b1010,
        }
    if mode == "chroot":
        confinement = {"effective_caps": 0b1010}
    return {
        "pid": 42,
        "kind": "delete",
        "mode": mode,
        "no_new_privs": True,
        "fds": [0, 1, 2, 10, 11],
        "confinement": confinement,
    }


TAMPERED: list[tuple[Mode, str, object]] = [
    ("none", "pid", 43),
    ("none", "kind", "write"),
    ("landlock", "mode", "none"),
    ("none", "no_new_privs", False),
    ("none", "fds", [0, 1, 2, 10, 11, 12]),  # an fd it should have closed
    ("landlock", "allowed", [DELETE_RIGHTS | ll.ACCESS_FS_READ_FILE]),  # more than needed
    ("landlock", "handled_fs", ll.ACCESS_FS_REMOVE_FILE),  # the rest left unhandled
    ("landlock", "handled_net", 0),
    ("landlock", "scoped", 0),
    ("landlock", "effective_caps", 0x1FFFFFFFFFF),  # kept every capability of root
    ("chroot", "effective_caps", 0x1FFFFFFFFFF),
]


def test_an_honest_hello_is_accepted() -> None:
    for mode in ("landlock", "chroot", "none"):
        _checker(mode)._check_hello({"ok": True, "hello": _good_hello(mode)}, 42, 11)


@pytest.mark.parametrize(("mode", "field", "value"), TAMPERED)
def test_a_hello_that_differs_from_the_request_is_refused(
    mode: Mode, field: str, value: object
) -> None:
    hello = _good_hello(mode)
    if field in hello:
        hello[field] = value
    else:
        confinement = hello["confinement"]
        assert isinstance(confinement, dict)
        confinement[field] = value
    with pytest.raises(ConfinementError):
        _checker(mode)._check_hello({"ok": True, "hello": hello}, 42, 11)


def test_a_worker_that_reports_a_confinement_failure_is_refused() -> None:
    reply = {"ok": False, "error": "ConfinementError", "detail": "LandlockUnavailable"}
    with pytest.raises(ConfinementError):
        _checker("landlock")._check_hello(reply, 42, 11)
    with pytest.raises(WorkerFailed):
        _checker("landlock")._check_hello(None, 42, 11)
