"""What a compromised process of fs-notes can still reach once confined (issue 26): named UNIX
sockets outside, MPTCP past Landlock's TCP rules, the controlling terminal (TIOCSTI), other
processes' limits (prlimit64), a program of its own (memfd exec, execveat), SysV IPC an outside
process keeps, and the calls a default-allow filter lets through.

Each attack runs in a child confined exactly as the role is (`confine_server` for the server,
with and without a replay store to reach; `worker.prepare` for each worker kind and mode), with
its positive control: the same attack just before confinement, in the same child. Where the
kernel itself refuses the control (a sysctl, a capability a regular user lacks), the test says
which and still requires the filter's EPERM afterwards. Everything the attacks could change
outside is checked from this process."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_sandbox_seccomp import _landlock, _require_seccomp, _run

from fs_notes.sandbox import seccomp

# The x86_64 and aarch64 numbers of every call the list test makes (checked against libseccomp's
# own table below); aarch64 has no uselib.
NUMBERS = {
    "x86_64": {
        "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
        "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
        "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243,
        "mq_notify": 244, "mq_getsetattr": 245, "ptrace": 101, "personality": 135,
        "uselib": 134, "acct": 163, "kexec_load": 246, "add_key": 248, "request_key": 249,
        "keyctl": 250, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
        "io_uring_setup": 425, "memfd_create": 319, "execveat": 322, "prlimit64": 302,
        "socket": 41, "ioprio_set": 251,
    },
    "aarch64": {
        "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193,
        "semctl": 191, "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188,
        "msgctl": 187, "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182,
        "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185, "ptrace": 117,
        "personality": 92, "acct": 89, "kexec_load": 104, "add_key": 217, "request_key": 218,
        "keyctl": 219, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "io_uring_setup": 425, "memfd_create": 279, "execveat": 281, "prlimit64": 261,
        "socket": 198, "ioprio_set": 30,
    },
}  # fmt: skip

CHILD = """
import ctypes, errno, fcntl, json, os, resource, select, socket, struct, sys, termios, tty
L = ctypes.c_long
NR = NUMBERS[os.uname().machine]
IPPROTO_MPTCP, TIOCSTI, TIOCLINUX, AT_EMPTY_PATH = 262, 0x5412, 0x541C, 0x1000
ctx = json.loads(sys.argv[1])

def sc(name, *args):
    def run():
        conv = [a if isinstance(a, bytes) or a is None else L(a) for a in args]
        if libc.syscall(L(NR[name]), *conv) == -1:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    return run

def in_child(fn):
    # run fn in a forked child (an exec must not replace this process): its exit status
    pid = os.fork()
    if pid == 0:
        try:
            fn()
            os._exit(0)
        except OSError as exc:
            os._exit(100 + exc.errno)
        except BaseException:
            os._exit(99)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status >= 100:
        raise OSError(status - 100, os.strerror(status - 100))
    if status != 0:
        raise OSError(0, f"exit {status}")

def created(*args):
    return lambda: socket.socket(*args).close()

def unix_connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(ctx["listener"])
    s.close()

# A pty made here, in raw mode: one byte typed is one byte read.
master, slave = os.openpty()
tty.setraw(slave)

def on_own_terminal(fn):
    # fn in a forked child whose controlling terminal the pty is (as serve's is when started
    # from a shell); a set-up that fails exits 98, not with an errno. Not this process's own
    # session: the view's relay would lead it and get SIGHUP when the pty closes.
    pid = os.fork()
    if pid == 0:
        try:
            try:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            except OSError as exc:  # the filter refuses taking a terminal (allowed.COMMANDS;
                if exc.errno != errno.ENOSYS:  # a monitored root server: setsid too): the
                    raise  # attack goes on with the tty as it is
        except BaseException:
            os._exit(98)
        try:
            fn()
            os._exit(0)
        except OSError as exc:
            os._exit(100 + exc.errno)
        except BaseException:
            os._exit(99)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status >= 100:
        raise OSError(status - 100, os.strerror(status - 100))
    if status != 0:
        raise OSError(0, f"exit {status}")

def typed():  # what TIOCSTI left in the terminal's input queue, drained
    out = b""
    while select.select([slave], [], [], 0.2)[0]:
        out += os.read(slave, 64)
    return out.decode()

TRUE = open("/bin/true", "rb").read()
true_fd = os.open("/bin/true", os.O_RDONLY)

def memfd_exec():
    fd = os.memfd_create("x", 0)
    os.write(fd, TRUE)
    in_child(lambda: os.execv(f"/proc/self/fd/{fd}", ["x"]))

