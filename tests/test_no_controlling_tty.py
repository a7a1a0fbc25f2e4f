"""No process of fs-notes has a controlling terminal (issue 26 item 2; sandbox/session.py).

`serve` is started on a pty the way a person starts it: as a job of a shell whose controlling
terminal the pty is (tests/on_terminal.py), and as the terminal's first program. The shell has
the terminal (positive control); the server, every relay and every worker has none (tty_nr 0 in
/proc/PID/stat), and the server does not lead its session (so it cannot take a terminal later).
Ctrl-C, Ctrl-D and the terminal going away (the pty's master closed) still stop it, exit 0, and
leave no process behind. A process past `leave_terminal` cannot inject input with TIOCSTI (which
works just before, where the kernel allows it: dev.tty.legacy_tiocsti=1) nor take a new terminal
(TIOCSCTTY), while a session leader can (control)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from test_fs_support import one_note
from wire import REPO, child_env

from fs_notes.sandbox.session import controlling_tty

ON_TERMINAL = str(Path(__file__).with_name("on_terminal.py"))
READY = b"OS containment: "  # logged once the workers are up (sandbox/confined.py)


def tty_nr(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[4])


@contextlib.contextmanager
def on_terminal(
    tmp_path: Path, *, first: bool = False
) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    notes = one_note(tmp_path)
    master, slave = os.openpty()
    err = tmp_path / "stderr"
    with open(err, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, ON_TERMINAL, *(["--first"] if first else []), os.ttyname(slave),
             "--", sys.executable, "-m", "fs_notes", "serve", str(notes),
             "--sandbox", "chroot"],  # at least: the hidden-Landlock pass has chroot workers
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=out,
            env=child_env(),
            cwd=REPO,
        )  # fmt: skip
    os.close(slave)
    try:
        deadline = time.monotonic() + 60
        while READY not in err.read_bytes() and time.monotonic() < deadline:
            assert proc.poll() is None, err.read_text(errors="replace")
            time.sleep(0.1)
        assert READY in err.read_bytes(), err.read_text(errors="replace")
        yield master, proc, err
    finally:
        with contextlib.suppress(OSError):
            os.close(master)
        if proc.poll() is None:
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
        proc.wait(10)


def _tree(pid: int) -> list[psutil.Process]:
    """The processes below `pid`, once the workers are up (started after the log line)."""
    deadline = time.monotonic() + 30
    while True:
        tree: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
        if len(_workers(tree)) >= 2 or time.monotonic() > deadline:
            return tree
        time.sleep(0.1)


def _workers(tree: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in tree if "-I" in p.cmdline()]  # sandbox/bootstrap.py's isolated child


def _server(tree: list[psutil.Process]) -> psutil.Process:
    """The process whose children are the workers."""
    (server,) = {w.parent().pid: w.parent() for w in _workers(tree)}.values()
    return server


def _no_terminal_in(tree: list[psutil.Process], shell: int) -> None:
    assert tty_nr(shell) != 0  # the control: the shell's session has the terminal
    workers = _workers(tree)
    assert len(workers) >= 2, [p.cmdline() for p in tree]  # the delete and write workers
    assert {p.pid: tty_nr(p.pid) for p in tree} == {p.pid: 0 for p in tree}
    server = _server(tree)
    assert os.getsid(server.pid) != server.pid  # it cannot take a terminal later


def _stops(proc: subprocess.Popen[bytes], tree: list[psutil.Process], err: Path) -> None:
    assert proc.wait(30) == 0, err.read_text(errors="replace")
    deadline = time.monotonic() + 10
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree):
        assert time.monotonic() < deadline, [p.pid for p in tree if p.is_running()]
        time.sleep(0.05)
    assert b"stdio transport closed" in err.read_bytes()


def test_a_job_of_a_shell_on_a_terminal_has_none_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    with on_terminal(tmp_path) as (master, proc, err):
        tree = _tree(proc.pid)
        _no_terminal_in(tree, proc.pid)
        # The job the shell started is the foreground group's: it relays the terminal's SIGINT.
        job = tree[0]
        assert os.tcgetpgrp(master) == os.getpgid(job.pid) == job.pid
        assert "waiting for an MCP client on stdin" in err.read_text()  # stdin is still a tty
        os.write(master, b"\x03")
        _stops(proc, tree, err)


def test_ctrl_d_stops_it(tmp_path: Path) -> None:
    with on_terminal(tmp_path) as (master, proc, err):
        tree = _tree(proc.pid)
        os.write(master, b"\x04")
        _stops(proc, tree, err)


def test_the_terminal_going_away_stops_it(tmp_path: Path) -> None:
    with on_terminal(tmp_path) as (master, proc, err):
        tree = _tree(proc.pid)
        os.close(master)  # the server's stdin reads EIO: the end of input
        _stops(proc, tree, err)


def test_the_first_program_of_a_terminal_keeps_it_in_the_relay_only(tmp_path: Path) -> None:
    """A process that leads its session with a terminal cannot drop it without taking Ctrl-C
    away: the started process (the relay) keeps it, nothing below it has it."""
    with on_terminal(tmp_path, first=True) as (master, proc, err):
        tree = _tree(proc.pid)
        assert tty_nr(proc.pid) != 0
        _no_terminal_in(tree, proc.pid)
        os.write(master, b"\x03")
        _stops(proc, tree, err)


_INJECT = """
import errno, fcntl, os, sys, termios
from fs_notes.sandbox.process import capabilities, drop_capabilities
from fs_notes.sandbox.session import controlling_tty, leave_terminal
if capabilities() != (0, 0):  # root: TIOCSTI and TIOCSCTTY(1) with CAP_SYS_ADMIN work on any tty
    drop_capabilities(frozenset())
