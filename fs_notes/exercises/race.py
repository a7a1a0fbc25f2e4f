"""The race harness: attackers swap a folder with a symlink to outside while the server works.

Two attacker processes (`swap.py`) exchange, with renameat2(RENAME_EXCHANGE) in a tight loop,
``ws/dir`` (a real folder of notes) with ``ws/link`` (a symlink to ``../outside``), and
``ws/file.md`` (a note) with ``ws/flink.md`` (a symlink to ``../outside/note.md``). Meanwhile the
real server with every layer on (the knock-out target with nothing knocked out: self-confined,
confined workers) is driven over stdio through reads, listings and whole delete flows (create a
victim in ``dir``, put a same-named decoy in ``outside``, ask, confirm). The run is bounded by a
number of attempts and by time.

Counted: attempts (operations), refusals (operations the server refused: some are expected, the
folder being a symlink half of the time), escapes: the secret of ``outside/note.md`` in any
response, its access time moved (a read), any outside decoy deleted or changed, any unexpected
file in ``outside``. With every layer on there must be none.
The control runs the same attackers against validate-then-use (realpath, check the prefix, then
open the string), in-process: it must escape, which shows the harness can see an escape.

Does not: prove the absence of races (it samples them); it exercises the paths the tools use.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .client import TargetClient, meta
from .layout import changed, prime_atime, snapshot

FULL_ATTEMPTS = 20_000
SHORT_ATTEMPTS = 400


@dataclass
class RaceOptions:
    attempts: int = FULL_ATTEMPTS
    seconds: float = 600.0
    control_seconds: float = 3.0
    timeout: float = 20.0


def _layout(root: Path, secret: str) -> None:
    ws, outside = root / "ws", root / "outside"
    (ws / "dir").mkdir(parents=True)
    outside.mkdir()
    (ws / "dir" / "note.md").write_text("# Inside\ninside\n")
    (ws / "file.md").write_text("# File\ninside\n")
    (outside / "note.md").write_text(f"# {secret}\nnot yours\n")
    (ws / "link").symlink_to("../outside")
    (ws / "flink.md").symlink_to("../outside/note.md")


def _policy(root: Path) -> Path:
    path = root / "policy.toml"
    ws = json.dumps(str(root / "ws"))
    path.write_text(
        '[[principal]]\nname = "racer"\nlocal = true\n\n'
        f'[[workspace]]\nname = "race"\npath = {ws}\nsandbox = "chroot"\n\n'
        '[[grant]]\nprincipal = "racer"\nworkspace = "race"\n'
        'operations = ["read", "write", "delete"]\n'
    )
    return path


def _attackers(root: Path, seconds: float) -> list[subprocess.Popen[bytes]]:
    pairs = [("ws/dir", "ws/link"), ("ws/file.md", "ws/flink.md")]
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fs_notes.exercises.swap",
                str(root / a),
                str(root / b),
                "--seconds",
                str(seconds),
            ],
            stdout=subprocess.PIPE,
        )
        for a, b in pairs
    ]


def _stop(procs: list[subprocess.Popen[bytes]]) -> int:
    """Stop the attackers; the number of swaps they made."""
    for proc in procs:
        proc.terminate()
    swaps = 0
    for proc in procs:
        out, _ = proc.communicate()
        swaps += int(out.strip() or 0)
    return swaps


class _Server:
    def __init__(self, root: Path, secret: str, options: RaceOptions) -> None:
        self.root, self.secret, self.options = root, secret, options
        state = root / "state"
        state.mkdir()
        command = [
            sys.executable, "-m", "fs_notes.exercises.target", "--knockout", "none",
            "--policy", str(_policy(root)), "--state", str(state),
        ]  # fmt: skip
        self.client = TargetClient(command, root / "target.log", root)
        self.uri = "file://" + urllib.parse.quote(str(root / "ws"))
        self.escapes: list[str] = []

    def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        return self.tool({"name": name, "arguments": {"workspaceUri": self.uri, **arguments}})

    def tool(self, params: dict[str, Any]) -> dict[str, Any]:
        response = self.client.ask(
            "tools/call", {**params, "_meta": meta()}, timeout=self.options.timeout
        )
        if self.secret in json.dumps(response):
            self.escapes.append(f"secret in a response to {params['name']}")
        return response


def _refused(response: dict[str, Any]) -> bool:
    result = response.get("result")
    return not isinstance(result, dict) or result.get("isError") is True


def _delete_flow(server: _Server, n: int) -> bool:
    """One create + delete round trip of victim n; whether the server refused a step."""
    name, title = f"v{n:06d}.md", f"Victim {n:06d}"
    if _refused(server.call("notes_create", id=f"dir/{name}", content=f"# {title}\n")):
        return True
    decoy = server.root / "outside" / name
    decoy.write_text(f"# {title}\n")
    before = snapshot(decoy)
    first = server.call("notes_delete", title=title)
    result = first.get("result", {})
    refused = True
    if result.get("resultType") == "input_required":
        schema = result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]
        offered = [o["const"] for o in schema["properties"]["note_id"]["oneOf"]]
        answer = {"action": "accept", "content": {"note_id": offered[0], "confirm": True}}
        retry = server.tool(
            {
                "name": "notes_delete",
                "arguments": {"workspaceUri": server.uri, "title": title},
                "inputResponses": {"delete_choice": answer},
                "requestState": result["requestState"],
            }
        )
        refused = _refused(retry)
    if changed(before, snapshot(decoy), reads=False) is not None:
        server.escapes.append(f"outside/{name} deleted or changed")
    return refused


def _check_outside(server: _Server, note: Path, expected: set[str], state: Any) -> Any:
    now = snapshot(note)
    how = changed(state, now, reads=True)
    if how is not None:
        server.escapes.append(f"outside/note.md {how}")
        prime_atime(note)
        now = snapshot(note)
    extra = set(os.listdir(note.parent)) - expected
    if extra:
        server.escapes.append(f"unexpected files outside: {sorted(extra)[:3]}")
        expected |= extra
    return now


def _control(root: Path, secret: str, seconds: float) -> dict[str, Any]:
    """Validate-then-use, in-process, against the same attackers: it must escape."""
    ws = os.path.realpath(root / "ws")
    attempts = escapes = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for rel in ("dir/note.md", "file.md"):
            attempts += 1
            path = os.path.join(ws, rel)
            try:
                real = os.path.realpath(path)
                if not real.startswith(ws + os.sep):
                    continue  # refused by the check
                with open(path, "rb") as f:  # ... and the string used later
                    data = f.read()
            except OSError:
                continue
            if secret.encode() in data:
                escapes += 1
    return {"attempts": attempts, "escapes": escapes}


def run_race(options: RaceOptions) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="fs-notes-race-"))
    secret = "SECRET-" + secrets.token_hex(8)
    try:
        _layout(base, secret)
        note = base / "outside" / "note.md"
        prime_atime(note)
        state = snapshot(note)
        expected = set(os.listdir(base / "outside"))
        server = _Server(base, secret, options)
        counts = {kind: {"attempts": 0, "refused": 0} for kind in ("read", "list", "delete")}
        attempts = refusals = 0
        attackers = _attackers(base, options.seconds + 60)
        started = time.monotonic()
        try:
            while attempts < options.attempts and time.monotonic() - started < options.seconds:
                kind = ("read", "read", "list", "delete")[attempts % 4]
                if kind == "read":
                    rel = "dir/note.md" if attempts % 4 == 0 else "file.md"
                    refused = _refused(server.call("notes_read", id=rel))
                elif kind == "list":
                    refused = _refused(server.call("notes_list", folder="dir"))
                else:
                    expected.add(f"v{attempts:06d}.md")
                    refused = _delete_flow(server, attempts)
                counts[kind]["attempts"] += 1
                counts[kind]["refused"] += refused
                attempts += 1
                refusals += refused
                if attempts % 50 == 0:
                    state = _check_outside(server, note, expected, state)
            seconds = time.monotonic() - started
            _check_outside(server, note, expected, state)  # before the control reads it
            control = _control(base, secret, options.control_seconds)
        finally:
            swaps = _stop(attackers)
            server.client.close()
        return {
            "attackers": len(attackers),
            "swaps": swaps,
            "attempts": attempts,
            "by_operation": counts,
            "refusals": refusals,
            "escapes": len(server.escapes),
            "escape_details": server.escapes[:10],
            "seconds": round(seconds, 2),
            "control": control,
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
