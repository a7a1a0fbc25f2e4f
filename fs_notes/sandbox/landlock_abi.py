"""Landlock plumbing: syscall numbers, kernel structs, rights per ABI, checked syscalls.

Guarantees: every syscall's return value is checked *before* errno is read (errno is only
meaningful after a failure), every failure raises `LandlockError` carrying the errno and a readable
reason, and rights are plain integers gated on the running kernel's ABI, so nothing here ever asks
the kernel for a right it does not know. There is no switch to pretend Landlock is absent: the CI
pass that proves the chroot fallback hides it from outside (tests/hide_landlock.py, a seccomp
filter answering ENOSYS), which this module sees as a kernel without Landlock.

Does not: decide what to allow (that is `sandbox.confine`), close the ruleset fd it creates (the
caller owns it), or know rights added after ABI 7 (a newer kernel's extra rights stay unhandled,
i.e. allowed, until they are added here).

Why not the PyPI `landlock` package (1.0.0.dev5): its error check reads errno without looking at
the return value (a stale errno from an earlier call turns a success into an exception, and a
failure with errno 0 into a success), its `Ruleset` never closes the ruleset fd, its
`ruleset_attr` lacks `handled_access_net`/`scoped` (no network or scope confinement), and its
default allowed set is "every right of this ABI". This module replaces all of it; nothing from
that package is imported.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from typing import Final

# x86_64 and aarch64 share these numbers (the Landlock syscalls were added after the
# syscall tables were unified).
SYS_LANDLOCK_CREATE_RULESET: Final = 444
SYS_LANDLOCK_ADD_RULE: Final = 445
SYS_LANDLOCK_RESTRICT_SELF: Final = 446

# landlock_create_ruleset() flags
CREATE_RULESET_VERSION: Final = 1 << 0
CREATE_RULESET_ERRATA: Final = 1 << 1

# landlock_add_rule() rule types
RULE_PATH_BENEATH: Final = 1
RULE_NET_PORT: Final = 2

# Filesystem rights (handled_access_fs / path_beneath_attr.allowed_access)
ACCESS_FS_EXECUTE: Final = 1 << 0
ACCESS_FS_WRITE_FILE: Final = 1 << 1
ACCESS_FS_READ_FILE: Final = 1 << 2
ACCESS_FS_READ_DIR: Final = 1 << 3
ACCESS_FS_REMOVE_DIR: Final = 1 << 4
ACCESS_FS_REMOVE_FILE: Final = 1 << 5
ACCESS_FS_MAKE_CHAR: Final = 1 << 6
ACCESS_FS_MAKE_DIR: Final = 1 << 7
ACCESS_FS_MAKE_REG: Final = 1 << 8
ACCESS_FS_MAKE_SOCK: Final = 1 << 9
ACCESS_FS_MAKE_FIFO: Final = 1 << 10
ACCESS_FS_MAKE_BLOCK: Final = 1 << 11
ACCESS_FS_MAKE_SYM: Final = 1 << 12
ACCESS_FS_REFER: Final = 1 << 13  # ABI 2
ACCESS_FS_TRUNCATE: Final = 1 << 14  # ABI 3
ACCESS_FS_IOCTL_DEV: Final = 1 << 15  # ABI 5

# Network rights (ABI 4)
ACCESS_NET_BIND_TCP: Final = 1 << 0
ACCESS_NET_CONNECT_TCP: Final = 1 << 1

# Scopes (ABI 6)
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0
SCOPE_SIGNAL: Final = 1 << 1

# landlock_restrict_self() flags (ABI 7: LOG_SAME_EXEC_OFF, LOG_NEW_EXEC_ON, LOG_SUBDOMAINS_OFF).
# We pass none of them: a denial inside our worker is an attack or a bug, and either way it
# should reach the audit log.

#: Rights that may be allowed on a non-directory; everything else needs a directory fd (EINVAL).
FILE_RIGHTS: Final = (
    ACCESS_FS_EXECUTE
    | ACCESS_FS_WRITE_FILE
    | ACCESS_FS_READ_FILE
    | ACCESS_FS_TRUNCATE
    | ACCESS_FS_IOCTL_DEV
)

FS_RIGHT_NAMES: Final[dict[int, str]] = {
    ACCESS_FS_EXECUTE: "EXECUTE",
    ACCESS_FS_WRITE_FILE: "WRITE_FILE",
    ACCESS_FS_READ_FILE: "READ_FILE",
    ACCESS_FS_READ_DIR: "READ_DIR",
    ACCESS_FS_REMOVE_DIR: "REMOVE_DIR",
    ACCESS_FS_REMOVE_FILE: "REMOVE_FILE",
    ACCESS_FS_MAKE_CHAR: "MAKE_CHAR",
    ACCESS_FS_MAKE_DIR: "MAKE_DIR",
    ACCESS_FS_MAKE_REG: "MAKE_REG",
    ACCESS_FS_MAKE_SOCK: "MAKE_SOCK",
    ACCESS_FS_MAKE_FIFO: "MAKE_FIFO",
    ACCESS_FS_MAKE_BLOCK: "MAKE_BLOCK",
    ACCESS_FS_MAKE_SYM: "MAKE_SYM",
    ACCESS_FS_REFER: "REFER",
    ACCESS_FS_TRUNCATE: "TRUNCATE",
    ACCESS_FS_IOCTL_DEV: "IOCTL_DEV",
}

_ABI1_FS: Final = (1 << 13) - 1  # EXECUTE .. MAKE_SYM, 13 rights


def fs_rights(abi: int) -> int:
    """Every filesystem right the given ABI knows (what a ruleset should *handle*)."""
    if abi < 1:
        return 0
    rights = _ABI1_FS
    if abi >= 2:
        rights |= ACCESS_FS_REFER
    if abi >= 3:
        rights |= ACCESS_FS_TRUNCATE
    if abi >= 5:
        rights |= ACCESS_FS_IOCTL_DEV
    return rights


def net_rights(abi: int) -> int:
    """Every network right the given ABI knows (ABI 4 and later)."""
    return ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP if abi >= 4 else 0


def scopes(abi: int) -> int:
    """Every scope the given ABI knows (ABI 6 and later)."""
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


def describe_fs(rights: int) -> list[str]:
    """Names of the filesystem rights in a mask (unknown bits as hex)."""
    names = [name for bit, name in FS_RIGHT_NAMES.items() if rights & bit]
    unknown = rights & ~sum(FS_RIGHT_NAMES)
    if unknown:
        names.append(hex(unknown))
    return names


class RulesetAttr(ctypes.Structure):
    """struct landlock_ruleset_attr (24 bytes since ABI 6; older kernels read a prefix)."""

    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class PathBeneathAttr(ctypes.Structure):
    """struct landlock_path_beneath_attr, which the kernel declares packed (12 bytes)."""

    _pack_ = 1
    _fields_ = [
        ("allowed_access", ctypes.c_uint64),
        ("parent_fd", ctypes.c_int32),
    ]


class NetPortAttr(ctypes.Structure):
    """struct landlock_net_port_attr (ABI 4): a TCP port and what may be done with it."""

    _fields_ = [
        ("allowed_access", ctypes.c_uint64),
        ("port", ctypes.c_uint64),
    ]


assert ctypes.sizeof(RulesetAttr) == 24
assert ctypes.sizeof(PathBeneathAttr) == 12
assert ctypes.sizeof(NetPortAttr) == 16


def ruleset_attr_size(abi: int) -> int:
    """How much of `RulesetAttr` this ABI understands (8, 16 or 24 bytes)."""
    if abi >= 6:
        return 24
    if abi >= 4:
        return 16
    return 8


class LandlockError(OSError):
    """A Landlock syscall failed; `.errno` is the kernel's, `.reason` a readable explanation."""

    def __init__(self, err: int, syscall: str, reason: str) -> None:
        super().__init__(err, f"{syscall}: {os.strerror(err)} ({reason})")
        self.syscall = syscall
        self.reason = reason


