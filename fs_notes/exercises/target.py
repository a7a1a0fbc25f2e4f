"""The knock-out target: the real server with exactly one containment layer replaced (hidden).

    python -m fs_notes.exercises.target --knockout {none,lexical,filesystem,os} --policy FILE
        --state DIR [--leak-fd DIR] [--bind SRC:DST ...] [--terminal TTY]

It builds the server the way `fs-notes serve --policy FILE` does (the same policy, root handles,
self-confinement, OS layer, tools and dispatcher, from the composition root `compose.py`) and
serves it over stdio, with these differences and no others:

- `--knockout lexical`: note ids and folders reach the filesystem layer unchecked, and URIs are
  parsed naively (`naive.naive_uri_parts`); authorization still decides which workspace.
- `--knockout filesystem`: `naive.NaiveRoot` instead of `fs.WorkspaceRoot` (path strings, plain
  open/unlink), and deletion by the attacker worker's bare unlink (`rawdelete.RawChanges`,
  confined through the real worker's entry point); writes happen in this (still self-confined)
  process.
- `--knockout os`: no self-confinement and no workers: writes and deletions in-process.
- Every response carries the refusal trace of its request (`trace.TRACE_KEY`).
- `--leak-fd DIR` (repeatable) keeps DIR open as an inheritable fd `LEAK_FD` (+1, ...): a leak to
  exploit, also handed to the raw delete workers, which must close it.
- `--bind SRC:DST` bind-mounts SRC on DST in a private mount namespace (the mount-point attack).
- `--terminal TTY`: started from that terminal, as from an operator's shell: it becomes the
  target's controlling terminal, held as fd `TERMINAL_FD` (the tty-injection attack). Then, as
  `serve` does, it leaves it (sandbox/session.py), but in the os knock-out.

Guarantees: none of this is reachable from `fs-notes serve` or the `fs-notes` command line: the
switch lives only in this module, which only the exercises and the tests start.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal

from fs_notes.sandbox.kinds import Mode
from fs_notes.sandbox.probe import HostReport

from ..compose import build_server, open_confirm_parts, open_os_layer, open_roots
from ..config import StatePaths
from ..errors import ConfigError
from ..fs import WorkspaceRoot
from ..fs.changes import InProcessChanges, NoteChanges
from ..policy import Policy, PolicyError
from ..policy_file import load_policy
from ..sandbox.launch import WORKER_PROGRAM
from .compromised import attack, refused
from .hostview import HostLookup
from .naive import PERMISSIVE_IDS, NaiveRoot
from .rawworker import RawWorker
from .trace import Trace
from .tracing import (
    COMPROMISED_METHOD,
    LEAK_FD,
    TERMINAL_FD,
    TracingChanges,
    TracingDispatcher,
    TracingPolicy,
    TracingRoot,
    traced_ids,
)

KNOCKOUTS = ("none", "lexical", "filesystem", "os")
log = logging.getLogger("fs_notes.exercises.target")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fs_notes.exercises.target")
    p.add_argument("--knockout", choices=KNOCKOUTS, required=True)
    p.add_argument("--policy", required=True)
    p.add_argument("--state", required=True, help="folder for the replay database and audit log")
    p.add_argument("--leak-fd", action="append", default=[], metavar="DIR")
    p.add_argument("--bind", action="append", default=[], metavar="SRC:DST")
    p.add_argument("--terminal", default=None, metavar="TTY")
    p.add_argument("--log-level", default="warning")
    return p


def _take_terminal(path: str) -> None:
    """Make the terminal `path` this process's controlling one (a session of its own, opened
    without O_NOCTTY), held as TERMINAL_FD: what a server started from a shell has on 0-2."""
    if os.getsid(0) != os.getpid():
        os.setsid()
    fd = os.open(path, os.O_RDWR)
    os.dup2(fd, TERMINAL_FD, inheritable=False)
    os.close(fd)


def _leak(paths: Sequence[str]) -> tuple[int, ...]:
    """Hold each folder open as an inheritable fd LEAK_FD, LEAK_FD + 1, ..."""
    fds = []
    for i, path in enumerate(paths):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        os.dup2(fd, LEAK_FD + i, inheritable=True)
        os.close(fd)
        fds.append(LEAK_FD + i)
    return tuple(fds)


def _confine_self(
    knockout: str, policy: Policy, replay_db: str, roots: dict[str, WorkspaceRoot]
) -> tuple[bool, HostReport | None]:
    """Whether Landlock confines this process, and the host probe made before the private view
    (without Landlock: what the workers' mode is chosen from)."""
    if knockout == "os":
        return False, None
    from ..sandbox.selfconfine import SelfConfinementFailed, confine_server

    try:
        # the monitor of a root target starts the attacker worker too (rawworker.py)
        programs = (WORKER_PROGRAM, RawWorker.PROGRAM)
        done = confine_server(policy, replay_db=replay_db, roots=roots, worker_programs=programs)
    except SelfConfinementFailed as exc:
        raise ConfigError(f"self-confinement failed: {exc}") from None
    return done.enforced, done.host


class _Attackers:
    """The compromised-process class: attacker code in this (confined) server, or in attacker
    workers confined like the real ones; in the no-os knock-out, here, unconfined."""

    def __init__(
        self,
        policy: Policy,
        knockout: str,
        self_confined: bool,
        trace: Trace,
        host: HostReport | None = None,
    ) -> None:
        self._paths = {ws.name: ws.path for ws in policy.workspaces}
        self._knockout, self._self_confined, self._trace = knockout, self_confined, trace
        self._host = host
        self._workers: dict[tuple[str, str], RawWorker] = {}

    def _mode(self) -> Mode:
        if self._self_confined:
            return "landlock"
        from fs_notes.sandbox.probe import probe, select_mode

        return select_mode(self._host or probe(), False)

    def _worker(self, workspace: str, kind: Literal["delete", "write"]) -> RawWorker:
        worker = self._workers.get((workspace, kind))
        if worker is None:
            worker = RawWorker(self._paths[workspace], kind, self._mode())
            self._workers[(workspace, kind)] = worker
        return worker

    def handle(self, params: dict[str, Any]) -> dict[str, Any]:
        where, op = str(params["where"]), str(params["op"])
        target, planted, victim = str(params["target"]), str(params["planted"]), params["victim"]
        aim = str(params.get("aim", ""))
        if where == "server" or self._knockout == "os":
            result = attack(op, target, planted, int(victim), aim)
        else:
            kind: Literal["delete", "write"] = "delete" if where == "delete" else "write"
            worker = self._worker(str(params["workspace"]), kind)
            result = worker.attack(op, target, planted, int(victim), aim)
        if refused(result):
            self._trace.record("os", f"{op} in the {where} process refused ({result})")
        return {"result": result}

    def close(self) -> None:
        for worker in self._workers.values():
            worker.close()


def run(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    from ..logline import install

    install(getattr(logging, str(args.log_level).upper(), logging.WARNING), tag="fs-notes target")
    if args.terminal is not None:
        _take_terminal(args.terminal)
        if args.knockout != "os":
            from ..sandbox.session import leave_terminal

            leave_terminal()  # what serve does first (sandbox/session.py)
    binds = [(src, dst) for src, _, dst in (b.partition(":") for b in args.bind)]
    if binds:
        from .mountns import enter_private_binds

        enter_private_binds(binds)
    leaked = _leak(args.leak_fd)
    try:
        policy = load_policy(args.policy)
        principal = policy.local_principal()
    except PolicyError as exc:
        raise ConfigError(str(exc)) from None
    state = StatePaths(
        replay_db=os.path.join(args.state, "replay.db"),
        audit_log=os.path.join(args.state, "audit.jsonl"),
    )
    confirm = open_confirm_parts(state)
    knockout: str = args.knockout
    trace = Trace()
    real = open_roots(policy) if knockout != "filesystem" else {}
    host = HostLookup()  # the judge's look at the host, from before the private view
    db = confirm.replay_db
    assert db is not None  # the target keeps its own SQLite file
    self_confined, host_report = _confine_self(knockout, policy, db, real)
    roots: dict[str, TracingRoot | NaiveRoot] = {}
    for ws in policy.workspaces:
        if knockout == "filesystem":
            roots[ws.name] = NaiveRoot(ws.path, trace, host)
        else:
            roots[ws.name] = TracingRoot(real[ws.name], ws.path, trace, host)
    closers = []
    # Knocked out, the OS layer is not there: the tools act in this process (no worker).
    changes: NoteChanges = InProcessChanges(roots)
    if knockout in ("none", "lexical"):
        layer, confined = open_os_layer(
            policy, real, allow_unconfined=False, self_confined=self_confined, host=host_report
        )
        closers.append(layer.close)
        changes = TracingChanges(confined, trace)
    elif knockout == "filesystem":
        from .rawdelete import RawChanges

        raw = RawChanges(
            policy, roots, self_confined=self_confined, host=host_report, leak_fds=leaked
        )
        closers.append(raw.close)
        changes = TracingChanges(raw, trace, frozenset({"unlink_note"}))
    dispatcher, _env = build_server(
        TracingPolicy.wrap(policy, trace, naive_uris=knockout == "lexical"),
        roots,
        confirm,
        changes,
        ids=PERMISSIVE_IDS if knockout == "lexical" else traced_ids(trace),
    )
    config = {
        "knockout": knockout,
        "selfConfined": self_confined,
        "uris": "naive" if knockout == "lexical" else "lexical",
        "ids": "permissive" if knockout == "lexical" else "lexical",
        "roots": "NaiveRoot" if knockout == "filesystem" else "WorkspaceRoot",
        "changes": {"none": "ConfinedChanges", "lexical": "ConfinedChanges"}.get(
            knockout, "RawChanges" if knockout == "filesystem" else "InProcessChanges"
        ),
        "leakedFds": list(leaked),
    }
    log.warning("knock-out target: %s", config)
    from ..transport import stdio

    attackers = _Attackers(policy, knockout, self_confined, trace, host_report)
    closers.append(attackers.close)
    private: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        COMPROMISED_METHOD: attackers.handle
    }
    try:
        out = stdio.claim_stdout()
        dispatch = TracingDispatcher(dispatcher, trace, config, private)
        asyncio.run(stdio.serve(dispatch, principal, out))
    finally:
        for close in closers:
            close()
        for root in real.values():
            root.close()
        confirm.close()
    return 0


def main() -> int:
    try:
        return run(sys.argv[1:])
    except ConfigError as exc:
        print(f"fs-notes target: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
