"""notes_append, notes_edit and expectedVersion (issue 17, items 2 and 3): what ends up on disk,
that a refusal writes nothing, and that no update is lost, in process (layers 1 and 2) and through
the confined write worker (layer 3), whose filesystem layer makes the final compare."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from inprocess import InProcess, Wired
from oslayer import host_mode, make_layer, policy_for
from wire import tool_text

import fs_notes.fs.fileops as fileops
import fs_notes.fs.root as fs_root
import fs_notes.tools.versions as versions
from fs_notes.fs import Identity, IdentityChanged, WorkspaceRoot
from fs_notes.fs.version import is_version, note_version
from fs_notes.journal.store import Journal
from fs_notes.policy import Principal
from fs_notes.policy_file import load_policy
from fs_notes.rounds.seal import KeyRing
from fs_notes.sandbox.confined import ConfinedChanges, OsLayer

ME = Principal("me")
JOURNAL = "# Journal\n- monday: rain\n"
SECRET = "# secret\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "j.md").write_text(JOURNAL)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_text(SECRET)
    return notes


Call = Callable[[str, dict[str, Any]], dict[str, Any]]


@pytest.fixture
def call(ws: Path, tmp_path: Path) -> Iterator[Call]:
    """A tools/call in process (`InProcessChanges`: the filesystem layer of this process)."""
    srv = InProcess(policy_for(ws, "none"), tmp_path, keyring=KeyRing.ephemeral(), clock=time.time)

    def run(name: str, args: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = srv.call(ME, name, {"workspaceUri": ws.as_uri(), **args})["result"]
        return result

    yield run
    for root in srv.roots.values():
        root.close()
    srv.replay.close()


def _ident(path: Path) -> Identity:
    return Identity.of(os.stat(path))


def _version(path: Path) -> str:
    return note_version(_ident(path), path.read_bytes())


def _read_version(call: Call, note_id: str = "j.md") -> str:
    result = call("notes_read", {"id": note_id})
    assert result.get("isError") is not True, result
    version: str = result["structuredContent"]["version"]
    return version


def _mismatch(note_id: str, version: str) -> tuple[str, dict[str, str]]:
    return (
        f"refused: {note_id} changed since version {version}; nothing was written: read it "
        "again (notes_read) and retry with its new version",
        {"error": "versionMismatch", "id": note_id, "expectedVersion": version},
    )


# -- the version ------------------------------------------------------------------------------


def test_the_version_is_of_the_file_and_its_bytes_not_of_its_time_stamps(
    ws: Path, call: Call
) -> None:
    note = ws / "j.md"
    first = _read_version(call)
    assert is_version(first) and first == _version(note)
    read = call("notes_read", {"id": "j.md"})
    assert read["content"][1]["text"].startswith(f"(version {first}: pass it as expectedVersion")
    assert _read_version(call) == first  # served from the caches: the same version
    os.utime(note, ns=(1, 1))  # touched: same file, same bytes
    assert _read_version(call) == first
    note.write_text(JOURNAL.replace("rain", "sun"))  # one word changed, in place
    changed = _read_version(call)
    assert changed != first and changed == _version(note)
    copy = ws / "copy.tmp"
    copy.write_bytes(note.read_bytes())
    os.replace(copy, note)  # the same bytes in another file (an editor's atomic save)
    assert _read_version(call) not in (first, changed)


def test_an_expected_version_that_is_no_version_is_refused(ws: Path, call: Call) -> None:
    before = _ident(ws / "j.md")
    result = call("notes_append", {"id": "j.md", "content": "x", "expectedVersion": "v1:abc"})
    assert result["isError"] is True
    assert tool_text(result) == (
        'invalid expectedVersion: pass the version notes_read returned ("v1:" and 32 '
        "hexadecimal digits)"
    )
    assert _ident(ws / "j.md") == before


# -- no lost update -----------------------------------------------------------------------------


def test_an_update_with_a_version_read_before_someone_else_wrote_is_refused(
    ws: Path, call: Call
) -> None:
    note = ws / "j.md"
    seen = _read_version(call)
    note.write_text(JOURNAL + "- tuesday: someone else's line\n")  # between our read and write
    theirs = _ident(note)
    result = call("notes_update", {"id": "j.md", "content": "# mine\n", "expectedVersion": seen})
    text, data = _mismatch("j.md", seen)
    assert result["isError"] is True and tool_text(result) == text
    assert result["structuredContent"] == data
    assert note.read_text() == JOURNAL + "- tuesday: someone else's line\n"
    assert _ident(note) == theirs  # not even rewritten with the same bytes
    # positive control: with the version of what is there now, the update goes through
    fresh = _read_version(call)
    done = call("notes_update", {"id": "j.md", "content": "# mine\n", "expectedVersion": fresh})
    assert done.get("isError") is not True, done
    assert note.read_text() == "# mine\n"
    assert done["structuredContent"] == {"id": "j.md", "size": 7, "version": _version(note)}


def test_append_adds_exactly_the_text_and_refuses_a_stale_version(ws: Path, call: Call) -> None:
    note = ws / "j.md"
    seen = _read_version(call)
    args = {"id": "j.md", "content": "- tuesday: sun\n", "expectedVersion": seen}
    done = call("notes_append", args)
    assert done.get("isError") is not True, done
    assert note.read_text() == JOURNAL + "- tuesday: sun\n"
    size = len(JOURNAL) + 15
    assert done["structuredContent"] == {
        "id": "j.md", "size": size, "appended": 15, "version": _version(note),
    }  # fmt: skip
    assert tool_text(done) == f"appended 15 bytes to j.md ({size} bytes, version {_version(note)})"
    before = _ident(note)
    stale = call("notes_append", {"id": "j.md", "content": "twice?\n", "expectedVersion": seen})
    text, data = _mismatch("j.md", seen)
    assert stale["isError"] is True and tool_text(stale) == text
    assert stale["structuredContent"] == data
    assert _ident(note) == before and note.read_text() == JOURNAL + "- tuesday: sun\n"


def test_append_without_a_version_adds_to_what_is_there_when_it_writes(
    ws: Path, call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone writes between the tool's read and its write: the writer refuses (the file is
    not the one read), the tool reads again and appends to their version: nothing lost."""
    note = ws / "j.md"
    load = versions.load_current
    reads = []

    def read_then_someone_writes(opened: Any, note_id: str) -> versions.Current:
        current = load(opened, note_id)
        reads.append(current.version)
        if len(reads) == 1:
            note.write_text(JOURNAL + "- theirs\n")
        return current

    monkeypatch.setattr(versions, "load_current", read_then_someone_writes)
    done = call("notes_append", {"id": "j.md", "content": "- mine\n"})
    assert done.get("isError") is not True, done
    assert note.read_text() == JOURNAL + "- theirs\n- mine\n"
    assert len(reads) == 2