class LandlockUnavailable(LandlockError):
    """This kernel cannot enforce Landlock (not built in, disabled at boot, or hidden)."""


_COMMON_REASONS: Final[dict[int, str]] = {
    errno.ENOSYS: "the kernel has no Landlock syscalls (CONFIG_SECURITY_LANDLOCK not set)",
    errno.EOPNOTSUPP: "Landlock is built in but disabled at boot (add landlock to lsm=)",
}

_REASONS: Final[dict[str, dict[int, str]]] = {
    "landlock_create_ruleset": {
        errno.EINVAL: "unknown flags or access rights, or size too small",
        errno.E2BIG: "attribute size larger than the kernel knows, with non-zero tail",
        errno.EFAULT: "bad attribute pointer",
        errno.ENOMSG: "empty handled access set",
    },
    "landlock_add_rule": {
        errno.EINVAL: "bad flags, or allowed rights not a subset of the handled ones, or "
        "directory-only rights on a non-directory fd",
        errno.ENOMSG: "empty allowed access set",
        errno.EBADF: "ruleset fd or parent fd is not an open fd",
        errno.EBADFD: "ruleset fd is not a ruleset, or parent fd has the wrong type",
        errno.EPERM: "the ruleset fd is not writable",
        errno.EFAULT: "bad rule attribute pointer",
    },
    "landlock_restrict_self": {
        errno.EINVAL: "unknown flags",
        errno.EBADF: "ruleset fd is not an open fd",
        errno.EBADFD: "ruleset fd is not a ruleset",
        errno.EPERM: "no_new_privs is not set and CAP_SYS_ADMIN is missing",
        errno.E2BIG: "too many stacked Landlock domains",
    },
}


