"""`fs-notes serve`: build the policy, open the workspace roots, wire the tools, run a transport."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import ipaddress
import logging
import os
import socket
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .confirm.audit import AuditLog, AuditLogDamaged
from .confirm.replay import MAX_ROWS, ReplayStore, UnsafeLocation, default_replay_path
from .confirm.state import KEPT_NAME, KeyFileError, KeyRing, StateSealer
from .errors import ConfigError
from .fs import FsError, WorkspaceRoot
from .limits import connection_budget
from .policy import NotAuthenticated, Policy, PolicyError, Principal, hash_token
from .protocol.dispatch import Dispatcher, LazyDispatcher

if TYPE_CHECKING:  # the tools import pydantic: serve loads them after the first answer
    from .sandbox.selfconfine import SelfConfinement
    from .tools.context import IdRules, NotesEnv, WorkspaceRoots
    from .tools.delete import NoteDeleter
    from .tools.write_tools import NoteWriter

log = logging.getLogger("fs_notes.serve")


@dataclass(frozen=True)
class HttpBind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False


def parse_bind(text: str) -> HttpBind:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--http takes HOST:PORT (e.g. 127.0.0.1:8765), got {text!r}")
    return HttpBind(host, int(port))


def read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise ConfigError(f"--token-file {path}: {exc.strerror}") from None
    if len(token) < 16:
        raise ConfigError(f"--token-file {path}: the token must be at least 16 characters")
    return token


def build_policy(args: argparse.Namespace) -> Policy:
    if args.policy and args.workspace:
        raise ConfigError("give either WORKSPACE or --policy FILE, not both")
    if args.policy:
        if args.token_file:
            raise ConfigError(
                "--token-file is for WORKSPACE mode; a policy file holds token hashes"
            )
        try:
            from .policy_file import load_policy  # the file format: only when there is a file

            return load_policy(args.policy)
        except PolicyError as exc:
            raise ConfigError(str(exc)) from None
    if not args.workspace:
        raise ConfigError(
            "give the notes folder to serve (fs-notes serve WORKSPACE) or --policy FILE"
        )
    path = os.path.realpath(args.workspace)
    if not os.path.isdir(path):
        raise ConfigError(f"{args.workspace}: not a folder")
    token_hash = None
    if args.http:
        if not args.token_file:
            raise ConfigError("--http needs --token-file FILE (the bearer token clients must send)")
        token_hash = hash_token(read_token(args.token_file))
    elif args.token_file:
        raise ConfigError("--token-file only applies with --http")
    try:
        return Policy.for_single_workspace(path, _local_user(), token_sha256=token_hash)
    except PolicyError as exc:
        raise ConfigError(f"{args.workspace}: {exc}") from None


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"


def open_roots(policy: Policy) -> dict[str, WorkspaceRoot]:
    roots: dict[str, WorkspaceRoot] = {}
    for ws in policy.workspaces:
        try:
            roots[ws.name] = WorkspaceRoot.open(ws.path, symlinks=ws.symlinks)
        except (FsError, OSError) as exc:
            for root in roots.values():
                root.close()
            raise ConfigError(
                f'workspace "{ws.name}" ({ws.path}): cannot open the folder: {exc}'
            ) from None
    return roots


@dataclass
class ConfirmParts:
    """What notes_delete needs besides the workspaces (see tools/delete.py)."""

    sealer: StateSealer
    replay: ReplayStore
    audit: AuditLog


def open_confirm_parts(args: argparse.Namespace, policy: Policy | None = None) -> ConfirmParts:
    """The sealer, replay store and audit log. Without --state-key-file the key ring is kept
    beside the replay database (made there, 0600, on first start), so that a confirmation in
    flight survives a restart; an in-memory replay database gets a key that dies with us."""
    try:
        path = args.replay_db or default_replay_path()
    except (ValueError, OSError) as exc:
        raise ConfigError(f"the default state folder: {exc} (or pass --replay-db)") from None
    try:
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        if policy is not None:  # each principal's quota fits whatever the others hold
            per = policy.limits.nonces_per_principal
            rows = max(MAX_ROWS, per * len(policy.principals))
            replay = ReplayStore(path, max_rows=rows, per_principal=per)
        else:
            replay = ReplayStore(path)
    except UnsafeLocation as exc:
        raise ConfigError(f"the replay database {path}: {exc}") from None
    except sqlite3.DatabaseError as exc:
        raise ConfigError(
            f"the replay database {path} is damaged ({exc}); move it aside to start afresh "
            "(confirmations in flight are then lost)"
        ) from None
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"--replay-db {path}: {exc}") from None
    if replay.durable_claims:
        log.warning(
            "the kernel's boot id cannot be read: states sealed before a reboot cannot be "
            "told apart, so every confirmation claim is fsync'ed (synchronous=FULL)"
        )
    keep = None if args.state_key_file or path == ":memory:" else os.path.dirname(path) or "."
    try:
        if args.state_key_file:
            keyring = KeyRing.from_file(args.state_key_file)
        elif keep is not None:
            os.makedirs(keep, mode=0o700, exist_ok=True)
            keyring = KeyRing.kept_in(keep)
        else:
            keyring = KeyRing.ephemeral()
    except (KeyFileError, OSError) as exc:
        if args.state_key_file:
            raise ConfigError(f"--state-key-file {args.state_key_file}: {exc}") from None
        where = os.path.join(keep or "", KEPT_NAME)
        raise ConfigError(f"the state key file kept at {where}: {exc}") from None
    try:
        audit = AuditLog(args.audit_log)
    except AuditLogDamaged as exc:
        raise ConfigError(f"the audit log {args.audit_log}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"--audit-log {args.audit_log}: {exc.strerror}") from None
    return ConfirmParts(StateSealer(keyring), replay, audit)


def build_server(
    policy: Policy,
    roots: WorkspaceRoots,
    confirm: ConfirmParts,
    *,
    deleter: NoteDeleter | Literal["unconfined"],
    writer: NoteWriter | Literal["unconfined"],
    ids: IdRules | None = None,
) -> tuple[Dispatcher, NotesEnv]:
    """The dispatcher and tool state for these roots. `deleter` and `writer` are named by every
    caller: `serve` passes the confined workers (sandbox/confined.py); "unconfined" (the tools
    act in this process, through the filesystem layer only) is for in-process tests and the
    exercises' knock-out of the OS layer, and never a default. `serve` passes the default for
    `ids` (the lexical layer); only the escape exercises' knock-out target passes other rules."""
    from .app import build_dispatcher, build_methods
    from .tools import read_tools, resources, structure_tools, write_tools
    from .tools.context import NotesEnv
    from .tools.delete import DeleteTool, DirectDeleter
    from .tools.summarize import SummarizeTool

    replay = confirm.replay.path
    index_dir = None if replay == ":memory:" else os.path.dirname(os.path.abspath(replay))
    env = NotesEnv(policy, roots, ids, index_dir)
    delete = DeleteTool(
        env,
        confirm.sealer,
        confirm.replay,
        confirm.audit,
        DirectDeleter(env) if deleter == "unconfined" else deleter,
    )
    tools = (
        read_tools.build(env)
        + structure_tools.build(env)
        + write_tools.build(
            env, write_tools.DirectWriter(env) if writer == "unconfined" else writer
        )
        + [delete.spec(), SummarizeTool(env, confirm.sealer).spec()]
    )
    list_resources, read_resource = resources.build(env)
    methods = build_methods(tools, list_resources=list_resources, read_resource=read_resource)
    return build_dispatcher(methods), env


