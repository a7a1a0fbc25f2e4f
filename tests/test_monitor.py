"""A server starts nothing and a root server holds nothing: its monitor starts the workers.

(sandbox/monitor.py; issue 26 items 1 and 3.)

Each test confines a child exactly as `serve` does (`confine_server`), as root: the server must
then hold no capability at all, its monitor only the workers', and the monitor must answer its
request table and nothing else, whatever code in the server sends it. The positive controls: the
same process could become another user before it confined itself, and after every refusal a
well-formed request still starts a worker that does its job. In the regular-user pass the
server has a monitor too (so it starts nothing itself), which holds no capability either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from oslayer import needed
from test_fs_support import one_note
from test_selfconfine import PRELUDE, run_child
from wire import REPO, child_env

from fs_notes.sandbox.process import CAP_SYS_CHROOT
from fs_notes.sandbox.selfconfine import SERVER_CAPABILITIES

SETUP = """
import socket
from fs_notes.fs import WorkspaceRoot
from fs_notes.sandbox import monitor
from fs_notes.sandbox.supervisor import ConfinedWorker
ws, outside = sys.argv[1], sys.argv[2]
def caps(pid="self"):
    lines = read(f"/proc/{pid}/status").decode().splitlines()
    status = dict(line.split(":\\t", 1) for line in lines)
    return {k: int(status[k], 16) for k in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")}
def may_become_nobody():
    pid = os.fork()
    if pid == 0:
        try:
            os.setresuid(65534, 65534, 65534)
            os._exit(0)
        except OSError:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
out["before"] = {"caps": caps(), "setuid": may_become_nobody()}
outside_fd = os.open(outside, os.O_RDONLY | os.O_DIRECTORY)  # opened before: not a workspace
policy = Policy.for_single_workspace(ws, "me", token_sha256=None)
root = WorkspaceRoot.open(ws)
done = confine_server(policy, replay_db=None, roots={policy.workspaces[0].name: root})
mode = "landlock" if done.enforced else "chroot"
m = monitor.current()
"""


def _root_or_unprivileged() -> bool:
    """True as root; False in the regular-user pass (the test then proves what holds there)."""
    return needed("root") == "run"


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    return one_note(tmp_path, outside=True), tmp_path / "outside"


def test_a_root_server_holds_no_capability_and_its_monitor_only_what_the_workers_need(
    folders: tuple[Path, Path],
) -> None:
    root = _root_or_unprivileged()
    ws, outside = folders
    if root:
        os.chown(ws, 65534, 65534)  # the folder's owner: the workers become that user
    out = run_child(
        SETUP
        + """
import ctypes
def on_purpose(fn):  # named so for CI's logging pass (.ci/seccomp-log): refused on purpose
    libc, name = ctypes.CDLL(None), ctypes.create_string_buffer(16)
    libc.prctl(16, name)
    libc.prctl(15, b"fs-notes-probe")
    try:
        return fn()
    finally:
        libc.prctl(15, name)
setuid = on_purpose(lambda: attempt(lambda: os.setresuid(65534, 65534, 65534)))
out["server"] = {"caps": caps(), "setuid": setuid,
                 "reported": done.effective_caps, "has_monitor": m is not None,
                 "monitor_pid": done.monitor_pid}
if m is not None:
    told = m.ask({"op": "status"})
    out["monitor"] = {k: told[k] for k in ("uid", "effective_caps", "permitted_caps",
                                            "bounding_caps", "seccomp", "profile", "no_new_privs",
                                            "workers")}
    out["monitor_fds"] = len(told["fds"])
with ConfinedWorker(root.fd, "write", mode) as w:
    w.create_note("new.md", b"# New\\n")
    out["worker_uid"] = w.hello["uid"]
    out["started_by_monitor"] = m is not None and w.pid in m.ask({"op": "status"})["workers"]
if m is not None:
    out["after_close"] = m.ask({"op": "status"})["workers"]
""",
        str(ws),
        str(outside),
    )
    new = ws / "new.md"
    assert new.read_text() == "# New\n"
    if not root:  # a monitor too, so the server starts nothing; no capability anywhere
        assert out["server"]["has_monitor"] is True
        assert out["server"]["caps"]["CapEff"] == 0 and out["server"]["caps"]["CapPrm"] == 0
        assert out["server"]["setuid"] == "ENOSYS"
        told = out["monitor"]
        assert (told["uid"], told["effective_caps"], told["permitted_caps"]) == (
            os.geteuid(), 0, 0,
        )  # fmt: skip
        assert told["seccomp"] == 2 and told["no_new_privs"] is True and told["workers"] == []
        assert told["profile"] == ("monitor" if _landlock() else "monitor-chroot")
        # (a regular user's chroot worker is uid 0 of a user namespace of its own)
        me = os.geteuid() if _landlock() else 0
        assert out["started_by_monitor"] is True and out["worker_uid"] == me
        assert out["after_close"] == []
        return
    kept = sum(1 << c for c in SERVER_CAPABILITIES)
    if not _landlock():
        kept |= 1 << CAP_SYS_CHROOT  # its chroot workers' chroot
    # positive control: before confining itself, the process had root's capabilities and could
    # become another user
    assert out["before"]["caps"]["CapEff"] & (1 << 21)  # CAP_SYS_ADMIN
    assert out["before"]["setuid"] is True
    # the server: nothing, in every set, and it can no longer become anyone
    sets = ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")
    assert out["server"]["caps"] == dict.fromkeys(sets, 0)
    assert out["server"]["reported"] == 0
    assert out["server"]["setuid"] == "ENOSYS"  # not on its list, and no CAP_SETUID anyway
    # the monitor: the workers' capabilities, its own filter, stderr + /dev/null x2 + its socket
    assert out["monitor"] == {
        "uid": 0,
        "effective_caps": kept,
        "permitted_caps": kept,
        "bounding_caps": kept,
        "seccomp": 2,
        "profile": "monitor" if _landlock() else "monitor-chroot",
        "no_new_privs": True,
        "workers": [],
    }
    assert out["monitor_fds"] == 4
    # the worker it started became the folder's owner, and is gone once closed
    assert out["started_by_monitor"] is True and out["worker_uid"] == 65534
    assert new.stat().st_uid == 65534
    assert out["after_close"] == []


def _landlock() -> bool:
    return os.environ.get("FS_NOTES_TEST_LANDLOCK_HIDDEN") != "1"


def test_the_monitor_refuses_every_request_outside_its_table_and_keeps_nothing_sent_with_one(
    folders: tuple[Path, Path],
) -> None:
    _root_or_unprivileged()  # a regular user's server has a monitor too: the same refusals
    ws, outside = folders
    out = run_child(
        SETUP
        + """
def asked(request, fds=()):
    try:
        m.ask(request, fds)
        return "accepted"
    except monitor.MonitorRefused as exc:
        return str(exc).removeprefix("the monitor refused: ")
fds_before = len(m.ask({"op": "status"})["fds"])
a, b = socket.socketpair()
rp, wp = os.pipe()
good = {"op": "start", "program": "fs_notes.sandbox.worker", "kind": "delete", "mode": mode}
fds = (root.fd, b.fileno(), wp)
r = {
    "no such op": asked({"op": "exec", "argv": ["/bin/sh", "-c", "id"]}, fds),
    "attacker program": asked({**good, "program": "fs_notes.exercises.attacker_worker"}, fds),
    "any module": asked({**good, "program": "os"}, fds),
    "unconfined": asked({**good, "mode": "none"}, fds),
    "no such kind": asked({**good, "kind": "read"}, fds),
    "a user named": asked({**good, "user": "0:0"}, fds),
    "outside folder": asked(good, (outside_fd, b.fileno(), wp)),
    "pipe as channel": asked(good, (root.fd, rp, wp)),
    "read end as stderr": asked(good, (root.fd, b.fileno(), rp)),
    "two fds": asked(good, (root.fd, b.fileno())),
    "poll the server": asked({"op": "poll", "pid": os.getpid()}),
    "kill the monitor": asked({"op": "kill", "pid": m.pid}),
    "kill a string": asked({"op": "kill", "pid": "1"}),
    "fds with kill": asked({"op": "kill", "pid": 1}, (root.fd,)),
    "status with more": asked({"op": "status", "pid": 1}),
}
def raw(data):
    m._sock.send(data)
    return m._sock.recv(4096).decode()
r["not json"] = raw(b"{not json")
r["op a list"] = raw(b'{"op": []}')  # found by review: once a TypeError that ended the monitor
r["deep"] = raw(b"[" * 2000 + b"]" * 2000)  # and a RecursionError
r["too long"] = raw(b" " * 5000)
r["program a list"] = asked({**good, "program": ["fs_notes.sandbox.worker"]}, fds)
r["own socket as channel"] = asked(good, (root.fd, m._sock.fileno(), wp))
out["refused"] = r
out["fds_kept"] = len(m.ask({"op": "status"})["fds"]) - fds_before
out["workers"] = m.ask({"op": "status"})["workers"]
# positive control: a well-formed request still starts a worker that does its job
with ConfinedWorker(root.fd, "delete", mode) as w:
    w.unlink_note("a.md", root.stat_note("a.md"))
out["left"] = sorted(os.listdir(ws))
# interrupted between a request and its reply (found by review): the reply would answer the
# next request, so the monitor is never asked again; it ends, with its workers
class Interrupted(BaseException):
    pass
real = m._sock
class Cut:
    def sendmsg(self, *args):
        return real.sendmsg(*args)
    def recv(self, size):
        # interrupted once the reply has come, so the server closes with it unread: the monitor
        # then reads ECONNRESET, not end-of-file (it ended with 70 on that once, in CI)
        import select
        select.select([real], [], [], 10)
        raise Interrupted()
    def close(self):
        real.close()
w = ConfinedWorker(root.fd, "write", mode)  # a worker up: it must go with the monitor
m._sock = Cut()
try:
    m.ask({"op": "status"})
except Interrupted:
    pass
out["after interrupt"] = asked({"op": "status"})
out["monitor ended"] = os.waitstatus_to_exitcode(os.waitpid(m.pid, 0)[1])
try:
    w.create_note("late.md", b"# Late\\n")
    out["late"] = "created"
except Exception as exc:
    out["late"] = type(exc).__name__
""",
        str(ws),
        str(outside),
    )
    three = "start takes three fds"
    assert out["refused"] == {
        "no such op": "no such request",
        "attacker program": "not a program this monitor starts",
        "any module": "not a program this monitor starts",
        "unconfined": f"this monitor starts {'landlock' if _landlock() else 'chroot'} workers only",
        "no such kind": "not a kind of worker the policy uses in that workspace",
        "a user named": "start takes program, kind and mode",
        "outside folder": "not a workspace folder this monitor was given",
        "pipe as channel": "the channel is not a socket",
        "read end as stderr": "stderr is not the write end of a pipe",
        "two fds": three,
        "poll the server": "not a worker this monitor started",
        "kill the monitor": "not a worker this monitor started",
        "kill a string": "kill takes a pid",
        "fds with kill": "kill takes no fds",
        "status with more": "status takes nothing",
        "not json": '{"ok": false, "error": "not JSON"}',
        "op a list": '{"ok": false, "error": "no such request"}',
        "deep": '{"ok": false, "error": "malformed request (RecursionError)"}',
        "too long": '{"ok": false, "error": "request or fds cut short"}',
        "program a list": "start takes program, kind and mode",
        "own socket as channel": "the channel is not a socket",
    }
    assert out["fds_kept"] == 0 and out["workers"] == []
    assert out["left"] == []  # the delete worker ran after all that
    assert out["after interrupt"] == "the monitor stopped answering"
    assert out["monitor ended"] == 0
    assert out["late"] == "WorkerFailed" and not (ws / "late.md").exists()
    assert (outside / "secret.md").read_text() == "# secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.md"]


KILLED = PRELUDE + textwrap.dedent(SETUP) + textwrap.dedent("""
w = ConfinedWorker(root.fd, "write", mode)
print("ready", flush=True)
time.sleep(60)
""")


def test_the_monitor_and_its_workers_end_with_the_server(folders: tuple[Path, Path]) -> None:
    _root_or_unprivileged()
    ws, outside = folders
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time\n" + KILLED, str(ws), str(outside)],
        stdout=subprocess.PIPE, text=True, cwd=REPO, env=child_env(),
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        started = psutil.Process(proc.pid)
        tree = [started, *started.children(recursive=True)]  # the server is one of them: the
        names = sorted(p.name() for p in tree)  # process started, or below relays (a view)
        assert "fs-notes-monito" in names and "fs-notes-write" in names, names
        server = next(p for p in tree if p.name() == "fs-notes-server")
        server.send_signal(signal.SIGKILL)
        _, alive = psutil.wait_procs(tree, timeout=10)
        assert alive == []
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