def reason_for(syscall: str, err: int) -> str:
    """A readable reason for a Landlock syscall's errno."""
    common = _COMMON_REASONS.get(err)
    if common is not None:
        return common
    specific = _REASONS.get(syscall, {}).get(err)
    if specific is not None:
        return specific
    if platform.system() != "Linux":
        return "Landlock exists only on Linux"
    return "unexpected error"


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


def _checked(name: str, result: int) -> int:
    # The return value decides; errno is read only after a failure.
    if result >= 0:
        return result
    err = ctypes.get_errno()
    if err == 0:  # cannot happen for a real syscall failure; never report it as success
        err = errno.EIO
    cls = LandlockError
    if err in (errno.ENOSYS, errno.EOPNOTSUPP):
        cls = LandlockUnavailable
    raise cls(err, name, reason_for(name, err))


def abi_version() -> int:
    """The running kernel's Landlock ABI (>= 1); raises `LandlockUnavailable` otherwise."""
    result = _syscall(
        ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
        ctypes.c_void_p(None),
        ctypes.c_size_t(0),
        ctypes.c_uint32(CREATE_RULESET_VERSION),
    )
    return _checked("landlock_create_ruleset", result)


def errata() -> int:
    """Bitmask of Landlock errata fixed in this kernel (bit N-1 = erratum N); 0 if unsupported."""
    result = _syscall(
        ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
        ctypes.c_void_p(None),
        ctypes.c_size_t(0),
        ctypes.c_uint32(CREATE_RULESET_ERRATA),
    )
    try:
        return _checked("landlock_create_ruleset", result)
    except LandlockError as exc:
        if exc.errno == errno.EINVAL:  # kernel predates the errata query
            return 0
        raise


def create_ruleset(abi: int, handled_fs: int, handled_net: int = 0, scoped: int = 0) -> int:
    """Create a ruleset; returns its fd (close-on-exec). The caller must close it."""
    attr = RulesetAttr(handled_fs, handled_net, scoped)
    result = _syscall(
        ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
        ctypes.byref(attr),
        ctypes.c_size_t(ruleset_attr_size(abi)),
        ctypes.c_uint32(0),
    )
    return _checked("landlock_create_ruleset", result)


def add_path_rule(ruleset_fd: int, parent_fd: int, allowed: int) -> None:
    """Allow `allowed` beneath the directory (or on the file) that `parent_fd` names."""
    attr = PathBeneathAttr(allowed, parent_fd)
    result = _syscall(
        ctypes.c_long(SYS_LANDLOCK_ADD_RULE),
        ctypes.c_int(ruleset_fd),
        ctypes.c_int(RULE_PATH_BENEATH),
        ctypes.byref(attr),
        ctypes.c_uint32(0),
    )
    _checked("landlock_add_rule", result)


def add_net_rule(ruleset_fd: int, port: int, allowed: int) -> None:
    """Allow `allowed` (ACCESS_NET_*) on TCP `port` (ABI 4 and later)."""
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"not a TCP port: {port}")
    attr = NetPortAttr(allowed, port)
    result = _syscall(
        ctypes.c_long(SYS_LANDLOCK_ADD_RULE),
        ctypes.c_int(ruleset_fd),
        ctypes.c_int(RULE_NET_PORT),
        ctypes.byref(attr),
        ctypes.c_uint32(0),
    )
    _checked("landlock_add_rule", result)


def restrict_self(ruleset_fd: int, flags: int = 0) -> None:
    """Enforce the ruleset on the calling thread (and its future children), irreversibly."""
    result = _syscall(
        ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF),
        ctypes.c_int(ruleset_fd),
        ctypes.c_uint32(flags),
    )
    _checked("landlock_restrict_self", result)
