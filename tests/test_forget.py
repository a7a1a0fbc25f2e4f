"""`fs-notes forget` and the pruning of unused search indexes at start-up (issue 25, item 6).

Real servers in subprocesses build real indexes in a private state folder; the tests then
remove them with the command and look at what is left on disk. Last-seen times are set from
outside, on the index's record (its mtime), never through a switch in the product."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from preludes import release
from wire import REPO, call_tool, stdio_server

from fs_notes.statefolder import index_name, state_home

DAY = 86400


def _env(state: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", XDG_STATE_HOME=str(state))
    return env


def _folder(tmp: Path, name: str = "notes") -> Path:
    folder = tmp / name
    folder.mkdir()
    (folder / "plan.md").write_text("# Plan\n\nthe secret words of the plan\n")
    return folder


def _serve_and_search(folder: Path, state: Path, *extra: str) -> str:
    """Serve `folder`, search it (which builds its index), stop; the server's stderr."""
    with stdio_server(str(folder), *extra, env=_env(state)) as server:
        uri = folder.resolve().as_uri()
        answer = server.ask(call_tool(1, "notes_search", {"workspaceUri": uri, "query": "plan"}))
        assert answer["result"]["structuredContent"]["matches"][0]["id"] == "plan.md"
        assert server.close() == 0
        return server.stderr


def _forget(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", "forget", *args],
        capture_output=True,
        text=True,
        env=_env(state),
        cwd=REPO,
        timeout=60,
    )


def _state_files(state: Path) -> list[str]:
    return sorted(p.name for p in (state / "fs-notes").iterdir())


def _index_files(state: Path) -> list[str]:
    """A folder's files: its search index and its journal of changes."""
    return [n for n in _state_files(state) if n.startswith(("search-", "journal-"))]


def test_forget_folder_removes_its_index_and_record_and_names_each_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    folder = _folder(tmp_path)
    _serve_and_search(folder, state)
    digest = index_name("notes", str(folder.resolve())).removesuffix(".sqlite3")
    before = _index_files(state)
    assert f"{digest}.sqlite3" in before and f"{digest}.json" in before
    assert digest.replace("search-", "journal-") + ".sqlite3" in before  # the journal goes too
    record = json.loads((state / "fs-notes" / f"{digest}.json").read_text())
    assert record == {"workspace": "notes", "folder": str(folder.resolve())}
    size = (state / "fs-notes" / f"{digest}.sqlite3").stat().st_size
    done = _forget(state, str(folder), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    removed = {Path(str(r["path"])).name: r["bytes"] for r in report["removed"]}
    assert set(removed) == set(before)
    assert removed[f"{digest}.sqlite3"] == size
    assert report["kept"] == []
    assert _index_files(state) == []
    # the global state stays: it is not per folder
    assert {"replay.sqlite3", "state.keys"} <= set(_state_files(state))
    assert (folder / "plan.md").read_text().startswith("# Plan")  # the notes are untouched


def test_forget_in_text_names_each_file_with_its_size_and_what_stays(tmp_path: Path) -> None:
    state = tmp_path / "state"
    folder = _folder(tmp_path)
    _serve_and_search(folder, state)
    done = _forget(state, str(folder))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("removed ") and ".sqlite3 (" in line for line in lines)
    assert "kept (not per folder)" in done.stdout
    again = _forget(state, str(folder))
    assert again.returncode == 0
    assert "nothing was removed" in again.stdout


def test_an_index_a_running_server_holds_is_not_removed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    folder = _folder(tmp_path)
    with stdio_server(str(folder), env=_env(state)) as server:
        uri = folder.resolve().as_uri()
        server.ask(call_tool(1, "notes_search", {"workspaceUri": uri, "query": "plan"}))
        before = {n: (state / "fs-notes" / n).stat() for n in _index_files(state)}
        done = _forget(state, str(folder), "--json")
        assert done.returncode == 1
        report = json.loads(done.stdout)
        assert report["removed"] == []
        assert all("in use" in str(k["reason"]) for k in report["kept"])
        after = {n: (state / "fs-notes" / n).stat() for n in _index_files(state)}
        assert set(after) == set(before)
        assert all(after[n].st_ino == before[n].st_ino for n in before)
        # and the server still answers from it
        answer = server.ask(call_tool(2, "notes_search", {"workspaceUri": uri, "query": "secret"}))
        assert answer["result"]["structuredContent"]["matches"][0]["id"] == "plan.md"


