"""A state folder someone else filled: the search-index records, lock files and leftovers that
`fs-notes forget` and serve's start-up claim and pruning meet (issue 25, a security review).

The attacker is another process of the same user, or an earlier fs-notes that crashed: it can
plant anything in the state folder. One test per finding of the review, each on real processes
(`fs-notes forget`, `fs-notes serve` with its stdin closed: it claims, prunes and stops), with a
timeout wherever the finding was a hang. We run as root here: no check below depends on file
permissions (the owner check compares with our own uid, which made every file)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from preludes import release
from wire import REPO, call_tool, stdio_server

from fs_notes.statefolder import index_digest

DAY = 86400
LONE = '{"workspace": "w", "folder": "\\ud800"}'  # valid JSON; not valid Unicode


def _env(state: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", XDG_STATE_HOME=str(state))


def _folder(tmp: Path, name: str = "notes") -> Path:
    folder = tmp / name
    folder.mkdir()
    (folder / "plan.md").write_text("# Plan\n\nthe secret words of the plan\n")
    return folder


def _state(tmp: Path) -> Path:
    path = tmp / "state" / "fs-notes"
    path.mkdir(parents=True, mode=0o700)
    return path


def _digest(folder: Path) -> str:
    return index_digest(folder.name, str(folder.resolve()))


def _record(state: Path, folder: Path, name: str | None = None) -> Path:
    """A good record for `folder` (as serve FOLDER writes it)."""
    ws = name or folder.name
    path = state / f"search-{index_digest(ws, str(folder))}.json"
    path.write_text(json.dumps({"workspace": ws, "folder": str(folder)}))
    return path


def _run(state: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(state.parent),
        cwd=REPO,
        timeout=timeout,
    )


def _snapshot(path: Path) -> tuple[bytes, int, int, int, int]:
    st = path.lstat()
    return path.read_bytes(), stat.S_IMODE(st.st_mode), st.st_size, st.st_ino, st.st_mtime_ns


def _old(path: Path, days: float) -> None:
    when = time.time() - days * DAY
    os.utime(path, (when, when), follow_symlinks=False)


# 1. A record holding an escaped lone surrogate crashed forget and serve's pruning (UnicodeError).


def test_a_record_with_a_lone_surrogate_is_not_believed_and_forget_names_it(
    tmp_path: Path,
) -> None:
    state = _state(tmp_path)
    bad = state / "search-00000000000000aa.json"
    bad.write_text(LONE)
    (state / "search-00000000000000aa.sqlite3").write_bytes(b"x" * 10)
    other = _folder(tmp_path, "other")
    done = _run(state, "forget", str(other))  # another folder's: the record is named, left
    assert done.returncode == 0, done.stderr
    line = (f"record not believed {bad}: its workspace or folder is not valid Unicode "
            "(a lone surrogate); its index counts as one without a record")  # fmt: skip
    assert line in done.stdout.splitlines()
    assert bad.read_text() == LONE
    done = _run(state, "forget", "--stale", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["unbelieved"] == [
        {"path": str(bad),
         "reason": "its workspace or folder is not valid Unicode (a lone surrogate)"}
    ]  # fmt: skip
    assert {Path(r["path"]).name for r in report["removed"]} == {
        "search-00000000000000aa.json", "search-00000000000000aa.sqlite3"
    }  # fmt: skip
    assert {r["why"] for r in report["removed"]} == {
        "its record is not believed: its workspace or folder is not valid Unicode "
        "(a lone surrogate)"
    }
    assert not any(p.name.startswith("search-") for p in state.iterdir())


def test_a_lone_surrogate_record_never_stops_serve_or_the_pruning_of_the_others(
    tmp_path: Path,
) -> None:
    state = _state(tmp_path)
    (state / "search-00000000000000aa.json").write_text(LONE)
    unused = _folder(tmp_path, "unused")
    old = _record(state, unused)
    old.with_suffix(".sqlite3").write_bytes(b"y" * 20)
    _old(old, 40)
    served = _folder(tmp_path, "served")
    done = _run(state, "serve", str(served), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    warned = [line for line in done.stderr.splitlines() if "not believed" in line]
    assert len(warned) == 1 and "WARNING" in warned[0]
    assert warned[0].endswith(
        f"record not believed {state}/search-00000000000000aa.json: its workspace or folder "
        "is not valid Unicode (a lone surrogate)"
    )
    assert any(f"pruned {old.with_suffix('.sqlite3')} (20 bytes)" in line
               for line in done.stderr.splitlines())  # fmt: skip
    assert not old.exists() and not old.with_suffix(".sqlite3").exists()
    assert (state / "search-00000000000000aa.json").read_text() == LONE  # not unused: unseen


# 2. A hard link planted at a record's path was written through when serve touched its record.


def test_serve_never_writes_through_a_hard_link_planted_at_its_record(tmp_path: Path) -> None:
    state = _state(tmp_path)
    folder = _folder(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious bytes of another file of the user, longer than a record " * 3)
    victim.chmod(0o640)
    before = _snapshot(victim)
    record = state / f"search-{_digest(folder)}.json"
    os.link(victim, record)
    done = _run(state, "serve", str(folder))
    assert done.returncode == 0, done.stderr
    assert _snapshot(victim) == before  # bytes, mode, size, inode, mtime
    assert victim.stat().st_nlink == 1  # the record is a file of its own now
    st = record.lstat()
    assert st.st_ino != before[3] and stat.S_IMODE(st.st_mode) == 0o600 and st.st_nlink == 1
    assert json.loads(record.read_text()) == {"workspace": "notes", "folder": str(folder)}


# 3. A FIFO at an index's -shm hung forget and the pruning (in_use() opened it).


def test_a_fifo_at_an_index_shm_never_hangs_forget(tmp_path: Path) -> None:
    state = _state(tmp_path)
    record = _record(state, tmp_path / "gone")
    record.with_suffix(".sqlite3").write_bytes(b"z" * 30)
    fifo = state / f"{record.stem}.sqlite3-shm"
    os.mkfifo(fifo)
    done = _run(state, "forget", "--stale", timeout=30)  # TimeoutExpired before the fix
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"not removed {fifo}: a FIFO (never opened)" in lines
    gone = tmp_path / "gone"
    why = f"the index of {gone}: its folder is gone"  # --stale says why (the JSON's "why")
    assert f"removed {record.with_suffix('.sqlite3')} (30 bytes): {why}" in lines
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in state.iterdir()) == [fifo.name]


def test_a_fifo_at_an_index_shm_never_hangs_serves_pruning(tmp_path: Path) -> None:
    state = _state(tmp_path)
    unused = _folder(tmp_path, "unused")
    record = _record(state, unused)
    fifo = state / f"{record.stem}.sqlite3-shm"
    os.mkfifo(fifo)
    _old(record, 40)
    done = _run(state, "serve", str(_folder(tmp_path, "served")), timeout=60)
    assert done.returncode == 0, done.stderr
    assert any(line.endswith(f"not pruned {fifo}: a FIFO (never opened)")
               for line in done.stderr.splitlines())  # fmt: skip
    assert not record.exists() and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_fifo_at_the_lock_files_name_stops_serve_with_what_to_do_never_a_hang(
    tmp_path: Path,
) -> None:
    state = _state(tmp_path)
    folder = _folder(tmp_path)
    fifo = state / f"search-{_digest(folder)}.lock"
    os.mkfifo(fifo)
    done = _run(state, "serve", str(folder), timeout=30)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f'fs-notes: the state folder {state}: cannot record the search index of workspace '
        f'"notes": {fifo.name} is a FIFO (never opened): remove it'
    )
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


# 4. serve's claim waited for its lock without end: one process holding it hung the start-up.


def test_serve_gives_up_on_a_lock_held_too_long_and_says_what_to_do(tmp_path: Path) -> None:
    state = _state(tmp_path)
    folder = _folder(tmp_path)
    digest = _digest(folder)
    record = _record(state, folder.resolve())
    lock = state / f"search-{digest}.lock"
    lock.touch(mode=0o600)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, sys\n"
         "fds = [open(p, 'rb') for p in sys.argv[1:]]\n"
         "for f in fds: fcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('held', flush=True); sys.stdin.read()", str(record), str(lock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        began = time.monotonic()
        done = _run(state, "serve", str(folder), timeout=40)  # TimeoutExpired before the fix
        took = time.monotonic() - began
    finally:
        release(holder)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f'fs-notes: the state folder {state}: cannot record the search index of workspace '
        f'"notes": search-{digest}.lock is locked by another process, for 5 seconds now (a '
        "removal by fs-notes forget holds it a moment only): stop that process (fuser -v "
        "names it), then start the server again"
    )
    assert 4 < took < 30
    assert json.loads(record.read_text()) == {"workspace": "notes", "folder": str(folder)}
    # the lock released, it starts
    assert _run(state, "serve", str(folder)).returncode == 0


# 5. An unbelieved record dropped a running server's claim (forget took it for unlocked).


def test_an_unbelieved_record_never_drops_a_running_servers_claim(tmp_path: Path) -> None:
    top = tmp_path / "state"
    state = top / "fs-notes"
    folder = _folder(tmp_path)
    digest = _digest(folder)
    record = state / f"search-{digest}.json"
    with stdio_server(str(folder), env=_env(top)) as server:
        server.ask(call_tool(1, "notes_list", {"workspaceUri": folder.resolve().as_uri()}))
        lock = state / f"search-{digest}.lock"
        held = lock.lstat().st_ino if lock.exists() else None  # (no lock file before the fix)
        with record.open("r+b") as f:  # made unbelievable in place (a buggy writer, say)
            f.write(b"not json " * 20)
        for args in (("forget", "--stale", "--json"), ("serve", str(folder)),
                     ("forget", str(folder), "--json")):  # fmt: skip
            done = _run(state, *args)
            if args[0] == "forget":
                assert done.returncode == 1, done.stdout
                report = json.loads(done.stdout)
                assert report["removed"] == []
                assert report["kept"] and all(
                    str(k["reason"]).startswith("in use: a running fs-notes server holds it")
                    for k in report["kept"]
                )
            else:  # a second server of the same folder starts and stops
                assert done.returncode == 0, done.stderr
            assert lock.lstat().st_ino == held  # the lock stays on the running server's inode
        answer = server.ask(call_tool(2, "notes_search", {
            "workspaceUri": folder.resolve().as_uri(), "query": "secret"}))  # fmt: skip
        assert answer["result"]["structuredContent"]["matches"][0]["id"] == "plan.md"
        assert server.close() == 0
    done = _run(state, "forget", str(folder), "--json")  # positive control: stopped, it goes
    assert done.returncode == 0, done.stdout
    assert not any(p.name.startswith("search-") for p in state.iterdir())


# 6. forget said "removed" of a file another hard link keeps.


def test_forget_keeps_a_hard_linked_index_file_and_says_why(tmp_path: Path) -> None:
    state = _state(tmp_path)
    gone = tmp_path / "gone"
    record = _record(state, gone)
    index = record.with_suffix(".sqlite3")
    index.write_bytes(b"the index's copy of the notes" * 4)
    wal = state / f"{record.stem}.sqlite3-wal"
    wal.write_bytes(b"w" * 8)
    backup = tmp_path / "backup.sqlite3"
    os.link(index, backup)
    before = _snapshot(index)
    done = _run(state, "forget", "--stale")
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    assert f"not removed {index}: another hard link keeps its data" in lines
    assert f"not removed {record}: kept while another file of its index stays" in lines
    assert f"removed {wal} (8 bytes): the index of {gone}: its folder is gone" in lines
    assert not any(line.startswith(f"removed {index} (") for line in lines)
    assert _snapshot(index) == before and _snapshot(backup) == before
    assert sorted(p.name for p in state.iterdir()) == sorted([index.name, record.name])


# 7. A FIFO or a folder at an index's name was called "a symbolic link".


def test_a_fifo_or_a_folder_at_an_index_name_is_called_what_it_is(tmp_path: Path) -> None:
    state = _state(tmp_path)
    record = _record(state, tmp_path / "gone")
    journal = state / f"{record.stem}.sqlite3-journal"
    journal.mkdir()
    wal = state / f"{record.stem}.sqlite3-wal"
    os.mkfifo(wal)
    link = state / f"{record.stem}.sqlite3"
    link.symlink_to(tmp_path / "elsewhere")
    done = _run(state, "forget", "--stale", timeout=30)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert f"not removed {journal}: a directory (never entered)" in lines
    assert f"not removed {wal}: a FIFO (never opened)" in lines
    assert f"not removed {link}: a symbolic link (never followed)" in lines
    assert journal.is_dir() and stat.S_ISFIFO(wal.lstat().st_mode) and link.is_symlink()


# 8. Temporary records left by a crash mid-write were never removed.


def test_leftover_temporary_records_are_removed_by_forget_and_pruning(tmp_path: Path) -> None:
    state = _state(tmp_path)
    folder = _folder(tmp_path)
    digest = _digest(folder)
    done = _run(state, "serve", str(folder))  # a good index: its record, its lock
    assert done.returncode == 0, done.stderr
    stale = state / f".search-{digest}.json.0123456789ab.tmp"
    stale.write_bytes(b'{"workspace": ')
    _old(stale, 1 / 24)
    young = state / f".search-{digest}.json.ba9876543210.tmp"
    young.write_bytes(b"{")  # a record being written: left
    fifo = state / ".search-00000000000000bb.json.aaaaaaaaaaaa.tmp"
    os.mkfifo(fifo)
    _old(fifo, 1)
    done = _run(state, "forget", "--stale", timeout=30)
    lines = done.stdout.splitlines()
    assert (f"removed {stale} (14 bytes): a temporary record left by an interrupted write"
            in lines)  # fmt: skip
    assert f"not removed {fifo}: a FIFO (never opened)" in lines
    assert done.returncode == 1  # the FIFO
    assert not stale.exists() and young.read_bytes() == b"{" and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert (state / f"search-{digest}.json").exists()  # the index itself is not stale
    fifo.unlink()
    stale.write_bytes(b"{}")
    _old(stale, 1 / 24)
    done = _run(state, "serve", str(_folder(tmp_path, "other")))
    assert done.returncode == 0, done.stderr
    assert any(line.endswith(f"removed {stale} (2 bytes): a temporary record left by an "
                             "interrupted write") for line in done.stderr.splitlines())  # fmt: skip
    assert not stale.exists() and young.exists()