assert capabilities() == (0, 0)
fcntl.ioctl(0, termios.TIOCSTI, b"A")  # the control: injected while the terminal is ours
print("before", controlling_tty() != 0, flush=True)
leave_terminal()
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"B")
    print("injected", flush=True)
except OSError as exc:
    print("refused", errno.errorcode[exc.errno], flush=True)
master, slave = os.openpty()
try:
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    print("took", flush=True)
except OSError as exc:
    print("take", errno.errorcode[exc.errno], flush=True)
os.close(os.open(os.ttyname(slave), os.O_RDWR))  # no O_NOCTTY: a leader would get it
print("after", controlling_tty(), flush=True)
"""


def _legacy_tiocsti() -> bool:
    try:
        return Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() == "1"
    except OSError:
        return True  # kernels before 6.2 have no switch: TIOCSTI always works


@pytest.mark.skipif(not _legacy_tiocsti(), reason="TIOCSTI refused to everyone here (the control)")
def test_past_leave_terminal_no_input_is_injected_nor_a_terminal_taken(tmp_path: Path) -> None:
    master, slave = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, ON_TERMINAL, os.ttyname(slave), "--", sys.executable, "-c", _INJECT],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=child_env(),
            cwd=REPO,
            timeout=60,
        )
        os.set_blocking(master, False)
        try:
            typed = os.read(master, 100)
        except BlockingIOError:  # nothing came
            typed = b""
    finally:
        os.close(slave)
        os.close(master)
    lines = done.stdout.decode().splitlines()
    assert lines == ["before True", "refused EPERM", "take EPERM", "after 0"], done.stderr
    assert typed == b"A"  # echoed by the terminal: the control only, never "B"


def test_a_session_leader_takes_a_terminal_it_opens(tmp_path: Path) -> None:
    """The control for "after 0" above: why the server must not lead its session."""
    code = (
        "import os; from fs_notes.sandbox.session import controlling_tty; os.setsid(); "
        "m, s = os.openpty(); os.close(os.open(os.ttyname(s), os.O_RDWR)); "
        "print(controlling_tty() != 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=child_env(), cwd=REPO, timeout=30
    )
    assert done.stdout == b"True\n", done.stderr
    assert controlling_tty() == tty_nr(os.getpid())
