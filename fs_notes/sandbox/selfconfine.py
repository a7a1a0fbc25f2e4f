"""Self-confinement of the server process: its own Landlock domain, applied once at start-up.

First, with or without Landlock, the private view (sandbox/view.py): as root (CAP_SYS_ADMIN),
or as a regular user in a user namespace of its own, it moves into a mount namespace that shows
only the paths of its plan (so a compromised server cannot even `stat` what lies outside), and
each workspace handle in `roots` is re-opened on its bind; where the kernel refuses it, `view`
says why (startup.py names the setting and the fix). A regular user's server then keeps no
capability at all (in its user namespace it held every one). A view begun and
not finished is `SelfConfinementFailed`.

Guarantees, when `confine_server` returns a report with `enforced=True`:
- The server process and everything it starts later (threads, workers) is in a Landlock domain
  that handles every filesystem right of the running ABI and allows only: beneath each workspace,
  the rights its policy grants (listing always; reading for read/delete; the write worker's
  rights for write; the delete worker's for delete: a worker's own domain is nested in this
  one, so it can never hold more); reading the Python installation, the top-level packages the
  server was loaded from, the folders of the shared libraries already mapped, and /proc; reading
  and executing the interpreter binary and its ELF loader (to start workers); /dev/null; the
  replay database's folder (SQLite creates and removes its -wal/-shm files there); with --http,
  binding the one TCP port it serves and reading the name-service files; with `connect_names`
  (a replay store named by host name), reading the name-service files; with --port-file, writing
  in that file's folder. TCP connect is denied except to the `connect_ports` given (the replay
  store's), and bind on any port but the one served (ABI >= 4); signals and abstract unix
  sockets cannot leave the domain (ABI >= 6).
- In the private view, the server keeps the host's network namespace when it binds a port
  (--http) or has connect ports; otherwise (stdio, no store to reach) its network namespace is
  an empty one of its own.
- It is applied while the process has exactly one thread (checked via /proc/self/task), so no
  thread escapes it: up to ABI 7 Landlock binds only the calling thread and the threads it starts
  later (this kernel refuses the thread-sync flag of newer ones; see sandbox/confine.py).
- It is proven, not assumed: listing "/" works just before and must fail with EACCES just after,
  and the server's own package must still be readable; otherwise `SelfConfinementFailed`.
- Any failure on a host whose kernel has Landlock raises `SelfConfinementFailed`; `serve` then
  refuses to start (the operator can pass --no-self-confine). A kernel without Landlock gives
  `enforced=False` with the reason.
- As root, once Landlock (or, without it, the chroot workers' capability limit) is in force, it
  forks its monitor (sandbox/monitor.py), which alone keeps the workers' capabilities and starts
  every worker from a fixed request table; the server itself then holds no capability at all
  (effective, permitted, inheritable, ambient and bounding sets empty, securebits locked).
- With or without Landlock, the server then loads its system-call filter (sandbox/seccomp.py,
  profile "server"; its monitor starts the workers, so it may not even execve):
  no mode, owner, time or attribute change, link, node, mount, namespace, ptrace, keyring, bpf,
  IPC, memfd, execveat, terminal-injection or other-process prlimit call succeeds in it or in
  anything it starts; socket() only for the replay store's TCP (and DNS), none without a store.
  A filter that cannot be loaded is a `SelfConfinementFailed` too (refuse to start).

Does not (docs/self-confinement.md has the reasoning):
- Restrict files that were open before it (workspace roots, the replay database's connection,
  the audit log, stdin/stdout/stderr): Landlock checks at open time. The key file is read once
  before confinement and is deliberately *not* readable afterwards.
- Keep secrets readable by the server from it: the Python tree, /proc (where magic links such as
  /proc/self/root resolve to their real targets, which Landlock then checks), and everything the
  policy grants. It bounds what a compromised server can reach, not what it can leak from there.
- Protect the workspaces themselves, or the replay folder, from the server: it holds every right
  its workers need there. Put --replay-db in a folder of its own (the default is).
- Restrict which *address* a connect port is reached on: Landlock's port rule names a port
  only, so the replay store's port may be connected to on ANY host, local or remote (and the
  name-service files, when granted, let it resolve any name). Pin the address elsewhere (the
  store's configuration, a firewall) if that matters.
- Restrict UDP, ptrace of processes in the same domain, or anything else Landlock does not know.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from fs_notes.policy import Policy
from fs_notes.sandbox import landlock_abi as ll
from fs_notes.sandbox.chroot import KEPT_CAPABILITIES, WRITE_EXTRA_CAPABILITIES
from fs_notes.sandbox.confine import DELETE_RIGHTS, WRITE_RIGHTS
from fs_notes.sandbox.kinds import KINDS, Mode
from fs_notes.sandbox.launch import WORKER_PROGRAM
from fs_notes.sandbox.probe import HostReport, probe
from fs_notes.sandbox.process import CAP_NET_BIND_SERVICE, CAP_SETGID, CAP_SETPCAP, CAP_SETUID
from fs_notes.sandbox.seccomp import Network, Profile
from fs_notes.sandbox.userns import UserNamespaces, probe_here
from fs_notes.sandbox.view import Mount, Shape, View, regular_user_without_view

log = logging.getLogger("fs_notes.sandbox.selfconfine")

READ = ll.ACCESS_FS_READ_FILE | ll.ACCESS_FS_READ_DIR
LIST = ll.ACCESS_FS_READ_DIR
#: What SQLite needs in the replay database's folder (WAL and shared-memory files come and go).
SQLITE_DIR = (
    ll.ACCESS_FS_READ_FILE
    | ll.ACCESS_FS_READ_DIR
    | ll.ACCESS_FS_WRITE_FILE
    | ll.ACCESS_FS_MAKE_REG
    | ll.ACCESS_FS_REMOVE_FILE
    | ll.ACCESS_FS_TRUNCATE
)
#: Writing a file atomically (temp file + rename) in a folder: the hidden --port-file option.
PORT_FILE_DIR = (
    ll.ACCESS_FS_WRITE_FILE
    | ll.ACCESS_FS_MAKE_REG
    | ll.ACCESS_FS_REMOVE_FILE
    | ll.ACCESS_FS_TRUNCATE
)
#: Files the C library reads to resolve a host name (--http localhost, a replay store by name).
NAME_SERVICE_FILES = (
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/resolv.conf",
)
#: Capabilities a server started as root keeps until it forks its monitor (sandbox/monitor.py),
#: which then alone keeps them (the server drops every one) and its workers inherit them, in the
#: bounding set:
#: what the workers need for notes owned by other users, CAP_SETPCAP so that each worker
#: can shed what its kind does not need (it grants nothing beyond the bounding set), and
#: CAP_SETUID/CAP_SETGID so that a worker of a folder owned by another user becomes that
#: user. Everything else, e.g. CAP_SYS_MODULE or CAP_SYS_RAWIO, which reach past Landlock, is
#: dropped (CAP_NET_BIND_SERVICE stays only for an HTTP port below 1024; without Landlock,
#: CAP_SYS_CHROOT stays for the chroot workers).
SERVER_CAPABILITIES = (
    KEPT_CAPABILITIES | WRITE_EXTRA_CAPABILITIES | {CAP_SETPCAP, CAP_SETUID, CAP_SETGID}
)


def _kept(caps: frozenset[int]) -> frozenset[int]:
    """What of `caps` the server keeps: all of them as root; none as a regular user, whose
    workers run as itself (in its private view it holds every capability of its own user
    namespace, which it needs no more once the view is built)."""
    return caps if os.geteuid() == 0 else frozenset()


#: Why a regular user's server without Landlock has no private view.
CHROOT_WORKERS_NEED_PROC = (
    "without Landlock a regular user's chroot workers need user namespaces of their own, whose "
    "maps are written in /proc, which the view shows read-only"
)
SYSTEM_LIBRARY_FOLDERS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
#: The server's own top-level packages (the worker imports both).
OWN_PACKAGES = ("fs_notes",)
_PT_INTERP = 3


class SelfConfinementFailed(Exception):
    """Landlock exists here but the server could not (or did not provably) confine itself."""


@dataclass(frozen=True)
class Grant:
    """One Landlock rule: `rights` beneath `path` (a folder) or on it (a file); in the private
    view (sandbox/view.py) `shape` says how the path is shown ("names": the folder's own
    entries come from other rules; None: its whole tree, or the file)."""

    path: str
    rights: int
    why: str
    shape: Shape | None = None


@dataclass(frozen=True)
class Plan:
    grants: tuple[Grant, ...]
    bind_ports: tuple[int, ...] = ()
    #: TCP ports the server may connect to (on any address: Landlock names ports only).
    connect_ports: tuple[int, ...] = ()
    #: Paths the process names as they are written (symbolic links on the way are copied into
    #: the view): the interpreter, its loader, the import path, the workspaces as configured.
    literals: tuple[str, ...] = ()


@dataclass(frozen=True)
class SelfConfinement:
    """What `confine_server` did."""

    enforced: bool
    abi: int | None = None
    reason: str | None = None  # why not enforced
    grants: tuple[Grant, ...] = field(default=())
    bind_ports: tuple[int, ...] = ()
    connect_ports: tuple[int, ...] = ()
    effective_caps: int | None = None  # what was left of the capabilities
    #: A root server's monitor (sandbox/monitor.py), which keeps its workers' capabilities.
    monitor_pid: int | None = None
    monitor_caps: int | None = None  # the capabilities it kept
    seccomp: dict[str, Any] | None = None  # sandbox.seccomp.Installed.to_json(), when loaded
    view: dict[str, Any] | None = None  # sandbox.view.View.to_json()
    #: Without Landlock: the host probe (sandbox/probe.py), run before the view hides the
    #: scratch folder it needs; the OS layer picks the workers' mode from it.
    host: HostReport | None = None
    #: A regular user's server (no view: it is not root): whether the kernel gives it a user
    #: namespace, or which settings refuse it (sandbox/userns.py, probed in a forked child).
    user_namespaces: UserNamespaces | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "enforced": self.enforced,
            "seccomp": self.seccomp,
            "view": self.view,
            "abi": self.abi,
            "reason": self.reason,
            "rules": [
                {"path": g.path, "rights": ll.describe_fs(g.rights), "why": g.why}
                for g in self.grants
            ],
            "bind_ports": list(self.bind_ports),
            "connect_ports": list(self.connect_ports),
            "effective_caps": self.effective_caps,
            "monitor_pid": self.monitor_pid,
            "monitor_caps": self.monitor_caps,
            "user_namespaces": (
                self.user_namespaces.to_json() if self.user_namespaces is not None else None
            ),
        }


# -- the plan ------------------------------------------------------------------------------


def workspace_rights(operations: Iterable[str]) -> int:
    """What the server's domain allows beneath a workspace whose grants hold `operations`."""
    ops = set(operations)
    rights = LIST  # the filesystem layer opens folders O_DIRECTORY to resolve and list
    if ops & {"read", "delete"}:  # delete reads titles to find its candidates
        rights |= ll.ACCESS_FS_READ_FILE
    if "write" in ops:
        rights |= WRITE_RIGHTS
    if "delete" in ops:
        rights |= DELETE_RIGHTS
    return rights


