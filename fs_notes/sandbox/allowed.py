"""What each process of fs-notes may call: the allow-lists of its system-call filter, with why.

The filter (sandbox/seccomp.py) is two seccomp programs. The first refuses, with EPERM, the calls
named in `seccomp.DENIED` and the calls allowed for one use only with any other argument
(`seccomp.argument_rules`: socket families, prlimit64 on another process, TIOCSTI, ...). The second,
built from this module, refuses with ENOSYS every call that is not on its role's list below (and
not decided by the first): a default of deny, so a system call nobody here thought of, or one a
newer kernel adds, is refused until someone writes it down here with a reason. The kernel keeps an
audit record (type=1326, SECCOMP) of every call the second program refuses: the operator finds
them with `journalctl -k` or `dmesg`, and CI fails on any that a test did not make on purpose
(`.ci/seccomp-log`).

Roles (one profile each, `seccomp.PROFILES`):
  * "server": the server process and its threads, after its own confinement. It starts no
    process: its monitor does (sandbox/monitor.py), so execve is refused to it by name.
  * "monitor" / "monitor-chroot": the server's monitor, which starts its workers (as root, with
    the capabilities the server gave up); its list is the workers' start (`WORKER_START`: fork
    and exec of the interpreter, loading it, Landlock, becoming the folder's owner; and, without
    Landlock, chroot and unshare) and their own calls (its filter stays under theirs). No
    socket(), no file watch, no listening.
  * "write": the write worker (create and replace a note, from its own filter on).
  * "delete": the delete worker (remove a note, move a note between folders).
  * "relay": the process a server is started as, when it goes on below it (sandbox/session.py:
    the private view's first process, a session of its own): it passes signals on and waits.
    Its list is not `RUNTIME`: it opens nothing, reads nothing, starts nothing.
  Reading is done by the server itself (the filesystem layer, fs_notes/fs/, beneath a workspace
  fd); there is no read worker.

What it guarantees: once `seccomp.install(role)` returns, a call outside `allowed(role)` fails
(ENOSYS) in that process and in everything it starts later; the lists are the same on every
architecture, with the names an architecture lacks (x86_64's `open` on aarch64) left out.

What it does NOT guarantee:
  * Anything about the arguments of an allowed call but those the first program checks: an
    allowed `openat` may name any path, and which paths it reaches is Landlock's business.
  * That a call on the list is harmless in every use: each reason says what it is needed for.
    `ioctl`, `fcntl` and `prctl` are allowed only with the commands in `COMMANDS` (each with
    why); a command on those lists is allowed on any fd, and its other arguments are not read.
"""

from __future__ import annotations

from typing import Final

from fs_notes.sandbox.kinds import Network, Profile

