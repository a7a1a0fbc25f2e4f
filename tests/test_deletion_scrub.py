"""Deletion deletes (issue 27 item 2): after a note is gone, the search index's raw files hold
none of its words - after the deletion, while the server runs, and after it stops - and text an
edit replaced goes within the scrub timer or at close.

Judged on the raw bytes of `search-*.sqlite3` and its `-wal` (the `-shm` holds page numbers only,
and is read too). FTS5 keeps terms prefix-compressed, so each secret word is looked for by its
letters after the third (stored verbatim whatever an earlier term shares with it), in the case
the index folds it to and as written (the content table). The positive controls: before the
deletion the same detector finds every word in the files; a copy of the index deleted the plain
way (a DELETE, no scrub) still holds them.
"""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from wire import StdioServer, call_tool, child_env

from fs_notes.search import index as index_module
from fs_notes.search.index import Extract, NoteIndex

SECRET = ["Qvorblexian", "Zwyntharope", "Jixplumtrove", "Kravostimel"]
BODY = "Meeting about " + " ".join(SECRET) + " and the budget."
FORM: dict[str, object] = {"elicitation": {"form": {}}}


def _found(folder: Path, words: list[str] = SECRET) -> set[str]:
    """The secret words whose letters are in any raw file of the index in `folder`."""
    blobs = b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("search-"))
    return {w for w in words if w[3:].encode() in blobs or w.lower()[3:].encode() in blobs}


def _filler(n: int) -> list[tuple[str, Extract]]:
    words = ["alpha", "beta", "gamma", "delta", "river", "garden", "budget", "meeting", "plan"]
    return [
        (f"n{i}.md", Extract(f"Note {i}", " ".join(words[(i + k) % len(words)] for k in range(40))))
        for i in range(n)
    ]


def _build(path: Path, notes: dict[str, Extract]) -> NoteIndex:
    index = NoteIndex(str(path), label="test")
    index.refresh([(i, "k1") for i in notes], notes.get)
    return index


def test_a_removed_note_leaves_no_word_in_the_files_at_once_and_after_close(
    tmp_path: Path,
) -> None:
    notes = dict(_filler(300))
    notes["secret.md"] = Extract("Secret plans", BODY)
    index = _build(tmp_path / "search-x.sqlite3", notes)
    index._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    assert _found(tmp_path) == set(SECRET)  # the control: the detector sees them
    # the other control: the same index, deleted the plain way, keeps them
    plain = tmp_path / "plain"
    plain.mkdir()
    copy = sqlite3.connect(plain / "search-x.sqlite3")
    index._conn.backup(copy)
    rid = copy.execute("SELECT rid FROM doc WHERE id = 'secret.md'").fetchone()[0]
    copy.execute("DELETE FROM fts WHERE rowid = ?", (rid,))
    copy.execute("DELETE FROM doc WHERE rid = ?", (rid,))
    copy.commit()
    copy.close()
    assert _found(plain) == set(SECRET)
    index.remove("secret.md")
    assert _found(tmp_path) == set()  # before remove() returned
    assert index.search("Qvorblexian", limit=10) == []
    assert "n0.md" in [h.id for h in index.search("budget", limit=400)]  # the rest is there
    index.close()
    assert _found(tmp_path) == set()
    wal = tmp_path / "search-x.sqlite3-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def test_a_note_gone_from_the_listing_is_scrubbed_by_the_refresh_that_drops_it(
    tmp_path: Path,
) -> None:
    notes = dict(_filler(50))
    notes["secret.md"] = Extract("Secret plans", BODY)
    index = _build(tmp_path / "search-x.sqlite3", notes)
    del notes["secret.md"]  # deleted from outside (rm, another editor)
    index.refresh([(i, "k1") for i in notes], notes.get)
    assert _found(tmp_path) == set()
    index.close()