def test_append_takes_content_as_create_and_update_do_and_the_old_name_writes_nothing(
    ws: Path, call: Call
) -> None:
    """Issue 28 item 7: one name for note text in every tool. The old `text` is refused."""
    note = ws / "j.md"
    before = note.read_bytes()
    old = call("notes_append", {"id": "j.md", "text": "- old name\n"})
    assert old.get("isError") is True, old
    assert "missing required argument 'content'" in old["content"][0]["text"]
    assert note.read_bytes() == before
    done = call("notes_append", {"id": "j.md", "content": "- new name\n"})  # the control
    assert done.get("isError") is not True, done
    assert note.read_bytes() == before + b"- new name\n"


# -- notes_edit ---------------------------------------------------------------------------------


def test_edit_applies_every_edit_and_returns_the_unified_diff(ws: Path, call: Call) -> None:
    note = ws / "j.md"
    seen = _read_version(call)
    edits = [{"oldText": "rain", "newText": "sun"}, {"oldText": "# Journal", "newText": "# Log"}]
    done = call("notes_edit", {"id": "j.md", "edits": edits, "expectedVersion": seen})
    assert done.get("isError") is not True, done
    assert note.read_text() == "# Log\n- monday: sun\n"
    diff = (
        "--- a/j.md\n+++ b/j.md\n@@ -1,2 +1,2 @@\n"
        "-# Journal\n-- monday: rain\n+# Log\n+- monday: sun\n"
    )
    assert done["structuredContent"] == {
        "id": "j.md", "size": 20, "version": _version(note), "diff": diff, "dryRun": False,
        "edits": 2,
    }  # fmt: skip
    assert tool_text(done) == f"edited j.md (20 bytes, version {_version(note)})\n" + diff


