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
from dataclasses import dataclass
from typing import Any, Literal

from fs_notes.sandbox.kinds import Mode
from fs_notes.sandbox.probe import HostReport

from ..compose import Door, InThisProcess, Opened, Seen, SelfConfine, ThroughOsLayer, compose
from ..config import StatePaths
from ..errors import ConfigError
from ..fs import WorkspaceRoot
from ..fs.changes import OPS, NoteChanges, Op
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


@dataclass(frozen=True)
class _Traced:
    """A door whose refusals by the verbs in `traced` are recorded (tracing.TracingChanges)."""

    inner: Door
    trace: Trace
    traced: frozenset[Op] = frozenset(OPS)

    def open(self, opened: Opened) -> tuple[NoteChanges, Callable[[], None]]:
        changes, close = self.inner.open(opened)
        return TracingChanges(changes, self.trace, self.traced), close


@dataclass(frozen=True)
class _RawDeletes:
    """Layer 2 knocked out: changes in this (still self-confined) process over the naive roots,
    deletions by the attacker worker's bare unlink (rawdelete.RawChanges)."""

    leak_fds: tuple[int, ...]

    def open(self, opened: Opened) -> tuple[NoteChanges, Callable[[], None]]:
        from .rawdelete import RawChanges

        confined = opened.confined
        raw = RawChanges(
            opened.policy,
            opened.tool_roots,
            self_confined=confined is not None and confined.enforced,
            host=confined.host if confined is not None else None,
            leak_fds=self.leak_fds,
        )
        return raw, raw.close


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
    knockout: str = args.knockout
    trace = Trace()
    host = HostLookup()  # the judge's look at the host, from before the private view

    def tool_roots(real: dict[str, WorkspaceRoot]) -> dict[str, TracingRoot | NaiveRoot]:
        if knockout == "filesystem":
            return {ws.name: NaiveRoot(ws.path, trace, host) for ws in policy.workspaces}
        return {ws.name: TracingRoot(real[ws.name], ws.path, trace, host)
                for ws in policy.workspaces}  # fmt: skip

    seen = Seen(
        lambda real: TracingPolicy.wrap(real, trace, naive_uris=knockout == "lexical"),
        tool_roots,
        PERMISSIVE_IDS if knockout == "lexical" else traced_ids(trace),
        real_roots=knockout != "filesystem",
    )
    # Knocked out, the OS layer is not there: the tools act in this process (no worker).
    door: Door = {
        "none": _Traced(ThroughOsLayer(), trace),
        "lexical": _Traced(ThroughOsLayer(), trace),
        "filesystem": _Traced(_RawDeletes(leaked), trace, frozenset({"unlink_note"})),
    }.get(knockout, InThisProcess())
    # the monitor of a root target starts the attacker worker too (rawworker.py)
    confine = SelfConfine(worker_programs=(WORKER_PROGRAM, RawWorker.PROGRAM))
    served = compose(
        policy, state, door, confine=None if knockout == "os" else lambda: confine, seen=seen
    )
    confined = served.confined
    self_confined = confined is not None and confined.enforced
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

    host_report = confined.host if confined is not None else None
    attackers = _Attackers(policy, knockout, self_confined, trace, host_report)
    private: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        COMPROMISED_METHOD: attackers.handle
    }
    try:
        out = stdio.claim_stdout()
        dispatch = TracingDispatcher(served.dispatcher, trace, config, private)
        asyncio.run(stdio.serve(dispatch, principal, out))
    finally:
        attackers.close()
        served.close()
    return 0


def main() -> int:
    try:
        return run(sys.argv[1:])
    except ConfigError as exc:
        print(f"fs-notes target: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
