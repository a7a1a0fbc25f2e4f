"""The allow-lists (sandbox/allowed.py): per role, calls a default-allow filter lets through are
refused; the calls each role needs are on its list, with a reason.

Each attack runs in a subprocess that loads the role's filter and then names itself
`fs-notes-probe`, so CI's logging pass (.ci/seccomp-log) knows the refusals it causes were made on
purpose. Every call is made with arguments under which, if the filter let it through, the kernel
would refuse it for a reason of its own (EINVAL, EBADF, ESRCH, ...) and change nothing: the
positive control runs the same calls without a filter and requires exactly that (never ENOSYS),
so ENOSYS under the filter can only be the filter's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from layers import status_field
from test_sandbox_seccomp import _require_seccomp
from wire import REPO, child_env

from fs_notes.sandbox import allowed, seccomp
from fs_notes.sandbox.allowed import COMMAND_ARG
from fs_notes.sandbox.kinds import PROFILES

#: name -> arguments under which the call, if it ran, fails harmlessly (x86_64 and aarch64).
HARMLESS: dict[str, tuple[int, ...]] = {
    "syslog": (0xFFFF, 0, 0),  # an unknown action: EINVAL (reads the kernel's log otherwise)
    "sethostname": (0, 1 << 20),  # a name longer than any: EINVAL
    "setdomainname": (0, 1 << 20),
    "name_to_handle_at": (-1, 0, 0, 0, 0xFFFF),  # a file handle, past Landlock: EBADF or EINVAL
    "fanotify_init": (0xFFFFFFFF, 0),  # every flag: EINVAL (watches a whole mount otherwise)
    "io_setup": (0, 0),  # AIO, a second way around the syscalls: EINVAL for 0 events
    "pidfd_open": (-1, 0),  # a handle on another process: EINVAL
    "pidfd_send_signal": (-1, 0, 0, 0),  # EBADF
    "mlockall": (0,),  # pinning memory: EINVAL without a flag
    "timer_create": (-1, 0, 0),  # EINVAL for clock -1
    "process_madvise": (-1, 0, 0, 0, 0),  # another process's memory: EBADF
    "vmsplice": (-1, 0, 0, 0),  # EBADF
    "inotify_init1": (0xFFFFFFFF,),  # EINVAL (a worker watches nothing)
    "kill": (0x3FFFFFFF, 0),  # a pid no process has: ESRCH (a worker signals nobody)
    "wait4": (0x3FFFFFFF, 0, 0, 0),  # ECHILD (a worker starts nobody)
    "setitimer": (99, 0, 0),  # EINVAL
    "listen": (-1, 0),  # EBADF (a worker serves its channel only)
    "setgroups": (-1, 0),  # EINVAL (a monitored root server changes no id)
    "capset": (0, 0),  # EFAULT (no header)
    "landlock_create_ruleset": (0, 0, 0xFFFF),  # EINVAL (an unknown flag)
}

#: per role: ten or more calls that only the allow-list refuses (none of them in seccomp.DENIED).
REFUSED_BY_DEFAULT: dict[str, tuple[str, ...]] = {
    "server": (  # its monitor starts the workers: no id change, no Landlock domain of its own
        "syslog", "sethostname", "setdomainname", "name_to_handle_at", "fanotify_init",
        "io_setup", "pidfd_open", "pidfd_send_signal", "mlockall", "timer_create",
        "process_madvise", "vmsplice", "setitimer", "setgroups", "capset",
        "landlock_create_ruleset",
    ),
    "write": (
        "syslog", "sethostname", "name_to_handle_at", "fanotify_init", "io_setup",
        "pidfd_open", "mlockall", "timer_create", "inotify_init1", "kill", "wait4", "listen",
    ),
    "delete": (
        "syslog", "sethostname", "name_to_handle_at", "fanotify_init", "io_setup",
        "pidfd_open", "mlockall", "timer_create", "inotify_init1", "kill", "wait4", "listen",
    ),
}  # fmt: skip

# the monitor starts and stops workers; it watches, serves and maps nothing else
REFUSED_BY_DEFAULT["monitor"] = (
    *REFUSED_BY_DEFAULT["server"][:10], "inotify_init1", "listen", "vmsplice", "setitimer",
)  # fmt: skip
REFUSED_BY_DEFAULT["monitor-chroot"] = REFUSED_BY_DEFAULT["monitor"]
REFUSED_BY_DEFAULT["relay"] = (*REFUSED_BY_DEFAULT["write"][:9], "listen", "vmsplice", "setitimer")

PROBE = """
import ctypes, errno, json, sys
import pyseccomp
from fs_notes.sandbox import seccomp
role, calls = sys.argv[1], json.loads(sys.argv[2])  # label -> [call, args]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
if role != "none":
    seccomp.install(role, name="fs-notes-probe")  # .ci/seccomp-log: refusals on purpose
