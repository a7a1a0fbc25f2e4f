"""Process hardening for the confined worker: no_new_privs, parent-death signal, fds, capabilities.

Guarantees: each function either does what it says or raises `OSError` (return values are checked
before errno is read); `close_fds_except` leaves exactly the listed fds open (verified by re-reading
/proc/self/fd); `drop_capabilities` drops the bounding set, ambient set and all but the kept
effective/permitted capabilities, and locks the securebits so an exec cannot bring them back;
`limit_capabilities` does the same without touching the securebits, so a uid-0 process it execs
gets the kept capabilities again (the bounding set caps them) and nothing more.

Does not: protect anything by itself (these are building blocks for `sandbox.worker`), work
without /proc mounted (`open_fds` needs /proc/self/fd), or undo anything (all of it is one-way).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import signal
from typing import Final

PR_SET_PDEATHSIG: Final = 1
PR_CAPBSET_READ: Final = 23
PR_CAPBSET_DROP: Final = 24
PR_SET_SECUREBITS: Final = 28
PR_SET_NO_NEW_PRIVS: Final = 38
PR_GET_NO_NEW_PRIVS: Final = 39
PR_CAP_AMBIENT: Final = 47
PR_CAP_AMBIENT_CLEAR_ALL: Final = 4

SECBIT_NOROOT: Final = 1 << 0
SECBIT_NOROOT_LOCKED: Final = 1 << 1
SECBIT_KEEP_CAPS_LOCKED: Final = 1 << 5
SECBIT_NO_CAP_AMBIENT_RAISE: Final = 1 << 6
SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: Final = 1 << 7

CAP_CHOWN: Final = 0
CAP_DAC_OVERRIDE: Final = 1
CAP_FOWNER: Final = 3
CAP_SETGID: Final = 6
CAP_SETUID: Final = 7
CAP_SETPCAP: Final = 8
CAP_NET_BIND_SERVICE: Final = 10
CAP_SYS_CHROOT: Final = 18
_LINUX_CAPABILITY_VERSION_3: Final = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result >= 0:
        return result
    err = ctypes.get_errno() or 5  # EIO if the C library left errno unset
    raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    """prctl(2) with its result checked."""
    fn = _libc.prctl
    fn.restype = ctypes.c_int
    result = fn(
        ctypes.c_int(option),
        ctypes.c_ulong(arg2),
        ctypes.c_ulong(arg3),
        ctypes.c_ulong(arg4),
        ctypes.c_ulong(arg5),
    )
    return _check(result, f"prctl({option})")


def set_no_new_privs() -> None:
    """Set no_new_privs: exec can never grant privileges (setuid bits, file caps) again."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if prctl(PR_GET_NO_NEW_PRIVS) != 1:
        raise OSError(1, "no_new_privs did not stick")


def no_new_privs() -> bool:
    """Whether no_new_privs is set on this thread."""
    return prctl(PR_GET_NO_NEW_PRIVS) == 1


def die_with_parent(expected_parent: int) -> None:
    """Get SIGKILL when the parent thread exits; exit now if the parent is already gone."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != expected_parent:  # the parent died before the prctl took effect
        os._exit(1)


def open_fds() -> list[int]:
    """The fds open in this process, from /proc/self/fd (without those used to list it)."""
    names = os.listdir("/proc/self/fd")  # its own fds are closed again when it returns
    fds = []
    for name in names:
        fd = int(name)
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            continue
        fds.append(fd)
    return sorted(fds)


def close_fds_except(keep: set[int]) -> list[int]:
    """Close every fd not in `keep`; return the fds left open (checked against `keep`)."""
    for fd in open_fds():
        if fd not in keep:
            with contextlib.suppress(OSError):  # raced away already: the re-check decides
                os.close(fd)
    left = open_fds()
    extra = set(left) - keep
    if extra:
        raise OSError(16, f"fds still open after closing: {sorted(extra)}")
    return left


def thread_count() -> int:
    """Kernel threads in this process (from /proc/self/task)."""
    return len(os.listdir("/proc/self/task"))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def capabilities() -> tuple[int, int]:
    """(effective, permitted) capability masks of this thread."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capget(ctypes.byref(header), data), "capget")
    eff = data[0].effective | (data[1].effective << 32)
    perm = data[0].permitted | (data[1].permitted << 32)
    return eff, perm


