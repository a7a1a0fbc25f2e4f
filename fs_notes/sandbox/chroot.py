"""The chroot fallback, for hosts without Landlock: make the workspace the worker's "/".

Guarantees (when `enter_chroot` returns): path lookups by name, absolute or relative, start at the
workspace and ".." stops at it, so `/etc/passwd` or `../outside/x` name things *inside* the
workspace; no_new_privs is set; and the process keeps only CAP_DAC_OVERRIDE and CAP_FOWNER (the
ones deleting or replacing other users' files in a shared folder needs; the write worker also
CAP_CHOWN, so a replaced note keeps its owner), with the bounding and
ambient sets emptied and the securebits locked (exec cannot regain capabilities). As root it stays
uid 0 on purpose: dropping to nobody (65534) would leave a worker that cannot delete the notes it
exists to delete. As a non-root user it first enters a new user + mount namespace (uid/gid mapped
to 0 inside), which is what makes chroot() possible without privileges.

Does NOT protect against (why Landlock is preferred, and why this is a *fallback*):
- Open directory fds: an inherited fd to a directory outside reaches outside (fchdir, *at calls);
  the worker must close every fd but its own before calling this (`sandbox.worker` does, and
  checks /proc/self/fd).
- A process keeping CAP_SYS_CHROOT escapes (chroot into a subdirectory, then walk ".." up);
  we drop it, but as root the remaining uid 0 still owns root's files and may signal every other
  uid-0 process (kill(2) needs no capability for the same uid); ptrace of the server is blocked
  only because the server's capabilities are not a subset of the worker's.
- Anything mounted or linked inside the workspace: a bind mount, a /proc mounted inside, a hard
  link to an outside file (unlinking removes only the link; in-place writes through it would
  change the outside file; the filesystem layer refuses hard-linked notes), a device node.
- Network, IPC and abstract unix sockets are not restricted at all.
- In a user namespace, the kernel may refuse (unprivileged user namespaces disabled, or
  max_user_namespaces = 0); `enter_chroot` then raises and the worker refuses to run.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Final

from fs_notes.sandbox.process import (
    CAP_CHOWN,
    CAP_DAC_OVERRIDE,
    CAP_FOWNER,
    CAP_SETGID,
    CAP_SETUID,
    become,
    capabilities,
    drop_capabilities,
    set_no_new_privs,
    write_proc,
)

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWUSER: Final = 0x10000000
KEPT_CAPABILITIES: Final = frozenset({CAP_DAC_OVERRIDE, CAP_FOWNER})
WRITE_EXTRA_CAPABILITIES: Final = frozenset({CAP_CHOWN})

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class ChrootReport:
    user_namespace: bool
    uid: int
    effective_caps: int

    def to_json(self) -> dict[str, object]:
        return {
            "user_namespace": self.user_namespace,
            "uid": self.uid,
            "effective_caps": self.effective_caps,
        }


def _unshare(flags: int) -> None:
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno() or 5
        raise OSError(err, f"unshare: {os.strerror(err)}")


def _enter_user_namespace() -> None:
    uid, gid = os.geteuid(), os.getegid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    write_proc("/proc/self/setgroups", "deny")
    write_proc("/proc/self/uid_map", f"0 {uid} 1")
    write_proc("/proc/self/gid_map", f"0 {gid} 1")


def enter_chroot(
    workspace_fd: int,
    *,
    extra_caps: frozenset[int] = frozenset(),
    owner: tuple[int, int] | None = None,
) -> ChrootReport:
    """chroot into the directory `workspace_fd` names, then shed privileges. Irreversible.

    `extra_caps` are kept besides `KEPT_CAPABILITIES` (the write worker keeps CAP_CHOWN so a
    replaced note keeps its owner). With `owner` (uid, gid), as root: after the chroot, become
    that user, with no capability at all (the workspace's owner needs none for its own folder).
    """
    before = os.fstat(workspace_fd)
    user_namespace = os.geteuid() != 0
    if user_namespace:
        _enter_user_namespace()
    os.fchdir(workspace_fd)
    os.chroot(".")
    os.chdir("/")
    root = os.stat("/")
    if (root.st_dev, root.st_ino) != (before.st_dev, before.st_ino):
        raise OSError(5, "chroot did not land on the workspace")
    set_no_new_privs()
    if owner is not None and not user_namespace:
        drop_capabilities(frozenset({CAP_SETUID, CAP_SETGID}))  # bounding set empty, caps locked
        become(*owner)
    else:
        drop_capabilities(KEPT_CAPABILITIES | extra_caps)
    return ChrootReport(user_namespace, os.getuid(), capabilities()[0])
