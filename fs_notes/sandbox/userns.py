"""User namespaces: whether this process may create one, and if not, which settings refuse it.

A server that is not root can have a private view (sandbox/view.py) only inside a user namespace
of its own (a mount namespace needs CAP_SYS_ADMIN, which a new user namespace gives its first
process over the namespaces it owns). Kernels and distributions turn them off for ordinary
users in different ways; this module tries for real (`attempt`, in a child process: the probe's,
sandbox/probe.py) and, when refused, reads the settings this kernel has and names those set to a
refusing value, with the fix (`refusing`).

Guarantees: `UserNamespaces.works` is True only if a child really entered a new user and mount
namespace, wrote its uid and gid maps (its own ids only) and mounted a tmpfs there (the
step at which Ubuntu's AppArmor restriction shows: the namespace is made, but holds no
privilege). Settings are read from /proc/sys, never assumed from the distribution; a setting
this kernel does not have is not named.

Does not: know which of several refusing settings refused (the kernel does not say), or see a
refusal that is no setting (a system-call filter such as a container runtime's, a security
module's policy, a parent namespace's limit): then the reason says that no known setting refuses
it, and what was read.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from fs_notes.sandbox.process import write_proc

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWUSER: Final = 0x10000000
MS_NOSUID: Final = 2
MS_NODEV: Final = 4


@dataclass(frozen=True)
class Setting:
    """A kernel setting (sysctl) that can refuse user namespaces: the value that refuses, what
    it means and how to allow them."""

    name: str
    refuses: str
    means: str
    fix: str

    @property
    def path(self) -> str:
        return "/proc/sys/" + self.name.replace(".", "/")


#: Every setting known to refuse an ordinary user a user namespace with a mount namespace.
SETTINGS: Final = (
    Setting(
        "kernel.unprivileged_userns_clone",
        "0",
        "Debian's switch (and older Ubuntu's): no user namespace for a user without CAP_SYS_ADMIN",
        "sysctl -w kernel.unprivileged_userns_clone=1 (and the same line in a file in "
        "/etc/sysctl.d/ to keep it)",
    ),
    Setting(
        "user.max_user_namespaces",
        "0",
        "no user namespace at all",
        "sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/ to keep it)",
    ),
    Setting(
        "user.max_mnt_namespaces",
        "0",
        "no new mount namespace at all",
        "sysctl -w user.max_mnt_namespaces=15000 (and in /etc/sysctl.d/ to keep it)",
    ),
    Setting(
        "kernel.apparmor_restrict_unprivileged_userns",
        "1",
        "Ubuntu's AppArmor restriction (23.10 on): a program without an AppArmor profile that "
        "allows it gets a user namespace with no privilege in it",
        "an AppArmor profile for the Python interpreter fs-notes runs on with the rule "
        "'userns,' (in /etc/apparmor.d/, loaded with apparmor_parser -r), or, for every "
        "program, sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
    ),
)


def read_settings() -> dict[str, str | None]:
    """Each known setting's value on this kernel (None: the kernel has no such setting)."""
    values: dict[str, str | None] = {}
    for s in SETTINGS:
        try:
            with open(s.path, encoding="ascii") as f:
                values[s.name] = f.read().strip()
        except OSError:
            values[s.name] = None
    return values


def refusing(values: Mapping[str, str | None]) -> list[Setting]:
    """The settings among `values` (read_settings') set to their refusing value."""
    return [s for s in SETTINGS if values.get(s.name) == s.refuses]


#: What each step of `attempt` does, in plain words.
_STEPS: Final = {
    "unshare": "unshare(CLONE_NEWUSER | CLONE_NEWNS)",
    "setgroups": "writing setgroups in the new user namespace",
    "uid_map": "writing the new user namespace's uid map",
    "gid_map": "writing the new user namespace's gid map",
    "mount": "mounting in the new namespaces",
}