out = {}
for label, (call, args) in calls.items():
    number = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, call)
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))
    out[label] = errno.errorcode.get(ctypes.get_errno(), "ok") if result == -1 else "ran"
getpid = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, "getpid")
out["getpid"] = "ok" if libc.syscall(ctypes.c_long(getpid)) > 0 else "?"
print(json.dumps(out))
"""


def _probe(role: str, calls: list[str] | dict[str, tuple[str, tuple[int, ...]]]) -> dict[str, Any]:
    """Each call's outcome in a process under `role`'s filter ("none": no filter); `calls` names
    calls of HARMLESS, or maps a label to a call and its arguments."""
    if isinstance(calls, list):
        calls = {c: (c, HARMLESS[c]) for c in calls}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE), role, json.dumps(calls)],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("role", PROFILES)
def test_ten_calls_a_default_allow_filter_lets_through_are_refused_in_each_role(role: str) -> None:
    _require_seccomp()
    calls = list(REFUSED_BY_DEFAULT[role])
    assert len(calls) >= 10
    # only the allow-list can refuse these: none is denied by name or on its list
    assert not set(calls) & set(seccomp.denied_for(role))  # type: ignore[arg-type]
    assert not set(calls) & set(allowed.allowed(role))  # type: ignore[arg-type]
    unfiltered = _probe("none", calls)  # positive control: each call exists and fails harmlessly
    assert all(unfiltered[c] not in ("ENOSYS", "ran", "ok") for c in calls), unfiltered
    filtered = _probe(role, calls)
    assert {c: filtered[c] for c in calls} == {c: "ENOSYS" for c in calls}
    assert filtered["getpid"] == "ok"  # what is on the list still runs


#: label -> (call, arguments): commands of ioctl, fcntl and prctl not in allowed.COMMANDS, each
#: failing harmlessly if let through (fd -1: EBADF; an unknown sub-option or value: EINVAL).
REFUSED_COMMANDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "ioctl TIOCSCTTY": ("ioctl", (-1, 0x540E, 0)),  # taking a terminal as its controlling one
    "ioctl TIOCSPGRP": ("ioctl", (-1, 0x5410, 0)),  # the terminal's foreground group
    "ioctl FS_IOC_GETFLAGS": ("ioctl", (-1, 0x80086601, 0)),
    "fcntl F_SETOWN": ("fcntl", (-1, 8, 1)),  # SIGIO sent to a process it names
    "fcntl F_SETSIG": ("fcntl", (-1, 10, 9)),
    "fcntl F_SETLEASE": ("fcntl", (-1, 1024, 0)),
    "fcntl F_NOTIFY": ("fcntl", (-1, 1026, 0)),
    "prctl PR_SET_DUMPABLE": ("prctl", (4, 7, 0, 0, 0)),  # 7: no such value, EINVAL
    "prctl PR_SET_MM": ("prctl", (35, 0xFFFF, 0, 0, 0)),  # no such field: EINVAL or EPERM
    "prctl PR_SET_CHILD_SUBREAPER": ("prctl", (36, 0, 1, 0, 0)),  # arg3 set: EINVAL
    "prctl PR_SET_PTRACER": ("prctl", (0x59616D61, 0x3FFFFFFF, 0, 0, 0)),  # no such pid
}

#: label -> (call, arguments, what it answers under every filter that has the call).
ALLOWED_COMMANDS: dict[str, tuple[str, tuple[int, ...], str]] = {
    "ioctl TCGETS": ("ioctl", (-1, 0x5401, 0), "EBADF"),  # isatty: runs, on no fd
    "ioctl TCGETS, high bits set": ("ioctl", (-1, 0x1_0000_5401, 0), "EBADF"),
    "ioctl TIOCSTI": ("ioctl", (-1, 0x5412, 0), "EPERM"),  # the first program's refusal stands
    "ioctl TIOCSTI, high bits set": ("ioctl", (-1, 0x7_0000_5412, 0), "EPERM"),
    "fcntl F_GETFD": ("fcntl", (-1, 1, 0), "EBADF"),
    "fcntl F_SETLK": ("fcntl", (-1, 6, 0), "EBADF"),
    "prctl PR_GET_NO_NEW_PRIVS": ("prctl", (39, 0, 0, 0, 0), "ran"),
    "prctl PR_GET_NAME, bad buffer": ("prctl", (16, 0, 0, 0, 0), "EFAULT"),
}


@pytest.mark.parametrize("role", [r for r in PROFILES if r != "relay"])
def test_ioctl_fcntl_and_prctl_run_only_with_the_commands_on_the_list(role: str) -> None:
    _require_seccomp()
    listed = {label: (call, args[COMMAND_ARG[call]]) for label, (call, args) in
              REFUSED_COMMANDS.items()}  # fmt: skip
    assert not [label for label, (call, cmd) in listed.items() if cmd in allowed.COMMANDS[call]]
    probes = {**REFUSED_COMMANDS, **{k: (c, a) for k, (c, a, _) in ALLOWED_COMMANDS.items()}}
    unfiltered = _probe("none", probes)  # positive control: each runs and fails harmlessly
    assert all(unfiltered[k] not in ("ENOSYS", "ok") for k in probes), unfiltered
    assert unfiltered["ioctl TIOCSTI"] == "EBADF"  # only a filter answers EPERM
    assert unfiltered["prctl PR_SET_DUMPABLE"] == "EINVAL"
    filtered = _probe(role, probes)
    assert {k: filtered[k] for k in REFUSED_COMMANDS} == {k: "ENOSYS" for k in REFUSED_COMMANDS}
    assert {k: filtered[k] for k in ALLOWED_COMMANDS} == {
        k: answer for k, (_, _, answer) in ALLOWED_COMMANDS.items()
    }


def test_every_command_on_the_lists_has_a_reason_and_tty_input_is_on_none() -> None:
    for call, commands in allowed.COMMANDS.items():
        assert call in allowed.RUNTIME, call
        assert all(isinstance(why, str) and ":" in why for why in commands.values()), call
    assert not set(allowed.COMMANDS["ioctl"]) & set(seccomp.IOCTL_DENIED.values())


def test_the_deny_list_still_answers_eperm_under_the_allow_list() -> None:
    # The kernel runs both programs and keeps the most severe answer; two errnos tie and the
    # newest program's wins, so the allow program lets every denied name through to the first.
    _require_seccomp()
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import ctypes, errno, json, os
            from fs_notes.sandbox import seccomp
            libc = ctypes.CDLL(None, use_errno=True)
            seccomp.install("write")
            out = {}
            for name, call in (("chmod", lambda: os.chmod("/", 0o755)),
                               ("msgget", lambda: libc.syscall(68, 1234, 0))):
                ctypes.set_errno(0)
                try:
                    r = call()
                    out[name] = errno.errorcode.get(ctypes.get_errno(), "ok") if r == -1 else "ok"
                except OSError as exc:
                    out[name] = errno.errorcode[exc.errno]
            print(json.dumps(out))
        """)],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"chmod": "EPERM", "msgget": "EPERM"}


