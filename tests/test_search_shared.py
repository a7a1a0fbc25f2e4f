"""Several servers on one folder share one search index file: one writes it at a time, the
others search what is committed and say how much that is; none is refused, and none indexes
again what another one did (issue 29 item 4).

Judged from outside: the other writer is a plain SQLite connection holding the write lock, or
a second `NoteIndex` on the same file; what each index loaded is recorded by its `load`; and
whole servers (`fs-notes serve`, three of them, one state folder) are compared answer by answer.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wire import StdioServer, call_tool, child_env, request

from fs_notes.search.index import GLANCE_MS, Building, Extract, NoteIndex


def _notes(n: int, word: str = "river") -> dict[str, Extract]:
    return {f"n{i:03}.md": Extract(f"Note {i}", f"{word} number {i}\n") for i in range(n)}


class _Loads:
    """`load` for NoteIndex.refresh, recording each id it is asked for."""

    def __init__(self, notes: dict[str, Extract]) -> None:
        self.notes = notes
        self.asked: list[str] = []

    def __call__(self, note_id: str) -> Extract | None:
        self.asked.append(note_id)
        return self.notes.get(note_id)


def _listed(notes: dict[str, Extract], key: str = "k1") -> list[tuple[str, str]]:
    return [(i, key) for i in notes]


@pytest.fixture
def path(tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "search-0123456789abcdef.sqlite3")


def test_a_refresh_kept_out_by_another_servers_write_searches_what_is_committed(
    path: str,
) -> None:
    """Ten notes indexed by one server; another holds the write lock (a build under way) while
    five more appear: the refresh writes nothing, says 10 of 15 are indexed, in at most a
    glance's wait, and the ten are found. The control: once the lock is let go, all 15."""
    first = NoteIndex(path, "first")
    notes = _notes(10)
    first.refresh(_listed(notes), _Loads(notes))
    more = {**notes, **{f"m{i}.md": Extract(f"More {i}", "river more\n") for i in range(5)}}
    second = NoteIndex(path, "second")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        loads = _Loads(more)
        began = time.monotonic()
        with pytest.raises(Building) as kept:
            second.refresh(_listed(more), loads)
        waited = time.monotonic() - began
        assert (kept.value.indexed, kept.value.total) == (10, 15)
        assert loads.asked == []  # nothing read, nothing written
        assert waited < GLANCE_MS / 1000 + 2.0  # (not BUSY_MS: a glance, then the answer)
        found = {hit.id for hit in second.search("river", limit=50)}
        assert found == set(notes)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert second.refresh(_listed(more), _Loads(more)) == 5  # the control
    assert {hit.id for hit in second.search("river", limit=50)} == set(more)
    first.close()
    second.close()


def test_an_update_kept_out_counts_the_notes_as_they_are_now(path: str) -> None:
    """The watch named three entries (one changed, one new, one deleted) while another server
    writes: nothing written, and the count says 8 of 10 as the folder is now."""
    index = NoteIndex(path, "one")
    notes = _notes(10)
    index.refresh(_listed(notes), _Loads(notes))
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        loads = _Loads({**notes, "new.md": Extract("New", "river\n")})
        with pytest.raises(Building) as kept:
            index.update([("n001.md", "k2"), ("new.md", "k1"), ("n002.md", None)], loads)
        assert (kept.value.indexed, kept.value.total) == (8, 10)
        assert loads.asked == []
        assert index.has("n002.md")  # not dropped: the writer kept it out
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    index.update([("n002.md", None)], _Loads(notes))  # the control: dropped once let in
    assert not index.has("n002.md")
    index.close()


def test_what_another_server_indexed_meanwhile_is_not_indexed_again(path: str) -> None:
    """The second index reads what is indexed (nothing), then, before it takes the write lock,
    the first indexes six of the ten notes: the second reads only the other four. The
    control: without the first's write it reads all ten."""
    notes = _notes(10)
    first, second = NoteIndex(path, "first"), NoteIndex(path, "second")
    six = dict(list(notes.items())[:6])

    def listed() -> Iterator[tuple[str, str]]:  # consumed after the second read what it has
        first.refresh(_listed(six), _Loads(six))
        yield from _listed(notes)

    loads = _Loads(notes)
    assert second.refresh(listed(), loads) == 4
    assert sorted(loads.asked) == sorted(set(notes) - set(six))
    assert {hit.id for hit in first.search("river", limit=50)} == set(notes)
    first.close()
    second.close()
    control = NoteIndex(path + ".control", "control")
    loads = _Loads(notes)
    assert control.refresh(_listed(notes), loads) == 10
    assert sorted(loads.asked) == sorted(notes)
    control.close()