@dataclass(frozen=True)
class UserNamespaces:
    """Whether this process can have a user namespace (with a mount namespace), and if not why."""

    works: bool
    step: str | None = None  # where it was refused: unshare, setgroups, uid_map, gid_map, mount
    error: str | None = None  # the errno's name ("EPERM"), or what else went wrong
    settings: tuple[tuple[str, str | None], ...] = ()  # what was read (name, value)

    @property
    def refusing(self) -> list[Setting]:
        return refusing(dict(self.settings))

    @property
    def reason(self) -> str | None:
        """Why not, in plain words, naming the settings that refuse it (None: it works)."""
        if self.works:
            return None
        step = _STEPS.get(self.step or "")
        what = f"{step} was refused ({self.error})" if step else f"the probe failed: {self.error}"
        found = self.refusing
        if found:
            named = "; ".join(f"{s.name} = {s.refuses}: {s.means}" for s in found)
            return f"{what}; this kernel's settings that refuse it: {named}"
        read = ", ".join(f"{n} = {v}" for n, v in self.settings if v is not None)
        read = read or "none of the known ones exists"
        return (
            f"{what}; no setting of this kernel refuses it ({read}): something else does, such "
            "as a system-call filter (a container's) or a security module"
        )

    @property
    def fixes(self) -> list[str]:
        return [f"{s.name}: {s.fix}" for s in self.refusing]

    def to_json(self) -> dict[str, Any]:
        return {
            "works": self.works,
            "refused_at": self.step,
            "error": self.error,
            "reason": self.reason,
            "settings": dict(self.settings),
            "refusing": [s.name for s in self.refusing],
            "fixes": self.fixes,
        }

    @classmethod
    def from_child(cls, result: Mapping[str, Any]) -> UserNamespaces:
        """From `attempt`'s answer (or a child's failure: `{"error": ...}`), with the settings
        read now."""
        settings = tuple(read_settings().items())
        if result.get("works") is True:
            return cls(True, settings=settings)
        step = result.get("step")
        return cls(
            False,
            step=str(step) if step else None,
            error=str(result.get("errno") or result.get("error") or "no answer"),
            settings=settings,
        )


_libc = ctypes.CDLL(None, use_errno=True)


def attempt(scratch: str) -> dict[str, Any]:
    """Enter a new user and mount namespace, map the own ids, mount a tmpfs on folder
    `scratch` (in the new namespace only). Irreversible: run it in a child that then exits.
    {"works": True}, or {"works": False, "step": ..., "errno": "EPERM"}."""
    uid, gid = os.geteuid(), os.getegid()
    step = "unshare"
    try:
        if _libc.unshare(ctypes.c_int(CLONE_NEWUSER | CLONE_NEWNS)) != 0:
            raise OSError(ctypes.get_errno() or errno.EIO, "unshare")
        step = "setgroups"
        write_proc("/proc/self/setgroups", "deny")
        step = "uid_map"
        write_proc("/proc/self/uid_map", f"{uid} {uid} 1")
        step = "gid_map"
        write_proc("/proc/self/gid_map", f"{gid} {gid} 1")
        step = "mount"
        flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV)
        if _libc.mount(b"fs-notes-probe", os.fsencode(scratch), b"tmpfs", flags, None) != 0:
            raise OSError(ctypes.get_errno() or errno.EIO, "mount")
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        return {"works": False, "step": step, "errno": name}
    return {"works": True}


def probe_here(timeout: float = 5.0) -> UserNamespaces:
    """`attempt` in a forked child of this (single-threaded) process: what serve's start-up
    asks, at the cost of a fork, not of a new interpreter. The child mounts on "/" in its own
    new mount namespace, which nothing else sees, and exits."""
    import json
    import select

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.write(write, json.dumps(attempt("/")).encode())
        finally:
            os._exit(0)
    os.close(write)
    out = b""
    try:
        poll = select.poll()
        poll.register(read, select.POLLIN)
        while poll.poll(int(timeout * 1000)):
            chunk = os.read(read, 4096)
            if not chunk:
                break
            out += chunk
        else:
            os.kill(child, 9)
    finally:
        os.close(read)
        os.waitpid(child, 0)
    try:
        result = json.loads(out)
    except ValueError:
        result = {"error": "the probe child gave no answer"}
    return UserNamespaces.from_child(result if isinstance(result, dict) else {})