@pytest.mark.parametrize(
    ("edits", "message", "data"),
    [
        (
            [{"oldText": "rain", "newText": "sun"}, {"oldText": "snow", "newText": "x"}],
            "edits[1]: oldText was not found (0 matches); it must occur exactly once",
            {"edit": 1, "reason": "notFound", "matches": 0},
        ),
        (
            [{"oldText": "n", "newText": "N"}],
            "edits[0]: oldText matches 3 times; it must occur exactly once (include more of "
            "the surrounding text)",
            {"edit": 0, "reason": "ambiguous", "matches": 3},
        ),
        (
            [{"oldText": "monday", "newText": "x"}, {"oldText": "day: r", "newText": "y"}],
            "edits[1]: oldText overlaps the text of edits[0]",
            {"edit": 1, "reason": "overlaps", "matches": 1},
        ),
    ],
)
def test_an_edit_that_does_not_match_exactly_once_changes_nothing(
    ws: Path, call: Call, edits: list[dict[str, str]], message: str, data: dict[str, Any]
) -> None:
    note = ws / "j.md"
    before = _ident(note)
    result = call("notes_edit", {"id": "j.md", "edits": edits})
    assert result["isError"] is True
    assert tool_text(result) == f"refused: nothing was changed in j.md: {message}"
    assert result["structuredContent"] == {"error": "editNotApplied", "id": "j.md", **data}
    assert _ident(note) == before and note.read_text() == JOURNAL


def test_a_dry_run_shows_the_diff_and_writes_nothing(ws: Path, call: Call) -> None:
    note = ws / "j.md"
    before = _ident(note)
    seen = _read_version(call)
    edits = [{"oldText": "rain", "newText": "sun"}]
    dry = call(
        "notes_edit", {"id": "j.md", "edits": edits, "dryRun": True, "expectedVersion": seen}
    )
    assert dry.get("isError") is not True, dry
    assert dry["structuredContent"]["diff"] == (
        "--- a/j.md\n+++ b/j.md\n@@ -1,2 +1,2 @@\n # Journal\n-- monday: rain\n+- monday: sun\n"
    )
    assert dry["structuredContent"]["dryRun"] is True
    assert dry["structuredContent"]["version"] == seen
    assert _ident(note) == before and note.read_text() == JOURNAL
    note.write_text(JOURNAL + "\n")
    stale = call(
        "notes_edit", {"id": "j.md", "edits": edits, "dryRun": True, "expectedVersion": seen}
    )
    assert stale["isError"] is True and stale["structuredContent"]["error"] == "versionMismatch"


def test_a_note_that_is_not_utf8_is_not_edited_but_may_be_appended_to(ws: Path, call: Call) -> None:
    note = ws / "bin.md"
    note.write_bytes(b"# bytes \xff\xfe\n")
    before = _ident(note)
    result = call("notes_edit", {"id": "bin.md", "edits": [{"oldText": "bytes", "newText": "x"}]})
    assert result["isError"] is True
    assert tool_text(result) == (
        "refused: bin.md is not valid UTF-8 text, so it cannot be edited (nothing was written)"
    )
    assert _ident(note) == before
    done = call("notes_append", {"id": "bin.md", "content": "more\n"})
    assert done.get("isError") is not True, done
    assert note.read_bytes() == b"# bytes \xff\xfe\nmore\n"


def test_the_result_is_held_to_the_read_limit(ws: Path, tmp_path: Path) -> None:
    toml = tmp_path / "policy.toml"
    toml.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "notes"\npath = {json.dumps(str(ws))}\nread_limit = 4096\n\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "notes"\noperations = ["read", "write"]\n'
    )
    policy = load_policy(str(toml))
    srv = InProcess(policy, tmp_path, keyring=KeyRing.ephemeral(), clock=time.time)
    try:
        before = _ident(ws / "j.md")
        args = {"workspaceUri": ws.as_uri(), "id": "j.md", "content": "x" * 5000}
        result = srv.call(ME, "notes_append", args)["result"]
    finally:
        for root in srv.roots.values():
            root.close()
        srv.replay.close()
    assert result["isError"] is True
    assert tool_text(result) == (
        f"refused: j.md would be {len(JOURNAL) + 5000} bytes, above this workspace's read limit "
        "of 4096 bytes; nothing was written"
    )
    assert _ident(ws / "j.md") == before


