"""`serve --log-file FILE` (issue 25 item 5): created 0600; a symlink, a FIFO or a hard link
planted at its name is refused (exit 2, the target untouched); and rotation by size keeps
working in a server that has confined itself with Landlock (the server proves it in its own
log), without creating, renaming or removing anything in the log's folder after start-up (the
folder's listing and each file's inode are the same before and after a dozen rotations).
Confinement runs in the server's own process, started here as a subprocess."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from layers import requirement
from oslayer import only_where
from preludes import ATTEMPT, run_child
from test_fs_support import one_note
from wire import REPO, StdioServer, call_tool, child_env

LINE = re.compile(r"^fs-notes (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")


def _refused(tmp_path: Path, name: Path) -> subprocess.CompletedProcess[str]:
    notes = one_note(tmp_path)
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", str(notes), "--log-file", str(name)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=REPO,
        timeout=30,
    )


def test_a_symlink_planted_at_the_name_is_refused_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    target.chmod(0o644)
    before = target.stat()
    link = tmp_path / "server.log"
    link.symlink_to(target)
    done = _refused(tmp_path, link)
    assert done.returncode == 2
    assert done.stderr.strip() == f"fs-notes: --log-file {link}: is a symbolic link (refused)"
    after = target.stat()
    assert target.read_text() == "keep me\n"
    assert (after.st_mode, after.st_size, after.st_mtime_ns) == (
        before.st_mode,
        before.st_size,
        before.st_mtime_ns,
    )
    assert not Path(f"{link}.1").exists()  # nothing half-done


def test_a_fifo_or_a_second_hard_link_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    done = _refused(tmp_path, fifo)
    assert done.returncode == 2
    assert done.stderr.strip() == f"fs-notes: --log-file {fifo}: not a regular file"
    mine = tmp_path / "mine"
    mine.write_text("mine\n")
    linked = tmp_path / "linked.log"
    os.link(mine, linked)
    (tmp_path / "again").mkdir()
    done = _refused(tmp_path / "again", linked)
    assert done.returncode == 2
    assert done.stderr.strip() == f"fs-notes: --log-file {linked}: has 2 hard links (refused)"
    assert mine.read_text() == "mine\n"


def test_a_rotated_file_that_cannot_be_made_leaves_nothing_half_done(tmp_path: Path) -> None:
    """FILE.2 cannot be opened (a folder sits at its name): serve exits 2 naming it, and what
    this start made of FILE and FILE.1 is removed again; an existing FILE keeps its content and
    mode (it is made 0600 only once every file is open). Positive control: with the folder gone
    the same start creates all of them."""
    log = tmp_path / "server.log"
    Path(f"{log}.2").mkdir()
    done = _refused(tmp_path, log)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"fs-notes: --log-file {log}.2: is a folder, not a file "
        f"(rotated file 2 of --log-file {log}: nothing was created)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "server.log.2"]
    log.write_text("older lines\n")
    log.chmod(0o640)
    (tmp_path / "again").mkdir()
    again = _refused(tmp_path / "again", log)
    assert again.returncode == 2
    assert log.read_text() == "older lines\n" and stat.S_IMODE(log.stat().st_mode) == 0o640
    assert not Path(f"{log}.1").exists()
    Path(f"{log}.2").rmdir()
    (tmp_path / "third").mkdir()
    started = _refused(tmp_path / "third", log)  # stdin is empty: serve, then exit on EOF
    assert started.returncode == 0, started.stderr
    assert all(Path(f"{log}{s}").is_file() for s in ("", ".1", ".2", ".3"))
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_a_log_file_inside_a_served_workspace_folder_is_refused(tmp_path: Path) -> None:
    """The log holds note ids and principal names: inside a workspace it would be served (as a
    note, named .md), watched and readable with the notes. Refused with exit 2 before anything
    is made, also through a symlink to the folder; beside the folder it is accepted."""
    notes = one_note(tmp_path)
    (tmp_path / "link").symlink_to(notes)
    for given in (notes / "server.log.md", notes / "sub" / "x.log", tmp_path / "link" / "s.log"):
        done = subprocess.run(
            [sys.executable, "-m", "fs_notes", "serve", str(notes), "--log-file", str(given)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=child_env(), cwd=REPO,
            timeout=30,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (
            f'fs-notes: --log-file {given}: inside the folder of workspace "notes" ({notes}), '
            "which is served: the log holds note ids and principal names; put it outside every "
            "workspace folder"
        )
    assert sorted(p.name for p in notes.iterdir()) == ["a.md"]  # nothing was made there
    beside = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", str(notes), "--log-file",
         str(tmp_path / "notes.log")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=child_env(), cwd=REPO,
        timeout=30,
    )  # fmt: skip
    assert beside.returncode == 0, beside.stderr
    assert (tmp_path / "notes.log").read_text()


def test_rotation_works_in_the_confined_server_and_touches_no_name(tmp_path: Path) -> None:
    only_where("landlock")
    notes = one_note(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "server.log"
    server = StdioServer(
        "serve",
        str(notes),
        "--log-file",
        str(log),
        "--log-file-max-bytes",
        "4096",
        "--log-file-backups",
        "2",
    )
    try:
        first = server.ask(call_tool("first", "notes_list", {"workspaceUri": notes.as_uri()}))
        assert first["result"].get("isError") is not True  # started: the files are open
        inodes = {p.name: p.stat().st_ino for p in logs.iterdir()}
        assert sorted(inodes) == ["server.log", "server.log.1", "server.log.2"]
        for n in range(120):  # ~200 bytes a line: about six rotations
            answer = server.ask(
                call_tool(n, "notes_read", {"workspaceUri": notes.as_uri(), "id": "a.md"})
            )
            assert answer["result"].get("isError") is not True
    finally:
        assert server.close() == 0
    assert "the server confined itself: Landlock" in server.stderr  # rotation ran confined
    assert {p.name: p.stat().st_ino for p in logs.iterdir()} == inodes
    for name in inodes:
        st = (logs / name).stat()
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert 0 < st.st_size <= 4096, name
        for line in (logs / name).read_text().splitlines():
            assert LINE.match(line), line
    # FILE.2, FILE.1, FILE are the log's last records in order (the same records as stderr,
    # which may also hold the workers' own lines); the first requests were rotated out.
    kept = "".join((logs / n).read_text() for n in ("server.log.2", "server.log.1", "server.log"))
    lines = iter(server.stderr.splitlines())
    assert all(any(line == other for other in lines) for line in kept.splitlines())
    assert 0 < kept.count("method=tools/call") < 120
    assert kept.splitlines()[-1].endswith("stdio transport closed")


CONFINED_ROTATION = (
    ATTEMPT
    + """
