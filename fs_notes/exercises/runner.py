"""Run the catalogue against the real server, once per layer configuration, and judge each run.

For every configuration ("all" layers, "no-lexical", "no-filesystem", "no-os") the runner builds
each attack's hostile layout under a fresh temporary folder, writes a policy with one workspace
per attack, starts one knock-out target (`target.py`, the real server over stdio) and drives the
attacks through it with raw JSON-RPC, as a client would. Configurations run in parallel.

The verdict of one attack in one configuration, in this order:
- "escaped" if any protected file was read (its primed access time moved, or its secret marker
  appeared in a response), changed, created or removed; if a `keep` file is gone or changed; or
  if a request that must fail (a device read) succeeded;
- else "blocked:<layer>" for the first refusal the target's trace attributes to a layer;
- else "n/a" with the reason: nothing was there for a layer to refuse (the kernel refused on its
  own, or the request stayed harmlessly inside the workspace), or the host cannot run it.

Guarantees: every outside file an attack names is checked, before and after, from this process;
the verdict never relies on the server's word alone for an escape. Does not: clean up after a
crashed run beyond its temporary folder (bind mounts live only in the target's namespace).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fs_notes.sandbox.view import unavailable_reason as view_unavailable

from . import shown
from .aims import Aims
from .catalogue import ATTACKS, Attack
from .client import TargetClient, TargetFailed, meta
from .compromised import learned, traced_by
from .host import DOCUMENTED, HostFacts, measure
from .layout import (
    FileState,
    HostLimit,
    atime_detects_reads,
    build,
    changed,
    prime_atime,
    secret_note,
    snapshot,
)
from .mountns import can_bind
from .steps import Compromised, Delete, Mutate, Mutation, Race, Request, fill
from .swap import exchange
from .trace import LAYERS, TRACE_KEY, Event
from .tracing import COMPROMISED_METHOD, CONFIG_METHOD, LEAK_FD

COLUMNS = ("all", "no-lexical", "no-filesystem", "no-os")
KNOCKOUT = {"all": "none", "no-lexical": "lexical", "no-filesystem": "filesystem", "no-os": "os"}


@dataclass
class Options:
    short: bool = False
    race_attempts: int = 0  # per race attack and configuration; 0: 40 short, 400 full
    timeout: float = 20.0

    def attempts(self) -> int:
        return self.race_attempts or (40 if self.short else 400)


@dataclass
class Outcome:
    result: str  # "blocked:<layer>", "escaped" or "n/a"
    detail: str = ""
    why: str | None = None  # for "n/a"
    host_limited: bool = False
    requests: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"result": self.result, "detail": self.detail}
        if self.why is not None:
            out["why"] = self.why
        if self.host_limited:
            out["host_limited"] = True
        return out


@dataclass
class Matrix:
    attacks: tuple[Attack, ...]
    results: dict[str, dict[str, Outcome]]  # attack name -> column -> outcome
    secret: str
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    configs: dict[str, Any] = field(default_factory=dict)  # what each target says it runs
    host: HostFacts = DOCUMENTED  # what the run measured (expected.HOST_CONDITIONS)


@dataclass
class _Run:
    """What one attack in one configuration produced."""

    events: list[Event] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    shown: list[dict[str, Any]] = field(default_factory=list)  # responses but note reads
    harm: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _ok(response: dict[str, Any]) -> bool:
    result = response.get("result")
    return isinstance(result, dict) and result.get("isError") is not True


def _message(response: dict[str, Any]) -> str:
    if "error" in response:
        return f"error {response['error'].get('code')}: {response['error'].get('message')}"
    result = response.get("result", {})
    content = result.get("content") or [{}]
    text = str(content[0].get("text", "")) if isinstance(content[0], dict) else ""
    return f"tool error: {text}" if result.get("isError") else "succeeded"


def _feed_fifo(path: Path, data: bytes, stop: threading.Event) -> None:
    """An outside process writing into a FIFO as soon as someone opens it for reading."""
    end = time.monotonic() + 10
    while not stop.is_set() and time.monotonic() < end:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            time.sleep(0.001)
            continue
        try:
            os.write(fd, data)
        except OSError:
            pass
        finally:
            os.close(fd)
        return


def _apply(root: Path, m: Mutation, names: dict[str, str]) -> None:
    if m.op == "rename":
        os.rename(root / m.path, root / m.other)
    elif m.op == "symlink":
        os.symlink(fill(m.other, names), root / m.path)
    else:
        exchange(root / m.path, root / m.other)


class _Column:
    def __init__(
        self, column: str, base: Path, secret: str, options: Options, host: dict[str, str]
    ) -> None:
        self.column = column
        self.base = base / column
        self.secret = secret
        self.options = options
        self.host = host  # capability -> why not ("" when available)
        self.client: TargetClient | None = None
        self.failed: str | None = None
        self.binds: list[tuple[str, str]] = []
        self.leaks: list[str] = []
        self.leak_fd: dict[str, int] = {}
        self.config: dict[str, Any] = {}
        self.exit_note: str | None = None
        self.ws_names: dict[str, str] = {}
        self.victims: list[subprocess.Popen[bytes]] = []  # reaped when the target is gone
        self.terminal = -1  # the other end of the terminal the target is started from

    def _names(self, attack: Attack) -> dict[str, str]:
        root = self.base / attack.name
        quoted = urllib.parse.quote(str(root))
        return {
            "ws": f"file://{quoted}/ws",
            "root_uri": f"file://{quoted}",
            "rootq": quoted,
            "root": str(root),
            "leakfd": str(self.leak_fd.get(attack.name, "")),
            "wsname": self.ws_names.get(attack.name, ""),
        }

    # -- set-up ----------------------------------------------------------------------------

    def _prepare(self, attacks: tuple[Attack, ...]) -> tuple[list[Attack], dict[str, Outcome]]:
        ready: list[Attack] = []
        limited: dict[str, Outcome] = {}
        for attack in attacks:
            root = self.base / attack.name
            if self.column in attack.not_run:
                limited[attack.name] = Outcome("n/a", why=attack.not_run[self.column])
                continue
            if attack.needs_mount and self.host.get("mount"):
                limited[attack.name] = Outcome("n/a", why=self.host["mount"], host_limited=True)
                continue
            if attack.needs_view and self.host.get("view"):
                why = f"no private view here: {self.host['view']}"
                limited[attack.name] = Outcome("n/a", why=why, host_limited=True)
                continue
            fd = str(LEAK_FD + len(self.leaks))
            names = {"leakfd": fd, "secret": self.secret}  # build fills {root}
            layout = tuple(fill(e, names) for e in attack.layout)
            try:
                built = build(root, layout, secret_note(self.secret))
            except HostLimit as exc:
                limited[attack.name] = Outcome("n/a", why=str(exc), host_limited=True)
                continue
            if attack.leak is not None:
                self.leak_fd[attack.name] = LEAK_FD + len(self.leaks)
                self.leaks.append(str(root / attack.leak))
            self.binds += built.binds
            ready.append(attack)
        return ready, limited

    def _policy(self, attacks: list[Attack]) -> Path:
        lines = ['[[principal]]\nname = "exerciser"\nlocal = true\n']
        for i, attack in enumerate(attacks):
            self.ws_names[attack.name] = f"a{i}"
            ws = json.dumps(str(self.base / attack.name / "ws"))
            ops = json.dumps(list(attack.operations))
            lines.append(f'[[workspace]]\nname = "a{i}"\npath = {ws}\nsandbox = "chroot"\n')
            lines.append(f'[[grant]]\nprincipal = "exerciser"\nworkspace = "a{i}"\n'
                         f"operations = {ops}\n")  # fmt: skip
        path = self.base / "policy.toml"
        path.write_text("\n".join(lines), encoding="utf-8")
        return path

    def _start(self, policy: Path) -> TargetClient:
        state = self.base / "state"
        state.mkdir(exist_ok=True)
        command = [
            sys.executable, "-m", "fs_notes.exercises.target",
            "--knockout", KNOCKOUT[self.column], "--policy", str(policy), "--state", str(state),
        ]  # fmt: skip
        for leak in self.leaks:
            command += ["--leak-fd", leak]
        for src, dst in self.binds:
            command += ["--bind", f"{src}:{dst}"]
        # the terminal it is started from, as from a shell (the tty-injection attack reads here)
        master, slave = os.openpty()
        os.set_blocking(master, False)
        self.terminal = master
        command += ["--terminal", os.ttyname(slave)]
        try:
            return TargetClient(command, self.base / "target.log", self.base)
        finally:
            os.close(slave)

    # -- running ---------------------------------------------------------------------------

    def run(self, attacks: tuple[Attack, ...]) -> dict[str, Outcome]:
        self.base.mkdir(parents=True)
        ready, outcomes = self._prepare(attacks)
        if ready:
            self.client = self._start(self._policy(ready))
            try:
                answer = self.client.ask(CONFIG_METHOD, {"_meta": meta()}, self.options.timeout)
                self.config = answer.get("result", {})
                for attack in ready:
                    outcomes[attack.name] = self._attack(attack)
            finally:
                code = self.client.close()
                os.close(self.terminal)
                if code != 0:
                    self.exit_note = f"{self.column}: the target exited with status {code}"
                for victim in self.victims:
                    victim.wait(timeout=10)
        return outcomes

    def _send(self, request: Request, names: dict[str, str], run: _Run) -> dict[str, Any]:
        assert self.client is not None
        params = dict(fill(request.params, names))
        params["_meta"] = meta(request.capabilities)
        stop = threading.Event()
        feeder = None
        if request.feed_fifo is not None:
            path = Path(names["root"]) / request.feed_fifo
            feeder = threading.Thread(
                target=_feed_fifo, args=(path, f"# {self.secret}\n".encode(), stop), daemon=True
            )
            feeder.start()
        try:
            response = self.client.ask(request.method, params, timeout=self.options.timeout)
        finally:
            stop.set()
            if feeder is not None:
                feeder.join(1)
        run.responses.append(response)
        if request.method != "resources/read" and params.get("name") != "notes_read":
            run.shown.append(response)
        run.events += [Event.from_json(e) for e in response.get(TRACE_KEY, [])]
        if request.harm_if_ok and _ok(response):
            run.harm.append(f"{request.method} succeeded on a non-note: {_message(response)}")
        return response

    def _compromised(self, step: Compromised, names: dict[str, str], run: _Run) -> None:
        params = {
            "where": step.where,
            "op": step.op,
            "target": "{root}/outside/secret.md",
            "planted": "{root}/outside/planted",
            "victim": "{victim}",
            "aim": "{aim}",
            "workspace": "{wsname}",
        }
        response = self._send(Request(COMPROMISED_METHOD, params), names, run)
        result = str(response.get("result", {}).get("result", "?"))
        run.notes.append(f"{step.op} in the {step.where} process: {result[:80]}")
        harm = learned(step.op, result)
        if harm is not None:
            run.harm.append(f"{harm} (the {step.where} process)")

    def _delete(self, step: Delete, root: Path, names: dict[str, str], run: _Run,
                after_mutation: Callable[[], None]) -> None:  # fmt: skip
        args = {"workspaceUri": "{ws}", "title": step.title}
        first = self._send(Request("tools/call", {"name": "notes_delete", "arguments": args}),
                           names, run)  # fmt: skip
        result = first.get("result", {})
        if result.get("resultType") != "input_required":
            run.notes.append(f"round 1: {_message(first)}")
            return
        form = result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]
        offered = [o["const"] for o in form["properties"]["note_id"]["oneOf"]]
        if step.choose not in offered:
            run.notes.append(f"round 1 offered {offered}, not {step.choose}")
            return
        for m in step.between:
            _apply(root, m, names)
        after_mutation()
        answer = {"action": "accept", "content": {"note_id": step.choose, "confirm": True}}
        retry = {
            "name": "notes_delete",
            "arguments": args,
            "inputResponses": {"delete_choice": answer},
            "requestState": result["requestState"],
        }
        response = self._send(Request("tools/call", retry), names, run)
        run.notes.append(f"the retry got {_message(response)}")

    def _race(self, step: Race, root: Path, names: dict[str, str], run: _Run) -> None:
        a, b = root / step.swap[0], root / step.swap[1]
        exchange(a, b)  # the first attempt is made with the pair swapped, deterministically
        self._send(step.request, names, run)
        exchange(a, b)
        attacker = subprocess.Popen(
            [sys.executable, "-m", "fs_notes.exercises.swap", str(a), str(b), "--seconds", "60"],
            stdout=subprocess.DEVNULL,
        )
        try:
            started = time.monotonic()  # wait until the attacker is really swapping
            while not a.is_symlink() and time.monotonic() - started < 5:
                time.sleep(0.001)
            for _ in range(self.options.attempts()):
                response = self._send(step.request, names, run)
                if self.secret in json.dumps(response):
                    break
        finally:
            attacker.terminate()
            attacker.wait()

    def _attack(self, attack: Attack) -> Outcome:
        if self.failed is not None:
            return Outcome("n/a", why=f"not run: {self.failed}")
        root = self.base / attack.name
        names = self._names(attack)
        protected = [root / p for p in attack.protected]
        for path in protected:
            prime_atime(path)
        before = {p: snapshot(p) for p in protected}
        keep: dict[Path, FileState | None] = {root / p: snapshot(root / p) for p in attack.keep}

        def after_mutation() -> None:
            for path, state in keep.items():
                if state is None:
                    keep[path] = snapshot(path)

        run = _Run()
        victim = None
        if any(isinstance(step, Compromised) for step in attack.steps):
            # A process the attacker must not trace, nor read the environment of (it carries
            # the secret marker there).
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "FS_NOTES_SECRET": self.secret}
            victim = subprocess.Popen(["sleep", "60"], env=env)
            names["victim"] = str(victim.pid)
            _until_exec_done(victim.pid)
            op = next(s.op for s in attack.steps if isinstance(s, Compromised))
            aims = Aims(op, self.secret, victim, self.terminal)
            names["aim"] = aims.aim
        try:
            for step in attack.steps:
                if isinstance(step, Compromised):
                    self._compromised(step, names, run)
                elif isinstance(step, Request):
                    self._send(step, names, run)
                elif isinstance(step, Mutate):
                    for m in step.mutations:
                        _apply(root, m, names)
                    after_mutation()
                elif isinstance(step, Delete):
                    self._delete(step, root, names, run, after_mutation)
                else:
                    self._race(step, root, names, run)
        except TargetFailed as exc:
            self.failed = f"the target failed during {attack.name}: {exc}"
            return Outcome("n/a", why=self.failed, requests=len(run.responses))
        finally:
            if victim is not None:
                run.harm += aims.harm()
                aims.close()
                tracer = traced_by(victim.pid)
                if tracer:
                    run.harm.append(f"the victim process {victim.pid} was traced by {tracer}")
                victim.kill()
                try:  # a traced victim is reaped only once its tracer (the target) lets go
                    victim.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    self.victims.append(victim)
        reads = self.host.get("atime", "") == ""
        for path in protected:
            how = changed(before[path], snapshot(path), reads=reads)
            if how is not None:
                run.harm.append(f"{path.relative_to(root)} {how}")
        for path, state in keep.items():
            now = snapshot(path)
            if state is not None and (
                now is None or (now.ino, now.content) != (state.ino, state.content)
            ):
                run.harm.append(f"{path.relative_to(root)} deleted or changed")
        if self.secret in json.dumps(run.responses):
            run.harm.append("the secret marker appeared in a response")
        if attack.served is not None:
            _judge_rendering(attack, run)
        return _verdict(run)


def _until_exec_done(pid: int) -> None:
    """Wait (at most 2 s) until `pid`'s environment is in place: Popen returns when the exec
    closed its fds, which is before the new program's environment is set up."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f.read(1):
                    return
        except OSError:
            return
        time.sleep(0.005)