_QUERIES = ("river plan", "alpha", "restore backup yesterday", "note 17")


def _folder(root: Path, n: int) -> Path:
    import random

    words = ["alpha", "beta", "gamma", "delta", "restore", "backup", "plan", "river",
             "yesterday", "kappa"]  # fmt: skip
    rnd = random.Random(7)
    notes = root / "notes"
    for i in range(n):
        folder = notes / f"d{i % 40}"
        folder.mkdir(parents=True, exist_ok=True)
        body = " ".join(rnd.choice(words) for _ in range(60))
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\n{body}\n")
    return notes


def _search(server: StdioServer, rid: int, query: str) -> dict[str, Any]:
    server.send(call_tool(rid, "notes_search", {"query": query, "limit": 10}))
    response = server.recv(timeout=120)
    assert response["id"] == rid
    result: dict[str, Any] = response["result"]
    return result


def test_three_servers_on_one_folder_answer_every_search_through_a_build_and_edits(
    tmp_path: Path,
) -> None:
    """Three `fs-notes serve` on one folder and one state folder: while the first builds the
    index of 12,000 notes, the other two search again and again, and no answer is an error;
    once built, the three give the same answers; a note written outside is found by all three."""
    notes = _folder(tmp_path, 12000)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    env = child_env(XDG_STATE_HOME=str(state))
    servers = [StdioServer("serve", str(notes), env=env) for _ in range(3)]
    try:
        for server in servers:
            assert "result" in server.ask(request(0, "server/discover"))
        servers[0].send(call_tool(1, "notes_search", {"query": "river", "limit": 10}))
        during: list[dict[str, Any]] = []
        for rid in range(10, 16):
            for server in servers[1:]:
                during.append(_search(server, rid, "alpha plan"))
        built = servers[0].recv(timeout=120)
        assert built["id"] == 1 and not built["result"].get("isError"), built
        assert [r for r in during if r.get("isError")] == []
        for answer in during:  # what a search during the build says it searched
            found = answer["structuredContent"]
            assert "indexed" not in found or found["indexed"] <= found["total"] == 12000
        answers = [[_search(s, 100 + n, q)["structuredContent"] for n, q in enumerate(_QUERIES)]
                   for s in servers]  # fmt: skip
        assert answers[0] == answers[1] == answers[2]
        assert all(a["matches"] for a in answers[0][:3])  # (the control: they found notes)
        (notes / "d1" / "heron.md").write_text("# Heron\n\nA grey heron by the river.\n")
        time.sleep(0.3)
        for n, server in enumerate(servers):
            found = _search(server, 200 + n, "heron")["structuredContent"]["matches"]
            assert [m["id"] for m in found] == ["d1/heron.md"]
    finally:
        for server in servers:
            server.close()


def test_notes_search_says_how_much_it_searched_while_another_server_writes(
    tmp_path: Path,
) -> None:
    """Through the tool: with the index's write lock held by another server and a note added
    since the last search, notes_search answers (no error) from what is committed, with
    `indexed` and `total` and a line saying so. The control: let go, it says nothing of it."""
    import time as clock

    from inprocess import InProcess

    from fs_notes.policy import Policy
    from fs_notes.rounds.seal import KeyRing

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nriver\n")
    policy = Policy.for_single_workspace(str(notes), "me", token_sha256=None)
    state = tmp_path / "state"
    state.mkdir()
    srv = InProcess(policy, state, keyring=KeyRing.ephemeral(), clock=clock.time)
    me, uri = policy.local_principal(), policy.workspaces[0].uri

    def search() -> dict[str, Any]:
        result: dict[str, Any] = srv.call(me, "notes_search",
                                          {"workspaceUri": uri, "query": "river"})["result"]
        return result  # fmt: skip

    try:
        assert [m["id"] for m in search()["structuredContent"]["matches"]] == ["a.md"]
        (notes / "b.md").write_text("# B\n\nriver too\n")
        (index,) = state.glob("search-*.sqlite3")
        writer = sqlite3.connect(index, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        try:
            kept_out = search()
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert kept_out.get("isError") is not True, kept_out
        found = kept_out["structuredContent"]
        assert [m["id"] for m in found["matches"]] == ["a.md"]
        assert (found["indexed"], found["total"]) == (1, 2)
        assert kept_out["content"][0]["text"].endswith(
            "(searched 1 of 2 notes: another fs-notes server is indexing this folder; search "
            "again for the rest)"
        )
        after = search()["structuredContent"]
        assert sorted(m["id"] for m in after["matches"]) == ["a.md", "b.md"]
        assert "indexed" not in after and "total" not in after
    finally:
        srv.close()
