"""`fs-notes serve`: the server's lifecycle, from a typed configuration to a running transport.

`config.py` parses the command line and the policy once; `compose.compose` builds every part
(the root handles, the confirmation state, the self-confinement, the OS layer, the tools and
the dispatcher); this module orders the rest around it: close inherited fds, leave the
controlling terminal (a session of its own, behind a relay: sandbox/session.py), bind the
listening socket (self-confinement then allows that port only), compose, log the operator's
start-up summary (`startup.py`), run stdio or Streamable HTTP, and close everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import socket

from .compose import SelfConfine, ThroughOsLayer, compose
from .config import HttpBind, HttpOptions, ServeConfig
from .errors import ConfigError
from .limits import connection_budget
from .policy import NotAuthenticated, Policy, PolicyError, Principal
from .protocol.dispatch import Dispatcher

log = logging.getLogger("fs_notes.serve")


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
    config = ServeConfig.from_args(args)  # a bad configuration creates no log file
    from .sandbox.session import leave_terminal

    leave_terminal()  # no process of fs-notes keeps a controlling terminal (sandbox/session.py)
    if args.log_file is not None:  # opened now, before self-confinement (logfile.py)
        from .logfile import attach

        attach(
            args.log_file,
            args.log_file_max_bytes,
            args.log_file_backups,
            workspaces=[(ws.name, ws.path) for ws in config.policy.workspaces],
        )
    return run(config)


def run(config: ServeConfig) -> int:
    policy = config.policy
    stdio_principal: Principal | None = None
    if config.http is None:
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
    http = config.http
    listener: socket.socket | None = None

    def listen() -> int | None:
        """Bind the listening socket once the state is open (a refused workspace binds
        nothing), before self-confinement, which then allows binding that port only."""
        nonlocal listener
        if http is None:
            return None
        listener = _listen(http.bind, policy.limits.max_connections)
        return int(listener.getsockname()[1])

    def confine() -> SelfConfine | None:
        port = listen()
        if not config.self_confine:
            log.warning("the server does not confine itself (--no-self-confine)")
            return None
        return SelfConfine(port, http.port_file if http is not None else None)

    try:
        served = compose(
            policy,
            config.state,
            ThroughOsLayer(config.allow_unconfined),
            confine=confine,
            unused_days=config.unused_days,
            lazy=True,
        )
    except BaseException:
        if listener is not None:
            listener.close()
        raise
    from .startup import log_summary

    log_summary(config, served.roots, served.confirm, served.confined)
    try:
        if http is None:
            from .transport import stdio

            assert stdio_principal is not None
            out = stdio.claim_stdout()
            asyncio.run(stdio.serve(served.dispatcher, stdio_principal, out))
        else:
            assert listener is not None
            _serve_http(http, policy, served.dispatcher, listener)
    finally:
        served.close()
    return 0


def _serve_http(
    options: HttpOptions,
    policy: Policy,
    dispatcher: Dispatcher,
    listener: socket.socket,
) -> None:
    bind = options.bind
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
        log.info("listening: Streamable HTTP at http://%s:%d/mcp", bind.host, port)
        if options.port_file:
            _write_port_file(options.port_file, port)

    # The listening socket was bound before self-confinement (which then allows binding that
    # port only); the Host check needs its real port.
    hosts: list[str] | None = [*http.loopback_hosts(port), *options.allow_hosts]
    if not bind.loopback:
        hosts = list(options.allow_hosts) or None
    origins = [*options.allow_origins, *(http.loopback_origins(port) if bind.loopback else [])]
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


def _write_port_file(path: str, port: int) -> None:
    """Write `port` to `path` whole (a fresh, never-followed temporary file renamed into place):
    a name planted in the folder by someone else is neither followed nor overwritten. A failure
    is one log line; the server goes on (the port file is for whoever started it)."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o644)
        try:
            os.write(fd, str(port).encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        log.error("--port-file %s: cannot write the port: %s", path, exc.strerror)
        with contextlib.suppress(OSError):
            os.unlink(tmp)


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
