"""The server's private view of the filesystem: a mount namespace that holds only what it may use.

Landlock decides which paths a process may *open*; it does not hide which paths *exist*:
`stat`, `access`, `readlink`, an `open` that fails ENOENT rather than EACCES all tell a
compromised process what lies outside. This module closes that where the kernel lets us: the
server moves into a mount namespace of its own whose "/" is an empty tmpfs holding only the
paths of its self-confinement plan (sandbox/selfconfine.py), so anything else does not exist,
for every system call.

Guarantees, when `enter` returns `View(enforced=True)`:
- The caller goes on as the first process of a new PID namespace (`enter` forks; the parent
  only relays signals and the exit status), so it and everything it starts later (the workers)
  are the only processes there are: /proc is a fresh, read-only procfs of that namespace
  (`PROC_OPTIONS`; falls back to a read-only bind of the host's /proc, said in `proc`, which
  shows every process). No other process's environment, root, command line or mount table can
  be read, nor any process signalled or traced but these.
- Its own IPC namespace: no SysV segment, queue or semaphore set, and no POSIX message queue, of
  any process outside can be found, attached or read.
- Root or not: as root from CAP_SYS_ADMIN; a regular user's server in a user namespace of its
  own, made in the same unshare (mapping only its own uid and gid, setgroups denied), so every
  guarantee here holds for it too. Inside, it holds every capability over its namespaces only;
  the caller drops them all right after (sandbox/selfconfine.py). Files of other owners show as
  the overflow ids (65534): nothing in the view is the caller's to change but its own.
- Without `network` (stdio), an empty network namespace of its own: no TCP, UDP or named unix
  socket of the host can be reached or listed (/proc/net); socketpairs work.
- It sees a "/" that is a read-only tmpfs holding only: each `Mount` it was given, at its own
  path (a folder's whole tree, or one file, bind-mounted with every mount beneath it: nosuid;
  nodev except /dev/null; read-only, or noexec where it writes); folders holding names only
  (the import path); and the symbolic links on the way to each literal path that leads into
  the view (the interpreter, its loader, /lib64, /etc/localtime), copied as links. Nothing is
  ever created inside a bound tree, and no folder is copied for a literal that leads nowhere.
- The old root is detached (pivot_root, then a lazy unmount): no path leads back to it.
- Each bound path is bound from an O_PATH fd (no symlink followed in the last component); one
  given with the fd it was opened as at start-up (a workspace) must be that very folder, else
  `ViewFailed` (it was replaced since). `reopen` opens a folder again inside the view and checks
  it is the same device and inode.
- It is proven: after the switch, listing "/" gives exactly the top-level names planned, and an
  entry of the host's "/" that was not planned is absent (positive control: it existed before).
- Propagation is MS_SLAVE: mounts made later on the host inside a bound folder still appear here
  (the filesystem layer refuses notes on other mounts); nothing mounted here reaches the host.

Does not:
- Apply where the kernel refuses a regular user a user namespace (Debian's
  kernel.unprivileged_userns_clone=0, Ubuntu's AppArmor restriction, a container's filter), nor
  for root without CAP_SYS_ADMIN: `enter` returns `enforced=False` with the reason (naming the
  setting, `NO_USER_NAMESPACE`) and the caller says so; never a silent fall-back.
- Hide anything inside the bound paths (the Python installation, every workspace, the replay
  folder): a worker sees its siblings' workspaces (Landlock still denies opening them).
- Affect fds opened before it: they still reach the host's tree (".." from a directory fd climbs
  there, and neither Landlock nor this checks stat or getdents on an open fd). The caller
  re-opens its workspace folders inside the view (`reopen`) and must not hold any other
  directory fd (`serve` closes every inherited fd at start-up).
- Stop a process that keeps CAP_SYS_ADMIN from mounting again: the server drops it right after,
  and its system-call filter refuses the mount calls.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from fs_notes.sandbox.process import write_proc

MS_RDONLY: Final = 1
MS_NOSUID: Final = 2
MS_NODEV: Final = 4
MS_NOEXEC: Final = 8
MS_REMOUNT: Final = 32
MS_BIND: Final = 4096
MS_REC: Final = 16384
MS_SLAVE: Final = 1 << 19
MNT_DETACH: Final = 2
CLONE_NEWNS: Final = 0x00020000
CLONE_NEWPID: Final = 0x20000000
CLONE_NEWNET: Final = 0x40000000
CLONE_NEWIPC: Final = 0x08000000
CLONE_NEWUSER: Final = 0x10000000
CAP_SYS_ADMIN: Final = 21
AT_FDCWD: Final = -100
AT_RECURSIVE: Final = 0x8000
MOUNT_ATTR_RDONLY: Final = 0x1
MOUNT_ATTR_NOSUID: Final = 0x2
MOUNT_ATTR_NODEV: Final = 0x4
MOUNT_ATTR_NOEXEC: Final = 0x8
_MOUNT_SETATTR: Final = 442  # the same on every architecture with the unified table
#: pivot_root has no C library wrapper: its number per architecture.
_PIVOT_ROOT: Final = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
#: Where the new root is assembled (mounting a tmpfs there is private to the new namespace).
_STAGING: Final = ("/tmp", "/mnt", "/var/tmp", "/run")
_MAX_HOPS: Final = 40
#: The fresh /proc of the view's own PID namespace (only the server and its workers are in it):
#: besides, a process this one may not ptrace is absent, and gid= names the group exempt from
#: that (by default 0, which would exempt a root server): a group no process of ours has.
PROC_OPTIONS: Final = "hidepid=invisible,gid=4294967294"
#: In a user namespace of its own (a regular user's view) gid= must name a group mapped there,
#: and only the server's own is: no group is exempt, so the option is left out.
PROC_OPTIONS_USERNS: Final = "hidepid=invisible"

_libc = ctypes.CDLL(None, use_errno=True)

Shape = Literal["tree", "file", "names", "proc"]


@dataclass(frozen=True)
class Mount:
    """One path of the view: a folder's `tree` or a `file` (bound), a folder of `names` only
    (created empty: what is beneath it comes from other mounts), or `proc`."""

    path: str  # absolute, already resolved
    shape: Shape
    writable: bool = False
    fd: int | None = None  # bind from this fd (the workspace's) instead of opening `path`


@dataclass(frozen=True)
class View:
    enforced: bool
    reason: str | None = None
    visible: tuple[str, ...] = ()  # the bound paths
    proc: str | None = None  # PROC_OPTIONS, or "bind" (the host's /proc: every process shows)
    top: tuple[str, ...] = field(default=())
    network: bool = True  # False: an empty network namespace of its own
    user_namespace: bool = False  # True: built in a user namespace of its own (no root)

    def to_json(self) -> dict[str, object]:
        return {
            "enforced": self.enforced,
            "reason": self.reason,
            "visible": list(self.visible),
            "proc": self.proc,
            "network": self.network,
            "user_namespace": self.user_namespace,
        }


class ViewFailed(Exception):
    """The view was begun and could not be finished: the process must not go on."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno() or errno.EIO
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    enc = os.fsencode
    _check(
        _libc.mount(
            None if source is None else enc(source),
            enc(target),
            None if fstype is None else enc(fstype),
            ctypes.c_ulong(flags),
            enc(data) if data else None,
        ),
        f"mount {target}",
    )