def test_every_allowed_call_has_a_reason_and_a_name_the_kernel_knows() -> None:
    _require_seccomp()
    import pyseccomp

    for role in PROFILES:
        table = allowed.allowed(role)
        assert all(isinstance(why, str) and len(why) > 5 for why in table.values()), role
        for name in table:
            number = int(pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name))
            assert number != -1, f"{role}: {name} is no system call libseccomp knows"


def test_the_workers_lists_are_narrower_than_the_servers() -> None:
    server = set(allowed.allowed("server"))
    for role in ("write", "delete"):
        mine = set(allowed.allowed(role))
        # a worker starts nothing, signals nobody, listens nowhere, watches nothing
        assert not mine & {"clone", "clone3", "vfork", "execve", "kill", "tgkill", "wait4",
                           "socket", "connect", "accept4", "listen", "bind", "inotify_init1",
                           "setresuid", "capset", "landlock_restrict_self", "chroot"}  # fmt: skip
        assert mine - server <= {"renameat2"} | set(allowed.WRITE) | set(allowed.DELETE)
    assert "socket" not in allowed.allowed("server", "none")  # stdio, no store: no socket()
    assert "socket" in allowed.allowed("server", "tcp")
    assert {"chroot", "unshare"} <= set(allowed.allowed("monitor-chroot"))
    assert not {"chroot", "unshare"} & (server | set(allowed.allowed("monitor")))
    # the server's monitor starts the workers: the server starts nothing and changes no id
    assert not server & {"vfork", "execve", "setsid", "capset", "setresuid", "setgroups",
                         "arch_prctl", "landlock_restrict_self"}  # fmt: skip
    assert {"clone", "wait4", "kill", "inotify_init1", "accept4"} <= server
    assert set(allowed.WORKER_START) <= set(allowed.allowed("monitor"))
    with pytest.raises(ValueError):
        allowed.allowed("nope")  # type: ignore[arg-type]


