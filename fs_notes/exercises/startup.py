"""The start-up class: the real `fs-notes serve` on hostile layouts, judged from outside.

Each case of `startup_cases.py` is built twice in a temporary folder, hostile and made right
(its control), and the real server is started on each (`python -m fs_notes serve ...`, the
case's policy and a private --state-dir, XDG folders of its own) with one `initialize` request
on stdin, then end of input. No knock-out applies: nothing of the server is replaced, so a case
has one result, not a row of the matrix.

The verdict of a case, from the disk and the server's exit only, in this order:
- "escaped" if the server wrote anything on stdout (it answered: it served the layout), if a
  note of the layout or a folder holding one changed (content, mode, owner, modification time,
  inode: a folder's moves when an entry is made or removed in it) or went, or if
  anything was made in the state folder, the server's XDG folders or (the replay and audit
  cases) the folder given for the file;
- else "blocked:start-up" if it exited with status 2 and its last line on stderr is exactly
  the refusal the case states (the detail is that line);
- else "n/a", saying how it ended instead (another status, another line, no end in time).
Its control is "started" when the server answered the `initialize` with a result and left the
notes and their folders as they were, "escaped" if one changed, "refused" otherwise (the
detail says why).

Guarantees: the judgment never takes the server's word for anything but the line it printed;
every folder a case names is listed before and after; nothing is made outside the temporary
folder (the child's XDG_STATE_HOME and XDG_CONFIG_HOME lie in it), which is removed. Does not:
prove that serve refuses layouts no case builds, or that it would refuse them in another order
of its checks than the one the case provokes.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .classes import STARTUP
from .client import CLIENT_INFO
from .startup_cases import CASES, Layout, StartupCase, folder

BLOCKED = "blocked:start-up"
LEGACY_VERSION = "2025-11-25"  # `initialize`: the handshake a client opens with
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO},
}


@dataclass(frozen=True)
class NoteState:
    content: bytes
    mode: int
    uid: int
    gid: int
    mtime_ns: int
    ino: int


@dataclass(frozen=True)
class Ended:
    """How one server run ended, as seen from outside."""

    code: int | None  # None: it did not end in time (then killed)
    stdout: str
    last_line: str  # of stderr


@dataclass(frozen=True)
class StartupOutcome:
    name: str
    why: str
    result: str  # BLOCKED, "escaped" or "n/a"
    detail: str
    control: str  # "started", "refused" or "escaped"
    control_detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "class": STARTUP,
            "why": self.why,
            "result": self.result,
            "detail": self.detail,
            "control": self.control,
            "control_detail": self.control_detail,
        }


def note_state(path: Path) -> NoteState | None:
    """``path``'s state, not following a link (None: it is not there); read without moving its
    access time where this user may."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    content = b""
    if stat.S_ISREG(st.st_mode):
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(path, flags | os.O_NOATIME)
        except PermissionError:  # O_NOATIME needs ownership (or CAP_FOWNER)
            fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as f:
            content = f.read()
    return NoteState(content, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ino)