def test_an_index_an_older_server_has_open_is_not_removed(tmp_path: Path) -> None:
    """No record (an index made before records were kept), but open in another process:
    SQLite's own lock on its -shm file says so."""
    state = tmp_path / "state" / "fs-notes"
    state.mkdir(parents=True, mode=0o700)
    folder = _folder(tmp_path)
    path = state / index_name("notes", str(folder.resolve()))
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
         "c.execute('PRAGMA journal_mode = WAL'); c.execute('CREATE TABLE t (x)'); "
         "print('open', flush=True); sys.stdin.read()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        done = _forget(tmp_path / "state", "--stale", "--json")
        assert done.returncode == 1, done.stdout
        assert json.loads(done.stdout)["removed"] == []
        assert path.exists()
    finally:
        release(holder)
    done = _forget(tmp_path / "state", "--stale", "--json")
    assert done.returncode == 0
    reasons = {r["why"] for r in json.loads(done.stdout)["removed"]}
    assert reasons == {"no record of its folder (made before fs-notes kept one)"}
    assert _index_files(tmp_path / "state") == []


def test_stale_removes_a_deleted_or_moved_folders_index_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    kept, moved = _folder(tmp_path, "kept"), _folder(tmp_path, "moved")
    _serve_and_search(kept, state)
    _serve_and_search(moved, state)
    moved.rename(tmp_path / "elsewhere")
    digest = index_name("kept", str(kept.resolve()))[7:23]
    kept_files = {n for n in _index_files(state) if digest in n}
    done = _forget(state, "--stale", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {r["folder"] for r in report["removed"]} == {str(moved.resolve())}
    assert {r["why"] for r in report["removed"]} == {"its folder is gone"}
    assert set(_index_files(state)) == kept_files


def test_stale_removes_an_index_not_served_for_longer_than_unused_days(tmp_path: Path) -> None:
    state = tmp_path / "state"
    folder = _folder(tmp_path)
    _serve_and_search(folder, state)
    record = next((state / "fs-notes").glob("search-*.json"))
    old = time.time() - 40 * DAY
    os.utime(record, (old, old))
    assert _forget(state, "--stale", "--unused-days", "50", "--json").returncode == 0
    assert record.exists()  # 40 days < 50
    done = _forget(state, "--stale", "--json")  # default 30
    assert done.returncode == 0
    assert {r["why"] for r in json.loads(done.stdout)["removed"]} == {"not served for 40 days"}
    assert _index_files(state) == []


def test_stale_in_text_says_why_each_file_was_stale_as_the_json_does(tmp_path: Path) -> None:
    """--stale's text named what it removed but not why; now each line ends with the reason,
    the --json "why" of the same file (run on a copy of the same state folder), with the folder
    it was the index of."""
    import shutil

    state = tmp_path / "state"
    gone, old = _folder(tmp_path, "gone"), _folder(tmp_path, "old")
    _serve_and_search(gone, state)
    _serve_and_search(old, state)
    shutil.rmtree(gone)
    digest = index_name("old", str(old.resolve())).removesuffix(".sqlite3")
    record = state / "fs-notes" / f"{digest}.json"
    then = time.time() - 40 * DAY
    os.utime(record, (then, then))
    copy = tmp_path / "copy"
    shutil.copytree(state, copy, symlinks=True)
    as_json = _forget(copy, "--stale", "--json")
    done = _forget(state, "--stale")
    assert done.returncode == 0 == as_json.returncode, done.stderr
    why = {Path(str(r["path"])).name: (r["folder"], r["why"])
           for r in json.loads(as_json.stdout)["removed"]}  # fmt: skip
    assert {w for _, w in why.values()} == {"its folder is gone", "not served for 40 days"}
    removed = [line for line in done.stdout.splitlines() if line.startswith("removed ")]
    assert len(removed) == len(why) >= 4  # each index's .sqlite3 and .json at least
    for line in removed:
        path = line.removeprefix("removed ").split(" (", 1)[0]
        folder, reason = why[Path(path).name]
        assert line.endswith(f"): the index of {folder}: {reason}"), line
    assert _index_files(state) == []


def test_serve_prunes_indexes_not_served_for_the_set_time_and_logs_each(tmp_path: Path) -> None:
    state = tmp_path / "state"
    old_folder, served = _folder(tmp_path, "old"), _folder(tmp_path, "served")
    _serve_and_search(old_folder, state)
    _serve_and_search(served, state)
    records = {p.name: p for p in (state / "fs-notes").glob("search-*.json")}
    long_ago = time.time() - 31 * DAY
    for path in records.values():  # both, the served one too: it is claimed, not pruned
        os.utime(path, (long_ago, long_ago))
    old_prefix = index_name("old", str(old_folder.resolve())).removesuffix(".sqlite3")
    # 0: never
    stderr = _serve_and_search(served, state, "--unused-days", "0")
    assert "pruned" not in stderr
    assert any(n.startswith(old_prefix) for n in _index_files(state))
    for path in records.values():
        os.utime(path, (long_ago, long_ago))
    stderr = _serve_and_search(served, state)
    pruned = [line for line in stderr.splitlines() if " pruned " in line]
    assert pruned and all("INFO" in line and "not served for 31 days" in line for line in pruned)
    assert any(f"{old_prefix}.sqlite3" in line for line in pruned)
    assert not any(n.startswith(old_prefix) for n in _index_files(state))
    served_prefix = index_name("served", str(served.resolve())).removesuffix(".sqlite3")
    assert f"{served_prefix}.sqlite3" in _index_files(state)
    # and its record says it was served just now
    assert time.time() - (state / "fs-notes" / f"{served_prefix}.json").stat().st_mtime < 60


def test_the_policys_unused_index_days_sets_the_pruning_time(tmp_path: Path) -> None:
    from fs_notes.policy_file import load_policy

    folder = _folder(tmp_path)
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'[[principal]]\nname = "me"\nlocal = true\n[[workspace]]\nname = "n"\npath = "{folder}"\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "n"\noperations = ["read"]\n'
        "[limits]\nunused_index_days = 0\n"
    )
    assert load_policy(str(policy)).limits.unused_index_days == 0
    policy.write_text(policy.read_text().replace("= 0", "= -1"))
    with pytest.raises(Exception, match="unused_index_days: must be from 0"):
        load_policy(str(policy))