def _beneath(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


#: Why a server has no view when a regular user starts it on a kernel that refuses it a user
#: namespace (Debian's and Ubuntu's settings, a container's filter): the reason then goes on
#: with what the probe found (sandbox/userns.py), which names the setting and the fix.
NO_USER_NAMESPACE = "needs CAP_SYS_ADMIN (root) or a user namespace, which this kernel refuses"


def unavailable_reason() -> str | None:
    """Why this process cannot build a view (None: it can): as root, with CAP_SYS_ADMIN; as a
    regular user, in a user namespace of its own, if the kernel gives one (probed for real, in
    a forked child: sandbox/userns.py)."""
    from fs_notes.sandbox.process import capabilities
    from fs_notes.sandbox.userns import probe_here

    if platform.machine() not in _PIVOT_ROOT:
        return f"pivot_root's number is not known for {platform.machine()}"
    if capabilities()[0] & (1 << CAP_SYS_ADMIN):
        return None
    if os.geteuid() == 0:
        return "needs CAP_SYS_ADMIN, which this root server was started without (a launcher's)"
    userns = probe_here()
    if userns.works:
        return None
    return f"{NO_USER_NAMESPACE}: {userns.reason}"


def in_own_user_namespace() -> bool:
    """Whether `enter` would make a user namespace (no CAP_SYS_ADMIN here: a regular user)."""
    from fs_notes.sandbox.process import capabilities

    return not capabilities()[0] & (1 << CAP_SYS_ADMIN)


def regular_user_without_view(reason: str | None) -> bool:
    """Whether `reason` (a View's) is only that a regular user's kernel refuses it a user
    namespace: nothing this user's set-up could give it but that setting (root without
    CAP_SYS_ADMIN is weaker than it should be, and so is an unknown architecture)."""
    return bool(reason) and str(reason).startswith(NO_USER_NAMESPACE) and os.geteuid() != 0


# -- the plan: what to create, in order --------------------------------------------------------


@dataclass
class _Layout:
    bound: list[str] = field(default_factory=list)
    made: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> ("dir"|"link", text)

    def covered(self, path: str) -> bool:
        return _beneath(path, self.bound)

    def add_dirs(self, path: str) -> None:
        """Every folder above `path` (real folders: `path` is resolved)."""
        parent = os.path.dirname(path)
        while parent != "/" and not self.covered(parent):
            self.made.setdefault(parent, ("dir", ""))
            parent = os.path.dirname(parent)

    def follow(self, literal: str) -> None:
        """Copy the symbolic links on the way to `literal` (as the kernel would walk it), if it
        leads to a path the view shows; otherwise copy nothing (not even empty folders: their
        existence would tell what the host has)."""
        made: dict[str, tuple[str, str]] = {}
        pending = [c for c in literal.split("/") if c]
        here = "/"
        hops = 0
        while pending and hops < _MAX_HOPS:
            name = pending.pop(0)
            if name == ".":
                continue
            if name == "..":
                here = os.path.dirname(here)
                continue
            path = os.path.join(here, name)
            try:
                st = os.lstat(path)
            except OSError:
                return  # it does not exist on the host either
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                if not self.covered(path):
                    made.update(self._dirs_above(path))
                    made[path] = ("link", target)
                hops += 1
                if target.startswith("/"):
                    here = "/"
                pending = [c for c in target.split("/") if c] + pending
                continue
            if not stat.S_ISDIR(st.st_mode):
                return  # a file: shown only if a mount shows it
            here = path
        if not pending and (self.covered(here) or self.made.get(here) == ("dir", "")):
            self.made.update(made)

    def _dirs_above(self, path: str) -> dict[str, tuple[str, str]]:
        out: dict[str, tuple[str, str]] = {}
        parent = os.path.dirname(path)
        while parent != "/" and not self.covered(parent):
            out.setdefault(parent, self.made.get(parent, ("dir", "")))
            parent = os.path.dirname(parent)
        return out


def _plan(mounts: Sequence[Mount], literals: Sequence[str]) -> tuple[list[Mount], _Layout]:
    layout = _Layout()
    binds: list[Mount] = []
    for m in sorted(mounts, key=lambda m: m.path):  # a folder sorts before what is beneath it
        if not os.path.isabs(m.path) or m.path == "/" or os.path.normpath(m.path) != m.path:
            raise ValueError(f"not a resolved absolute path: {m.path!r}")
        if layout.covered(m.path):
            continue
        layout.add_dirs(m.path)
        if m.shape == "names":
            layout.made.setdefault(m.path, ("dir", ""))
            continue
        binds.append(m)
        layout.bound.append(m.path)
    for literal in literals:
        layout.follow(literal)
    return binds, layout


# -- entering it -------------------------------------------------------------------------------


def _source_fds(binds: Sequence[Mount]) -> dict[str, int]:
    """An O_PATH fd per bind, opened in the new namespace (the kernel binds only mounts of the
    caller's own); one given an fd must be the very folder that fd names."""
    fds: dict[str, int] = {}
    try:
        for m in binds:
            if m.shape == "proc":
                continue
            fd = fds[m.path] = os.open(m.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            if m.fd is not None:
                want, got = os.fstat(m.fd), os.fstat(fd)
                if (want.st_dev, want.st_ino) != (got.st_dev, got.st_ino):
                    raise OSError(errno.EXDEV, f"{m.path} was replaced since start-up")
    except OSError:
        for fd in fds.values():
            os.close(fd)
        raise
    return fds


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _restrict(target: str, attrs: int) -> None:
    """Set `attrs` (MOUNT_ATTR_*) on the mount at `target` and every mount beneath it
    (mount_setattr, AT_RECURSIVE: a submount of a bound tree gets them too); the flags it
    already has are kept."""
    attr = _MountAttr(attrs, 0, 0, 0)
    _check(
        _libc.syscall(
            ctypes.c_long(_MOUNT_SETATTR),
            ctypes.c_int(AT_FDCWD),
            os.fsencode(target),
            ctypes.c_uint(AT_RECURSIVE),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        ),
        f"mount_setattr {target}",
    )


def _attrs(m: Mount) -> int:
    """nosuid everywhere; nodev except /dev/null; read-only unless written; noexec if written."""
    attrs = MOUNT_ATTR_NOSUID
    if m.path != os.devnull:
        attrs |= MOUNT_ATTR_NODEV
    attrs |= MOUNT_ATTR_NOEXEC if m.writable else MOUNT_ATTR_RDONLY
    return attrs


def _assemble(
    base: str, binds: Sequence[Mount], layout: _Layout, fds: dict[str, int], proc_options: str
) -> str:
    """Build the new root under `base` (a fresh tmpfs); the /proc mode used."""
    for path, (what, text) in sorted(layout.made.items()):
        if what == "dir":
            os.mkdir(base + path, 0o755)
        else:
            os.symlink(text, base + path)
    proc = "none"
    for m in binds:
        target = base + m.path
        if m.shape == "proc":
            os.mkdir(target, 0o555)
            try:
                flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
                _mount("proc", target, "proc", flags, proc_options)
                proc = proc_options
            except OSError:  # e.g. a container whose /proc is partly covered
                _mount("/proc", target, None, MS_BIND | MS_REC)
                proc = "bind"
            restrict = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC
            _restrict(target, restrict)
            continue
        fd = fds[m.path]
        if m.shape == "tree":
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
        _restrict(target, _attrs(m))
    return proc


def _switch(base: str) -> None:
    nr = _PIVOT_ROOT[platform.machine()]
    os.chdir(base)
    _check(_libc.syscall(ctypes.c_long(nr), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount2 of the old root")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _become_first_process() -> None:
    """Fork into the new PID namespace (unshare(CLONE_NEWPID) moves only the children there):
    the child returns, as the namespace's first process; the parent relays signals and the exit
    status (sandbox/session.py, `behind_relay`)."""
    from fs_notes.sandbox.session import behind_relay

    behind_relay()
    # The first process of a PID namespace gets no signal it has no handler for: the server
    # still stops on SIGTERM (uvicorn installs its own handler later).
    signal.signal(signal.SIGTERM, lambda number, _frame: sys.exit(128 + number))


def enter(
    mounts: Sequence[Mount], literals: Sequence[str] = (), *, network: bool = True
) -> View:
    """Move this process into its view (see the module docstring). Irreversible once begun:
    `ViewFailed` if it cannot be finished; `View(enforced=False)` if it could not be begun.
    The view has its own PID namespace (this process forks: the caller goes on in the child,
    the parent only relays signals and the exit status) and, without `network`, its own empty
    network namespace."""
    reason = unavailable_reason()
    if reason is not None:
        return View(False, reason)
    from fs_notes.sandbox import seccomp

    seccomp.available()  # libseccomp loaded before "/" is replaced: the relay's filter needs it
    binds, layout = _plan(mounts, literals)
    expected_top = sorted(
        {p.split("/")[1] for p in [*layout.made, *layout.bound]}
    )
    host_top = sorted(os.listdir("/"))
    control = next((n for n in host_top if n not in expected_top), None)
    base = next((d for d in _STAGING if os.path.isdir(d) and not os.path.islink(d)), None)
    if base is None:
        return View(False, f"no folder to assemble the view in (one of {', '.join(_STAGING)})")
    own_userns = in_own_user_namespace()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (0 if network else CLONE_NEWNET)
    if own_userns:
        flags |= CLONE_NEWUSER
    uid, gid = os.geteuid(), os.getegid()
    try:
        _check(_libc.unshare(ctypes.c_int(flags)), "unshare")
    except OSError as exc:
        return View(False, str(exc))
    if own_userns:  # the same ids inside as out, and nothing else mapped: no way to change them
        try:
            write_proc("/proc/self/setgroups", "deny")
            write_proc("/proc/self/uid_map", f"{uid} {uid} 1")
            write_proc("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            raise ViewFailed(f"the user namespace's ids could not be mapped: {exc}") from None
    _become_first_process()
    try:  # from here on there is no way back: fail hard
        fds = _source_fds(binds)
    except OSError as exc:
        raise ViewFailed(f"the private view could not be built: {exc}") from None
    try:
        _mount(None, "/", None, MS_REC | MS_SLAVE)
        _mount("fs-notes-view", base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        options = PROC_OPTIONS_USERNS if own_userns else PROC_OPTIONS
        proc = _assemble(base, binds, layout, fds, options)
        _switch(base)
    except OSError as exc:
        raise ViewFailed(f"the private view could not be built: {exc}") from None
    finally:
        for fd in fds.values():
            os.close(fd)
    top = sorted(os.listdir("/"))
    if top != expected_top:
        raise ViewFailed(f"the view shows {top}, not {expected_top}")
    if control is not None and os.path.lexists("/" + control):
        raise ViewFailed(f"/{control} is still visible in the view")
    return View(True, None, tuple(m.path for m in binds), proc, tuple(top), network, own_userns)


def reopen(path: str, old_fd: int) -> int:
    """Open folder `path` again inside the view: a new O_DIRECTORY fd of the same device and
    inode as `old_fd` (opened before the view). OSError otherwise."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags)
    old, new = os.fstat(old_fd), os.fstat(fd)
    if (old.st_dev, old.st_ino) != (new.st_dev, new.st_ino):
        os.close(fd)
        raise OSError(errno.EXDEV, f"{path} is not the folder opened at start-up")
    return fd
