"""The system-call filter (seccomp) of the server and of every worker: what Landlock leaves open.

Landlock mediates path access only. It does not mediate a file's mode, owner, times or extended
attributes, hard or symbolic links' existence checks, mounts, namespaces, ptrace or the kernel's
keyrings, and capabilities are independent of it: a confined process running as uid 0 could still
`chmod("/etc/shadow", 0o644)` (its owner is uid 0 too) or `ptrace` a neighbour. This module closes
those with one seccomp filter per process, built with libseccomp (through the `pyseccomp` ctypes
binding, API-compatible with libseccomp's own Python bindings, which are not on PyPI).

A filter is two programs, loaded together by `install`: the first refuses by name and by argument
what is written below (`DENIED`, `argument_rules`, ...), with EPERM; the second is the role's
allow-list (sandbox/allowed.py), refusing everything else with ENOSYS and leaving a kernel audit
record of each such refusal. The kernel runs both on every call and keeps the more severe
answer; the second lets every name the first decides through, so the first's EPERM stands.

What it guarantees, once `install(profile)` returns:
  * Every system call not on `allowed(profile)` (sandbox/allowed.py) and not decided below fails
    with ENOSYS, and the kernel logs it (type=1326; the process is named `name_of(profile)`).
  * Every system call in `DENIED` (below, with why) fails with EPERM in this process and in
    everything it starts later (filters are inherited across fork and exec and cannot be removed);
    `clone3` fails with ENOSYS, so the C library falls back to `clone`, whose namespace flags are
    then refused. A call from another architecture's ABI (i386 `int 0x80` on x86_64) kills the
    process (libseccomp's default for a foreign architecture), so numbers cannot be swapped.
  * Mode and owner changes are refused in their fd forms too (`fchmod`, `fchown`): a process that
    can open a file for reading (the Python library, under Landlock) could otherwise change it.
    An update therefore creates its temp file with the note's mode (the write worker runs with
    umask 0) and cannot give it another owner: an updated note belongs to the worker's user, as a
    file saved by any editor does.
  * Some calls are refused unless one argument has one of a few values (`argument_rules`, the
    values as the kernel reads them: an int argument's low 32 bits): `prlimit64` only on pid 0
    or the process's own pid (no outside process's limits: RLIMIT_CPU {0, 0} kills it), and
    likewise `setpriority`, `ioprio_set` (one process only, not a group or user), the
    `sched_set*` calls, `migrate_pages` and `move_pages`;
    `personality` only the query; `ioctl` never TIOCSTI or TIOCLINUX (`IOCTL_DENIED`: no bytes
    pushed into a controlling terminal's input).
  * No process of fs-notes creates a socket after start-up but the server that reaches the
    replay store: AF_INET or AF_INET6, SOCK_STREAM, protocol 0 or IPPROTO_TCP (Landlock's TCP
    rules cover that; not MPTCP, SCTP, UDP or AF_UNIX, which reaches every named socket outside),
    and SOCK_DGRAM with protocol 0 when the store is named by host name (the C library's DNS).
    `socketpair` stays everywhere (the workers' channels, asyncio's wake-up pair).
  * Nothing new runs: no `memfd_create` (an ELF in a memfd runs through /proc/self/fd/N, which
    Landlock's execute right does not see), no `execveat`, no SysV or POSIX IPC with processes
    outside (there is no IPC namespace), no `uselib`.
  * The profiles add what each process must still not do: workers may not `execve` or create
    sockets at all (they serve one socketpair and never start anything). The server may start
    workers (execve, and in chroot mode `chroot`/`unshare`, which its children need before their
    own filter), and nothing else on the list.
  * `no_new_privs` is set first (libseccomp does it; required to load a filter without
    CAP_SYS_ADMIN), and `status()` reads the kernel's view (prctl PR_GET_SECCOMP: 2).

What it does NOT guarantee (decided, not overlooked):
  * Anything about *which paths* a call touches: seccomp sees pointers, not strings. Opening,
    creating and removing beneath a workspace is Landlock's business (sandbox/confine.py,
    sandbox/selfconfine.py) and the filesystem layer's (fs_notes/fs/).
  * `stat` of an outside path: the private view hides what exists outside (sandbox/view.py,
    as root), the chroot workers' chroot does for them; elsewhere existence can leak.
  * The deny-list alone would be a default of ALLOW; what makes it default-deny is the second
    program: a call nobody listed in sandbox/allowed.py (a new kernel's new one too) is ENOSYS.
  * The monitor's `execve` stays (it starts the workers by fork and exec of the interpreter,
    after the server's confinement); seccomp cannot read the path, so what it may run is
    Landlock's business (the interpreter and its ELF loader only); without Landlock
    ("monitor-chroot") it can still run any file it can read. The server and the workers refuse
    execve.
  * The replay store's server may still send UDP where the store is named by host name (DNS):
    Landlock does not mediate UDP, and a server that reaches the store keeps the host's network
    (only a server with no store and no HTTP gets an empty network namespace, as root).
  * An own-pid prlimit64 is allowed by the pid the process had when the filter was loaded; a
    child it forks later may only name pid 0 (glibc's setrlimit and getrlimit do).
  * Name-service clients that talk over AF_UNIX (nscd, systemd's nss-resolve and userdb) get
    EPERM after start-up and the C library falls back to its files and DNS.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from fs_notes.sandbox.allowed import COMMAND_ARG, COMMANDS, allowed
from fs_notes.sandbox.kinds import NETWORKS, PROFILES, Network, Profile

PR_GET_SECCOMP: Final = 21
PR_SET_NAME: Final = 15

# Syscalls newer than this host's libseccomp may know, by number (the same on every architecture
# with the unified table: x86_64, aarch64, riscv64).
_BY_NUMBER: Final = {
    "fchmodat2": 452,
    "setxattrat": 463,
    "removexattrat": 466,
    "open_tree_attr": 467,
    "file_setattr": 469,
}

#: Denied in every process of fs-notes, with the reason (none of them is needed after start-up).
DENIED: Final[dict[str, str]] = {
    # metadata Landlock does not mediate
    **{n: "mode" for n in ("chmod", "fchmod", "fchmodat", "fchmodat2")},
    **{n: "owner" for n in ("chown", "fchown", "lchown", "fchownat")},
    **{n: "times" for n in ("utime", "utimes", "utimensat", "futimesat")},
    **{
        n: "extended attributes"
        for n in (
            "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
            "fremovexattr", "setxattrat", "removexattrat", "file_setattr",
        )
    },
    **{
        n: "links and nodes"
        for n in ("link", "linkat", "symlink", "symlinkat", "mknod", "mknodat")
    },
    # mounts and namespaces
    **{
        n: "mounts"
        for n in (
            "mount", "umount2", "pivot_root", "move_mount", "open_tree", "open_tree_attr",
            "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
        )
    },
    "setns": "namespaces",
    # other processes
    **{n: "other processes" for n in ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp")},
    "pidfd_getfd": "other processes' fds",
    # the kernel itself
    **{n: "kernel keyrings" for n in ("add_key", "request_key", "keyctl")},
    "bpf": "bpf",
    "perf_event_open": "perf",
    "userfaultfd": "userfaultfd",
    **{n: "kernel modules" for n in ("init_module", "finit_module", "delete_module")},
    **{n: "kexec" for n in ("kexec_load", "kexec_file_load", "reboot")},
    **{
        n: "swap, accounting, quotas"
        for n in ("swapon", "swapoff", "acct", "quotactl", "quotactl_fd")
    },
    **{n: "raw I/O" for n in ("iopl", "ioperm")},
    **{n: "the clock" for n in ("settimeofday", "clock_settime", "clock_adjtime", "adjtimex")},
    # file handles resolve without any path (and so without Landlock's path checks)
    "open_by_handle_at": "file handles",
    # io_uring runs linkat, symlinkat and setxattr without these syscalls
    **{n: "io_uring" for n in ("io_uring_setup", "io_uring_enter", "io_uring_register")},
    # there is no IPC namespace (root or not): a SysV segment, semaphore set or queue that an
    # outside process keeps is found by its key and read or changed (mode 0600 of the same
    # user; any, for a root server); POSIX queues are the same through mq_open's name
    **{
        n: "SysV IPC"
        for n in (
            "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl",
            "msgget", "msgsnd", "msgrcv", "msgctl",
        )
    },
    **{
        n: "POSIX message queues"
        for n in (
            "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
            "mq_getsetattr",
        )
    },
    # an ELF written to a memfd runs through /proc/self/fd/N (Landlock's execute right does not
    # reach a file without a path), and execveat runs an fd: nothing new may run (the server's
    # execve stays for its workers, on the interpreter path Landlock allows, below)
    "memfd_create": "running what it wrote",
    "execveat": "running what it wrote",
    "uselib": "loading a library by path (old a.out)",
}  # fmt: skip

#: What each profile denies besides `DENIED`.
EXTRA_DENIED: Final[dict[Profile, dict[str, str]]] = {
    "server": {
        "chroot": "chroot", "unshare": "namespaces",
        "execve": "starting programs (its monitor starts the workers)",
    },
    "delete": {
        "chroot": "chroot", "unshare": "namespaces",
        "execve": "starting programs", "execveat": "starting programs", "socket": "sockets",
    },
    "write": {
        "chroot": "chroot", "unshare": "namespaces",
        "execve": "starting programs", "execveat": "starting programs", "socket": "sockets",
    },
    "relay": {
        "chroot": "chroot", "unshare": "namespaces",
        "execve": "starting programs", "execveat": "starting programs", "socket": "sockets",
    },
    "monitor": {"chroot": "chroot", "unshare": "namespaces", "socket": "sockets"},
    "monitor-chroot": {"socket": "sockets"},
}  # fmt: skip

CLONE_NAMESPACES: Final = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWTIME": 0x00000080,
}
# Inode flags (chattr, immutable included), project quotas, inode versions, verity, encryption
# policies, through ioctl on an fd; the 32-bit-ABI encodings too; and the terminal's: a server
# started from a terminal keeps it on fds 0-2, and TIOCSTI pushes bytes into its input queue (the
# operator's shell reads them as typed: `echo ... > OUTSIDE`), TIOCLINUX's TIOCL_PASTESEL pastes
# the console's selection the same way. The kernel truncates the command to 32 bits, so only
# those are compared (a command with high bits set is the same). The numbers are the same on
# x86_64 and aarch64 (asm-generic).
IOCTL_DENIED: Final = {
    "FS_IOC_SETFLAGS": 0x40086602,
    "FS_IOC32_SETFLAGS": 0x40046602,
    "FS_IOC_SETVERSION": 0x40087602,
    "FS_IOC32_SETVERSION": 0x40047602,
    "FS_IOC_FSSETXATTR": 0x401C5820,
    "FS_IOC_ENABLE_VERITY": 0x40806685,
    "FS_IOC_SET_ENCRYPTION_POLICY": 0x800C6613,
    "TIOCSTI": 0x5412,
    "TIOCLINUX": 0x541C,
}

AF_INET: Final = 2
AF_INET6: Final = 10
SOCK_STREAM: Final = 1
SOCK_DGRAM: Final = 2
IPPROTO_TCP: Final = 6
PERSONALITY_QUERY: Final = 0xFFFFFFFF
PRIO_PROCESS: Final = 0
IOPRIO_WHO_PROCESS: Final = 1



@dataclass(frozen=True)
class ArgumentRule:
    """`syscall` is refused (EPERM) unless argument `arg`, as the kernel reads it (its low `bits`
    bits: an int argument is truncated to 32), is one of `allowed`."""

    syscall: str
    arg: int
    allowed: frozenset[int]
    bits: int
    why: str


def argument_rules(network: Network, pid: int) -> tuple[ArgumentRule, ...]:
    """The calls allowed for one use only, in every profile; `pid` is the process's own."""
    rules = [
        # prlimit64 on another process changes its limits: RLIMIT_CPU {0, 0} makes the kernel
        # kill it (the user's MCP client, editor, shell), past Landlock's signal scope; glibc's
        # setrlimit and getrlimit pass 0, resource.prlimit(os.getpid()) the own pid.
        ArgumentRule("prlimit64", 0, frozenset({0, pid}), 32, "other processes' limits"),
        # the same for the scheduler: nice, affinity, policy and I/O priority of another process
        # (or of every process of a group or user: setpriority's and ioprio_set's `which`), and
        # moving its pages, starve or slow what runs beside fs-notes; nothing of ours sets them.
        ArgumentRule("setpriority", 0, frozenset({PRIO_PROCESS}), 32, "other processes' nice"),
        ArgumentRule("setpriority", 1, frozenset({0, pid}), 32, "other processes' nice"),
        ArgumentRule("ioprio_set", 0, frozenset({IOPRIO_WHO_PROCESS}), 32, "others' I/O"),
        ArgumentRule("ioprio_set", 1, frozenset({0, pid}), 32, "other processes' I/O"),
        *(
            ArgumentRule(name, 0, frozenset({0, pid}), 32, "other processes' scheduling")
            for name in (
                "sched_setaffinity",
                "sched_setscheduler",
                "sched_setparam",
                "sched_setattr",
                "migrate_pages",
                "move_pages",
            )
        ),
        # personality(0xffffffff) only reads it; a change (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE)
        # weakens what the process maps from then on, and what it starts.
        ArgumentRule("personality", 0, frozenset({PERSONALITY_QUERY}), 32, "personality"),
    ]
    if network != "none":
        # AF_UNIX reaches every named socket it can name (the session D-Bus, ssh-agent,
        # docker.sock, the display: Landlock ABI 7 scopes only abstract ones), AF_NETLINK,
        # AF_PACKET, AF_VSOCK ... the kernel; only the IP families Landlock's TCP rules cover.
        rules.append(
            ArgumentRule("socket", 0, frozenset({AF_INET, AF_INET6}), 32, "other families")
        )
        # SOCK_SEQPACKET with protocol 0 is SCTP, SOCK_RAW raw IP: neither is under Landlock's
        # TCP rules (the type's low four bits; SOCK_NONBLOCK and SOCK_CLOEXEC are above).
        types = {SOCK_STREAM, SOCK_DGRAM} if network == "tcp+dns" else {SOCK_STREAM}
        rules.append(ArgumentRule("socket", 1, frozenset(types), 4, "socket types but TCP's"))
        # IPPROTO_MPTCP (262) connects to any port: Landlock's TCP rules do not cover MPTCP,
        # which falls back to plain TCP; protocol 0 is TCP for SOCK_STREAM, UDP for SOCK_DGRAM.
        rules.append(
            ArgumentRule("socket", 2, frozenset({0, IPPROTO_TCP}), 32, "protocols but TCP")
        )
    return tuple(rules)