def test_symbolic_links_in_the_state_folder_are_neither_followed_nor_removed(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    folder = _folder(tmp_path)
    _serve_and_search(folder, state)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    digest = index_name("notes", str(folder.resolve())).removesuffix(".sqlite3")
    link = state / "fs-notes" / f"{digest}.sqlite3-journal"
    link.symlink_to(outside)
    done = _forget(state, str(folder), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert [Path(str(k["path"])).name for k in report["kept"]] == [link.name]
    assert link.is_symlink() and outside.read_text() == "keep me"
    assert _index_files(state) == [link.name]


def test_a_state_folder_that_is_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "search-0123456789abcdef.sqlite3").write_text("x")
    (tmp_path / "link").symlink_to(real)
    done = _forget(tmp_path, "--stale", "--state-dir", str(tmp_path / "link"))
    assert done.returncode == 2
    assert "a symbolic link" in done.stderr and "nothing was removed" in done.stderr
    assert (real / "search-0123456789abcdef.sqlite3").exists()


@pytest.mark.parametrize(
    "args", [[], ["somewhere", "--stale"], ["--stale", "--unused-days", "-1"]]
)
def test_forget_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    done = _forget(tmp_path, *args)
    assert done.returncode == 2
    assert done.stderr.startswith("fs-notes: ")


def test_the_index_name_is_the_one_the_server_uses(tmp_path: Path) -> None:
    """statefolder.index_name is the name tools/context.py opens (one rule, two places until
    the lead moves context.py onto it)."""
    state = tmp_path / "state"
    folder = _folder(tmp_path)
    _serve_and_search(folder, state)
    assert index_name("notes", str(folder.resolve())) in _index_files(state)
    assert state_home({"XDG_STATE_HOME": str(state)}) == str(state / "fs-notes")
    assert state_home({"XDG_STATE_HOME": "relative"}).endswith("/.local/state/fs-notes")


def test_forget_folder_takes_an_index_without_record_named_for_that_folder(
    tmp_path: Path,
) -> None:
    """An index made before records were kept is FOLDER's if `serve FOLDER` names it so;
    another unrecorded index is left to --stale."""
    state = tmp_path / "state"
    folder = _folder(tmp_path)
    _serve_and_search(folder, state)
    for record in (state / "fs-notes").glob("search-*.json"):
        record.unlink()  # as an older fs-notes left it
    other = state / "fs-notes" / "search-00000000000000aa.sqlite3"
    other.write_bytes(b"x" * 10)
    done = _forget(state, str(folder), "--json")
    assert done.returncode == 0, done.stderr
    removed = json.loads(done.stdout)["removed"]
    name = index_name("notes", str(folder.resolve()))
    assert name in {Path(str(r["path"])).name for r in removed}
    # its files only (the lock file serve made stays beside it: it goes too)
    # (and its journal of changes, named by the same digest)
    stem = name.removesuffix("sqlite3")
    mine = (stem, stem.replace("search-", "journal-"))
    assert all(Path(str(r["path"])).name.startswith(mine) for r in removed)
    assert all(r["folder"] is None for r in removed)
    assert _index_files(state) == [other.name]


def test_forget_uses_the_state_dir_serve_was_given(tmp_path: Path) -> None:
    state, elsewhere = tmp_path / "state", tmp_path / "elsewhere"
    folder = _folder(tmp_path)
    _serve_and_search(folder, state, "--state-dir", str(elsewhere))
    assert not (state / "fs-notes").exists()
    assert json.loads(_forget(state, str(folder), "--json").stdout)["removed"] == []
    done = _forget(state, str(folder), "--state-dir", str(elsewhere), "--json")
    assert done.returncode == 0
    assert len(json.loads(done.stdout)["removed"]) >= 2
    assert not any(n.startswith("search-") for n in os.listdir(elsewhere))


def test_forget_finds_a_folder_named_through_a_symlink_or_with_a_tilde(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    real = _folder(tmp_path, "real")
    (tmp_path / "via").symlink_to(real)
    _serve_and_search(real, state)
    done = _forget(state, str(tmp_path / "via"), "--json")  # serve resolved it: so does forget
    assert done.returncode == 0, done.stderr
    assert {r["folder"] for r in json.loads(done.stdout)["removed"]} == {str(real.resolve())}
    assert _index_files(state) == []
    _serve_and_search(real, state)
    env = dict(_env(state), HOME=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "fs_notes", "forget", "~/real"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _index_files(state) == []


def test_a_server_starting_during_a_removal_waits_and_then_makes_a_new_record(
    tmp_path: Path,
) -> None:
    """statefolder.Claim against a removal holding the lock file: the claim retries the lock,
    sees the lock file it waited on is gone, and claims a new one (never the removed inode)."""
    import threading

    from fs_notes.statefolder import Claim, Held, exclusive, open_folder, remove, scan

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    first = Claim()
    first.take(str(state), "notes", "/n")
    first.release()
    dir_fd = open_folder(str(state))
    try:
        (entry,) = scan(dir_fd)
        assert entry.folder == "/n"
        second = Claim()
        done = threading.Event()
        with exclusive(dir_fd, entry):
            def start() -> None:
                second.take(str(state), "notes", "/n")
                done.set()

            waiter = threading.Thread(target=start)
            waiter.start()
            assert not done.wait(0.5)  # blocked on the removal's lock
            removed, kept = remove(dir_fd, entry)
        assert (set(removed), kept) == ({"search-" + entry.digest + ".json",
                                         "search-" + entry.digest + ".lock"}, {})  # fmt: skip
        waiter.join(10)
        assert done.is_set()
        (again,) = scan(dir_fd)
        assert again.folder == "/n"
        # the record now there is the one the claim holds (not the removed one it waited on)
        with pytest.raises(Held, match="holds it"), exclusive(dir_fd, again):
            pass
        second.release()
        with exclusive(dir_fd, again):  # positive control: released, it can be taken
            pass
    finally:
        os.close(dir_fd)