def _listing(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return ["(the folder itself is gone)"]


def serve(layout: Layout, cwd: Path, timeout: float) -> Ended:
    """Start the real server on ``layout``, send it one `initialize` and end its input."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **layout.env}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fs_notes", "serve", *layout.args],
            input=json.dumps(INITIALIZE) + "\n", capture_output=True, text=True,
            timeout=timeout, cwd=cwd, env=env, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else bytes(exc.stdout or b"").decode()
        return Ended(None, out, f"did not end within {timeout:.0f} s (killed)")
    lines = done.stderr.strip().splitlines()
    return Ended(done.returncode, done.stdout, lines[-1] if lines else "")


def _answered(stdout: str) -> bool:
    """Whether the server answered the `initialize` with a result."""
    for line in stdout.splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(message, dict) and message.get("id") == 1 and "result" in message:
            return True
    return False


def _changes(root: Path, before: dict[Path, NoteState | None]) -> list[str]:
    harm = []
    for path, state in before.items():
        now = note_state(path)
        if now != state:
            how = "removed" if now is None else _how(state, now)
            harm.append(f"{path.relative_to(root)} {how}")
    return harm


def _how(before: NoteState | None, now: NoteState) -> str:
    if before is None:
        return "created"
    names = ("content", "mode", "uid", "gid", "mtime_ns", "ino")
    fields = [n for n in names if getattr(before, n) != getattr(now, n)]
    return "changed: " + ", ".join(fields)


def judge_hostile(layout: Layout, root: Path, before: dict[Path, NoteState | None],
                  ended: Ended) -> tuple[str, str]:  # fmt: skip
    """The case's result and detail, as the module says."""
    harm = []
    if ended.stdout.strip():
        harm.append(f"it answered on stdout, serving the layout: {ended.stdout.strip()[:120]}")
    harm += _changes(root, before)
    for path in layout.untouched:
        made = _listing(path)
        if made:
            harm.append(f"{path.relative_to(root)}/ now holds {', '.join(made)}")
    if harm:
        return "escaped", "; ".join(harm)
    if ended.code == 2 and ended.last_line == layout.refusal:
        return BLOCKED, ended.last_line
    how = "did not end" if ended.code is None else f"exited with status {ended.code}"
    return "n/a", f"{how}, not with the refusal expected ({layout.refusal}): {ended.last_line}"


def judge_control(layout: Layout, root: Path, before: dict[Path, NoteState | None],
                  ended: Ended) -> tuple[str, str]:  # fmt: skip
    """The control's result and detail: it must start and answer."""
    harm = _changes(root, before)
    if harm:
        return "escaped", "; ".join(harm)
    if ended.code == 0 and _answered(ended.stdout):
        return "started", "answered initialize, then ended with its input (status 0)"
    how = "did not end" if ended.code is None else f"exited with status {ended.code}"
    return "refused", f"{how} without answering: {ended.last_line}"


def _run_one(case: StartupCase, root: Path, hostile: bool, timeout: float) -> tuple[str, str]:
    folder(root)
    layout = case.build(root, hostile)
    before = {path: note_state(path) for path in layout.kept}
    if hostile and any(_listing(p) for p in layout.untouched):
        return "n/a", "the layout left a folder that must stay empty non-empty (a harness bug)"
    ended = serve(layout, root, timeout)
    judge = judge_hostile if hostile else judge_control
    return judge(layout, root, before, ended)


def run_case(case: StartupCase, base: Path, timeout: float = 60.0) -> StartupOutcome:
    result, detail = _run_one(case, base / case.name / "hostile", True, timeout)
    control, control_detail = _run_one(case, base / case.name / "control", False, timeout)
    return StartupOutcome(case.name, case.why, result, detail, control, control_detail)


def run_startup(
    cases: tuple[StartupCase, ...] = CASES, timeout: float = 60.0, keep_files: bool = False
) -> dict[str, Any]:
    """Every case and its control (cases in parallel), in a temporary folder: the JSON of
    `fs-notes exercises --json` under ``"startup"``."""
    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="fs-notes-startup-"))
    try:
        folder(base / "cases")
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(cases) or 1) as pool:
            outcomes = list(pool.map(lambda c: run_case(c, base / "cases", timeout), cases))
    finally:
        if not keep_files:
            shutil.rmtree(base, ignore_errors=True)
    blocked = sum(o.result == BLOCKED for o in outcomes)
    started_ok = sum(o.control == "started" for o in outcomes)
    return {
        "class": STARTUP,
        "cases": [o.to_json() for o in outcomes],
        "blocked": blocked,
        "escapes": sum(o.result == "escaped" for o in outcomes),
        "controls_started": started_ok,
        "root": os.geteuid() == 0,
        "seconds": round(time.monotonic() - started, 2),
        "passed": blocked == started_ok == len(outcomes),
    }
