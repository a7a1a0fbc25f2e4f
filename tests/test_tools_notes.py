"""The read tools over the real protocol: pagination, folders, titles, search bounds."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from wire import call_tool, stdio_server


def _uri(p: Path) -> str:
    return "file://" + urllib.parse.quote(str(p))


def test_notes_list_pages_through_every_note_exactly_once(tmp_path: Path) -> None:
    ids = [*sorted(f"f{i % 7}/n{i:03d}.md" for i in range(250)), "top.md"]
    for note_id in ids:
        (tmp_path / note_id).parent.mkdir(exist_ok=True)
        (tmp_path / note_id).write_text(f"# Note {note_id}\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "hidden.md").write_text("# no\n")
    seen: list[str] = []
    with stdio_server(str(tmp_path)) as server:
        args: dict[str, object] = {"workspaceUri": _uri(tmp_path), "limit": 100}
        pages = 0
        while True:
            sc = server.ask(call_tool(pages, "notes_list", args))["result"]["structuredContent"]
            seen += [n["id"] for n in sc["notes"]]
            pages += 1
            if "nextCursor" not in sc:
                break
            args["cursor"] = sc["nextCursor"]
        assert pages == 3 and seen == sorted(ids)
        folder = server.ask(
            call_tool(9, "notes_list", {"workspaceUri": _uri(tmp_path), "folder": "f3"})
        )
        assert all(
            n["id"].startswith("f3/") for n in folder["result"]["structuredContent"]["notes"]
        )
        bad = server.ask(
            call_tool(10, "notes_list", {"workspaceUri": _uri(tmp_path), "cursor": "!!"})
        )
        assert bad["result"]["isError"] is True


def test_search_is_case_insensitive_title_first_and_bounded(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Budget\nthe PLAN for q3\n")
    (tmp_path / "a.md").write_text("# Plan\nnothing\n")
    for i in range(30):
        (tmp_path / f"m{i:02d}.md").write_text(f"# M{i}\nplan {i}\n")
    with stdio_server(str(tmp_path)) as server:
        res = server.ask(
            call_tool(
                1, "notes_search", {"workspaceUri": _uri(tmp_path), "query": "plan", "limit": 5}
            )
        )["result"]["structuredContent"]
        ids = [m["id"] for m in res["matches"]]
        assert ids[0] == "a.md" and len(ids) == 5
        assert all("plan" in m["snippet"].lower() or m["id"] == "a.md" for m in res["matches"])
