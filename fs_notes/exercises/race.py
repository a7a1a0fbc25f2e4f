"""The race harness: attackers swap a folder with a symlink to outside while the server works.

Two attacker processes (`swap.py`) exchange, with renameat2(RENAME_EXCHANGE) in a tight loop,
``ws/dir`` (a real folder of notes) with ``ws/link`` (a symlink to ``../outside``), and
``ws/file.md`` (a note) with ``ws/flink.md`` (a symlink to ``../outside/note.md``). Meanwhile the
real server with every layer on (the knock-out target with nothing knocked out: self-confined,
confined workers) is driven over stdio through reads, listings, whole delete flows (create a
victim in ``dir``, put a same-named decoy in ``outside``, ask, confirm) and move flows
(notes_move there and, when that was done, back), which take turns over four routes:
``dir/victim-N.md`` -> ``dir/moved-N.md``, ``file.md`` -> ``filed-N.md``, ``top-N.md`` ->
``dir/in-N.md``, and ``dir/victim-N.md`` -> ``out-N.md``. A source in ``dir`` is planted in the
real folder (through an fd held on it, wherever the attackers have put its name) with a
same-named decoy in ``outside``, so a move through the symlink would take the decoy; a target in
``dir`` has none, so a move through the symlink would make a file appear in ``outside``. The run
is bounded by a number of attempts and by time.

Counted: attempts (operations; a move flow is one), moves (notes_move calls) and how many were
done, refusals (operations the server refused: some are expected, the folder being a symlink
half of the time), escapes: the secret of ``outside/note.md`` in any response, its access time
moved (a read), any outside decoy deleted, moved or changed, any unexpected file in ``outside``
(checked after every move flow: a moved note ending up there is one). With every layer on there
must be none.
The control runs the same attackers against validate-then-use, in-process: reads (realpath,
check the prefix, then open the string) and moves (realpath of the source and of the target's
folder, check the prefixes, then os.rename the strings). Both must escape (a read of the secret;
a note moved into or out of ``outside``), which shows the harness can see either.

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
CYCLE = ("read", "read", "list", "move", "delete")  # the operations, in turn
# The move flows' routes (there, then back), in turn; N is the attempt's number.
MOVE_ROUTES = {
    "within dir": ("dir/victim-{n}.md", "dir/moved-{n}.md"),
    "file.md": ("file.md", "filed-{n}.md"),
    "into dir": ("top-{n}.md", "dir/in-{n}.md"),
    "out of dir": ("dir/victim-{n}.md", "out-{n}.md"),
}


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


def _plant(dir_fd: int, name: str, text: str) -> None:
    """A new note in the folder ``dir_fd`` is open on (the real ``dir``, whatever its name now)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _move_flow(
    server: _Server, n: int, route: str, real_dir: int, expected: set[str]
) -> list[bool]:
    """One notes_move of ``route`` for attempt n and, if it was done, the move back; whether
    each call was refused. Plants the source (and its outside decoy, for a source in ``dir``)."""
    ws, outside = server.root / "ws", server.root / "outside"
    there, back = (p.format(n=f"{n:06d}") for p in MOVE_ROUTES[route])
    decoy = None
    if there.startswith("dir/"):
        name = there.removeprefix("dir/")
        _plant(real_dir, name, f"# Victim {n:06d}\ninside\n")
        expected.add(name)
        decoy = outside / name
        decoy.write_text(f"# Decoy {n:06d}\n")
    elif there != "file.md":
        (ws / there).write_text(f"# Top {n:06d}\ninside\n")
    before = snapshot(decoy) if decoy is not None else None
    refused = [_refused(server.call("notes_move", id=there, newId=back))]
    if not refused[0]:
        refused.append(_refused(server.call("notes_move", id=back, newId=there)))
    if decoy is not None and changed(before, snapshot(decoy), reads=False) is not None:
        server.escapes.append(f"outside/{decoy.name} moved, deleted or changed")
    if there == "file.md" and not os.path.lexists(ws / there) and os.path.lexists(ws / back):
        os.rename(ws / back, ws / there)  # the attacker of file.md needs it back
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


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _control_move(ws: str, folders: dict[str, int]) -> bool | None:
    """Validate-then-use of a move of ``dir/ctl.md`` to ``dir/ctl-moved.md``: None when the
    check refused (or the rename failed), else whether it escaped (the note came from or went
    to ``outside``: rename resolves both strings anew). Puts the note back where it came from."""
    src, dst = os.path.join(ws, "dir", "ctl.md"), os.path.join(ws, "dir", "ctl-moved.md")
    try:
        for path in (src, os.path.dirname(dst)):
            if not os.path.realpath(path).startswith(ws + os.sep):
                return None  # refused by the check
        os.rename(src, dst)  # ... and the strings used later
    except OSError:
        return None
    went = next(k for k, fd in folders.items() if _exists(fd, "ctl-moved.md"))
    came = next(k for k, fd in folders.items() if not _exists(fd, "ctl.md"))
    os.rename("ctl-moved.md", "ctl.md", src_dir_fd=folders[went], dst_dir_fd=folders[came])
    return "outside" in (went, came)


