"""Every change undoable (issue 30 item 2): each change through fs-notes keeps what it replaced
in the workspace's journal first (fs_notes/journal/), notes_history lists a note's kept versions
(a deleted note's too) and notes_restore puts one back byte for byte, through the same door;
a change whose previous bytes cannot be kept is not made; the journal is private, bounded, and
what it prunes is gone from its file. In process (layers 1 and 2); tests/test_sdk_history.py
drives the real `serve` (the confined worker)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from inprocess import InProcess
from trees import files

from fs_notes.errors import ConfigError
from fs_notes.fs.changes import InProcessChanges, NoteChanges
from fs_notes.fs.errors import IdentityChanged
from fs_notes.fs.identity import Identity
from fs_notes.journal.store import Journal, JournalFull, journal_name
from fs_notes.policy import Policy, PolicyError
from fs_notes.policy_file import load_policy
from fs_notes.rounds.seal import KeyRing
from fs_notes.statefolder import index_digest

PLAN = (
    "---\ntags: [garden]\n---\n# Plan\n\n## Beds\n\nTomatoes by the wall.\n\n"
    "## Paths\n\nGravel.\n"
)


def _policy(tmp_path: Path, limits: str = "", read_limit: str = "") -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "notes"\npath = "{tmp_path / "notes"}"\n{read_limit}\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "notes"\n'
        'operations = ["read", "write", "delete"]\n'
        + (f"\n[limits]\n{limits}\n" if limits else "")
    )
    return load_policy(str(path))


class _Served:
    def __init__(self, tmp_path: Path, *, door: Any = InProcessChanges, **policy: str) -> None:
        self.ws = files(tmp_path / "notes", {"plan.md": PLAN, "index.md": "# Index\n[[plan]]\n"})
        self.policy = _policy(tmp_path, **policy)
        self.state = tmp_path / "state"
        self.state.mkdir(exist_ok=True)
        self.srv = InProcess(
            self.policy, self.state, keyring=KeyRing.ephemeral(), clock=time.time, door=door
        )
        self.uri = self.policy.workspaces[0].uri
        ws = self.policy.workspaces[0]
        self.journal = self.state / journal_name(index_digest(ws.name, ws.path))

    def call(self, name: str, **args: Any) -> dict[str, Any]:
        me = self.policy.local_principal()
        response = self.srv.call(me, name, {"workspaceUri": self.uri, **args})
        result: dict[str, Any] = response["result"]
        return result

    def delete(self, note_id: str) -> dict[str, Any]:
        me = self.policy.local_principal()
        args = {"workspaceUri": self.uri, "id": note_id}
        state = self.srv.call(me, "notes_delete", args)["result"]["requestState"]
        accept = {"delete_choice": {"action": "accept",
                                    "content": {"note_id": note_id, "confirm": True}}}  # fmt: skip
        answer = self.srv.call(me, "notes_delete", args, inputResponses=accept, requestState=state)
        result: dict[str, Any] = answer["result"]
        return result

    def versions(self, note_id: str) -> list[dict[str, Any]]:
        history = self.call("notes_history", id=note_id)
        assert history.get("isError") is not True, history
        versions: list[dict[str, Any]] = history["structuredContent"]["versions"]
        return versions

    def close(self) -> None:
        self.srv.close()


@pytest.fixture
def served(tmp_path: Path) -> Any:
    s = _Served(tmp_path)
    yield s
    s.close()


def test_an_update_is_kept_and_restored_byte_for_byte(served: _Served) -> None:
    before = served.call("notes_read", id="plan.md")["structuredContent"]["version"]
    new = PLAN.replace("Gravel.", "Bark chips.")
    assert served.call("notes_update", id="plan.md", content=new).get("isError") is not True
    [kept] = served.versions("plan.md")
    assert kept["version"] == before  # the version notes_read gave before the change
    assert kept["tool"] == "notes_update" and kept["principal"] == "me"
    assert kept["size"] == len(PLAN.encode()) and kept["kind"] == "update"
    restored = served.call("notes_restore", id="plan.md", version=before)
    assert restored.get("isError") is not True, restored
    assert restored["structuredContent"]["restored"] == before
    assert (served.ws / "plan.md").read_bytes() == PLAN.encode()
    # The restore is kept too: the text it replaced can be put back in turn.
    newest, oldest = served.versions("plan.md")
    assert newest["tool"] == "notes_restore" and newest["size"] == len(new.encode())
    assert oldest["version"] == before


def test_a_deleted_note_is_listed_and_restored_byte_for_byte(served: _Served) -> None:
    raw = PLAN.encode() + b"\xe2\x80\x8b trailing bytes\n"
    (served.ws / "plan.md").write_bytes(raw)
    mode = stat.S_IMODE((served.ws / "plan.md").stat().st_mode)
    done = served.delete("plan.md")
    assert done["structuredContent"]["deleted"] == "plan.md"
    assert not (served.ws / "plan.md").exists()
    [kept] = served.versions("plan.md")
    assert kept["kind"] == "delete" and kept["tool"] == "notes_delete"
    assert kept["size"] == len(raw)
    restored = served.call("notes_restore", id="plan.md", version=kept["version"])
    assert restored.get("isError") is not True, restored
    assert (served.ws / "plan.md").read_bytes() == raw
    assert stat.S_IMODE((served.ws / "plan.md").stat().st_mode) & 0o600 == mode & 0o600


def test_edit_append_and_a_move_with_its_link_rewrite_are_kept(served: _Served) -> None:
    edit = served.call("notes_edit", id="plan.md",
                       edits=[{"oldText": "Gravel.", "newText": "Bark."}])  # fmt: skip
    assert edit.get("isError") is not True, edit
    assert served.call("notes_append", id="plan.md", content="\nMore.\n").get("isError") is not True
    moved = served.call("notes_move", id="plan.md", newId="garden/plan.md", updateLinks=True)
    assert moved.get("isError") is not True, moved
    tools = [v["tool"] for v in served.versions("plan.md")]
    assert tools == ["notes_append", "notes_edit"]
    history = served.call("notes_history", id="plan.md")["structuredContent"]
    assert [(m["id"], m["newId"]) for m in history["moves"]] == [("plan.md", "garden/plan.md")]
    # The backlink rewrite in index.md is a change too, kept under the move's name.
    [link] = served.versions("index.md")
    assert link["tool"] == "notes_move"
    restored = served.call("notes_restore", id="index.md", version=link["version"])
    assert restored.get("isError") is not True, restored
    assert (served.ws / "index.md").read_text() == "# Index\n[[plan]]\n"


def test_a_version_not_kept_is_refused_with_nothing_changed(served: _Served) -> None:
    st = (served.ws / "plan.md").stat()
    missing = "v1:" + "0" * 32
    refused = served.call("notes_restore", id="plan.md", version=missing)
    assert refused["isError"] is True
    assert refused["structuredContent"] == {
        "error": "versionNotKept", "id": "plan.md", "version": missing,
    }  # fmt: skip
    bad = served.call("notes_restore", id="plan.md", version="yesterday")
    assert bad["isError"] is True and "invalid version" in bad["content"][0]["text"]
    after = (served.ws / "plan.md").stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (st.st_ino, st.st_mtime_ns,
                                                                 st.st_size)  # fmt: skip


def test_restore_with_an_expected_version_refuses_a_note_changed_since(served: _Served) -> None:
    served.call("notes_update", id="plan.md", content=PLAN + "\nOne more line.\n")
    [kept] = served.versions("plan.md")
    now = served.call("notes_read", id="plan.md")["structuredContent"]["version"]
    (served.ws / "plan.md").write_text(PLAN + "\nThe person's own edit.\n")
    refused = served.call("notes_restore", id="plan.md", version=kept["version"],
                          expectedVersion=now)  # fmt: skip
    assert refused["isError"] is True
    assert refused["structuredContent"]["error"] == "versionMismatch"
    assert (served.ws / "plan.md").read_text().endswith("The person's own edit.\n")
    assert len(served.versions("plan.md")) == 1  # the refused restore kept nothing


def test_the_journal_is_private_to_the_user(served: _Served) -> None:
    served.call("notes_update", id="plan.md", content=PLAN + "\nx\n")
    for name in os.listdir(served.state):
        if name.startswith("journal-"):
            assert stat.S_IMODE(os.stat(served.state / name).st_mode) == 0o600, name


def test_a_link_planted_at_the_journal_name_is_refused_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.sqlite3"
    outside.write_bytes(b"the user's own file\n")
    st = outside.stat()
    probe = _Served(tmp_path)  # to learn the journal's name
    name = probe.journal.name
    probe.close()
    os.unlink(probe.journal)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(str(probe.journal) + suffix):
            os.unlink(str(probe.journal) + suffix)
    os.symlink(outside, probe.journal)
    with pytest.raises(ConfigError, match="the journal of changes"):
        _Served(tmp_path)
    assert outside.read_bytes() == b"the user's own file\n"
    after = outside.stat()
    assert (after.st_mtime_ns, after.st_size, after.st_mode) == (st.st_mtime_ns, st.st_size,
                                                                  st.st_mode)  # fmt: skip
    assert os.path.islink(tmp_path / "state" / name)


def test_a_note_whose_bytes_cannot_be_kept_is_not_changed(tmp_path: Path) -> None:
    s = _Served(tmp_path, read_limit="read_limit = 4096")
    try:
        big = b"# Big\n" + b"word " * 1000
        (s.ws / "big.md").write_bytes(big)
        st = (s.ws / "big.md").stat()
        refused = s.call("notes_update", id="big.md", content="# Big\n", force=True)
        assert refused["isError"] is True
        text = refused["content"][0]["text"]
        assert "cannot keep a copy to undo the change" in text and "nothing was changed" in text
        assert (s.ws / "big.md").read_bytes() == big
        after = (s.ws / "big.md").stat()
        assert (after.st_ino, after.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)
        # The control: a note within the limit is replaced.
        assert s.call("notes_update", id="index.md", content="# I\n", force=True).get(
            "isError") is not True  # fmt: skip
    finally:
        s.close()


class _Racing:
    """A door whose every update finds the note changed since it was read."""

    def __init__(self, roots: Any) -> None:
        self.inner: NoteChanges = InProcessChanges(roots)
        self.updates = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update_note(self, workspace: str, relpath: str, data: bytes, *,
                    expected: Identity | None = None) -> Identity:  # fmt: skip
        self.updates += 1
        raise IdentityChanged()


def test_a_change_that_did_not_go_through_leaves_no_row(tmp_path: Path) -> None:
    doors: list[_Racing] = []

    def door(roots: Any) -> Any:
        doors.append(_Racing(roots))
        return doors[0]

    s = _Served(tmp_path, door=door)
    try:
        busy = s.call("notes_update", id="plan.md", content=PLAN + "\nx\n")
        assert busy["isError"] is True and busy["structuredContent"]["error"] == "noteBusy"
        assert doors[0].updates > 0  # the door was reached, and refused each time
        assert s.versions("plan.md") == []
    finally:
        s.close()


def _marker_in(path: Path, marker: bytes) -> bool:
    data = b"".join(
        Path(str(path) + suffix).read_bytes()
        for suffix in ("", "-wal") if os.path.exists(str(path) + suffix)
    )  # fmt: skip
    return marker in data


def test_the_journal_is_bounded_and_what_it_prunes_is_gone_from_its_file(tmp_path: Path) -> None:
    s = _Served(tmp_path, limits="undo_mib = 1", read_limit="read_limit = 1048576")
    try:
        marker = b"SECRET-FIRST-VERSION-" * 1000  # 21 KB, in the first version only
        (s.ws / "plan.md").write_bytes(b"# Plan\n" + marker + b"\n")
        s.call("notes_update", id="plan.md", content="# Plan\n" + "a" * 300_000 + "\n", force=True)
        assert _marker_in(s.journal, marker[:42])  # the control: it is kept, in the file
        for n in range(4):  # 4 x 300 KB more, each a version older than a day: the oldest go
            _age(s.journal, 2 * 86400)
            s.call("notes_update", id="plan.md", content="# Plan\n" + str(n) * 300_000 + "\n",
                   force=True)  # fmt: skip
        sizes = [v["size"] for v in s.versions("plan.md")]
        assert sum(sizes) <= 1 << 20 and len(sizes) < 5
        assert all(v["size"] != len(marker) + 8 for v in s.versions("plan.md"))
        assert not _marker_in(s.journal, marker[:42])  # secure_delete: zeroed, not just freed
    finally:
        s.close()


def _age(journal: Path, seconds: float) -> None:
    """Every kept row made `seconds` older (as another process could see it: through SQLite)."""
    with contextlib.closing(sqlite3.connect(journal, isolation_level=None)) as db:
        db.execute("UPDATE kept SET at = at - ?", (seconds,))


def _ok(result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("isError") is not True, result
    return result


def test_no_writer_can_flush_what_another_change_kept(tmp_path: Path) -> None:
    """The attack: a client that writes a lot to push a deleted note out of the journal before
    the person looks. Versions younger than a day are never pruned for space: the flooding write
    is refused with nothing changed, and the deleted note is still restored byte for byte."""
    s = _Served(tmp_path, limits="undo_mib = 1", read_limit="read_limit = 1048576")
    try:
        _ok(s.delete("index.md"))
        body = b""
        for n in range(4):  # 3 x 300 KB kept (the versions these updates replace)
            body = ("# Plan\n" + str(n) * 300_000 + "\n").encode()
            _ok(s.call("notes_update", id="plan.md", content=body.decode(), force=True))
        before = os.stat(s.ws / "plan.md")
        refused = s.call("notes_update", id="plan.md", content="# Plan\n" + "9" * 300_000 + "\n",
                         force=True)  # fmt: skip
        assert refused["isError"] is True
        [text] = [c["text"] for c in refused["content"]]
        assert "journal of changes is full" in text and "undo_mib (1 MiB)" in text
        assert (s.ws / "plan.md").read_bytes() == body
        assert os.stat(s.ws / "plan.md").st_ino == before.st_ino
        [deleted] = s.versions("index.md")
        _ok(s.call("notes_restore", id="index.md", version=deleted["version"]))
        assert (s.ws / "index.md").read_text() == "# Index\n[[plan]]\n"
        # The control: the same write once what was kept is older than a day goes through,
        # pruning the oldest versions for space.
        _age(s.journal, 2 * 86400)
        _ok(s.call("notes_update", id="plan.md", content="# Plan\n" + "9" * 300_000 + "\n",
                   force=True))  # fmt: skip
        assert len(s.versions("plan.md")) < 4
    finally:
        s.close()


def test_rows_past_the_age_bound_go_when_it_opens_with_nothing_changed(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    journal = Journal(str(path), days=30, max_bytes=1 << 30)
    journal.keep(note_id="a.md", kind="delete", tool="t", principal="p", content=b"OLD-SECRET")
    journal.keep(note_id="b.md", kind="delete", tool="t", principal="p", content=b"YOUNG")
    journal.close()
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("UPDATE kept SET at = at - 40 * 86400 WHERE content = x'4f4c442d534543524554'")
    assert _marker_in(path, b"OLD-SECRET")  # the control: there before it opens again
    journal = Journal(str(path), days=30, max_bytes=1 << 30)
    try:
        assert journal.history("a.md") == []
        assert [e.content for e in journal.history("b.md")] == [b"YOUNG"]
        assert not _marker_in(path, b"OLD-SECRET")
    finally:
        journal.close()
    # undo_days lowered to 0 since: nothing of what was kept stays past the next start.
    Journal(str(path), days=0, max_bytes=1 << 30).close()
    assert not _marker_in(path, b"YOUNG")


def test_a_log_held_by_a_reader_is_emptied_once_it_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    journal = Journal(str(path), days=30, max_bytes=1 << 30)
    try:
        seq = journal.keep(note_id="a.md", kind="delete", tool="t", principal="p",
                           content=b"DROPPED-SECRET")  # fmt: skip
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM kept").fetchone()  # holds the log as it is
        journal.drop(seq)
        assert _marker_in(path, b"DROPPED-SECRET")  # the control: the log could not be emptied
        reader.execute("COMMIT")
        reader.close()
        journal.prune()  # what the hourly timer does
        assert not _marker_in(path, b"DROPPED-SECRET")
    finally:
        journal.close()


def test_a_journal_file_not_this_users_own_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    Journal(str(path), days=30, max_bytes=1 << 30).close()
    os.link(path, tmp_path / "other-name")
    with pytest.raises(PermissionError, match="hard link"):
        Journal(str(path), days=30, max_bytes=1 << 30)
    os.unlink(tmp_path / "other-name")
    Journal(str(path), days=30, max_bytes=1 << 30).close()  # the control: opened
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match=r"others may read it \(mode 644\)"):
        Journal(str(path), days=30, max_bytes=1 << 30)
    os.chmod(path, 0o600)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        with pytest.raises(PermissionError, match="owned by another user"):
            Journal(str(path), days=30, max_bytes=1 << 30)
    else:  # a file this user cannot own: root's, opened the only way it can be
        with pytest.raises(PermissionError, match="owned by another user"):
            Journal("/etc/passwd", days=0, max_bytes=0, read_only=True)


def test_rows_past_the_age_bound_go(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j.sqlite3"), days=1, max_bytes=1 << 30)
    try:
        journal.keep(note_id="a.md", kind="update", tool="t", principal="p", content=b"old")
        journal._db().execute("UPDATE kept SET at = at - 2 * 86400")  # two days ago
        journal.keep(note_id="b.md", kind="update", tool="t", principal="p", content=b"new")
        assert journal.history("a.md") == []
        assert [e.content for e in journal.history("b.md")] == [b"new"]
    finally:
        journal.close()


def test_undo_days_zero_keeps_no_bytes(tmp_path: Path) -> None:
    s = _Served(tmp_path, limits="undo_days = 0")
    try:
        s.call("notes_update", id="plan.md", content=PLAN + "\nx\n")
        assert s.versions("plan.md") == []
        assert not _marker_in(s.journal, b"Tomatoes by the wall")
    finally:
        s.close()


def test_ids_that_are_not_utf8_come_back_as_they_went_in(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j.sqlite3"), days=30, max_bytes=1 << 30)
    try:
        odd = os.fsdecode(b"caf\xe9.md")  # a Latin-1 name: a lone surrogate escape
        journal.keep(note_id=odd, kind="delete", tool="t", principal="p", content=b"x")
        [entry] = journal.history(odd)
        assert entry.id == odd and os.fsencode(entry.id) == b"caf\xe9.md"
    finally:
        journal.close()


def _in_another_process(path: Path, code: str) -> None:
    script = (
        "import sys; from fs_notes.journal.store import Journal\n"
        f"j = Journal({str(path)!r}, days=30, max_bytes=1 << 30)\n{code}\nj.close()\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parent.parent)  # fmt: skip


def test_another_process_closing_it_leaves_this_ones_log_and_shows_its_writes(
    tmp_path: Path,
) -> None:
    """Each open journal keeps its SQLite locks (the descriptor it checked stays open: closing
    it would drop them): another process closing the same journal must not take it for unused
    and delete the write-ahead log under this one, which would then miss later writes."""
    path = tmp_path / "j.sqlite3"
    journal = Journal(str(path), days=30, max_bytes=1 << 30)
    try:
        journal.keep(note_id="a.md", kind="delete", tool="t", principal="p", content=b"A")
        _in_another_process(path, "pass")  # opens and closes it
        assert os.path.exists(str(path) + "-wal") and os.path.exists(str(path) + "-shm")
        _in_another_process(
            path, "j.keep(note_id='b.md', kind='delete', tool='t', principal='p', content=b'B')"
        )
        assert [e.content for e in journal.history("b.md")] == [b"B"]
    finally:
        journal.close()
    # The control: once the last one closes, SQLite does remove its log (so the check above
    # would see it gone had this process not held its locks).
    _in_another_process(path, "pass")
    assert not os.path.exists(str(path) + "-wal")


def test_a_change_larger_than_the_whole_journal_is_refused_saying_so(tmp_path: Path) -> None:
    """(The policy refuses a read_limit above undo_mib, so only a journal used directly can be
    asked this; the door then says it is this change, not the last day's, that does not fit.)"""
    journal = Journal(str(tmp_path / "j.sqlite3"), days=30, max_bytes=1 << 20)
    try:
        with pytest.raises(JournalFull) as raised:
            journal.keep(note_id="big.md", kind="update", tool="t", principal="p",
                         content=b"x" * (2 << 20))  # fmt: skip
        assert raised.value.alone is True
        assert journal.history("big.md") == []  # nothing kept, nothing pruned
    finally:
        journal.close()


def test_a_read_limit_above_what_the_journal_can_keep_is_refused_at_load(tmp_path: Path) -> None:
    files(tmp_path / "notes", {"a.md": "# A\n"})
    with pytest.raises(PolicyError, match=r"read_limit: 4194304 bytes is more than \[limits\] "
                       r"undo_mib \(1 MiB\)"):  # fmt: skip
        _policy(tmp_path, limits="undo_mib = 1")
    _policy(tmp_path, limits="undo_mib = 1\nundo_days = 0")  # the control: nothing is kept


def test_a_folder_with_a_trash_keeps_a_deleted_note_there_and_it_can_still_be_restored(
    tmp_path: Path,
) -> None:
    """As Obsidian does: where the folder keeps a `.trash/`, a confirmed deletion moves the note
    there (a name of its own if one is taken), never over anything; its bytes are kept in the
    journal too, so notes_history lists it and notes_restore puts it back at its id."""
    s = _Served(tmp_path)
    try:
        trash = s.ws / ".trash"
        trash.mkdir()
        (trash / "index.md").write_text("# An older index, trashed before\n")
        before = (s.ws / "index.md").read_bytes()
        done = s.delete("index.md")
        assert done["structuredContent"] == {"deleted": "index.md", "outcome": "deleted",
                                             "trashed": ".trash/index 1.md"}  # fmt: skip
        assert not (s.ws / "index.md").exists()
        assert (trash / "index 1.md").read_bytes() == before
        assert (trash / "index.md").read_text() == "# An older index, trashed before\n"
        [kept] = s.versions("index.md")
        assert kept["kind"] == "delete" and kept["tool"] == "notes_delete"
        s.call("notes_restore", id="index.md", version=kept["version"])
        assert (s.ws / "index.md").read_bytes() == before
    finally:
        s.close()


def test_without_a_trash_or_with_trash_journal_the_note_is_removed(tmp_path: Path) -> None:
    s = _Served(tmp_path)
    try:
        assert s.delete("index.md")["structuredContent"] == {"deleted": "index.md",
                                                             "outcome": "deleted"}  # fmt: skip
        assert sorted(os.listdir(s.ws)) == ["plan.md"]  # no trash made
    finally:
        s.close()


def test_servers_starting_at_once_on_a_new_state_folder_all_open_it(tmp_path: Path) -> None:
    """Two servers started together (a desktop app and an editor) make the journal and the
    approvals file at the same moment: each opens them (SQLite answers "locked" at once to
    the switch to WAL and to a read lock's upgrade, which must wait instead: privatefile.py)."""
    start = time.time() + 1.0
    script = (
        "import time\nfrom fs_notes.journal.store import Journal\n"
        "from fs_notes.approval.store import Approvals\n"
        f"while time.time() < {start}:\n    pass\n"
        f"Journal({str(tmp_path / 'j.sqlite3')!r}, days=30, max_bytes=1 << 20).close()\n"
        f"Approvals({str(tmp_path / 'a.sqlite3')!r}).close()\n"
    )
    repo = Path(__file__).resolve().parent.parent
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, cwd=repo)
        for _ in range(6)
    ]
    errors = [p.communicate(timeout=60)[1] for p in procs]  # (bytes: shown as they are)
    assert [p.returncode for p in procs] == [0] * 6, errors
