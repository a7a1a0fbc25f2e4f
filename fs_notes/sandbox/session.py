"""No controlling terminal for any process of the server: a session of its own, left at start-up.

Why: a process whose controlling terminal is the operator's can push input into the shell there
with ioctl(TIOCSTI) (kernels with dev.tty.legacy_tiocsti=1), Landlock and the filter
notwithstanding; a server started by an MCP client inherits the client's terminal as its
controlling one even when its own stdin is a pipe. And a process that leads a session without a
terminal can make one it has open its controlling terminal (open(2) without O_NOCTTY, or
TIOCSCTTY): so the server must not lead its session either.

Guarantees, when `leave_terminal` returns (in the process that goes on as the server):
- It has no controlling terminal (tty_nr 0 in /proc/self/stat), and neither has anything it
  starts later (the workers): TIOCSTI is refused (EPERM without CAP_SYS_ADMIN).
- It is in a session without a controlling terminal and does not lead it, so it can never get
  one (only a session leader can). The workers it starts lead sessions of their own
  (sandbox/supervisor.py) without a terminal among their fds (stdin /dev/null, stderr a pipe),
  and cannot open one by name (Landlock allows /dev/null only; a chroot worker sees its
  workspace only, where the filesystem layer refuses device nodes).
- Its stdin, stdout and stderr are unchanged: stdio works as before, from an MCP client's pipes
  or from a terminal (reading and writing a terminal that is not the controlling one is allowed
  and never stops the process with SIGTTIN/SIGTTOU); a terminal's Ctrl-D is the end of input.
- Ctrl-C and SIGTERM still stop it: the process the caller started stays where it was (in the
  shell's foreground process group) as a relay that passes SIGTERM, SIGINT, SIGHUP and SIGQUIT
  on to the server, waits for it and exits as it did (128 + the signal for a signal). A relay
  drops its own controlling terminal (TIOCNOTTY, which for a process that does not lead its
  session changes nothing for anyone else); the server is killed with its relay
  (PR_SET_PDEATHSIG), so killing the started process ends them all.
- A relay holds nothing: no capability (as root too) and only the calls of its allow-list
  (sandbox/allowed.py "relay": wait, pass a signal on, end); it opens, reads and starts nothing.

How: setsid() where the process may (it does not lead its process group), then a fork so that
the server is not the new session's leader; a shell's job (which leads its process group, where
setsid is refused) forks first. One relay for a server an MCP client or a service manager
starts, two for one started from a shell.

Does not:
- Drop the terminal of a process that leads its session with a controlling terminal (started as
  a terminal's first program, not from a shell in it): dropping it there would hang up the
  terminal's foreground group and take Ctrl-C away. That relay keeps it and runs nothing but
  the relay; the server below it has none.
- Keep the server from the terminal that is its stdin, stdout or stderr: it reads the protocol
  there, and may change the terminal's settings (tcsetattr); it cannot inject input into it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import termios
from typing import Final

#: Signals a relay passes on to the process below it.
RELAYED: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def controlling_tty() -> int:
    """This process's controlling terminal (its device number; 0: none): /proc/self/stat."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[4])  # after "comm)": state ppid pgrp sid tty


def _drop_controlling_tty() -> None:
    """TIOCNOTTY on this process's controlling terminal (for one that does not lead its session:
    only its own tie to the terminal goes; it stays in its process group, which Ctrl-C signals)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:  # none after all (ENXIO), or not openable: nothing to drop through it
        return
    try:
        fcntl.ioctl(fd, termios.TIOCNOTTY)
    except OSError:
        pass  # checked by the caller's caller: the server's own tty_nr is what counts
    finally:
        os.close(fd)


def _relay(child: int, alive: int) -> None:
    """Pass signals on to `child`, wait for it and exit as it did; hold `alive` open until then
    (the child's check that its parent is there). Never returns."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):  # the client must see the server's end of stdio close, not ours
            os.dup2(null, fd)
        # The workspaces, databases and sockets are the child's.
        os.closerange(3, alive)
        os.closerange(alive + 1, 1 << 20)
        for sig in RELAYED:
            signal.signal(sig, lambda number, _frame: os.kill(child, number))
        _hold_nothing()
        while True:
            try:
                _, status = os.waitpid(child, 0)
                break
            except ChildProcessError:
                os._exit(70)
            except InterruptedError:
                continue
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)
    except BaseException:
        os._exit(70)


def _hold_nothing() -> None:
    """The relay sheds every capability (a root server's relay is outside its PID namespace and
    its view) and loads its own filter (sandbox/allowed.py "relay": wait, pass signals on, end).
    Where libseccomp cannot be loaded, the server below says so and refuses to start without
    its own filter (sandbox/selfconfine.py); a filter or a capability that cannot be dropped
    otherwise ends the relay, and with it the server (fail closed)."""
    from fs_notes.sandbox import seccomp
    from fs_notes.sandbox.process import limit_capabilities

    try:
        limit_capabilities(frozenset())
        if seccomp.available() is None:
            seccomp.install("relay")
    except (OSError, seccomp.SeccompUnavailable) as exc:
        os.write(2, f"fs-notes: the relay cannot confine itself: {exc}\n".encode())
        os._exit(70)


def behind_relay() -> None:
    """Fork: the child returns (killed if this process dies); this process relays signals to it
    and exits as it does (`_relay`), never returning."""
    from fs_notes.sandbox import seccomp

    seccomp.available()  # libseccomp loaded now: the child may soon pivot the root away
    sys.stdout.flush()
    sys.stderr.flush()
    alive_r, alive_w = os.pipe()  # the parent holds the write end until it dies
    child = os.fork()
    if child:
        os.close(alive_r)
        _relay(child, alive_w)
    os.close(alive_w)
    from fs_notes.sandbox.process import PR_SET_PDEATHSIG, prctl

    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.set_blocking(alive_r, False)
    try:
        if os.read(alive_r, 1) == b"":  # the relay died before the line above: go too
            os._exit(70)
    except BlockingIOError:
        pass
    os.close(alive_r)


def leave_terminal() -> None:
    """Go on in a session without a controlling terminal, not as its leader (module docstring).
    Forks once or twice; must be called before any thread starts. OSError from setsid (which
    the steps below rule out) propagates."""
    for _ in range(4):  # at most: fork (a group leader), setsid, fork
        pid = os.getpid()
        if os.getsid(0) == pid:
            # A session leader: with a terminal, a child leaves it (setsid, below); without,
            # a child is in a session it cannot give a terminal to.
            had_tty = controlling_tty() != 0
            behind_relay()
            if not had_tty:
                return
        elif os.getpgrp() != pid:
            os.setsid()
        else:  # a shell's job leads its process group: setsid is refused there
            _drop_controlling_tty()
            behind_relay()
    raise OSError("could not leave the session")  # pragma: no cover - the steps end in three