# -- a concurrent writer swaps the note: layer 2 refuses ------------------------------------------


def _swap_to_symlink(note: Path, target: Path) -> None:
    link = note.with_name("swap.tmp")
    link.symlink_to(target)
    os.replace(link, note)


def _swap_to_hardlink(note: Path, target: Path) -> None:
    link = note.with_name("swap.tmp")
    os.link(target, link)
    os.replace(link, note)


@pytest.mark.parametrize("swap", [_swap_to_symlink, _swap_to_hardlink, None])
def test_a_note_swapped_between_the_read_and_the_write_is_refused(
    ws: Path, call: Call, monkeypatch: pytest.MonkeyPatch, swap: Callable[[Path, Path], None] | None
) -> None:
    """The tool has read (and checked the version); before the writer acts, the note becomes a
    symlink or a hard link to a file outside. The writer's identity check refuses, the read
    again refuses what is there now. `None` is the positive control: no swap, the edit lands."""
    note, secret = ws / "j.md", ws.parent / "outside" / "secret.md"
    load = versions.load_current

    def read_then_swap(opened: Any, note_id: str) -> versions.Current:
        current = load(opened, note_id)
        if swap is not None and not note.is_symlink() and note.stat().st_nlink == 1:
            swap(note, secret)
        return current

    monkeypatch.setattr(versions, "load_current", read_then_swap)
    seen = _version(note)
    edits = [{"oldText": "rain", "newText": "PWNED"}]
    result = call("notes_edit", {"id": "j.md", "edits": edits, "expectedVersion": seen})
    if swap is None:
        assert result.get("isError") is not True, result
        assert note.read_text() == JOURNAL.replace("rain", "PWNED")
        return
    assert result["isError"] is True
    if swap is _swap_to_symlink:
        assert tool_text(result) == (
            "refused: j.md is not a note inside the workspace (symbolic links, '..' and other "
            "mounts are not followed)"
        )
    else:
        assert tool_text(result) == "refused: j.md has more than one hard link"
    assert secret.read_text() == SECRET


@pytest.mark.parametrize("expected", [True, False])
def test_a_swap_after_the_writers_first_check_is_caught_right_before_the_rename(
    ws: Path, monkeypatch: pytest.MonkeyPatch, expected: bool
) -> None:
    """Another writer replaces the note while our temp file is being written (after
    `_require_target`, before the rename): with an expected identity the check right before the
    rename refuses and the temp file is gone; without one (the positive control that the
    recheck is what refuses) the rename goes ahead over their file."""
    note = ws / "j.md"
    replace_in = fileops.replace_in

    def someone_writes_meanwhile(*args: Any) -> Identity:
        other = ws / "theirs.tmp"
        other.write_text("# theirs\n")
        os.replace(other, note)
        return replace_in(*args)

    monkeypatch.setattr(fs_root, "replace_in", someone_writes_meanwhile)
    with WorkspaceRoot.open(ws) as root:
        _, ident = root.read_note("j.md")
        if expected:
            with pytest.raises(IdentityChanged):
                root.update_note("j.md", b"# mine\n", expected=ident)
            assert note.read_text() == "# theirs\n"
        else:
            root.update_note("j.md", b"# mine\n")
            assert note.read_text() == "# mine\n"
    assert sorted(os.listdir(ws)) == ["j.md"]  # no temp file left


# -- through the confined write worker (layer 3) ---------------------------------------------