# Every Python process of fs-notes, from its own filter on (the interpreter's running core).
RUNTIME: Final[dict[str, str]] = {
    **{
        n: "memory (the allocator, mapped files)"
        for n in ("brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "msync")
    },
    **{
        n: "threads and locks (the C library's, the interpreter's GIL)"
        for n in ("futex", "set_robust_list", "get_robust_list", "rseq", "set_tid_address",
                  "sched_yield", "sched_getaffinity", "getcpu", "membarrier")
    },
    **{
        n: "signals (the interpreter's handlers, the C library's masks)"
        for n in ("rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
                  "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend", "restart_syscall")
    },
    **{
        n: "clocks and sleeps"
        for n in ("clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep",
                  "gettimeofday", "time")
    },
    **{
        n: "who it is (ids, groups, capabilities: reading only)"
        for n in ("getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid",
                  "getgroups", "getresuid", "getresgid", "getpgrp", "getpgid", "getsid",
                  "capget")
    },
    **{
        n: "its own limits and usage (prlimit64 on itself only: seccomp.argument_rules)"
        for n in ("getrlimit", "prlimit64", "getrusage", "getpriority",
                  "sched_getparam", "sched_getscheduler")
    },
    **{n: "the host's name and size, random bytes" for n in ("uname", "sysinfo", "getrandom")},
    **{
        n: "reading and writing open fds"
        for n in ("read", "write", "readv", "writev", "pread64", "pwrite64", "preadv",
                  "pwritev", "preadv2", "pwritev2", "lseek", "sendfile", "copy_file_range")
    },
    **{
        n: "managing its fds"
        for n in ("close", "close_range", "dup", "dup2", "dup3", "pipe", "pipe2", "eventfd2")
    },
    "fcntl": "fd flags, duplicates and SQLite's record locks (the commands: COMMANDS)",
    "ioctl": "fd controls: isatty, non-blocking, close-on-exec (the commands: COMMANDS)",
    **{
        n: "waiting on fds (the channels, asyncio's selector)"
        for n in ("poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1",
                  "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2")
    },
    **{
        n: "messages on sockets it holds (the workers' channels, asyncio's wake-up pair)"
        for n in ("sendmsg", "recvmsg", "sendto", "recvfrom", "shutdown", "getsockopt",
                  "setsockopt", "getsockname", "getpeername", "socketpair")
    },
    **{
        n: "opening and looking up paths (which paths: Landlock and the filesystem layer)"
        for n in ("openat", "open", "openat2", "newfstatat", "stat", "lstat", "fstat",
                  "statx", "statfs", "fstatfs", "getdents64", "getdents", "readlink",
                  "readlinkat", "access", "faccessat", "faccessat2", "getcwd", "chdir",
                  "fchdir", "umask", "fadvise64")
    },
    **{
        n: "durability and locks of files it writes (SQLite, notes)"
        for n in ("fsync", "fdatasync", "flock", "ftruncate", "fallocate")
    },
    "prctl": "its own name, parent-death signal, no_new_privs, seccomp state and capabilities "
             "(the commands: COMMANDS; each only restricts it, or reads)",
    "seccomp": "stacking a filter on itself (a filter can only take rights away)",
    **{n: "ending" for n in ("exit", "exit_group")},
}  # fmt: skip

#: Starting workers (the monitor, sandbox/monitor.py), and what each worker does between its
#: exec and its own filter, under the filter of the process that started it (sandbox/worker.py).
WORKER_START: Final[dict[str, str]] = {
    **{
        n: "starting its workers (namespace flags refused: seccomp.CLONE_NAMESPACES; clone3 "
        "answers ENOSYS, so the C library uses clone)"
        for n in ("clone", "clone3", "vfork")
    },
    "execve": "starting its workers (the interpreter: what it may run is Landlock's business)",
    **{n: "reaping its workers" for n in ("wait4", "waitid")},
    "setsid": "a worker's session of its own, between fork and exec (no controlling terminal)",
    **{
        n: "stopping its workers (signals cannot leave its Landlock domain)"
        for n in ("kill", "tgkill")
    },
    "arch_prctl": "a worker's start: the dynamic loader's thread pointer (x86_64)",
    **{
        n: "a worker's own Landlock domain, nested in the server's"
        for n in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
    },
    **{
        n: "a worker becoming the folder's owner and shedding capabilities (as root)"
        for n in ("capset", "setresuid", "setresgid", "setuid", "setgid", "setgroups")
    },
    "renameat2": "a worker moving a note (sandbox/worker.py), before its own filter",
}  # fmt: skip

#: The server, after its own confinement. It starts no process (its monitor starts the workers:
#: no execve, setsid, id change or Landlock domain of its own here).
SERVER: Final[dict[str, str]] = {
    **{
        n: "starting its threads (namespace flags refused: seccomp.CLONE_NAMESPACES; clone3 "
        "answers ENOSYS, so the C library uses clone)"
        for n in ("clone", "clone3")
    },
    **{n: "reaping its monitor, should it end" for n in ("wait4", "waitid")},
    **{
        n: "signals to its own threads, and psutil's sweep of a stopped worker's children "
        "(signals cannot leave its Landlock domain)"
        for n in ("kill", "tgkill")
    },
    **{
        n: "the live notes: which folders changed (fs_notes/fs/watch.py)"
        for n in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch")
    },
    **{
        n: "the replay database's journal and its folder (SQLite's -wal, -shm, -journal)"
        for n in ("unlink", "unlinkat", "rename", "renameat", "renameat2", "mkdir", "mkdirat")
    },
    **{
        n: "serving HTTP on the socket made before confinement"
        for n in ("accept", "accept4", "listen", "bind")
    },
    **{
        n: "reaching the replay store (socket() only TCP: seccomp.argument_rules)"
        for n in ("socket", "connect", "sendmmsg", "recvmmsg")
    },
}  # fmt: skip

#: The monitor without Landlock: its chroot workers need these before their own filter.
MONITOR_CHROOT: Final[dict[str, str]] = {
    "chroot": "a chroot worker's chroot into its workspace (sandbox/chroot.py)",
    "unshare": "a regular user's chroot worker's user namespace (sandbox/chroot.py)",
}

#: The write worker: create a note, replace one (temp file, fsync, renameat, fsync the folder).
WRITE: Final[dict[str, str]] = {
    **{
        n: "replacing a note: its temp file renamed over it, or removed on failure"
        for n in ("renameat", "rename", "renameat2", "unlinkat", "unlink")
    },
    **{n: "creating a note's folders" for n in ("mkdirat", "mkdir")},
}

#: The delete worker: remove a note, move one between folders (renameat2 RENAME_NOREPLACE).
DELETE: Final[dict[str, str]] = {
    **{n: "removing a note" for n in ("unlinkat", "unlink")},
    "renameat2": "moving a note (fs_notes/fs/rename.py: RENAME_NOREPLACE only)",
    **{n: "creating a moved note's folders" for n in ("mkdirat", "mkdir")},
}


#: The monitor (sandbox/monitor.py): it starts, reaps and kills workers, and its filter is
#: stacked under each worker's, so the workers' own calls are on its list too.
MONITOR: Final[dict[str, str]] = {
    **WORKER_START,
    **{f"{n}": f"a worker's own call, under the monitor's filter too: {why}"
       for n, why in (*WRITE.items(), *DELETE.items())},
}  # fmt: skip

#: The relay: signals passed on to the server below it, its exit awaited (sandbox/session.py).
RELAY: Final[dict[str, str]] = {
    **{n: "waiting for the server" for n in ("wait4", "waitid")},
    "kill": "passing a signal on to the server (SIGTERM, SIGINT, SIGHUP, SIGQUIT)",
    **{
        n: "its signal handlers (the interpreter's, which run the relaying code)"
        for n in ("rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
                  "restart_syscall")
    },
    **{
        n: "memory and locks of the interpreter running the handler"
        for n in ("brk", "mmap", "munmap", "mremap", "madvise", "mprotect", "futex")
    },
    **{n: "who it is" for n in ("getpid", "gettid", "getppid")},
    "write": "saying on stderr why it gave up",
    "close": "closing what it no longer needs",
    **{n: "ending as the server did" for n in ("exit", "exit_group")},
}  # fmt: skip


#: Which argument of a call in `COMMANDS` names the command (the kernel reads its low 32 bits).
COMMAND_ARG: Final[dict[str, int]] = {"ioctl": 1, "fcntl": 1, "prctl": 0}

#: The only commands `ioctl`, `fcntl` and `prctl` may be given, in every role that has the call
#: (any other: ENOSYS, logged, as for a call not on the list). Not there, among others: ioctl's
#: TIOCSTI and TIOCLINUX (bytes into a terminal's input: refused with EPERM by the first
#: program), TIOCSCTTY (taking a terminal), TIOCSPGRP, the inode flags (FS_IOC_SETFLAGS: chattr);
#: fcntl's F_SETOWN and F_SETSIG (signals sent to a process it names), F_SETLEASE, F_NOTIFY;
#: prctl's PR_SET_DUMPABLE, PR_SET_MM (rewriting its own memory map's fields), PR_SET_PTRACER,
#: PR_SET_CHILD_SUBREAPER, PR_SET_IO_FLUSHER, PR_SET_SPECULATION_CTRL.
COMMANDS: Final[dict[str, dict[int, str]]] = {
    "ioctl": {
        0x5401: "TCGETS: isatty() (Python's open() of every file, the C library's stdio)",
        0x5413: "TIOCGWINSZ: the terminal's size (os.get_terminal_size, for messages)",
        0x541B: "FIONREAD: bytes waiting on a socket or pipe (asyncio, subprocess)",
        0x5421: "FIONBIO: a socket made non-blocking (socket.setblocking)",
        0x5422: "TIOCNOTTY: giving up a controlling terminal (sandbox/session.py)",
        0x5450: "FIONCLEX: an fd made inheritable (os.set_inheritable)",
        0x5451: "FIOCLEX: an fd made close-on-exec (os.set_inheritable)",
    },
    "fcntl": {
        0: "F_DUPFD: a duplicate at or above a number",
        1030: "F_DUPFD_CLOEXEC: a duplicate at or above a number, close-on-exec",
        1: "F_GETFD: is it close-on-exec",
        2: "F_SETFD: close-on-exec on or off",
        3: "F_GETFL: its status flags (os.get_blocking)",
        4: "F_SETFL: O_NONBLOCK on or off (os.set_blocking, asyncio)",
        5: "F_GETLK: who holds a record lock (SQLite, fs_notes/statefolder.py)",
        6: "F_SETLK: a record lock (SQLite)",
        7: "F_SETLKW: a record lock, waiting (SQLite)",
        36: "F_OFD_GETLK: an open file's record lock, read",
        37: "F_OFD_SETLK: an open file's record lock",
        38: "F_OFD_SETLKW: an open file's record lock, waiting",
    },
    "prctl": {
        1: "PR_SET_PDEATHSIG: killed when its parent dies",
        15: "PR_SET_NAME: its name (the kernel's audit records carry it)",
        16: "PR_GET_NAME: its name, read",
        21: "PR_GET_SECCOMP: its filter's state, read",
        22: "PR_SET_SECCOMP: a filter stacked on itself (libseccomp may load through it)",
        23: "PR_CAPBSET_READ: its capability bounding set, read",
        24: "PR_CAPBSET_DROP: a capability dropped from its bounding set",
        27: "PR_GET_SECUREBITS: its securebits, read",
        28: "PR_SET_SECUREBITS: securebits locked (no root privileges after exec)",
        38: "PR_SET_NO_NEW_PRIVS: no privileges gained by exec",
        39: "PR_GET_NO_NEW_PRIVS: read",
        47: "PR_CAP_AMBIENT: its ambient capabilities read or cleared",
        0x53564D41: "PR_SET_VMA: the C library naming its own mappings (glibc 2.39 and later)",
    },
}


def allowed(profile: Profile, network: Network = "none") -> dict[str, str]:
    """Every call `profile` may make (besides those the first program decides), with why."""
    out = dict(RUNTIME)
    if profile == "server":
        out.update(SERVER)
        if network == "none":
            for name in ("socket", "connect", "sendmmsg", "recvmmsg"):
                del out[name]
    elif profile == "write":
        out.update(WRITE)
    elif profile == "delete":
        out.update(DELETE)
    elif profile in ("monitor", "monitor-chroot"):
        out.update(MONITOR)
        if profile == "monitor-chroot":
            out.update(MONITOR_CHROOT)
    elif profile == "relay":
        return dict(RELAY)
    else:
        raise ValueError(f"unknown seccomp profile {profile!r}")
    return out


__all__ = [
    "COMMANDS",
    "COMMAND_ARG",
    "DELETE",
    "MONITOR",
    "MONITOR_CHROOT",
    "RELAY",
    "RUNTIME",
    "SERVER",
    "WORKER_START",
    "WRITE",
    "allowed",
]