def refused_blocks(allowed: frozenset[int], bits: int) -> list[tuple[int, int]]:
    """(mask, value) pairs whose `x & mask == value` holds exactly for the `bits`-bit values x
    not in `allowed` (aligned power-of-two blocks covering the gaps): libseccomp 2.5 refuses two
    comparisons of one argument in a rule, so "neither a nor b" is written as these."""
    full = (1 << bits) - 1
    out: list[tuple[int, int]] = []
    edges = sorted(v for v in allowed if 0 <= v <= full)
    low = 0
    for high in [*edges, full + 1]:  # the gap [low, high)
        while low < high:
            size = low & -low if low else 1 << bits
            while low + size > high:
                size >>= 1
            out.append((full & ~(size - 1), low))
            low += size
        low = high + 1
    return out


class SeccompUnavailable(Exception):
    """This host cannot load the filter (no libseccomp, no seccomp in the kernel)."""


@dataclass(frozen=True)
class Installed:
    profile: Profile
    denied: int  # system calls refused by name (the clone flags and ioctls not counted)
    unknown: tuple[str, ...]  # names neither libseccomp nor `_BY_NUMBER` knows (not filtered)
    network: Network = "none"  # what socket() may still create (`Network`)
    absent: tuple[str, ...] = ()  # names this architecture does not have (nothing to refuse)
    allowed: int = 0  # calls the second program lets through (everything else: ENOSYS)

    def to_json(self) -> dict[str, object]:
        return {
            "profile": self.profile,
            "denied": self.denied,
            "unknown": list(self.unknown),
            "network": self.network,
            "absent": list(self.absent),
            "allowed": self.allowed,
        }