class Confined(Wired):
    """The tools wired as `serve` wires them, writes through the real OS layer's worker."""

    def __init__(self, ws: Path, layer: OsLayer, state: Path) -> None:
        super().__init__(policy_for(ws, "chroot"), ConfinedChanges(layer), state)
        self.ws = ws

    def __call__(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return self.call(name, {"workspaceUri": self.ws.as_uri(), **args})


@pytest.fixture
def confined(ws: Path, tmp_path: Path) -> Iterator[tuple[Confined, OsLayer]]:
    mode = host_mode()
    layer = make_layer(policy_for(ws, "chroot"), allow_unconfined=False)
    server = Confined(ws, layer, tmp_path)
    try:
        assert server.changes.refusal("notes", "update_note") is None
        assert layer.worker("notes", "write").hello["mode"] == mode
        yield server, layer
    finally:
        server.close()
        layer.close()


def test_append_edit_and_versioned_update_run_in_the_confined_worker(
    ws: Path, confined: tuple[Confined, OsLayer], monkeypatch: pytest.MonkeyPatch
) -> None:
    call, layer = confined
    note = ws / "j.md"
    sent: list[Identity | None] = []
    update = ConfinedChanges.update_note

    def recorded(self: ConfinedChanges, workspace: str, relpath: str, data: bytes, *,
                 expected: Identity | None = None) -> Identity:  # fmt: skip
        sent.append(expected)
        return update(self, workspace, relpath, data, expected=expected)

    monkeypatch.setattr(ConfinedChanges, "update_note", recorded)
    seen = _read_version(call)
    done = call("notes_append", {"id": "j.md", "content": "- tuesday\n", "expectedVersion": seen})
    assert done.get("isError") is not True, done
    assert note.read_text() == JOURNAL + "- tuesday\n"
    edits = [{"oldText": "tuesday", "newText": "wednesday"}]
    version = done["structuredContent"]["version"]
    edited = call("notes_edit", {"id": "j.md", "edits": edits, "expectedVersion": version})
    assert edited.get("isError") is not True, edited
    assert note.read_text() == JOURNAL + "- wednesday\n"
    assert edited["structuredContent"]["version"] == _version(note)
    stale = call("notes_update", {"id": "j.md", "content": "# gone\n", "expectedVersion": seen})
    assert stale["isError"] is True and stale["structuredContent"]["error"] == "versionMismatch"
    assert note.read_text() == JOURNAL + "- wednesday\n"
    assert len(sent) == 2 and all(isinstance(e, Identity) for e in sent)  # always compared
    pid = layer.worker("notes", "write").pid
    assert pid is not None and pid != os.getpid()


def test_the_confined_worker_refuses_a_note_changed_after_the_tools_check(
    ws: Path, confined: tuple[Confined, OsLayer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server read the note and its version matched; then someone rewrote it. Only the
    worker's compare (its filesystem layer, before writing) stands between them and a lost
    update: it refuses, the tool reads again and sees another version."""
    call, _ = confined
    note = ws / "j.md"
    refused: list[BaseException] = []
    update = ConfinedChanges.update_note

    def recorded(self: ConfinedChanges, workspace: str, relpath: str, data: bytes, *,
                 expected: Identity | None = None) -> Identity:  # fmt: skip
        try:
            return update(self, workspace, relpath, data, expected=expected)
        except BaseException as exc:
            refused.append(exc)
            raise

    keep = Journal.keep

    def kept_then_someone_writes(self: Journal, **row: Any) -> int:
        # After the server read the note (the tools, then the journal of changes, each under
        # the identity it saw), just before the worker writes.
        seq = keep(self, **row)
        if not refused and note.read_text() == JOURNAL:
            note.write_text(JOURNAL + "- theirs\n")
        return seq

    monkeypatch.setattr(ConfinedChanges, "update_note", recorded)
    monkeypatch.setattr(Journal, "keep", kept_then_someone_writes)
    seen = _version(note)
    result = call("notes_update", {"id": "j.md", "content": "# mine\n", "expectedVersion": seen})
    text, data = _mismatch("j.md", seen)
    assert result["isError"] is True and tool_text(result) == text
    assert result["structuredContent"] == data
    assert note.read_text() == JOURNAL + "- theirs\n"
    assert [type(e) for e in refused] == [IdentityChanged]  # the worker said no
    assert call("notes_history", {"id": "j.md"})["structuredContent"]["versions"] == []
    assert sorted(os.listdir(ws)) == ["j.md"]  # no temp file left by the worker