import errno, json, logging, os, sys
from fs_notes.logfile import RotatingLogFile
from fs_notes.policy import Policy
from fs_notes.sandbox.selfconfine import confine_server
notes, logs = sys.argv[1], sys.argv[2]
path = os.path.join(logs, "x.log")
handler = RotatingLogFile(path, 4096, 1)
handler.setFormatter(logging.Formatter("%(message)s"))
done = confine_server(Policy.for_single_workspace(notes, "me", token_sha256=None), replay_db=None)
out = {"enforced": done.enforced}

# What logging.handlers.RotatingFileHandler would do, refused by the domain:
out["rename"] = attempt(lambda: os.rename(path, path + ".1"))
new = os.path.join(logs, "new")
out["create"] = attempt(lambda: os.close(os.open(new, os.O_CREAT | os.O_WRONLY, 0o600)))
out["reopen"] = attempt(lambda: os.close(os.open(path, os.O_WRONLY | os.O_APPEND)))
for n in range(100):
    handler.emit(logging.makeLogRecord({"msg": f"record {n:03d} " + "x" * 90}))
handler.close()
print(json.dumps(out))
"""
)


def test_the_confined_process_cannot_rename_in_the_folder_yet_rotates(tmp_path: Path) -> None:
    """Positive control of the test above: under the server's own Landlock domain, the
    rename, create and reopen a name-based rotation needs are refused (EACCES; ENOENT as root,
    whose private view hides the folder first), and rotation within the open files still works:
    the last records in FILE, the ones before in FILE.1."""
    only_where("landlock")
    notes = one_note(tmp_path)
    logs = tmp_path / "logs"
    logs.mkdir()
    out = run_child(CONFINED_ROTATION, str(notes), str(logs))
    assert out["enforced"] is True
    refused = "ENOENT" if requirement("view")[0] == "run" else "EACCES"
    assert (out["rename"], out["create"], out["reopen"]) == (refused, refused, refused)
    records = [f"record {n:03d} " + "x" * 90 for n in range(100)]
    current = (logs / "x.log").read_text().splitlines()
    backup = (logs / "x.log.1").read_text().splitlines()
    assert backup + current == records[-len(backup + current) :]
    assert current[-1] == records[-1] and 0 < len(current) < 100 and backup
    assert sorted(p.name for p in logs.iterdir()) == ["x.log", "x.log.1"]