def close_inherited_fds() -> None:
    """Keep only stdin, stdout and stderr of what this process was started with: a directory fd
    left open by whoever started it would reach past the private view (".." from it) and past
    Landlock (stat and getdents on an open fd are not checked). (Python itself refuses to start
    with a folder as stdin, stdout or stderr.)"""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.closerange(3, soft if soft != resource.RLIM_INFINITY else 1 << 20)


def serve(args: argparse.Namespace) -> int:
    close_inherited_fds()
    bind = parse_bind(args.http) if args.http else None
    policy = build_policy(args)
    stdio_principal: Principal | None = None
    if bind is None:
        try:
            stdio_principal = policy.local_principal()
        except PolicyError as exc:
            raise ConfigError(str(exc)) from None
    for ws in policy.workspaces:
        if ws.worker_user is not None and os.geteuid() not in (0, ws.worker_user[1]):
            raise ConfigError(
                f'workspace "{ws.name}": worker_user = "{ws.worker_user[0]}" needs serve to run '
                "as root (or as that user)"
            )
    confirm = open_confirm_parts(args, policy)
    roots = open_roots(policy)
    if bind is not None:
        from .transport.http import split_host

        for entry in args.allow_host:
            try:
                split_host(entry)
            except ValueError:
                raise ConfigError(f"--allow-host takes HOST[:PORT], got {entry!r}") from None
    listener = _listen(bind, policy.limits.max_connections) if bind is not None else None
    port = int(listener.getsockname()[1]) if listener is not None else None
    confined = _confine_self(args, policy, confirm, port, roots)  # before any thread starts
    from .discovery import discover_method
    from .sandbox.confined import ConfinedDeleters, ConfinedWriters, OsLayer

    os_layer = OsLayer(
        policy,
        roots,
        allow_unconfined=args.allow_unconfined,
        self_confined=confined is not None and confined.enforced,
        host=confined.host if confined is not None else None,
    )

    def build() -> Dispatcher:
        full, _env = build_server(
            policy,
            roots,
            confirm,
            deleter=ConfinedDeleters(os_layer),
            writer=ConfinedWriters(os_layer),
        )
        return full

    # server/discover is answered at once; the tools (and pydantic) load just after.
    dispatcher = LazyDispatcher({"server/discover": discover_method(resources=True)}, build)
    dispatcher.warm_up(1.0)
    for ws in policy.workspaces:
        log.warning(
            "serving workspace %s (%s) with resolver %s",
            ws.name,
            ws.uri,
            roots[ws.name].resolver_name,
        )
    try:
        if bind is None:
            from .transport import stdio

            assert stdio_principal is not None
            out = stdio.claim_stdout()
            asyncio.run(stdio.serve(dispatcher, stdio_principal, out))
        else:
            assert listener is not None and port is not None
            _serve_http(args, policy, dispatcher, bind, listener)
    finally:
        os_layer.close()
        for root in roots.values():
            root.close()
        confirm.replay.close()
        confirm.audit.close()
    return 0