def shm_read():
    shmid = libc.shmget(L(ctx["shm_key"]), L(0), L(0))
    if shmid == -1:
        raise OSError(ctypes.get_errno(), "shmget")
    libc.shmat.restype = ctypes.c_void_p
    addr = libc.shmat(shmid, None, 0)
    ctx["shm_seen"] = ctypes.string_at(addr, len(ctx["shm_text"])).decode()
    libc.shmdt(ctypes.c_void_p(addr))

victim = ctx["victim"]
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

cpus = sorted(os.sched_getaffinity(0))

def reach(soft, nice, cpu_set):
    return {
        "unix_connect": unix_connect,
        "socketpair": lambda: [s.close() for s in socket.socketpair()],
        "tcp": created(socket.AF_INET, socket.SOCK_STREAM),
        "tcp6": created(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP),
        "mptcp": created(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP),
        "udp": created(socket.AF_INET, socket.SOCK_DGRAM),
        "netlink": created(socket.AF_NETLINK, socket.SOCK_RAW, 0),
        "tiocsti": lambda: on_own_terminal(lambda: fcntl.ioctl(slave, TIOCSTI, b"x")),
        "tioclinux": lambda: fcntl.ioctl(slave, TIOCLINUX, b"\\x06"),
        "prlimit_other": lambda: resource.prlimit(victim, resource.RLIMIT_NOFILE, (soft, hard)),
        "prlimit_own_pid": lambda: resource.prlimit(os.getpid(), resource.RLIMIT_NOFILE),
        "prlimit_zero": lambda: resource.prlimit(0, resource.RLIMIT_NOFILE),
        "setrlimit": lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard)),
        "nice_other": lambda: os.setpriority(os.PRIO_PROCESS, victim, nice - 5),
        "nice_group": lambda: os.setpriority(os.PRIO_PGRP, victim, nice),  # its own group
        "nice_self": lambda: os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0)),
        "affinity_other": lambda: os.sched_setaffinity(victim, cpu_set),
        "affinity_self": lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)),
        "ioprio_other": sc("ioprio_set", 1, victim, (2 << 13) | 7),  # best effort, lowest
        "memfd_exec": memfd_exec,
        "execveat": lambda: in_child(sc("execveat", true_fd, b"", None, None, AT_EMPTY_PATH)),
        "shm_read": shm_read,
        "personality_query": sc("personality", 0xFFFFFFFF),
    }

def run_all(soft, nice, cpu_set):
    out = {name: attempt(fn) for name, fn in reach(soft, nice, cpu_set).items()}
    out["typed"] = typed()
    out["shm_seen"] = ctx.pop("shm_seen", None)
    return out

control = run_all(200, 10, cpus[:1])
keep = (master, slave, true_fd)
CONFINE
on_purpose()
after = run_all(100, 19, cpus)
print(json.dumps({"control": control, "after": after, "seccomp": seccomp_json}))
"""

SERVER = """
from fs_notes.policy import Policy
from fs_notes.sandbox.selfconfine import confine_server
done = confine_server(Policy.for_single_workspace(ctx["ws"], "me", token_sha256=None),
                      replay_db=None, connect_ports=tuple(ctx["connect_ports"]),
                      connect_names=ctx["connect_names"])
seccomp_json = done.seccomp
"""

WORKER = """
import argparse
from fs_notes.sandbox import worker
parent, child = socket.socketpair()
fd = os.open(ctx["ws"], os.O_RDONLY | os.O_DIRECTORY)
args = argparse.Namespace(kind=ctx["kind"], mode=ctx["mode"], workspace_fd=fd,
                          channel_fd=child.fileno(), symlinks="deny")
