"""Landlock confinement of the calling process: deny every handled right except the listed ones.

Guarantees: after `confine()` returns, the calling thread (and any child it forks or thread it
starts later) is restricted for life: every filesystem right the running ABI knows is *handled*
(denied unless a rule allows it beneath one of the given directories, or on one of the given
files), TCP bind is denied except on the ports listed in `bind_ports` and TCP connect except to
those in `connect_ports` (ABI >= 4), abstract unix sockets and signals cannot reach outside the
domain (ABI >= 6), and no_new_privs is set first. Rules go on fds the caller opened itself
(O_PATH|O_NOFOLLOW); a rule on a non-directory may only allow file rights (EXECUTE, WRITE_FILE,
READ_FILE, TRUNCATE, IOCTL_DEV), anything else is refused here rather than by the kernel's
EINVAL. Rights and ports are validated before any syscall, and the ruleset fd is always closed.
If any step fails it raises, and the caller must not continue unconfined.

Does not: confine other threads. Up to ABI 7 Landlock binds only the calling thread: threads that
already exist keep their old (unconfined) credentials, threads started afterwards inherit the
domain. Verified on Linux 6.18 / ABI 7: a thread started before `landlock_restrict_self` could
still list /etc afterwards, one started after could not, and the thread-sync flag of newer kernels
(LANDLOCK_RESTRICT_SELF_TSYNC, bit 3) is refused with EINVAL. So this refuses to run in a
multi-threaded process unless told otherwise. It also does not restrict access through fds opened
*before* the call (Landlock checks at open time; already-open files keep their access, which is
why the worker closes every other fd first), stop reads of the fds it keeps, or limit anything
Landlock does not know (e.g. UDP, ptrace of same-domain processes, /proc of itself). A port
rule names a port only: a connect port may be reached on ANY address (local or remote), and a
bind port bound on any local address.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from fs_notes.sandbox import landlock_abi as ll
from fs_notes.sandbox.errors import ConfinementError
from fs_notes.sandbox.process import no_new_privs, set_no_new_privs, thread_count

#: What the delete worker may do beneath the workspace: unlink files. Resolution needs nothing
#: more: O_PATH opens and openat2 walks need no Landlock right, and unlinkat needs REMOVE_FILE on
#: the parent directory. READ_DIR is allowed because the filesystem layer opens directories with
#: O_DIRECTORY (not O_PATH) to walk them; it lists names, never contents.
DELETE_RIGHTS = ll.ACCESS_FS_REMOVE_FILE | ll.ACCESS_FS_READ_DIR

#: What the write worker may do beneath the workspace: create a regular file (MAKE_REG) and
#: write it (WRITE_FILE), make missing folders (MAKE_DIR), open folders to walk them (READ_DIR),
#: and replace a note atomically by renaming a temporary file over it in the same folder, which
#: needs REMOVE_FILE (the replaced entry, and cleanup of a failed temp file) besides MAKE_REG.
#: Moving a note (notes_move, added 2026-12-01) renames it from one folder to another: REMOVE_FILE
#: on the source folder, MAKE_REG on the target's, and REFER (ABI >= 2) on both, which Landlock
#: requires for any rename or link between folders: granted beneath the workspace only, so a
#: rename whose source or target folder is outside it fails with EXDEV whatever code asks for
#: it. Before ABI 2 the kernel refuses every cross-folder rename of a confined process; moves
#: are then refused before they are tried (`MOVE_MIN_ABI`, sandbox/confined.py).
#: Not granted: READ_FILE and TRUNCATE (the filesystem layer never reads or truncates in these
#: paths: creates are O_EXCL, updates write a new file), REMOVE_DIR, and every MAKE_* but REG
#: and DIR.
WRITE_RIGHTS = (
    ll.ACCESS_FS_MAKE_REG
    | ll.ACCESS_FS_MAKE_DIR
    | ll.ACCESS_FS_WRITE_FILE
    | ll.ACCESS_FS_REMOVE_FILE
    | ll.ACCESS_FS_READ_DIR
    | ll.ACCESS_FS_REFER
)
#: The Landlock ABI from which a confined write worker can move notes between folders (REFER).
MOVE_MIN_ABI = 2


@dataclass(frozen=True)
class ConfinementReport:
    """What `confine()` enforced."""

    abi: int
    handled_fs: int
    handled_net: int
    scoped: int
    allowed: tuple[int, ...]  # per rule, in order
    no_new_privs: bool

    def to_json(self) -> dict[str, object]:
        return {
            "abi": self.abi,
            "handled_fs": self.handled_fs,
            "handled_net": self.handled_net,
            "scoped": self.scoped,
            "allowed": list(self.allowed),
            "allowed_names": [ll.describe_fs(a) for a in self.allowed],
            "no_new_privs": self.no_new_privs,
        }


def _check_rules(rules: Sequence[tuple[int, int]], handled_fs: int, abi: int) -> None:
    for fd, allowed in rules:
        if allowed == 0:
            raise ValueError("a rule must allow at least one right")
        if allowed & ~handled_fs:
            extra = ll.describe_fs(allowed & ~handled_fs)
            raise ValueError(f"rule allows rights that are not handled (ABI {abi}): {extra}")
        mode = os.fstat(fd).st_mode
        if not stat.S_ISDIR(mode) and allowed & ~ll.FILE_RIGHTS:
            # The kernel refuses directory rights (REMOVE_FILE, MAKE_*, READ_DIR...) on a
            # non-directory with EINVAL; say so before anything has been changed.
            extra = ll.describe_fs(allowed & ~ll.FILE_RIGHTS)
            raise ValueError(f"rule fd {fd} is not a directory and cannot allow {extra}")


def _check_ports(ports: Sequence[int]) -> None:
    for port in ports:
        if type(port) is not int or not 0 <= port <= 0xFFFF:
            raise ValueError(f"not a TCP port: {port!r}")


def _rule_rights(rules: Sequence[tuple[int, int]], abi: int) -> tuple[int, ...]:
    # Rights a kernel does not know (e.g. TRUNCATE before ABI 3) are dropped from the rules;
    # they are not handled there either, so nothing is denied that was meant to be allowed.
    known = ll.fs_rights(abi)
    return tuple(allowed & known for _fd, allowed in rules)


def confine(
    rules: Sequence[tuple[int, int]],
    *,
    handled: int | None = None,
    deny_tcp: bool = True,
    scope: bool = True,
    allow_threads: bool = False,
    bind_ports: Sequence[int] = (),
    connect_ports: Sequence[int] = (),
) -> ConfinementReport:
    """Restrict this process to `rules` [(directory or file fd, allowed fs rights)], irreversibly.

    `handled` defaults to every filesystem right of the running ABI, so anything not allowed by a
    rule is denied. With `deny_tcp`, TCP bind is allowed only on `bind_ports` and TCP connect
    only to `connect_ports`, on any address (before ABI 4 the kernel cannot restrict TCP at all,
    so both are moot there).
    Raises `ll.LandlockUnavailable` if the kernel cannot enforce Landlock, `ll.LandlockError` if
    a syscall fails, `ValueError` for a bad rule, `ConfinementError` if the process is
    multi-threaded (Landlock would bind only this thread) and `allow_threads` is false.
    """
    if not allow_threads and (threading.active_count() != 1 or thread_count() != 1):
        raise ConfinementError("refusing to confine a multi-threaded process (one thread only)")
    abi = ll.abi_version()
    all_fs = ll.fs_rights(abi)
    handled_fs = all_fs if handled is None else handled
    if handled_fs == 0 or handled_fs & ~all_fs:
        raise ValueError(f"handled rights must be a non-empty subset of ABI {abi}'s")
    allowed = _rule_rights(rules, abi)
    _check_rules([(fd, a) for (fd, _), a in zip(rules, allowed, strict=True)], handled_fs, abi)
    if bind_ports and not deny_tcp:
        raise ValueError("bind_ports only mean something when TCP is handled (deny_tcp)")
    if connect_ports and not deny_tcp:
        raise ValueError("connect_ports only mean something when TCP is handled (deny_tcp)")
    _check_ports(bind_ports)
    _check_ports(connect_ports)
    handled_net = ll.net_rights(abi) if deny_tcp else 0
    scoped = ll.scopes(abi) if scope else 0

    set_no_new_privs()
    ruleset_fd = ll.create_ruleset(abi, handled_fs, handled_net, scoped)
    try:
        for (fd, _), rights in zip(rules, allowed, strict=True):
            ll.add_path_rule(ruleset_fd, fd, rights)
        for port in bind_ports if handled_net else ():
            ll.add_net_rule(ruleset_fd, port, ll.ACCESS_NET_BIND_TCP)
        for port in connect_ports if handled_net else ():
            ll.add_net_rule(ruleset_fd, port, ll.ACCESS_NET_CONNECT_TCP)
        ll.restrict_self(ruleset_fd, 0)
    finally:
        os.close(ruleset_fd)
    return ConfinementReport(abi, handled_fs, handled_net, scoped, allowed, no_new_privs())
