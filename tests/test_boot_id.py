"""Fail closed on the boot id (issue 15 item 5): when the kernel's boot id cannot be read, the
reboot check that lets the replay store skip an fsync per claim cannot run, so every claim is
made durable (synchronous=FULL), the server says so at start-up and `fs-notes check` reports it.

Faked from outside: a private mount namespace (as a regular user, in a user namespace of its
own, with every capability dropped before fs-notes starts) with /dev/null bound over the boot id
file. Positive control: the same program outside it sees the id and the WAL-only mode."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from mountns import command_prefix
from test_fs_support import unavailable

REPO = Path(__file__).resolve().parent.parent
PROGRAM = """
import json, sys, logging, io
sys.path.insert(0, {repo!r})
from fs_notes.rounds.boot import boot_id
from fs_notes.confirm.replay import ReplayStore
from fs_notes.check import report
store = ReplayStore({db!r})
sync = store._conn.execute("PRAGMA synchronous").fetchone()[0]
store.close()
print(json.dumps({{"boot_id": boot_id(), "synchronous": sync,
                  "durable": store.durable_claims, "check": report()["replay"]}}))
"""


def _run(tmp_path: Path, hidden: bool) -> dict[str, object]:
    code = PROGRAM.format(repo=str(REPO), db=str(tmp_path / f"replay-{hidden}.db"))
    command = [sys.executable, "-c", code]
    if hidden:
        script = (
            "mount --bind /dev/null /proc/sys/kernel/random/boot_id && exec \"$@\""
        )
        prefix, drop = command_prefix()
        command = [*prefix, "sh", "-c", script, "sh", *drop, *command]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_without_a_boot_id_every_claim_is_durable_and_it_is_said(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        unavailable("hiding the boot id needs unshare and mount")
    seen = _run(tmp_path, hidden=False)  # positive control
    assert isinstance(seen["boot_id"], str) and len(seen["boot_id"]) == 36
    assert seen["synchronous"] == 1 and seen["durable"] is False  # NORMAL
    assert seen["check"] == {"boot_id_readable": True, "durable_claims": False}
    hidden = _run(tmp_path, hidden=True)
    assert hidden["boot_id"] is None
    assert hidden["synchronous"] == 2 and hidden["durable"] is True  # FULL
    assert hidden["check"] == {"boot_id_readable": False, "durable_claims": True}


def test_the_server_says_so_at_start_up(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        unavailable("hiding the boot id needs unshare and mount")
    ws = tmp_path / "notes"
    ws.mkdir()
    script = "mount --bind /dev/null /proc/sys/kernel/random/boot_id && exec \"$@\""
    prefix, drop = command_prefix()  # as a regular user: its own user namespace, no capability
    proc = subprocess.run(
        [*prefix, "sh", "-c", script, "sh", *drop,
         sys.executable, "-m", "fs_notes", "serve", str(ws), "--replay-db",
         str(tmp_path / "state" / "r.db")],
        input="", capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "the kernel's boot id cannot be read" in proc.stderr
    assert "synchronous=FULL" in proc.stderr


def test_nothing_is_read_at_import_and_the_id_once_on_first_use() -> None:
    """Issue 28 item 3: rounds/request.py read /proc when it was imported. Now the boot id is
    read on first use, once (an audit hook counts the opens of its file)."""
    code = (
        "import sys\n"
        "opened = []\n"
        "sys.addaudithook(lambda e, a: opened.append(a[0]) if e == 'open' and "
        "str(a[0]).endswith('random/boot_id') else None)\n"
        "import fs_notes.rounds.request as request\n"
        "import fs_notes.tools.delete\n"
        "at_import = len(opened)\n"
        "first, second = request.this_boot(), request.this_boot()\n"
        "print(at_import, len(opened), first == second, len(first))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1", "True", "36"]