state, hello = worker.prepare(args, (parent.fileno(), *keep))
seccomp_json = hello["confinement"]["seccomp"]
"""

# "server+store": it reaches a replay store by address; "server+named-store": by host name.
ROLES = ["server", "server+store", "server+named-store", "delete/landlock", "delete/chroot",
         "write/landlock", "write/chroot"]  # fmt: skip


def _child(role: str) -> str:
    body = SERVER if role.startswith("server") else WORKER
    code = textwrap.dedent(CHILD).replace("CONFINE", textwrap.dedent(body))
    return f"NUMBERS = {NUMBERS!r}\n" + code


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """What lives outside: a listening named UNIX socket, a victim process, a SysV segment."""
    import socket

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "note.md").write_text("# Note\n")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = str(tmp_path / "outside.sock")  # as the session bus or ssh-agent listen
    listener.bind(path)
    listener.listen(8)
    victim = subprocess.Popen(  # its own process group, which only it is in
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    libc = ctypes.CDLL(None, use_errno=True)
    key, text = 0x26000000 + os.getpid() % 0xFFFF, "the outside segment"
    # IPC_CREAT | IPC_EXCL: a new segment, ours, never another's of the same key
    shmid = libc.shmget(ctypes.c_int(key), ctypes.c_size_t(4096), ctypes.c_int(0o3000 | 0o600))
    assert shmid != -1, os.strerror(ctypes.get_errno())
    libc.shmat.restype = ctypes.c_void_p
    addr = libc.shmat(shmid, None, 0)
    ctypes.memmove(addr, text.encode(), len(text))
    libc.shmdt(ctypes.c_void_p(addr))
    try:
        yield {"ws": str(ws), "listener": path, "victim": victim.pid, "shm_key": key,
               "shm_text": text}  # fmt: skip
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID
        victim.kill()
        victim.wait()
        listener.close()


def _soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files line")


def _nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])


def _kernel_lets_tiocsti() -> bool:
    """dev.tty.legacy_tiocsti: 0 refuses TIOCSTI to a process without CAP_SYS_ADMIN (EIO)."""
    try:
        return Path("/proc/sys/dev/tty/legacy_tiocsti").read_text().strip() != "0"
    except FileNotFoundError:
        return True  # older kernels have no switch: always allowed on the own terminal


def _mptcp() -> bool:
    try:
        return Path("/proc/sys/net/mptcp/enabled").read_text().strip() == "1"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("role", ROLES)
def test_a_confined_process_reaches_no_socket_terminal_process_program_or_segment_outside(
    outside: dict[str, Any], role: str
) -> None:
    kind, _, mode = role.partition("/")
    kind = "server" if kind.startswith("server") else kind
    landlock = _landlock()
    if mode == "landlock" and not landlock:
        with pytest.raises(AssertionError, match="LandlockUnavailable"):  # refuses: fail closed
            _run(_child(role), _json({**outside, "kind": kind, "mode": mode}))
        return
    _require_seccomp()
    store, named = role in ("server+store", "server+named-store"), role == "server+named-store"
    ctx = {**outside, "kind": kind, "mode": mode, "connect_ports": [6379] if store else [],
           "connect_names": named}  # fmt: skip
    soft_before = _soft_nofile(outside["victim"])
    result = _run(_child(role), _json(ctx))
    control, after = result["control"], result["after"]
    network = "tcp+dns" if named else "tcp" if store else "none"
    if kind == "server":
        assert result["seccomp"]["profile"] == "server"
        assert result["seccomp"]["network"] == network
    else:
        assert result["seccomp"]["profile"] == kind and result["seccomp"]["network"] == "none"

    # Unconfined, every attack works (the kernel's own refusals named where they apply).
    works = ("unix_connect", "socketpair", "tcp", "tcp6", "udp", "netlink", "prlimit_other",
             "prlimit_own_pid", "prlimit_zero", "setrlimit", "memfd_exec", "execveat",
             "shm_read", "personality_query", "nice_other", "nice_group", "nice_self",
             "affinity_other", "affinity_self", "ioprio_other")  # fmt: skip
    assert {k: control[k] for k in works} == dict.fromkeys(works, "ok"), control
    assert control["shm_seen"] == outside["shm_text"]
    assert control["mptcp"] == ("ok" if _mptcp() else "EPROTONOSUPPORT")
    # TIOCSTI on the own controlling terminal: the byte is typed; with legacy_tiocsti = 0 the
    # kernel answers EIO to a process without CAP_SYS_ADMIN (a regular user), never EPERM.
    if _kernel_lets_tiocsti() or os.geteuid() == 0:
        assert (control["tiocsti"], control["typed"]) == ("ok", "x")
    else:
        assert (control["tiocsti"], control["typed"]) == ("EIO", "")
    assert control["tioclinux"] == "ENOTTY"  # a pty is no console: the kernel says so, not EPERM

    # Confined: seccomp's EPERM, nothing typed, nothing read, the victim's limit unchanged.
    refused = ("unix_connect", "mptcp", "netlink", "tiocsti", "tioclinux", "prlimit_other",
               "memfd_exec", "execveat", "shm_read", "nice_other", "nice_group",
               "affinity_other", "ioprio_other")  # fmt: skip
    # A worker cannot even fork the child these two attack from (its allow-list has no clone:
    # sandbox/allowed.py): ENOSYS, before the attack's own call could be tried.
    forked = () if kind == "server" else ("tiocsti", "execveat")
    expected = {k: "ENOSYS" if k in forked else "EPERM" for k in refused}
    assert {k: after[k] for k in refused} == expected, after
    assert after["typed"] == "" and after["shm_seen"] is None
    victim = outside["victim"]
    assert _soft_nofile(victim) == 200 != soft_before  # the control's, not 100
    assert _nice(victim) == 10  # the control's, not 19
    assert os.sched_getaffinity(victim) == {min(os.sched_getaffinity(0))}  # the control's
    # What the process still needs (glibc's setrlimit passes pid 0; asyncio, the workers'
    # channels: socketpair) and, for the store's server only, TCP over IPv4 and IPv6 (and UDP
    # for the C library's DNS when the store has a host name).
    kept = ("socketpair", "prlimit_own_pid", "prlimit_zero", "setrlimit", "personality_query",
            "nice_self", "affinity_self")  # fmt: skip
    assert {k: after[k] for k in kept} == dict.fromkeys(kept, "ok"), after
    tcp = "ok" if store else "EPERM"
    udp = "ok" if named else "EPERM"
    assert (after["tcp"], after["tcp6"], after["udp"]) == (tcp, tcp, udp)


def _json(ctx: dict[str, Any]) -> str:
    import json

    return json.dumps(ctx)


LISTED = """
import ctypes, json, os, sys
ctx = json.loads(sys.argv[1])
L = ctypes.c_long
NR = NUMBERS[os.uname().machine]

