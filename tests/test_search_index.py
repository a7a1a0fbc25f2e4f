"""Ranked full-text search (issue 14, first part: fs_notes/search/): what a person means is
found, the index follows edits made outside fs-notes, and it never widens what is served."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from wire import StdioServer, call_tool

from fs_notes.search.query import match_expression


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    (notes / "commands").mkdir(parents=True)
    (notes / "projects").mkdir()
    (notes / "commands" / "tar.md").write_text("# tar\n\nArchiving utility: extract a tar file.\n")
    (notes / "commands" / "docker-start.md").write_text("# docker start\n\nStart containers.\n")
    (notes / "commands" / "npm-restart.md").write_text("# npm restart\n\nRestart a package.\n")
    (notes / "projects" / "kanban-board.md").write_text("# Board\n\nColumns and cards.\n")
    (notes / "cafe.md").write_text("# Café au lait\n\nMilk and coffee.\n")
    (notes / "canvas.md").write_text("# Canvas plugin\n\nHow to embed images in a canvas.\n")
    (tmp_path / "outside.md").write_text("# Secret plans\n\nSECRETWORD\n")
    return notes


def _search(server: StdioServer, ws: Path, n: int, query: str, **more: object) -> dict[str, object]:
    args = {"workspaceUri": ws.as_uri(), "query": query, **more}
    result: dict[str, object] = server.ask(call_tool(n, "notes_search", args))["result"]
    return result


def _ids(result: dict[str, object]) -> list[str]:
    structured = result["structuredContent"]
    assert isinstance(structured, dict)
    return [m["id"] for m in structured["matches"]]


@pytest.fixture
def server(ws: Path, tmp_path: Path) -> StdioServer:
    srv = StdioServer("serve", str(ws), "--replay-db", str(tmp_path / "state" / "replay.db"))
    yield srv
    assert srv.close() == 0


def test_words_are_words_and_titles_and_file_names_rank_first(
    server: StdioServer, ws: Path
) -> None:
    # "tar" used to find docker-start.md and npm-restart.md first ("tar" inside "start").
    assert _ids(_search(server, ws, 1, "tar")) == ["commands/tar.md"]
    assert _ids(_search(server, ws, 2, "extract a tar file"))[0] == "commands/tar.md"
    assert _ids(_search(server, ws, 3, "kanban")) == ["projects/kanban-board.md"]  # file name
    assert _ids(_search(server, ws, 4, "cafe")) == ["cafe.md"]  # accents folded
    assert _ids(_search(server, ws, 5, "canv")) == ["canvas.md"]  # the word being typed
    assert _ids(_search(server, ws, 6, "Canvas plugin")) == ["canvas.md"]
    assert _ids(_search(server, ws, 7, '"embed images"')) == ["canvas.md"]
    assert _ids(_search(server, ws, 8, '"images embed"')) == []  # a phrase is a phrase
    found = _search(server, ws, 9, "how to embed images")
    assert _ids(found)[0] == "canvas.md"
    match = found["structuredContent"]["matches"][0]  # type: ignore[index]
    assert "**embed**" in match["snippet"] and match["score"] > 0


def test_folder_and_cursor(server: StdioServer, ws: Path) -> None:
    assert _ids(_search(server, ws, 1, "start restart tar", folder="commands")) != []
    assert all(i.startswith("commands/")
               for i in _ids(_search(server, ws, 2, "start restart tar", folder="commands")))
    first = _search(server, ws, 3, "start restart tar", limit=1)
    cursor = first["structuredContent"]["nextCursor"]  # type: ignore[index]
    second = _search(server, ws, 4, "start restart tar", limit=1, cursor=cursor)
    assert _ids(first) != _ids(second) and len(_ids(second)) == 1
    bad = _search(server, ws, 5, "tar", cursor="x")
    assert bad["isError"] is True


def test_edits_made_outside_are_found_by_the_next_search(
    server: StdioServer, ws: Path, tmp_path: Path
) -> None:
    assert _ids(_search(server, ws, 1, "zebra")) == []
    (ws / "cafe.md").write_text("# Café au lait\n\nA zebra drinks it.\n")
    assert _ids(_search(server, ws, 2, "zebra")) == ["cafe.md"]
    (ws / "cafe.md").unlink()
    assert _ids(_search(server, ws, 3, "zebra")) == []
    # A note replaced by a symbolic link to outside after it was indexed is dropped, and the
    # outside file's words never show.
    assert _ids(_search(server, ws, 4, "canvas")) == ["canvas.md"]
    (ws / "canvas.md").unlink()
    (ws / "canvas.md").symlink_to(tmp_path / "outside.md")
    assert _ids(_search(server, ws, 5, "canvas")) == []
    leaked = _search(server, ws, 6, "secretword plans")
    assert _ids(leaked) == [] and "SECRETWORD" not in str(leaked)
    index = list((tmp_path / "state").glob("search-*.sqlite3"))
    assert len(index) == 1 and stat.S_IMODE(index[0].stat().st_mode) == 0o600
    assert not any(p.name.startswith("search-") for p in ws.rglob("*"))  # never in the workspace
    assert os.path.commonpath([index[0], ws]) != str(ws)


@pytest.mark.parametrize(
    "query",
    ['a"b', "NEAR(x y)", "title:secret", "x OR", "(", "*", '""', "-x", "x^y", "\u00e9t\u00e9"],
)
def test_any_query_is_words_for_fts5(query: str) -> None:
    import sqlite3

    expression = match_expression(query)
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(a, tokenize = 'unicode61 remove_diacritics 2')")
    conn.execute("INSERT INTO t VALUES ('x y title secret near')")
    if expression is not None:
        conn.execute("SELECT * FROM t WHERE t MATCH ?", (expression,)).fetchall()  # no error