def test_text_an_edit_replaced_is_scrubbed_on_the_timer_and_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = dict(_filler(50))
    notes["plans.md"] = Extract("Plans", BODY)
    index = _build(tmp_path / "search-x.sqlite3", notes)
    notes["plans.md"] = Extract("Plans", "Meeting about the budget.")  # the words edited out
    index.refresh([(i, "k2" if i == "plans.md" else "k1") for i in notes], notes.get)
    assert index.search("Zwyntharope", limit=10) == []
    index.close()
    assert _found(tmp_path) == set()  # at close
    # on the timer (made short from outside), with the index still open
    for p in tmp_path.iterdir():
        p.unlink()
    monkeypatch.setattr(index_module, "SCRUB_SECONDS", 0.2)
    notes["plans.md"] = Extract("Plans", BODY)
    index = _build(tmp_path / "search-x.sqlite3", notes)
    notes["plans.md"] = Extract("Plans", "Meeting about the budget.")
    index.refresh([(i, "k3" if i == "plans.md" else "k1") for i in notes], notes.get)
    deadline = time.monotonic() + 10
    while _found(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _found(tmp_path) == set()
    index.close()


def _uri(ws: Path) -> str:
    return "file://" + urllib.parse.quote(str(ws))


def _folder(tmp_path: Path, filler: int, notes: dict[str, str]) -> tuple[Path, Path]:
    """A workspace of `filler` ordinary notes and `notes` (name -> text), and an empty state
    folder of the server's own (0700)."""
    ws = tmp_path / "notes"
    ws.mkdir()
    for name, extract in _filler(filler):
        (ws / name).write_text(f"# {extract.title}\n\n{extract.text}\n")
    for name, text in notes.items():
        (ws / name).write_text(text)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    return ws, state


def test_a_confirmed_delete_through_serve_leaves_no_word_in_the_state_folder(
    tmp_path: Path,
) -> None:
    """The real server, confined as `serve` confines itself: index the folder (a search), then
    delete the note through the confirmation flow; the raw files hold none of its words while
    the server still runs, nor after it stops."""
    ws, state = _folder(tmp_path, 200, {"secret.md": f"# Secret plans\n\n{BODY}\n"})
    server = StdioServer("serve", str(ws), "--state-dir", str(state), env=child_env())
    try:
        found = server.ask(call_tool(1, "notes_search", {"query": "Qvorblexian"}))
        ids = [m["id"] for m in found["result"]["structuredContent"]["matches"]]
        assert ids == ["secret.md"]
        assert _found(state) == set(SECRET)  # the control: indexed, in the files
        args = {"workspaceUri": _uri(ws), "title": "Secret plans"}
        first: dict[str, Any] = server.ask(call_tool(2, "notes_delete", args, FORM))
        state_token = first["result"]["requestState"]
        answer = {"action": "accept", "content": {"note_id": "secret.md", "confirm": True}}
        done = server.ask(
            call_tool(3, "notes_delete", args, FORM,
                      inputResponses={"delete_choice": answer}, requestState=state_token)
        )  # fmt: skip
        assert done["result"]["structuredContent"] == {"deleted": "secret.md", "outcome": "deleted"}
        assert not (ws / "secret.md").exists()
        assert _found(state) == set()  # the server still runs
        again = server.ask(call_tool(4, "notes_search", {"query": "budget"}))
        assert again["result"]["structuredContent"]["matches"]  # the index still serves
    finally:
        code = server.close()
    assert code == 0, server.stderr
    assert _found(state) == set(), server.stderr
    wal = list(state.glob("search-*.sqlite3-wal"))
    assert all(p.stat().st_size == 0 for p in wal), [p.stat().st_size for p in wal]
    assert "could not" not in server.stderr, server.stderr


def _delete(server: StdioServer, ws: Path, title: str, note_id: str, first_id: int) -> Any:
    args = {"workspaceUri": _uri(ws), "title": title}
    first: dict[str, Any] = server.ask(call_tool(first_id, "notes_delete", args, FORM))
    answer = {"action": "accept", "content": {"note_id": note_id, "confirm": True}}
    token = first["result"]["requestState"]
    return server.ask(
        call_tool(first_id + 1, "notes_delete", args, FORM,
                  inputResponses={"delete_choice": answer}, requestState=token)
    )["result"]  # fmt: skip


def test_a_deletion_before_any_search_scrubs_the_index_a_previous_run_left(
    tmp_path: Path,
) -> None:
    """Reviewer's find: a server that had not opened its index yet (no search since it started)
    deleted the note and left its words in the file the previous run built, until some later
    search. Now the deletion opens the index to drop it."""
    ws, state = _folder(tmp_path, 50, {"secret.md": f"# Secret plans\n\n{BODY}\n"})
    first = StdioServer("serve", str(ws), "--state-dir", str(state), env=child_env())
    try:
        first.ask(call_tool(1, "notes_search", {"query": "Qvorblexian"}))
    finally:
        assert first.close() == 0, first.stderr
    assert _found(state) == set(SECRET)  # the control: the last run's index holds them
    server = StdioServer("serve", str(ws), "--state-dir", str(state), env=child_env())
    try:
        done = _delete(server, ws, "Secret plans", "secret.md", 1)
        assert done["structuredContent"] == {"deleted": "secret.md", "outcome": "deleted"}
        assert _found(state) == set()  # while it runs, with no search in between
    finally:
        assert server.close() == 0, server.stderr
    assert _found(state) == set()


def test_a_moved_notes_old_name_leaves_the_index_by_the_stop_at_the_latest(
    tmp_path: Path,
) -> None:
    """Reviewer's find: notes_move never told the index, so the old id stayed in its files
    until a later search refreshed it, and for good if none came before the stop."""
    old = "Jixplumtrove-minutes.md"
    ws, state = _folder(tmp_path, 50, {old: "# Minutes\n\nNothing of note.\n"})
    server = StdioServer("serve", str(ws), "--state-dir", str(state), env=child_env())
    try:
        found = server.ask(call_tool(1, "notes_search", {"query": "Jixplumtrove"}))
        assert [m["id"] for m in found["result"]["structuredContent"]["matches"]] == [old]
        assert _found(state, ["Jixplumtrove"]) == {"Jixplumtrove"}  # the control
        moved = server.ask(call_tool(2, "notes_move", {"id": old, "newId": "minutes.md"}))
        assert moved["result"].get("isError") is not True, moved
    finally:
        assert server.close() == 0, server.stderr
    assert (ws / "minutes.md").exists()
    assert _found(state, ["Jixplumtrove"]) == set()


def test_remove_scrubs_a_gone_note_at_once_and_a_moved_one_by_close(tmp_path: Path) -> None:
    notes = dict(_filler(100))
    notes["secret.md"] = Extract("Secret plans", BODY)
    notes["moved.md"] = Extract("Moved", "Xandrovulpe Quentimarsh")
    index = _build(tmp_path / "search-x.sqlite3", notes)
    index.remove("moved.md", gone=False)  # its text lives on under its new id
    assert index.search("Xandrovulpe", limit=10) == []
    index.remove("secret.md")
    assert _found(tmp_path) == set()
    index.close()
    assert _found(tmp_path, ["Xandrovulpe", "Quentimarsh"]) == set()


def test_a_cancelled_build_scrubs_what_its_committed_batches_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviewer's find: a build stopped after a committed batch raised past the scrub, so the
    text its batches replaced waited for the next write (no timer was started). Cut short,
    it still starts the timer (made short from outside), and the timer scrubs."""
    monkeypatch.setattr(index_module, "BATCH", 20)
    monkeypatch.setattr(index_module, "SCRUB_SECONDS", 0.2)
    notes = dict(_filler(60))
    notes["n3.md"] = Extract("Plans", BODY)
    index = _build(tmp_path / "search-x.sqlite3", notes)
    index._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    assert _found(tmp_path) == set(SECRET)  # the control
    edited = {**notes, "n3.md": Extract("Plans", "Meeting about the budget.")}

    def stop(done: int, total: int) -> None:
        if done == 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        index.refresh([(i, "k2") for i in edited], edited.get, on_progress=stop)
    assert index.search("Zwyntharope", limit=10) == []  # n3 was in the committed batch
    deadline = time.monotonic() + 10
    while _found(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _found(tmp_path) == set()  # with no write after it, nor a close
    index.close()


def test_an_index_used_after_fork_has_a_free_lock_and_a_timer_of_its_own(tmp_path: Path) -> None:
    """Reviewer's find: a child forked while a thread held the index's lock would wait for ever,
    and the parent's timer (not in the child) kept the child from starting one. Run in a
    subprocess: the parent holds the lock in a thread across the fork."""
    code = f"""
import os, sys, threading, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from fs_notes.search import index as m
from fs_notes.search.index import Extract, NoteIndex
m.SCRUB_SECONDS = 0.2
notes = {{"a.md": Extract("A", "Zwyntharope budget"), "b.md": Extract("B", "plain")}}
index = NoteIndex({str(tmp_path / "search-f.sqlite3")!r})
index.refresh([(i, "k1") for i in notes], notes.get)
index._timer = threading.Timer(3600, lambda: None)  # a timer of the parent's
held, done = threading.Event(), threading.Event()
def hold():
    with index._lock:
        held.set()
        done.wait()
threading.Thread(target=hold, daemon=True).start()
held.wait()
pid = os.fork()
if pid == 0:
    notes["a.md"] = Extract("A", "budget")
    index.update([("a.md", "k2")], notes.get)  # would hang on the parent's held lock
    time.sleep(1.0)
    blob = open({str(tmp_path / "search-f.sqlite3")!r}, "rb").read()
    try:
        blob += open({str(tmp_path / "search-f.sqlite3-wal")!r}, "rb").read()
    except FileNotFoundError:
        pass
    os._exit(0 if b"yntharope" not in blob else 3)
done.set()
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    import subprocess
    import sys

    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=child_env())  # fmt: skip
    assert ran.stdout.strip() == "0", (ran.stdout, ran.stderr)