def _operations(policy: Policy) -> dict[str, set[str]]:
    ops: dict[str, set[str]] = {ws.name: set() for ws in policy.workspaces}
    for principal in policy.principals:
        for grant in policy.grants_for(principal):
            ops[grant.workspace.name] |= set(grant.operations)
    return ops


def _beneath(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _python_grants() -> list[Grant]:
    """The interpreter's installation, and the top-level modules loaded from elsewhere."""
    prefixes = sorted(
        {
            os.path.realpath(p)
            for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
        }
    )
    grants = [Grant(p, READ, "Python installation") for p in prefixes]
    wanted: dict[str, object] = {name: sys.modules.get(name) for name in OWN_PACKAGES}
    for name, loaded in list(sys.modules.items()):
        if "." not in name and name not in wanted:
            wanted[name] = loaded
    for name, module in wanted.items():
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or _beneath(file, prefixes):
            continue
        real = os.path.realpath(file)
        if _beneath(real, prefixes):
            continue
        if getattr(module, "__path__", None) is not None:  # a package: its whole folder
            folder = os.path.dirname(real)
            grants.append(Grant(folder, READ, f"package {name}"))
        else:
            folder = real
            grants.append(Grant(real, ll.ACCESS_FS_READ_FILE, f"module {name}"))
        # The import system lists the folder on sys.path that holds it (names only).
        grants.append(Grant(os.path.dirname(folder), LIST, f"import path of {name}", "names"))
    return grants


def _mapped_library_folders() -> set[str]:
    """Folders of the files mapped into this process (shared libraries a later import needs).

    /proc/self/maps names each file by its resolved path (the kernel prints the dentry's path),
    so no realpath is needed; a deleted file's " (deleted)" entry is skipped."""
    paths = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith(")"):
                paths.add(parts[5])
    return {os.path.dirname(p) for p in paths}


def elf_interpreter(path: str) -> str | None:
    """The PT_INTERP of an ELF executable (its dynamic loader), or None."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2):
            return None
        end = "<" if head[5] == 1 else ">"
        if head[4] == 2:  # 64-bit: p_type p_flags p_offset p_vaddr p_paddr p_filesz
            (phoff,) = struct.unpack_from(end + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 54)
            entry, at_offset, at_size = struct.Struct(end + "IIQQQQ"), 2, 5
        else:  # 32-bit: p_type p_offset p_vaddr p_paddr p_filesz
            (phoff,) = struct.unpack_from(end + "I", head, 28)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 42)
            entry, at_offset, at_size = struct.Struct(end + "IIIII"), 1, 4
        for i in range(min(phnum, 256)):
            f.seek(phoff + i * phentsize)
            raw = f.read(entry.size)
            if len(raw) < entry.size:
                return None
            fields = entry.unpack(raw)
            if fields[0] == _PT_INTERP:
                f.seek(fields[at_offset])
                name = f.read(min(fields[at_size], 4096)).split(b"\0", 1)[0]
                return name.decode("utf-8", "replace") or None
    return None


def _runtime_grants(*, names: bool, covered: list[str]) -> list[Grant]:
    exe = os.path.realpath(sys.executable)
    grants = [Grant(exe, ll.ACCESS_FS_READ_FILE | ll.ACCESS_FS_EXECUTE, "interpreter (workers)")]
    interp = elf_interpreter(exe)
    if interp is not None:
        grants.append(
            Grant(
                os.path.realpath(interp),
                ll.ACCESS_FS_READ_FILE | ll.ACCESS_FS_EXECUTE,
                "ELF loader of the interpreter",
            )
        )
    folders = _mapped_library_folders()
    # The loader's default folders too, for a C extension imported later whose library is not
    # mapped yet (code only: kernel modules there need CAP_SYS_MODULE, which is dropped).
    folders |= {os.path.realpath(d) for d in SYSTEM_LIBRARY_FOLDERS if os.path.isdir(d)}
    for d in sorted(folders):
        if not _beneath(d, covered):
            grants.append(Grant(d, READ, "shared libraries"))
            covered = [*covered, d]  # sorted: a folder comes before what lies beneath it
    grants.append(Grant("/proc", READ, "/proc (psutil, /proc/self/fd, boot id)", "proc"))
    grants.append(Grant(os.devnull, ll.ACCESS_FS_READ_FILE | ll.ACCESS_FS_WRITE_FILE, "/dev/null"))
    optional = ["/etc/ld.so.cache", "/etc/localtime"]
    if names:
        optional += NAME_SERVICE_FILES
    for path in optional:
        if os.path.isfile(path):
            grants.append(Grant(os.path.realpath(path), ll.ACCESS_FS_READ_FILE, path))
    return grants


def build_plan(
    policy: Policy,
    *,
    replay_db: str | None,
    http_port: int | None = None,
    port_file: str | None = None,
    connect_ports: Sequence[int] = (),
    connect_names: bool = False,
) -> Plan:
    """The rules the server's domain would hold for this policy and these options.

    `connect_ports`: the TCP ports it may connect to (the replay store's); `connect_names`: it
    resolves a host name to reach them, so it reads the name-service files (as with --http)."""
    for port in connect_ports:
        if type(port) is not int or not 0 < port <= 0xFFFF:
            raise SelfConfinementFailed(f"not a TCP port to connect to: {port!r}")
    names = http_port is not None or connect_names
    grants: list[Grant] = []
    ops = _operations(policy)
    for ws in policy.workspaces:
        grants.append(Grant(ws.path, workspace_rights(ops[ws.name]), f"workspace {ws.name}"))
    python = _python_grants()
    grants += python
    covered = [g.path for g in python if g.rights & READ == READ]
    grants += _runtime_grants(names=names, covered=covered)
    if replay_db is not None and replay_db != ":memory:":
        folder = os.path.dirname(os.path.realpath(replay_db))
        grants.append(Grant(folder, SQLITE_DIR, "replay database folder"))
    if port_file is not None:
        folder = os.path.dirname(os.path.realpath(port_file))
        grants.append(Grant(folder, PORT_FILE_DIR, "--port-file folder"))
    merged: dict[str, Grant] = {}
    for g in grants:
        if g.path == "/" or not os.path.isabs(g.path):
            raise SelfConfinementFailed(f"{g.why}: refusing a rule on {g.path!r}")
        old = merged.get(g.path)
        if old is not None:
            shape = old.shape if old.shape == g.shape else None
            g = Grant(g.path, old.rights | g.rights, old.why, shape)
        merged[g.path] = g
    ports = (http_port,) if http_port is not None else ()
    literals = _literals(policy, replay_db, port_file, names=names)
    return Plan(
        tuple(merged.values()),
        bind_ports=ports,
        connect_ports=tuple(dict.fromkeys(connect_ports)),
        literals=literals,
    )


def _literals(
    policy: Policy, replay_db: str | None, port_file: str | None, *, names: bool
) -> tuple[str, ...]:
    """The paths this process (and the workers it starts) name as written, not resolved."""
    paths = [sys.executable, os.devnull, *SYSTEM_LIBRARY_FOLDERS, *sys.path]
    if names:
        paths += NAME_SERVICE_FILES
    paths += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    interp = elf_interpreter(os.path.realpath(sys.executable))
    if interp is not None:
        paths.append(interp)
    paths += ["/etc/ld.so.cache", "/etc/localtime"]
    paths += [ws.path for ws in policy.workspaces]
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str):
            paths.append(os.path.dirname(file))
    for extra in (replay_db, port_file):
        if extra is not None and extra != ":memory:":
            paths.append(os.path.dirname(os.path.abspath(extra)))
    return tuple(dict.fromkeys(p for p in paths if p and os.path.isabs(p)))


# -- applying it ---------------------------------------------------------------------------


def _open_rules(plan: Plan) -> list[tuple[int, int]]:
    rules: list[tuple[int, int]] = []
    try:
        for g in plan.grants:
            # Rules go on fds we open ourselves, never following a symlink in the last component
            # (the paths are already resolved); a missing path is an error, not a skipped rule.
            fd = os.open(g.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            rules.append((fd, g.rights))
    except OSError as exc:
        for fd, _ in rules:
            os.close(fd)
        raise SelfConfinementFailed(f"cannot open {g.path} ({g.why}): {exc.strerror}") from None
    return rules


def _can_list(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:
        return False
    os.close(fd)
    return True


def apply(plan: Plan) -> SelfConfinement:
    """Confine this process to `plan`, irreversibly, and prove it took effect."""
    import threading

    from fs_notes.sandbox.confine import confine
    from fs_notes.sandbox.errors import ConfinementError
    from fs_notes.sandbox.process import limit_capabilities, thread_count

    own = os.path.dirname(os.path.realpath(__file__))
    if threading.active_count() != 1 or thread_count() != 1:
        raise SelfConfinementFailed(
            "refusing to confine a multi-threaded process: Landlock would bind only this thread"
        )
    if not _can_list("/"):  # positive control: what must fail afterwards works now
        raise SelfConfinementFailed("cannot list / even before confining: nothing to prove")
    keep = SERVER_CAPABILITIES
    if any(port < 1024 for port in plan.bind_ports):
        keep |= {CAP_NET_BIND_SERVICE}
    keep = _kept(keep)
    rules = _open_rules(plan)
    try:
        caps = limit_capabilities(keep)
        report = confine(rules, bind_ports=plan.bind_ports, connect_ports=plan.connect_ports)
    except (ConfinementError, ll.LandlockError, ValueError, OSError) as exc:
        raise SelfConfinementFailed(f"{type(exc).__name__}: {exc}") from None
    finally:
        for fd, _ in rules:
            os.close(fd)
    if _can_list("/"):
        raise SelfConfinementFailed("Landlock accepted the ruleset but / is still readable")
    if not _can_list(own):
        raise SelfConfinementFailed(f"the server's own package {own} is no longer readable")
    return SelfConfinement(
        True,
        report.abi,
        None,
        plan.grants,
        bind_ports=plan.bind_ports,
        connect_ports=plan.connect_ports,
        effective_caps=caps,
    )


def unavailable_reason() -> str | None:
    """Why this kernel cannot confine the server (None when it has Landlock)."""
    try:
        ll.abi_version()
    except ll.LandlockUnavailable as exc:
        return exc.reason
    except ll.LandlockError as exc:
        return f"{exc.syscall}: {errno.errorcode.get(exc.errno or 0, '?')} ({exc.reason})"
    return None


class RootHandle(Protocol):
    """What the view needs of a workspace handle (fs_notes.fs.WorkspaceRoot)."""

    @property
    def fd(self) -> int: ...

    def rebase(self, fd: int) -> None: ...


def confine_server(
    policy: Policy,
    *,
    replay_db: str | None,
    http_port: int | None = None,
    port_file: str | None = None,
    roots: Mapping[str, RootHandle] | None = None,
    connect_ports: Sequence[int] = (),
    connect_names: bool = False,
    worker_programs: Sequence[str] = (WORKER_PROGRAM,),
) -> SelfConfinement:
    """Confine the server now (one thread only); see the docstring. `roots` (by workspace name)
    are the workspace handles opened at start-up: the private view is bound from their fds and
    each is moved onto its folder inside the view. `connect_ports` (the replay store's) stay
    reachable over TCP, on any address, and keep the host's network in the view;
    `connect_names` grants the name-service files (a store named by host name).
    `worker_programs`: what a root server's monitor may start (the escape exercises add their
    attacker worker)."""
    from fs_notes import clib
    from fs_notes.sandbox import seccomp

    seccomp.available()  # load libseccomp now: finding it runs ldconfig, which Landlock forbids
    clib.prepare()  # and look up the C functions the server calls later (the folder watch's)
    plan = build_plan(
        policy,
        replay_db=replay_db,
        http_port=http_port,
        port_file=port_file,
        connect_ports=connect_ports,
        connect_names=connect_names,
    )
    # socket() after start-up only for the replay store's TCP (and DNS, when it has a host name)
    network: Network = "none" if not connect_ports else "tcp+dns" if connect_names else "tcp"
    host = probe() if unavailable_reason() is not None else None
    by_path = {ws.path: roots[ws.name] for ws in policy.workspaces if roots and ws.name in roots}
    if host is not None and os.geteuid() != 0:
        # No Landlock, a regular user: its chroot workers make user namespaces of their own,
        # writing their maps in /proc, which the view mounts read-only; so no view (said).
        entered = View(False, CHROOT_WORKERS_NEED_PROC)
        log.warning("the server has no private view of the filesystem (%s)", entered.reason)
    else:
        entered = _enter_view(plan, by_path)
    seen = entered.to_json()
    # A regular user's server: whether it could have a user namespace (startup.py says so).
    userns = probe_here() if regular_user_without_view(entered.reason) else None
    reason = unavailable_reason()
    if reason is not None:  # no Landlock: the chroot workers need chroot/unshare from us
        caps = _limit_for_chroot_workers(http_port)
        done = SelfConfinement(False, None, reason, effective_caps=caps, view=seen, host=host)
        done = _separate(done, policy, by_path, "chroot", worker_programs)
        return replace(done, seccomp=_filter("server", network), user_namespaces=userns)
    done = _separate(apply(plan), policy, by_path, "landlock", worker_programs)
    for g in done.grants:
        log.debug("self-confinement rule: %s %s (%s)", g.path, ll.describe_fs(g.rights), g.why)
    return replace(done, seccomp=_filter("server", network), view=seen, user_namespaces=userns)


def _separate(
    done: SelfConfinement,
    policy: Policy,
    roots: Mapping[str, RootHandle],
    mode: Mode,
    programs: Sequence[str],
) -> SelfConfinement:
    """The server forks its monitor (sandbox/monitor.py), which starts its workers from now on,
    so the server itself starts nothing (its filter refuses execve). As root the monitor keeps
    the capabilities the workers need and the server then holds none: effective, permitted,
    inheritable, ambient and bounding sets emptied, the securebits locked (no exec regains
    root's). A regular user's server has none to drop (its workers run as its own user)."""
    from fs_notes.sandbox import monitor
    from fs_notes.sandbox.process import capabilities, drop_capabilities, worker_user

    folders: dict[tuple[int, int], monitor.Folder] = {}
    try:
        for ws in policy.workspaces:
            root = roots.get(ws.path)
            fd = root.fd if root is not None else os.open(ws.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                st = os.fstat(fd)
                named = ws.worker_user[1:] if ws.worker_user is not None else None
                user = worker_user(fd, named)
            finally:
                if root is None:
                    os.close(fd)
            kinds = frozenset(k for k in KINDS if k in policy.operations_in(ws.name))
            key = (st.st_dev, st.st_ino)
            seen = folders.get(key)
            if seen is not None:  # two workspaces, one folder (a symlink, a bind mount)
                if (seen.user, seen.symlinks) != (user, ws.symlinks):
                    raise SelfConfinementFailed(
                        f"workspace {ws.name} is the folder of another workspace, with another "
                        "worker user or symlink policy"
                    )
                kinds |= seen.kinds
            folders[key] = monitor.Folder(user, ws.symlinks, kinds)
            if os.geteuid() == 0 and st.st_uid != 0 and st.st_mode & 0o005 != 0o005:
                log.warning(
                    "workspace %s: the server holds no capability once confined and reads by "
                    "mode bits; its folder belongs to uid %d with mode %o, which it cannot list "
                    "or read: run serve as that user",
                    ws.name, st.st_uid, stat.S_IMODE(st.st_mode),
                )  # fmt: skip
        started = monitor.start(
            folders, mode=mode, profile="monitor" if mode == "landlock" else "monitor-chroot",
            programs=programs,
        )  # fmt: skip
        kept = capabilities()[0]
        if os.geteuid() == 0:
            drop_capabilities(frozenset())
    except OSError as exc:
        raise SelfConfinementFailed(f"the monitor could not be started: {exc}") from None
    return replace(
        done, effective_caps=capabilities()[0], monitor_pid=started.pid, monitor_caps=kept
    )


#: Landlock rights that change something (a grant holding one is bound writable in the view).
_CHANGES = ~(READ | ll.ACCESS_FS_EXECUTE)


def view_mounts(plan: Plan, fds: Mapping[str, int]) -> list[Mount]:
    """The private view of `plan`: each grant at its resolved path; `fds` (by grant path) are
    bound from the fd instead (the workspaces as opened at start-up)."""
    mounts = []
    for g in plan.grants:
        real = os.path.realpath(g.path)
        shape = g.shape or ("tree" if os.path.isdir(real) else "file")
        mounts.append(Mount(real, shape, bool(g.rights & _CHANGES), fds.get(g.path)))
    return mounts


def _enter_view(plan: Plan, roots: Mapping[str, RootHandle]) -> View:
    """The private view (sandbox/view.py), before Landlock and before CAP_SYS_ADMIN is dropped;
    then each workspace handle is moved onto its folder inside it."""
    import threading

    from fs_notes.sandbox import view
    from fs_notes.sandbox.process import thread_count

    if threading.active_count() != 1 or thread_count() != 1:
        raise SelfConfinementFailed("refusing to give a multi-threaded process a private view")
    mounts = view_mounts(plan, {path: root.fd for path, root in roots.items()})
    try:
        # The host's network only when the server must reach it: a port it serves (--http) or
        # one it connects to (the replay store); stdio alone gets an empty network namespace.
        network = bool(plan.bind_ports or plan.connect_ports)
        seen = view.enter(mounts, plan.literals, network=network)
    except (view.ViewFailed, OSError, ValueError) as exc:
        raise SelfConfinementFailed(str(exc)) from None
    if seen.enforced and seen.proc == "bind":
        log.warning(
            "the private view shows the host's /proc (a fresh one could not be mounted): "
            "other processes are listed there"
        )
    if not seen.enforced:
        if not view.regular_user_without_view(seen.reason):  # a regular user's: startup.py says
            log.warning(
                "the server has no private view of the filesystem (%s): a compromised server "
                "could learn which paths exist outside its workspaces, though not open or change "
                "them",
                seen.reason,
            )
        return seen
    for path, root in roots.items():
        try:
            root.rebase(view.reopen(path, root.fd))
        except OSError as exc:
            raise SelfConfinementFailed(f"workspace {path}: {exc.strerror}") from None
    return seen


def _limit_for_chroot_workers(http_port: int | None) -> int:
    """Without Landlock the server still sheds every capability but its workers' (and
    CAP_SYS_CHROOT for their chroot): CAP_SYS_ADMIN, CAP_LINUX_IMMUTABLE, CAP_SYS_MODULE, ... go."""
    from fs_notes.sandbox.process import CAP_SYS_CHROOT, limit_capabilities

    keep = SERVER_CAPABILITIES | {CAP_SYS_CHROOT}
    if http_port is not None and http_port < 1024:
        keep |= {CAP_NET_BIND_SERVICE}
    try:
        return limit_capabilities(_kept(frozenset(keep)))
    except OSError as exc:
        raise SelfConfinementFailed(f"capabilities could not be limited: {exc}") from None


def _filter(profile: Profile, network: Network) -> dict[str, Any]:
    """The server's system-call filter (sandbox/seccomp.py), loaded while it has one thread, so
    every thread and worker inherits it. SelfConfinementFailed if it cannot be loaded."""
    import threading

    from fs_notes.sandbox import seccomp
    from fs_notes.sandbox.process import thread_count

    if threading.active_count() != 1 or thread_count() != 1:
        raise SelfConfinementFailed("refusing to filter a multi-threaded process")
    try:
        installed = seccomp.install(profile, network)
    except (seccomp.SeccompUnavailable, OSError) as exc:
        raise SelfConfinementFailed(f"the system-call filter cannot be loaded: {exc}") from None
    if seccomp.status() != 2:
        raise SelfConfinementFailed("the system-call filter was loaded but is not in force")
    return installed.to_json()