def _control(root: Path, secret: str, seconds: float, real_dir: int) -> dict[str, Any]:
    """Validate-then-use reads and moves, in-process, against the same attackers: both must
    escape."""
    ws = os.path.realpath(root / "ws")
    outside = os.open(root / "outside", os.O_RDONLY | os.O_DIRECTORY)
    folders = {"outside": outside, "dir": real_dir}
    for fd in folders.values():
        _plant(fd, "ctl.md", "# Control\n")
    reads = {"attempts": 0, "escapes": 0}
    moves = {"attempts": 0, "escapes": 0}
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            for rel in ("dir/note.md", "file.md"):
                reads["attempts"] += 1
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
                    reads["escapes"] += 1
            moves["attempts"] += 1
            moves["escapes"] += _control_move(ws, folders) is True
    finally:
        os.close(outside)
    return {
        "attempts": reads["attempts"] + moves["attempts"],
        "escapes": reads["escapes"] + moves["escapes"],
        "reads": reads,
        "moves": moves,
    }


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
        real_dir = os.open(base / "ws" / "dir", os.O_RDONLY | os.O_DIRECTORY)
        counts = {kind: {"attempts": 0, "refused": 0} for kind in dict.fromkeys(CYCLE)}
        routes = {route: {"attempts": 0, "refused": 0} for route in MOVE_ROUTES}
        attempts = refusals = moves = moved = 0
        attackers = _attackers(base, options.seconds + 60)
        started = time.monotonic()
        try:
            while attempts < options.attempts and time.monotonic() - started < options.seconds:
                slot = attempts % len(CYCLE)
                kind = CYCLE[slot]
                if kind == "read":
                    rel = "dir/note.md" if slot == 0 else "file.md"
                    refused = _refused(server.call("notes_read", id=rel))
                elif kind == "list":
                    refused = _refused(server.call("notes_list", folder="dir"))
                elif kind == "move":
                    route = list(MOVE_ROUTES)[counts["move"]["attempts"] % len(MOVE_ROUTES)]
                    calls = _move_flow(server, attempts, route, real_dir, expected)
                    refused = calls[0]
                    moves += len(calls)
                    moved += calls.count(False)
                    routes[route]["attempts"] += 1
                    routes[route]["refused"] += refused
                    state = _check_outside(server, note, expected, state)
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
            control = _control(base, secret, options.control_seconds, real_dir)
        finally:
            swaps = _stop(attackers)
            server.client.close()
            os.close(real_dir)
        return {
            "attackers": len(attackers),
            "swaps": swaps,
            "attempts": attempts,
            "by_operation": counts,
            "moves": moves,  # notes_move calls (a flow's move back is one more)
            "moved": moved,  # ... that the server did
            "move_routes": routes,
            "refusals": refusals,
            "escapes": len(server.escapes),
            "escape_details": server.escapes[:10],
            "seconds": round(seconds, 2),
            "control": control,
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