def _judge_rendering(attack: Attack, run: _Run) -> None:
    """A rendering attack: harm if anything shown misleads (shown.py); refused by the rendering
    if the hostile name was served exactly and nothing shown misled."""
    assert attack.served is not None
    run.harm += shown.harm(run.shown, attack.forged)
    if any(attack.served in shown.served_ids(r) for r in run.responses):
        run.events.insert(
            0, Event("render", f"{attack.served!a} served exactly, shown escaped")
        )
    else:
        run.notes.append(f"{attack.served!a} was never served")


def _explain(event: Event) -> str:
    if event.layer == "kernel":
        return f"the kernel refused on its own ({event.detail})"
    if event.detail.endswith("NoteNotFound"):
        return "the name was taken literally, and no such note exists"
    return event.detail


def _verdict(run: _Run) -> Outcome:
    count = len(run.responses)
    if run.harm:
        return Outcome("escaped", detail="; ".join(run.harm), requests=count)
    for event in run.events:
        if event.layer in LAYERS:
            return Outcome(f"blocked:{event.layer}", detail=event.detail, requests=count)
    said = [_explain(e) for e in run.events] + run.notes
    if not said and run.responses and all(_ok(r) for r in run.responses):
        said = ["the request succeeded and stayed inside the workspace"]
    elif not said and run.responses:
        said = [_message(run.responses[-1])]
    return Outcome(
        "n/a",
        why="nothing there for a layer to refuse: " + ("; ".join(dict.fromkeys(said)) or "-"),
        requests=count,
    )