def denied_for(profile: Profile, network: Network = "none") -> dict[str, str]:
    """Every system call `profile` refuses by name, with the reason (with `network` "none",
    socket() too; the calls refused by argument are `argument_rules`)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown seccomp profile {profile!r}")
    if network not in NETWORKS:
        raise ValueError(f"unknown seccomp network {network!r}")
    if network != "none" and profile != "server":
        raise ValueError(f"a {profile} worker creates no socket")
    out = dict(DENIED)
    out.update(EXTRA_DENIED[profile])
    if profile == "monitor-chroot":
        out.pop("chroot", None)
        out.pop("unshare", None)
    if network == "none":
        out.setdefault("socket", "sockets (nothing creates one after start-up)")
    return out


def _library() -> ModuleType:
    try:
        import pyseccomp
    except (ImportError, OSError) as exc:  # pyseccomp loads libseccomp.so.2 when imported
        raise SeccompUnavailable(f"libseccomp cannot be loaded: {exc}") from None
    module: ModuleType = pyseccomp
    return module


def available() -> str | None:
    """Why no filter can be loaded here (None: it can)."""
    try:
        _library()
    except SeccompUnavailable as exc:
        return str(exc)
    return None


def _number(sc: ModuleType, name: str) -> int:
    """The native number of `name`: -2 and below if this architecture has no such call, -1 if
    neither libseccomp nor `_BY_NUMBER` knows it."""
    number = int(sc.resolve_syscall(sc.Arch.NATIVE, name))
    if number == -1:
        number = _BY_NUMBER.get(name, -1)
    return number


def _deny_program(
    sc: ModuleType, deny: dict[str, str], network: Network
) -> tuple[Any, int, list[str], list[str]]:
    """The first program: DENIED and the profile's own refusals by name, the argument rules."""
    flt = sc.SyscallFilter(defaction=sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    count, unknown, absent = 0, [], []
    for name in sorted(deny):
        number = _number(sc, name)
        if number < -1:
            absent.append(name)
        elif number < 0:
            unknown.append(name)
        else:
            flt.add_rule(eperm, number)
            count += 1
    for flag in CLONE_NAMESPACES.values():
        flt.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for request in IOCTL_DENIED.values():
        flt.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    for rule in argument_rules(network, os.getpid()):
        if rule.syscall in deny:
            continue  # refused whatever its arguments
        for mask, value in refused_blocks(rule.allowed, rule.bits):
            flt.add_rule(eperm, rule.syscall, sc.Arg(rule.arg, sc.MASKED_EQ, mask, value))
    return flt, count, unknown, absent


def _allow_program(sc: ModuleType, allow: Iterable[str]) -> tuple[Any, int]:
    """The second program: ENOSYS, logged by the kernel (an audit record), for every call not in
    `allow`, and for `ioctl`, `fcntl` and `prctl` with a command not in `allowed.COMMANDS`. The
    kernel runs both programs and keeps the first program's EPERM over this one's ALLOW, so
    every name the first decides is allowed here (and every ioctl it refuses: of two ERRNO
    answers the newer program's would stand, and TIOCSTI is an EPERM)."""
    flt = sc.SyscallFilter(defaction=sc.ERRNO(errno.ENOSYS))
    flt.set_attr(sc.Attr.CTL_LOG, 1)
    count = 0
    for name in sorted(set(allow)):
        number = _number(sc, name)
        if number < 0:
            continue
        count += 1
        if name not in COMMANDS:
            flt.add_rule(sc.ALLOW, number)
            continue
        values = set(COMMANDS[name])
        if name == "ioctl":
            values |= set(IOCTL_DENIED.values())
        arg = COMMAND_ARG[name]
        for value in sorted(values):
            flt.add_rule(sc.ALLOW, number, sc.Arg(arg, sc.MASKED_EQ, 0xFFFFFFFF, value))
    return flt, count


def decided_by_name(profile: Profile, network: Network = "none") -> frozenset[str]:
    """Every call the second program lets through to the first: the role's allow-list, the calls
    the first refuses by name, and those it allows for one use only (`argument_rules`). Not
    clone: the first checks clone's flags, but only a role whose list has it may clone at all."""
    rules = {rule.syscall for rule in argument_rules(network, 0)}
    return frozenset(allowed(profile, network)) | frozenset(denied_for(profile, network)) | rules


def install(profile: Profile, network: Network = "none", *, name: str | None = None) -> Installed:
    """Load the filter of `profile` into this process (irreversible); `network`: what socket()
    may still create (servers only). SeccompUnavailable or OSError if it cannot be loaded: the
    caller then refuses to go on (fail closed). The process's name becomes `name` (at most 15
    bytes; by default `name_of(profile)`), which the kernel's audit records of refused calls
    carry (comm=)."""
    sc = _library()
    deny = denied_for(profile, network)
    first, count, unknown, absent = _deny_program(sc, deny, network)
    second, allowed_count = _allow_program(sc, decided_by_name(profile, network))
    from fs_notes.sandbox.process import prctl

    comm = ctypes.create_string_buffer((name or name_of(profile)).encode()[:15])
    prctl(PR_SET_NAME, ctypes.addressof(comm))
    first.load()
    second.load()
    return Installed(profile, count, tuple(unknown), network, tuple(absent), allowed_count)


def name_of(profile: Profile) -> str:
    """The process name (at most 15 bytes) a filter of `profile` gives its process."""
    return f"fs-notes-{profile}"[:15]


def status() -> int:
    """The kernel's seccomp mode of this thread, from prctl(PR_GET_SECCOMP) (no file to read,
    so it works after confinement): 0 none, 2 filter (in strict mode, 1, the call would kill)."""
    from fs_notes.sandbox.process import prctl

    return prctl(PR_GET_SECCOMP)


__all__ = [
    "CLONE_NAMESPACES",
    "DENIED",
    "EXTRA_DENIED",
    "IOCTL_DENIED",
    "NETWORKS",
    "PROFILES",
    "ArgumentRule",
    "Installed",
    "Network",
    "Profile",
    "SeccompUnavailable",
    "argument_rules",
    "available",
    "denied_for",
    "install",
    "refused_blocks",
    "status",
]
