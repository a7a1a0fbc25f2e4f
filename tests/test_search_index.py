"""Ranked full-text search (issue 14, first part: fs_notes/search/): what a person means is
found, the index follows edits made outside fs-notes, and it never widens what is served."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
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
def server(ws: Path, tmp_path: Path) -> Iterator[StdioServer]:
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
    # The words in order count extra, and are marked as one run in the snippet.
    assert "**How to embed images**" in match["snippet"] and match["score"] > 0


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


def test_notes_list_newest_first_pages_by_modification_time(server: StdioServer, ws: Path) -> None:
    # Issue 14: "what changed recently".
    now = 1_700_000_000
    for age, note in enumerate(["canvas.md", "cafe.md", "commands/tar.md"]):
        os.utime(ws / note, (now - age * 60, now - age * 60))
    for note in ("commands/docker-start.md", "commands/npm-restart.md", "projects/kanban-board.md"):
        os.utime(ws / note, (now - 3600, now - 3600))
    pages, cursor, n, first_cursor = [], None, 0, None
    while True:
        n += 1
        args: dict[str, object] = {"workspaceUri": ws.as_uri(), "recent": True, "limit": 2}
        if cursor is not None:
            args["cursor"] = cursor
        listed = server.ask(call_tool(n, "notes_list", args))["result"]["structuredContent"]
        pages.append([note["id"] for note in listed["notes"]])
        cursor = listed.get("nextCursor")
        first_cursor = first_cursor or cursor
        if cursor is None:
            break
    assert pages == [
        ["canvas.md", "cafe.md"],
        ["commands/tar.md", "commands/docker-start.md"],
        ["commands/npm-restart.md", "projects/kanban-board.md"],
    ]
    assert first_cursor is not None
    plain = server.ask(call_tool(99, "notes_list", {"workspaceUri": ws.as_uri(), "limit": 2,
                                                    "cursor": first_cursor}))  # fmt: skip
    assert plain["result"]["isError"] is True  # a cursor of one order is refused by the other


def test_tags_from_front_matter_and_inline_not_from_code(
    server: StdioServer, ws: Path, tmp_path: Path
) -> None:
    (ws / "projects" / "alpha.md").write_text(
        "---\ntags: [Project/Alpha, work]\n---\n# Alpha\n\nSee #urgent and #2024 (not a tag).\n"
        "```\n#not-in-code\n```\nand `#nor-inline-code`, nor a URL http://x/#frag, nor a#b.\n"
    )
    (ws / "projects" / "beta.md").write_text("---\ntags: project/beta, WORK\n---\n# Beta\n#work\n")
    (tmp_path / "outside.md").write_text("#secret-tag\n")
    (ws / "leak.md").symlink_to(tmp_path / "outside.md")
    uri = ws.as_uri()
    counts = server.ask(call_tool(1, "notes_tags", {"workspaceUri": uri}))["result"]
    tags = {t["tag"].casefold(): t["count"] for t in counts["structuredContent"]["tags"]}
    assert tags == {"work": 2, "project/alpha": 1, "project/beta": 1, "urgent": 1}
    assert "secret" not in str(counts)
    nested = server.ask(call_tool(2, "notes_tags", {"workspaceUri": uri, "tag": "#project"}))
    ids = [n["id"] for n in nested["result"]["structuredContent"]["notes"]]
    assert ids == ["projects/alpha.md", "projects/beta.md"]
    bad = server.ask(call_tool(3, "notes_tags", {"workspaceUri": uri, "tag": "2024"}))["result"]
    assert bad["isError"] is True


def test_links_resolve_like_a_vault_and_never_reach_outside(
    server: StdioServer, ws: Path, tmp_path: Path
) -> None:
    (ws / "projects" / "plan.md").write_text(
        "# Plan\n\nSee [[Board]], [[kanban-board|the board]], [[cafe#Milk]], ![[canvas]],\n"
        "[tar](../commands/tar.md), [coffee](../cafe.md), [web](https://example.com/x.md),\n"
        "[[Nowhere]], [out](../../outside.md), [[leak]] and `[[not-in-code]]`.\n"
        "```\n[[not-in-a-fence]]\n```\n"
    )
    (tmp_path / "outside.md").write_text("# Secret plans\n")
    (ws / "leak.md").symlink_to(tmp_path / "outside.md")
    uri = ws.as_uri()
    asked = call_tool(1, "notes_links", {"workspaceUri": uri, "id": "projects/plan.md"})
    result = server.ask(asked)["result"]
    links = [(link["target"], link["id"]) for link in result["structuredContent"]["links"]]
    assert links == [
        ("Board", None),  # a heading is not a name: no note is called Board
        ("kanban-board", "projects/kanban-board.md"),
        ("cafe", "cafe.md"),
        ("canvas", "canvas.md"),
        ("../commands/tar.md", "commands/tar.md"),
        ("../cafe.md", "cafe.md"),
        ("Nowhere", None),
        ("../../outside.md", None),  # out of the workspace: resolves to nothing
        ("leak", None),  # a symlinked note is not a note
    ]
    embeds = [link["embed"] for link in result["structuredContent"]["links"]]
    assert embeds[3] is True and embeds.count(True) == 1
    back = server.ask(call_tool(2, "notes_links", {"workspaceUri": uri, "id": "cafe.md"}))
    assert back["result"]["structuredContent"]["backlinks"] == ["projects/plan.md"]
    assert "Secret" not in str(back) and "Secret" not in str(result)


def test_search_ranks_tags_and_filters_by_tag(server: StdioServer, ws: Path) -> None:
    (ws / "projects" / "alpha.md").write_text("---\ntags: [project/alpha]\n---\n# Alpha\n\ncards\n")
    (ws / "projects" / "beta.md").write_text("# Beta\n\ncards #project\n")
    tagged = _ids(_search(server, ws, 1, "cards", tag="project"))  # nested tags included
    assert sorted(tagged) == ["projects/alpha.md", "projects/beta.md"]
    assert "projects/kanban-board.md" in _ids(_search(server, ws, 2, "cards"))  # untagged too
    assert _ids(_search(server, ws, 3, "cards", tag="project/alpha")) == ["projects/alpha.md"]
    assert _ids(_search(server, ws, 4, "alpha"))[0] == "projects/alpha.md"


def test_scripts_without_spaces_are_found_inside_a_sentence(server: StdioServer, ws: Path) -> None:
    (ws / "zh.md").write_text("# 会议记录\n\n我们讨论了全文检索的设计和实现。\n")
    (ws / "ja.md").write_text("# 議事録\n\n東京でプロジェクトの打ち合わせをしました。\n")
    (ws / "ko.md").write_text("# 회의\n\n검색을 개선하는 방법을 논의했습니다.\n")
    found = _search(server, ws, 1, "全文检索")
    assert _ids(found) == ["zh.md"]
    snippet = found["structuredContent"]["matches"][0]["snippet"]  # type: ignore[index]
    assert "**全文检索**" in snippet and "\u2060" not in snippet
    assert _ids(_search(server, ws, 2, "打ち合わせ")) == ["ja.md"]
    assert _ids(_search(server, ws, 3, "검색")) == ["ko.md"]
    assert _ids(_search(server, ws, 4, "会议记录")) == ["zh.md"]  # the title, exactly
    assert _ids(_search(server, ws, 5, "检全")) == []  # characters out of order are not a word


def test_aliases_headings_and_properties(server: StdioServer, ws: Path) -> None:
    (ws / "projects" / "q3.md").write_text(
        "---\ntitle: Third quarter plan\naliases: [Q3 roadmap, \"Plan, Q3\"]\ntags: [plan]\n"
        "date: 2026-07-01\nstatus: draft\npriority: 2\ndone: false\n---\n"
        "# Third quarter plan\n\n## Hiring pipeline\n\nSome words.\n"
    )
    (ws / "projects" / "notes.md").write_text("# Notes\n\nThe hiring pipeline came up twice.\n")
    assert _ids(_search(server, ws, 1, "Q3 roadmap"))[0] == "projects/q3.md"  # an alias: exact
    assert _ids(_search(server, ws, 2, "hiring pipeline"))[0] == "projects/q3.md"  # a heading
    read = server.ask(call_tool(3, "notes_read", {"workspaceUri": ws.as_uri(),
                                                  "id": "projects/q3.md"}))  # fmt: skip
    structured = read["result"]["structuredContent"]
    assert structured["aliases"] == ["Q3 roadmap", "Plan, Q3"]
    assert structured["tags"] == ["plan"]
    assert structured["properties"] == {
        "title": "Third quarter plan",
        "aliases": ["Q3 roadmap", "Plan, Q3"],
        "tags": ["plan"],
        "date": "2026-07-01",  # as written, not a date object
        "status": "draft",
        "priority": 2,
        "done": False,
    }


def test_a_forged_index_row_never_reaches_a_result(
    server: StdioServer, ws: Path, tmp_path: Path
) -> None:
    """The index is a cache: rows written into it by anyone (code above the filesystem layer
    gone wrong, or an attacker with the state folder) are re-checked through layer 2 before a
    result names them. Positive control: a forged row for a real note with its true identity is
    served, so forged rows do reach the search."""
    import sqlite3

    assert _ids(_search(server, ws, 1, "coffee")) == ["cafe.md"]  # builds the index
    (index_file,) = (tmp_path / "state").glob("search-*.sqlite3")
    st = (ws / "canvas.md").stat()
    true_key = ":".join(map(str, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                  st.st_ctime_ns)))  # fmt: skip
    forged = [
        ("../outside.md", true_key, "Outside"),  # an escape
        ("/etc/passwd.md", true_key, "Absolute"),
        ("commands/ghost.md", true_key, "Ghost"),  # no such note
        ("cafe.md.bak.md", true_key, "Wrong key"),
        ("canvas.md", true_key, "Forged title"),  # the positive control
    ]
    db = sqlite3.connect(index_file)
    with db:
        db.execute("DELETE FROM doc WHERE id = 'canvas.md'")
        for n, (note_id, key, title) in enumerate(forged):
            rid = 9000 + n
            db.execute("INSERT INTO doc (rid, id, key, title, stem, body_chars)"
                       " VALUES (?, ?, ?, ?, '', 0)", (rid, note_id, key, title))  # fmt: skip
            db.execute("INSERT INTO fts (rowid, title, name, keys, headings, body)"
                       " VALUES (?, ?, '', '', '', 'kumquat')", (rid, title))  # fmt: skip
    db.close()
    found = _search(server, ws, 2, "kumquat")
    assert _ids(found) == ["canvas.md"]
    assert "Outside" not in str(found) and "passwd" not in str(found)


def test_large_pages_of_results_stay_within_what_the_confined_server_may_write(
    server: StdioServer, ws: Path
) -> None:
    """A page of large notes makes SQLite spill its temporary tables: they must stay in memory,
    since the confined server may not create files in /tmp (a disk I/O error, once)."""
    block = ("walrus " + "filler text of a long note " * 20 + "\n") * 1200  # ~200 KB each
    for n in range(30):
        (ws / f"big{n:02d}.md").write_text(f"# Big {n}\n\n{block}")
    for n in range(1, 4):
        found = _search(server, ws, n, "walrus", limit=30)
        assert found.get("isError") is not True, found
        assert len(_ids(found)) == 30


def test_a_tag_starts_a_line_or_follows_white_space_and_link_targets_are_not_tags() -> None:
    """Found on a real folder (the Rust book): section links and link reference definitions
    were counted as tags."""
    from fs_notes.notes.tags import tags_of

    text = (
        "# Maps\n\nSee [the section](#comparing-values) and [access] or\n"
        "[multi line\nlink”](#second-section)<!-- ignore -->.\n\n"
        "[access]: #accessing-values\n  [other]: ch02.html#guessing\n"
        "Real: #rust and (#not-after-a-paren) but\t#tabbed, end #last\n#first-on-line\n"
    )
    assert tags_of(text) == ["rust", "tabbed", "last", "first-on-line"]