def run_matrix(
    options: Options,
    attacks: tuple[Attack, ...] = ATTACKS,
    columns: tuple[str, ...] = COLUMNS,
    keep_files: bool = False,
) -> Matrix:
    """Run every attack in every configuration (in parallel), in a temporary folder."""
    import secrets

    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="fs-notes-exercises-"))
    secret = "SECRET-" + secrets.token_hex(8)
    try:
        facts = measure(
            mount=can_bind(str(base / "scratch")) or "",
            view=view_unavailable() or "",
            atime="" if atime_detects_reads(base) else "access times are not recorded here",
        )
        host = {"mount": facts.mount, "atime": facts.atime, "view": facts.view}
        runs = {c: _Column(c, base, secret, options, host) for c in columns}
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(columns)) as pool:
            futures = {c: pool.submit(runs[c].run, attacks) for c in columns}
            by_column = {c: f.result() for c, f in futures.items()}
    finally:
        if not keep_files:
            shutil.rmtree(base, ignore_errors=True)
    results = {a.name: {c: by_column[c][a.name] for c in columns} for a in attacks}
    detection = "access time and content" if not host["atime"] else "content only"
    notes = [f"outside files checked by {detection}"]
    if host["mount"]:
        notes.append(host["mount"])
    configs = {c: runs[c].config for c in columns}
    notes += [n for n in (runs[c].exit_note for c in columns) if n is not None]
    if configs.get("all", {}).get("selfConfined") is False:
        notes.append(
            "the server could not confine itself with Landlock here; the documented matrix "
            "assumes it does (without it, reads and writes in the no-filesystem column escape)"
        )
    return Matrix(attacks, results, secret, time.monotonic() - started, notes, configs, facts)
