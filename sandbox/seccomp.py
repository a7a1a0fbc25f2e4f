"""The system-call filter (seccomp) of the server and of every worker: what Landlock leaves open.

Landlock mediates path access only. It does not mediate a file's mode, owner, times or extended
attributes, hard or symbolic links' existence checks, mounts, namespaces, ptrace or the kernel's
keyrings, and capabilities are independent of it: a confined process running as uid 0 could still
`chmod("/etc/shadow", 0o644)` (its owner is uid 0 too) or `ptrace` a neighbour. This module closes
those with one seccomp filter per process, built with libseccomp (through the `pyseccomp` ctypes
binding, API-compatible with libseccomp's own Python bindings, which are not on PyPI).

What it guarantees, once `install(profile)` returns:
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
  * It is a deny list over a default of ALLOW: a new kernel's new system call that changes
    metadata is open until it is added here (the newest are listed by number).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from types import ModuleType
from typing import Final, Literal

Profile = Literal["server", "server-chroot", "delete", "write"]
PR_GET_SECCOMP: Final = 21
PROFILES: Final[tuple[Profile, ...]] = ("server", "server-chroot", "delete", "write")

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
}  # fmt: skip

#: What each profile denies besides `DENIED`.
EXTRA_DENIED: Final[dict[Profile, dict[str, str]]] = {
    "server": {"chroot": "chroot", "unshare": "namespaces"},
    "server-chroot": {},
    "delete": {
        "chroot": "chroot", "unshare": "namespaces",
        "execve": "starting programs", "execveat": "starting programs", "socket": "sockets",
    },
    "write": {
        "chroot": "chroot", "unshare": "namespaces",
        "execve": "starting programs", "execveat": "starting programs", "socket": "sockets",
    },
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
# policies, through ioctl on an fd; the 32-bit-ABI encodings too. The kernel truncates the
# command to 32 bits, so only those are compared (a command with high bits set is the same).
IOCTL_DENIED: Final = {
    "FS_IOC_SETFLAGS": 0x40086602,
    "FS_IOC32_SETFLAGS": 0x40046602,
    "FS_IOC_SETVERSION": 0x40087602,
    "FS_IOC32_SETVERSION": 0x40047602,
    "FS_IOC_FSSETXATTR": 0x401C5820,
    "FS_IOC_ENABLE_VERITY": 0x40806685,
    "FS_IOC_SET_ENCRYPTION_POLICY": 0x800C6613,
}


class SeccompUnavailable(Exception):
    """This host cannot load the filter (no libseccomp, no seccomp in the kernel)."""


@dataclass(frozen=True)
class Installed:
    profile: Profile
    denied: int  # system calls refused by name (the clone flags and ioctls not counted)
    unknown: tuple[str, ...]  # names neither libseccomp nor `_BY_NUMBER` knows (not filtered)

    def to_json(self) -> dict[str, object]:
        return {"profile": self.profile, "denied": self.denied, "unknown": list(self.unknown)}


def denied_for(profile: Profile) -> dict[str, str]:
    """Every system call `profile` refuses, with the reason."""
    if profile not in PROFILES:
        raise ValueError(f"unknown seccomp profile {profile!r}")
    out = dict(DENIED)
    out.update(EXTRA_DENIED[profile])
    if profile == "server-chroot":
        out.pop("chroot", None)
        out.pop("unshare", None)
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


def install(profile: Profile) -> Installed:
    """Load the filter of `profile` into this process (irreversible). SeccompUnavailable or
    OSError if it cannot be loaded: the caller then refuses to go on (fail closed)."""
    sc = _library()
    deny = denied_for(profile)
    flt = sc.SyscallFilter(defaction=sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    count, unknown = 0, []
    for name in sorted(deny):
        number = int(sc.resolve_syscall(sc.Arch.NATIVE, name))
        if number < 0:
            number = _BY_NUMBER.get(name, -1)
        if number < 0:
            unknown.append(name)
            continue
        flt.add_rule(eperm, number)
        count += 1
    for flag in CLONE_NAMESPACES.values():
        flt.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for request in IOCTL_DENIED.values():
        flt.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    flt.load()
    return Installed(profile, count, tuple(unknown))


def status() -> int:
    """The kernel's seccomp mode of this thread, from prctl(PR_GET_SECCOMP) (no file to read,
    so it works after confinement): 0 none, 2 filter (in strict mode, 1, the call would kill)."""
    from fs_notes.sandbox.process import prctl

    return prctl(PR_GET_SECCOMP)


__all__ = [
    "CLONE_NAMESPACES",
    "DENIED",
    "EXTRA_DENIED",
    "PROFILES",
    "Installed",
    "Profile",
    "SeccompUnavailable",
    "available",
    "denied_for",
    "install",
    "status",
]
