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


def test_a_confirmed_delete_through_serve_leaves_no_word_in_the_state_folder(
    tmp_path: Path,
) -> None:
    """The real server, confined as `serve` confines itself: index the folder (a search), then
    delete the note through the confirmation flow; the raw files hold none of its words while
    the server still runs, nor after it stops."""
    ws = tmp_path / "notes"
    ws.mkdir()
    for name, extract in _filler(200):
        (ws / name).write_text(f"# {extract.title}\n\n{extract.text}\n")
    (ws / "secret.md").write_text(f"# Secret plans\n\n{BODY}\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
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