def test_a_note_moved_then_deleted_before_a_search_leaves_no_word_at_once(
    tmp_path: Path,
) -> None:
    """Found on a real corpus through the official client: a note moved (its old place waits
    for the timer) and then deleted before any search indexed it under its new id kept its
    words in the files until the timer. A deletion now scrubs whatever is pending."""
    notes = dict(_filler(100))
    notes["old.md"] = Extract("Check note", BODY)
    index = _build(tmp_path / "search-x.sqlite3", notes)
    index._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    assert _found(tmp_path) == set(SECRET)  # the control
    index.remove("old.md", gone=False)  # moved to new.md, which no search has indexed yet
    index.remove("new.md")  # then deleted
    assert _found(tmp_path) == set()
    index.close()


def test_a_drop_another_servers_write_holds_up_waits_or_is_kept_and_done_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviewer's find: a deletion that met another server's write to the shared index failed
    at once (a deferred BEGIN cannot wait to upgrade its lock) and nothing tried again: the
    words stayed after the stop. Now the write lock is taken at BEGIN, waiting BUSY_MS; a
    longer write keeps the drop pending, done on the timer or at close."""
    import threading

    monkeypatch.setattr(index_module, "BUSY_MS", 400)
    path = tmp_path / "search-x.sqlite3"
    notes = dict(_filler(50))
    notes["secret.md"] = Extract("Secret plans", BODY)
    notes["other.md"] = Extract("Other plans", "Xandrovulpe Quentimarsh")
    index = _build(path, notes)
    writer = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")  # another server, writing for 0.1 s
    threading.Timer(0.1, writer.execute, ("COMMIT",)).start()
    index.remove("secret.md")  # waits for it
    assert _found(tmp_path) == set()
    writer.execute("BEGIN IMMEDIATE")  # now for longer than BUSY_MS
    with pytest.raises(sqlite3.OperationalError):
        index.remove("other.md")
    assert _found(tmp_path, ["Xandrovulpe"]) == {"Xandrovulpe"}  # the control: still there
    writer.execute("COMMIT")
    writer.close()
    index.close()  # the pending drop, done at close
    assert _found(tmp_path, ["Xandrovulpe", "Quentimarsh"]) == set()


def test_text_replaced_through_fs_notes_leaves_the_index_by_the_stop(tmp_path: Path) -> None:
    """Reviewer's find: notes_update, notes_edit and the link rewrites of notes_move never told
    the index, so the text they replaced (and a rewritten note's link to the old id) stayed
    in its files until some later search, past the stop too."""
    ws, state = _folder(tmp_path, 50, {
        "plans.md": f"# Plans\n\n{BODY}\n",
        "index.md": "# Index\n\nSee [[Xandrovulpe-minutes]].\n",
        "Xandrovulpe-minutes.md": "# Minutes\n\nNothing of note.\n",
    })  # fmt: skip
    server = StdioServer("serve", str(ws), "--state-dir", str(state), env=child_env())
    try:
        server.ask(call_tool(1, "notes_search", {"query": "Qvorblexian"}))
        assert _found(state, [*SECRET, "Xandrovulpe"]) == {*SECRET, "Xandrovulpe"}  # control
        updated = server.ask(call_tool(2, "notes_update", {"id": "plans.md",
                                                            "content": "# Plans\n\nbudget\n"}))
        assert updated["result"].get("isError") is not True, updated
        moved = server.ask(call_tool(3, "notes_move", {"id": "Xandrovulpe-minutes.md",
                                                        "newId": "minutes.md",
                                                        "updateLinks": True}))  # fmt: skip
        assert moved["result"].get("isError") is not True, moved
        assert (ws / "index.md").read_text() == "# Index\n\nSee [[minutes]].\n"
    finally:
        assert server.close() == 0, server.stderr
    assert _found(state, [*SECRET, "Xandrovulpe"]) == set()


def test_an_index_of_the_same_folder_under_another_name_goes_at_the_next_start(
    tmp_path: Path,
) -> None:
    """Reviewer's find: a deletion scrubs the index of the workspace it ran in; one the same
    folder had under another name (zero-config `serve FOLDER`, then a policy calling it
    "work") kept every word of the note for 30 days, or for ever. Nothing keeps such an index
    current, so the start that serves the folder under its new name removes it."""
    ws, state = _folder(tmp_path, 20, {"secret.md": f"# Secret plans\n\n{BODY}\n"})
    first = StdioServer("serve", str(ws), "--state-dir", str(state), env=child_env())
    try:
        first.ask(call_tool(1, "notes_search", {"query": "Qvorblexian"}))
    finally:
        assert first.close() == 0, first.stderr
    assert _found(state) == set(SECRET)  # the control: the zero-config index holds them
    policy = tmp_path / "p.toml"
    policy.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "work"\npath = "{ws}"\n\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "work"\n'
        'operations = ["read", "write", "delete"]\n'
    )
    server = StdioServer("serve", "--policy", str(policy), "--state-dir", str(state),
                         "--log-level", "info", env=child_env())  # fmt: skip
    try:
        server.ask(call_tool(0, "notes_workspaces", {}))  # (it has started)
        assert _found(state) == set()  # gone at the start, before any search
        done = _delete(server, ws, "Secret plans", "secret.md", 1)
        assert done["structuredContent"] == {"deleted": "secret.md", "outcome": "deleted"}
    finally:
        assert server.close() == 0, server.stderr
    assert _found(state) == set()
    assert "its folder is served now under another workspace name or path" in server.stderr
