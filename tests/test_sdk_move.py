"""notes_move from the official Python SDK client, over stdio against `fs-notes serve` (the
confined write worker): the note moves, its wikilinks are rewritten, and a move onto an existing
note or out of the workspace is a tool error that changes nothing."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import anyio
from mcp import Client
from trees import files
from wire import sdk_stdio


def test_official_client_moves_a_note_and_rewrites_its_links(tmp_path: Path) -> None:
    ws = files(tmp_path / "notes", {
        "projects/tps-report.md": "# TPS report\n",
        "index.md": "# Index\n[[tps-report]]\n",
        "taken.md": "# Taken\n",
    })  # fmt: skip
    (tmp_path / "outside").mkdir()
    ino = (ws / "projects" / "tps-report.md").stat().st_ino
    uri = "file://" + urllib.parse.quote(str(ws))

    async def main() -> None:
        params = sdk_stdio(str(ws), "--replay-db", str(tmp_path / "r.db"))
        async with Client(params, cache=None, read_timeout_seconds=30) as client:
            onto = await client.call_tool(
                "notes_move", {"workspaceUri": uri, "id": "index.md", "newId": "taken.md"}
            )
            assert onto.is_error is True
            out = await client.call_tool(
                "notes_move",
                {"workspaceUri": uri, "id": "index.md", "newId": "../outside/index.md"},
            )
            assert out.is_error is True
            moved = await client.call_tool(
                "notes_move",
                {"workspaceUri": uri, "id": "projects/tps-report.md",
                 "newId": "archive/tps-report.md", "updateLinks": True},
            )  # fmt: skip
            assert moved.is_error is not True, moved
            assert moved.structured_content is not None
            assert moved.structured_content["backlinks"] == [
                {"id": "index.md", "wikilinks": 1, "updated": True}
            ]

    anyio.run(main)
    assert (ws / "archive" / "tps-report.md").stat().st_ino == ino
    assert not (ws / "projects" / "tps-report.md").exists()
    assert (ws / "index.md").read_text() == "# Index\n[[archive/tps-report]]\n"
    assert (ws / "taken.md").read_text() == "# Taken\n"
    assert os.listdir(tmp_path / "outside") == []