def owner_of(workspace_fd: int) -> tuple[int, int] | None:
    """Whom a worker started as root runs as: the workspace folder's owner, when that is not
    root (None: stay as we are)."""
    if os.geteuid() != 0:
        return None
    st = os.fstat(workspace_fd)
    return None if st.st_uid == 0 else (st.st_uid, st.st_gid)


def user_as_root(user: tuple[int, int]) -> tuple[int, int] | None:
    """Whom a worker started by this process becomes for a named `user`: that user, if this
    process is root and `user` is not (None: stay as we are); OSError (EPERM) if this process is
    another user, who cannot switch to it."""
    if os.geteuid() == 0:
        return None if user[0] == 0 else user
    if user[0] != os.geteuid():
        raise OSError(errno.EPERM, "running workers as another user needs serve to run as root")
    return None


def worker_user(workspace_fd: int, named: tuple[int, int] | None) -> tuple[int, int] | None:
    """Whom a worker this process starts for the folder `workspace_fd` becomes: the `named`
    user (the policy's worker_user), else the folder's owner; None: stay as we are."""
    return owner_of(workspace_fd) if named is None else user_as_root(named)


def become(uid: int, gid: int) -> None:
    """Switch every uid and gid of this process to `uid`/`gid`, with no supplementary groups; the
    kernel then clears the capabilities (KEEP_CAPS is off: `drop_capabilities` locks it so). Checks
    the result; OSError otherwise."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError(1, "the uid or gid did not change")
    if capabilities() != (0, 0):
        raise OSError(1, "capabilities survived the change of uid")


def drop_capabilities(keep: frozenset[int]) -> None:
    """Keep only `keep` (effective+permitted); empty the bounding, ambient, inheritable sets."""
    prctl(
        PR_SET_SECUREBITS,
        SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_KEEP_CAPS_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
    )
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    for cap in range(64):
        if cap in keep:
            continue
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: past the kernel's last capability
                raise
            break
    mask = sum(1 << cap for cap in keep)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = mask & 0xFFFFFFFF
    data[1].effective = data[1].permitted = mask >> 32
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    eff, perm = capabilities()
    if eff != mask or perm != mask:
        raise OSError(1, f"capabilities not dropped: eff={eff:#x} perm={perm:#x}")


def bounding_set() -> int:
    """This thread's capability bounding set (PR_CAPBSET_READ: works without /proc)."""
    mask = 0
    for cap in range(64):
        try:
            if prctl(PR_CAPBSET_READ, cap) == 1:
                mask |= 1 << cap
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: past the kernel's last capability
                raise
            break
    return mask


def limit_capabilities(keep: frozenset[int]) -> int:
    """Reduce this thread to `keep`: effective, permitted and bounding sets; empty the inheritable
    and ambient sets. Returns the effective mask left. A process that holds no capability
    outside `keep` is left as it is (it has nothing to drop, and an unprivileged process may not
    change its bounding set; no_new_privs keeps exec from granting any).
    """
    mask = sum(1 << cap for cap in keep)
    eff, perm = capabilities()
    if (eff | perm) & ~mask == 0:
        return eff
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    bounding = bounding_set()
    for cap in range(64):
        if bounding & (1 << cap) and cap not in keep:
            prctl(PR_CAPBSET_DROP, cap)  # needs CAP_SETPCAP, still effective until capset
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    left = perm & mask
    data[0].effective = data[0].permitted = left & 0xFFFFFFFF
    data[1].effective = data[1].permitted = left >> 32
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    eff, perm = capabilities()
    if eff != left or perm != left or bounding_set() & ~mask:
        raise OSError(1, f"capabilities not limited: eff={eff:#x} perm={perm:#x}")
    return eff


def write_proc(path: str, text: str) -> None:
    """Write `text` to a /proc file (a user namespace's setgroups, uid_map, gid_map) in one
    write(2), as the kernel requires of those files."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)