def _confine_self(
    args: argparse.Namespace,
    policy: Policy,
    confirm: ConfirmParts,
    port: int | None,
    roots: dict[str, WorkspaceRoot],
) -> SelfConfinement | None:
    """Confine this process (sandbox/selfconfine.py); what was done (None: --no-self-confine)."""
    if getattr(args, "no_self_confine", False):
        log.warning("the server does not confine itself (--no-self-confine)")
        return None
    from .sandbox.selfconfine import SelfConfinementFailed, confine_server

    try:
        done = confine_server(
            policy,
            replay_db=confirm.replay.path,
            http_port=port,
            port_file=getattr(args, "port_file", None),
            roots=roots,
        )
    except SelfConfinementFailed as exc:
        raise ConfigError(
            f"the server cannot confine itself with Landlock: {exc} "
            "(--no-self-confine runs without it)"
        ) from None
    if done.enforced:
        log.info(
            "the server confined itself: Landlock ABI %s, %d rules", done.abi, len(done.grants)
        )
    else:
        log.info("the server does not confine itself: %s", done.reason)
    return done


def _serve_http(
    args: argparse.Namespace,
    policy: Policy,
    dispatcher: Dispatcher,
    bind: HttpBind,
    listener: socket.socket,
) -> None:
    port = int(listener.getsockname()[1])
    from .transport import http

    def authenticate(token: str | None) -> Principal | None:
        if token is None:
            return None
        try:
            return policy.authenticate_token(token)
        except NotAuthenticated:
            return None

    if not bind.loopback:
        log.warning("listening on %s, which is not a loopback address", bind.host)

    def started(port: int) -> None:
        log.warning("Streamable HTTP at http://%s:%d/mcp", bind.host, port)
        if args.port_file:
            tmp = args.port_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(str(port))
            os.replace(tmp, args.port_file)

    # The listening socket was bound before self-confinement (which then allows binding that
    # port only); the Host check needs its real port.
    hosts: list[str] | None = [*http.loopback_hosts(port), *args.allow_host]
    if not bind.loopback:
        hosts = list(args.allow_host) or None
    origins = list(args.allow_origin) + (http.loopback_origins(port) if bind.loopback else [])
    limits = policy.limits
    app = http.build_app(
        dispatcher, authenticate, allowed_origins=origins, allowed_hosts=hosts, limits=limits
    )
    budget = connection_budget(limits.max_connections)
    if budget < limits.max_connections:
        log.warning(
            "at most %d HTTP connections (not %d): the rest of the file descriptors are kept "
            "for workers, notes and databases",
            budget,
            limits.max_connections,
        )
    http.run(
        app,
        bind.host,
        port,
        on_started=started,
        limits=limits,
        max_connections=budget,
        sock=listener,
    )


def _listen(bind: HttpBind, backlog: int) -> socket.socket:
    """The listening socket, bound now (exit 2 with one line if it cannot be)."""
    host = bind.host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        addresses = socket.getaddrinfo(host, bind.port, family, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        where = f"{bind.host}:{bind.port}"
        raise ConfigError(f"--http {where}: unknown host ({exc.strerror})") from None
    sock = socket.socket(addresses[0][0], socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addresses[0][4][:2])
        sock.listen(min(2048, max(16, backlog * 2)))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"--http {bind.host}:{bind.port}: cannot listen there: {exc.strerror}"
        ) from None
    sock.set_inheritable(False)
    return sock