def call(name, *args):
    conv = [a if isinstance(a, bytes) or a is None else L(a) for a in args]
    if libc.syscall(L(NR[name]), *conv) == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))

NONE = 0x7FFFFF00  # an IPC key, pid or id nothing uses
MISSING = b"/nonexistent/fs-notes"
calls = {
    # each harmless unconfined: a key that does not exist, an id or fd that is invalid
    "shmget": lambda: call("shmget", NONE, 0, 0), "shmat": lambda: call("shmat", -1, 0, 0),
    "shmctl": lambda: call("shmctl", -1, 2, 0), "shmdt": lambda: call("shmdt", 0),
    "semget": lambda: call("semget", NONE, 0, 0), "semop": lambda: call("semop", -1, 0, 0),
    "semctl": lambda: call("semctl", -1, 0, 2, 0),
    "semtimedop": lambda: call("semtimedop", -1, 0, 0, 0),
    "msgget": lambda: call("msgget", NONE, 0), "msgsnd": lambda: call("msgsnd", -1, 0, 0, 0),
    "msgrcv": lambda: call("msgrcv", -1, 0, 0, 0, 0), "msgctl": lambda: call("msgctl", -1, 2, 0),
    "mq_open": lambda: call("mq_open", b"fs-notes-none", 0, 0, None),
    "mq_unlink": lambda: call("mq_unlink", b"fs-notes-none"),
    "mq_timedsend": lambda: call("mq_timedsend", -1, b"x", 1, 0, None),
    "mq_timedreceive": lambda: call("mq_timedreceive", -1, None, 0, None, None),
    "mq_notify": lambda: call("mq_notify", -1, None),
    "mq_getsetattr": lambda: call("mq_getsetattr", -1, None, None),
    "ptrace": lambda: call("ptrace", 12, NONE, 0, 0),  # PTRACE_GETREGS of no process
    "personality": lambda: call("personality", 0),  # a change (to PER_LINUX, as it is)
    "uselib": lambda: call("uselib", MISSING),
    "acct": lambda: call("acct", MISSING),
    "kexec_load": lambda: call("kexec_load", 0, 0, None, 0xDEAD0000),
    "add_key": lambda: call("add_key", b"fs-notes-none", b"x", None, 0, -2),
    "request_key": lambda: call("request_key", b"fs-notes-none", b"x", None, 0),
    "keyctl": lambda: call("keyctl", 0, -1, 0),  # KEYCTL_GET_KEYRING_ID of the thread's
    "bpf": lambda: call("bpf", 0x7FFF, None, 0),
    "perf_event_open": lambda: call("perf_event_open", None, 0, -1, -1, 0),
    "userfaultfd": lambda: call("userfaultfd", 0xDEAD),
    "io_uring_setup": lambda: call("io_uring_setup", 0, None),
    "memfd_create": lambda: call("memfd_create", b"x", 0xDEAD0000),
    "execveat": lambda: call("execveat", -1, b"", None, None, 0x1000),
    "socket_unix": lambda: call("socket", 1, 1, 0),
}
calls = {k: v for k, v in calls.items() if k.partition("_unix")[0] in NR}
control = {name: attempt(fn) for name, fn in calls.items()}
CONFINE
on_purpose()
after = {name: attempt(fn) for name, fn in calls.items()}
print(json.dumps({"control": control, "after": after}))
"""

# What the kernel answers unconfined to a process without the capability or sysctl a call needs
# (a regular user here; root's control reaches the argument checks): EPERM before seccomp, so
# for these the positive control is root's.
_KERNEL_EPERM = {"acct", "kexec_load", "bpf", "perf_event_open", "userfaultfd"}


@pytest.mark.parametrize("role", ["server", "delete/chroot", "write/chroot"])
def test_each_role_refuses_the_calls_a_default_allow_filter_lets_through(
    outside: dict[str, Any], role: str
) -> None:
    _landlock()  # the hidden-Landlock pass: the server is the chroot variant then
    _require_seccomp()
    kind, _, mode = role.partition("/")
    body = SERVER if kind == "server" else WORKER.replace("*keep", "")
    code = textwrap.dedent(LISTED).replace("CONFINE", textwrap.dedent(body))
    ctx = {**outside, "kind": kind, "mode": mode, "connect_ports": [], "connect_names": False}
    result = _run(f"NUMBERS = {NUMBERS!r}\n" + code, _json(ctx))
    control, after = result["control"], result["after"]
    assert len(after) >= 10
    assert set(after.values()) == {"EPERM"}, after
    for name, outcome in control.items():
        if name in _KERNEL_EPERM and os.geteuid() != 0:
            continue  # the kernel refuses it unconfined too (said above)
        assert outcome != "EPERM", (name, control)  # the call reached the kernel unconfined
    assert control["personality"] == "ok" and control["socket_unix"] == "ok"


def test_the_syscall_numbers_of_the_tests_are_libseccomps() -> None:
    _require_seccomp()
    import pyseccomp

    arch = {"x86_64": pyseccomp.Arch.X86_64, "aarch64": pyseccomp.Arch.AARCH64}
    for machine, numbers in NUMBERS.items():
        for name, number in numbers.items():
            assert pyseccomp.resolve_syscall(arch[machine], name) == number, (machine, name)
    assert pyseccomp.resolve_syscall(pyseccomp.Arch.AARCH64, "uselib") < 0  # none there


def test_every_listed_call_is_refused_by_name_in_every_role() -> None:
    by_argument = {r.syscall for r in seccomp.argument_rules("tcp", 1)}
    listed = set(NUMBERS["x86_64"]) - by_argument
    for profile in seccomp.PROFILES:
        denied = seccomp.denied_for(profile)
        missing = listed - set(denied) - ({"execve"} if profile.startswith("monitor") else set())
        assert not missing, (profile, missing)
        assert "socket" in denied  # the server that reaches no store creates none
    assert "socket" not in seccomp.denied_for("server", "tcp")  # refused by its arguments
    with pytest.raises(ValueError, match="creates no socket"):
        seccomp.denied_for("delete", "tcp")


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("allowed", [set(), {0}, {1, 2}, {0, 6}, {255}, {3, 200}, {0, 5, 15}])
def test_the_refused_blocks_match_exactly_the_values_not_allowed(
    bits: int, allowed: set[int]
) -> None:
    blocks = seccomp.refused_blocks(frozenset(allowed), bits)
    for x in range(1 << bits):
        assert any(x & mask == value for mask, value in blocks) is (x not in allowed), x


def test_the_argument_rules_say_why_and_allow_only_the_process_itself() -> None:
    rules = seccomp.argument_rules("tcp+dns", 4242)
    assert all(r.why for r in rules)
    by = {(r.syscall, r.arg): r.allowed for r in rules}
    assert by[("prlimit64", 0)] == {0, 4242}
    assert by[("personality", 0)] == {0xFFFFFFFF}
    assert by[("socket", 0)] == {2, 10} and by[("socket", 2)] == {0, 6}  # no 262 (MPTCP)
    assert by[("socket", 1)] == {1, 2}  # DNS over UDP, for a store named by host name
    for name in ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr",
                 "migrate_pages", "move_pages"):  # fmt: skip
        assert by[(name, 0)] == {0, 4242}
    # one process, and only the own: not a process group or a user's processes (PRIO_USER 2)
    assert by[("setpriority", 0)] == {0} and by[("setpriority", 1)] == {0, 4242}
    assert by[("ioprio_set", 0)] == {1} and by[("ioprio_set", 1)] == {0, 4242}
    assert "socket" not in {r.syscall for r in seccomp.argument_rules("none", 1)}
    assert {seccomp.IOCTL_DENIED["TIOCSTI"], seccomp.IOCTL_DENIED["TIOCLINUX"]} == {0x5412, 0x541C}