RELAYED = """
import os, sys, time
from fs_notes.sandbox.session import behind_relay
behind_relay()
print(os.getpid(), flush=True)
time.sleep(60)
"""


def test_the_relay_holds_no_capability_and_may_only_wait_signal_and_end() -> None:
    _require_seccomp()
    relay = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(RELAYED)],
        stdout=subprocess.PIPE, text=True, cwd=REPO, env=child_env(),
    )  # fmt: skip
    try:
        assert relay.stdout is not None
        server = int(relay.stdout.readline())
        for _ in range(200):  # the relay confines itself just after the fork
            if status_field(relay.pid, "Seccomp") == "2":
                break
            time.sleep(0.02)
        assert Path(f"/proc/{relay.pid}/comm").read_text() == "fs-notes-relay\n"
        assert status_field(relay.pid, "Seccomp") == "2"
        assert status_field(relay.pid, "NoNewPrivs") == "1"
        caps = [status_field(relay.pid, cap) for cap in ("CapEff", "CapPrm", "CapBnd")]
        assert caps == ["0" * 16] * 3
        # positive control: the process below it (not yet confined here) keeps what it had
        assert status_field(server, "CapBnd") == status_field(os.getpid(), "CapBnd")
        relay.send_signal(signal.SIGTERM)  # passed on: the server ends, the relay as it did
        assert relay.wait(timeout=30) == 128 + signal.SIGTERM
        assert not Path(f"/proc/{server}").exists()  # reaped by the relay before it ended
    finally:
        relay.kill()
        relay.wait()
        if relay.stdout is not None:
            relay.stdout.close()
