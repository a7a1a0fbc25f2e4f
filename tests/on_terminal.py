"""A shell on a terminal, for tests: `python on_terminal.py [--first] TTY -- COMMAND...`.

Becomes the leader of a new session whose controlling terminal is TTY (a pty's slave), then runs
COMMAND as a job would run from an interactive shell: in a process group of its own, made the
terminal's foreground group, with TTY as stdin (stdout and stderr stay as given). With --first
the command is the terminal's first program instead (the session leader itself: exec, no job).
The shell ignores SIGHUP (so a closed terminal does not take it away before it reports), waits
for the job and exits as it did.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import termios


def main(argv: list[str]) -> int:
    first = argv[0] == "--first"
    if first:
        argv = argv[1:]
    tty, sep, *command = argv
    assert sep == "--" and command
    os.setsid()
    fd = os.open(tty, os.O_RDWR)  # a session leader without a terminal: it becomes the ctty
    fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
    os.dup2(fd, 0)
    os.close(fd)
    if first:
        os.execvp(command[0], command)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # tcsetpgrp from outside the foreground
    job = os.fork()
    if job == 0:
        os.setpgid(0, 0)
        os.tcsetpgrp(0, os.getpid())
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        os.execvp(command[0], command)
    with contextlib.suppress(OSError):  # as a shell does, in both (an exec'ed job did it)
        os.setpgid(job, job)
    while True:
        try:
            _, status = os.waitpid(job, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
