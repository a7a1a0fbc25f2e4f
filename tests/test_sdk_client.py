"""The official MCP Python SDK client (mcp==2.3.0) against the real server, in 2026-07-28 mode,
over stdio and Streamable HTTP: discovery, tools, and every read/write tool."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from trees import files
from wire import TOOLS, HttpServer, sdk_stdio, token_http_server

from fs_notes.fs import Identity
from fs_notes.fs.version import note_version

TOKEN = "sdk-token-0123456789abcdef"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return files(tmp_path / "notes", {
        "projects/tps-report.md": "# TPS report\n\nThe old TPS report.\n",
        "groceries.md": "---\ntitle: Shopping\n---\nmilk, eggs\n",
    })  # fmt: skip


def _uri(ws: Path) -> str:
    return "file://" + urllib.parse.quote(str(ws))


async def _exercise(client: Client, ws: Path) -> None:
    assert client.protocol_version == "2026-07-28"
    tools = await client.list_tools()
    assert {t.name for t in tools.tools} == TOOLS
    uri = _uri(ws)
    listed = await client.call_tool("notes_list", {"workspaceUri": uri})
    assert listed.is_error is not True
    assert listed.structured_content is not None
    notes = {n["id"]: n["title"] for n in listed.structured_content["notes"]}
    assert notes == {"groceries.md": "Shopping", "projects/tps-report.md": "TPS report"}
    created = await client.call_tool(
        "notes_create", {"workspaceUri": uri, "id": "ideas/new.md", "content": "# New idea\nTPS?"}
    )
    assert created.is_error is not True, created
    assert (ws / "ideas" / "new.md").read_text() == "# New idea\nTPS?"
    again = await client.call_tool(
        "notes_create", {"workspaceUri": uri, "id": "ideas/new.md", "content": "overwrite?"}
    )
    assert again.is_error is True
    assert (ws / "ideas" / "new.md").read_text() == "# New idea\nTPS?"
    content = (
        "---\naliases: [Shopping list]\nstore: corner\n---\n"
        "# Groceries\nbread #food, see [[TPS report]] and [[tps-report]]"
    )
    updated = await client.call_tool(
        "notes_update", {"workspaceUri": uri, "id": "groceries.md", "content": content}
    )
    assert updated.is_error is not True
    read = await client.call_tool("notes_read", {"workspaceUri": uri, "id": "groceries.md"})
    assert read.structured_content == {
        "id": "groceries.md",
        "title": "Groceries",
        "content": content,
        "tags": ["food"],
        "aliases": ["Shopping list"],
        "properties": {"aliases": ["Shopping list"], "store": "corner"},
        "version": _version(ws / "groceries.md"),
    }
    tags = await client.call_tool("notes_tags", {"workspaceUri": uri})
    assert tags.structured_content == {"tags": [{"tag": "food", "count": 1}]}
    links = await client.call_tool("notes_links", {"workspaceUri": uri, "id": "groceries.md"})
    assert links.structured_content is not None
    assert [(x["target"], x["id"]) for x in links.structured_content["links"]] == [
        ("TPS report", None),  # a title is not a file name
        ("tps-report", "projects/tps-report.md"),
    ]
    back = await client.call_tool(
        "notes_links", {"workspaceUri": uri, "id": "projects/tps-report.md"}
    )
    assert back.structured_content is not None
    assert back.structured_content["backlinks"] == ["groceries.md"]
    alias = await client.call_tool("notes_search", {"workspaceUri": uri, "query": "shopping list"})
    assert alias.structured_content is not None
    assert alias.structured_content["matches"][0]["id"] == "groceries.md"
    recent = await client.call_tool("notes_list", {"workspaceUri": uri, "recent": True})
    assert recent.structured_content is not None
    assert recent.structured_content["notes"][0]["id"] == "groceries.md"  # the newest
    found = await client.call_tool("notes_search", {"workspaceUri": uri, "query": "tps"})
    assert found.structured_content is not None
    ids = [m["id"] for m in found.structured_content["matches"]]
    assert ids[0] == "projects/tps-report.md"  # the title is the query: first
    assert sorted(ids[1:]) == ["groceries.md", "ideas/new.md"]  # (groceries links to it)
    resources = await client.list_resources()
    assert {r.name for r in resources.resources} == {
        "groceries.md",
        "projects/tps-report.md",
        "ideas/new.md",
    }
    tps = next(r for r in resources.resources if r.name == "projects/tps-report.md")
    contents = await client.read_resource(str(tps.uri))
    first = contents.contents[0]
    assert isinstance(first, types.TextResourceContents) and first.text.startswith("# TPS report")
    await _append_and_edit_without_lost_updates(client, ws)


def _version(path: Path) -> str:
    return note_version(Identity.of(os.stat(path)), path.read_bytes())


async def _append_and_edit_without_lost_updates(client: Client, ws: Path) -> None:
    """notes_append and notes_edit (added 2026-12-01) with the version notes_read gave; a
    stale version is refused and nothing is written (through the confined write worker)."""
    uri, note_id, path = _uri(ws), "projects/tps-report.md", ws / "projects" / "tps-report.md"
    read = await client.call_tool("notes_read", {"workspaceUri": uri, "id": note_id})
    assert read.structured_content is not None
    first = read.structured_content["version"]
    assert first == _version(path)
    appended = await client.call_tool(
        "notes_append",
        {"workspaceUri": uri, "id": note_id, "content": "- cover sheet\n",
         "expectedVersion": first},
    )
    assert appended.is_error is not True, appended
    assert path.read_text() == "# TPS report\n\nThe old TPS report.\n- cover sheet\n"
    assert appended.structured_content is not None
    second = appended.structured_content["version"]
    assert second == _version(path) != first
    before = os.stat(path)
    stale = await client.call_tool(
        "notes_edit",
        {"workspaceUri": uri, "id": note_id, "expectedVersion": first,
         "edits": [{"oldText": "old", "newText": "new"}]},
    )  # fmt: skip
    assert stale.is_error is True
    assert stale.structured_content == {
        "error": "versionMismatch", "id": note_id, "expectedVersion": first,
    }  # fmt: skip
    assert Identity.of(os.stat(path)) == Identity.of(before)
    edited = await client.call_tool(
        "notes_edit",
        {"workspaceUri": uri, "id": note_id, "expectedVersion": second,
         "edits": [{"oldText": "old", "newText": "new"}]},
    )  # fmt: skip
    assert edited.is_error is not True, edited
    assert path.read_text() == "# TPS report\n\nThe new TPS report.\n- cover sheet\n"
    assert edited.structured_content is not None
    assert edited.structured_content["diff"] == (
        "--- a/projects/tps-report.md\n+++ b/projects/tps-report.md\n@@ -1,4 +1,4 @@\n"
        " # TPS report\n \n-The old TPS report.\n+The new TPS report.\n - cover sheet\n"
    )


def test_official_client_over_stdio(workspace: Path) -> None:
    async def main() -> None:
        params = sdk_stdio(str(workspace))
        async with Client(params, cache=None, read_timeout_seconds=30) as client:
            await _exercise(client, workspace)

    anyio.run(main)


@pytest.fixture
def http(workspace: Path, tmp_path: Path) -> Iterator[HttpServer]:
    with token_http_server(workspace, tmp=tmp_path, token=TOKEN) as srv:
        yield srv


def test_official_client_over_http(workspace: Path, http: HttpServer) -> None:
    async def main() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as h:
            transport: Any = streamable_http_client(http.url, http_client=h)
            async with Client(transport, cache=None, read_timeout_seconds=30) as client:
                await _exercise(client, workspace)

    anyio.run(main)


@pytest.mark.parametrize("action", ["accept", "decline", "cancel"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_official_client_delete_flow_with_an_elicitation_callback(
    workspace: Path, tmp_path: Path, action: str, transport: str
) -> None:
    seen: list[dict[str, Any]] = []

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)  # the server asks in form mode
        schema = params.requested_schema
        seen.append({"message": params.message, "schema": schema})
        choice = schema["properties"]["note_id"]["oneOf"][0]["const"]
        content = {"note_id": choice, "confirm": True} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)

    async def flow(client: Client) -> None:
        result = await client.call_tool(
            "notes_delete", {"workspaceUri": _uri(workspace), "title": "TPS report"}
        )
        assert result.is_error is not True, result
        assert result.structured_content is not None
        outcome = result.structured_content["outcome"]
        assert (
            outcome == {"accept": "deleted", "decline": "declined", "cancel": "cancelled"}[action]
        )

    async def main() -> None:
        if transport == "stdio":
            params = sdk_stdio(str(workspace), "--replay-db", str(tmp_path / "r.db"))
            async with Client(
                params, cache=None, read_timeout_seconds=30, elicitation_callback=on_elicit
            ) as c:
                await flow(c)
            return
        replay = ("--replay-db", str(tmp_path / "r.db"))
        with token_http_server(workspace, *replay, tmp=tmp_path, token=TOKEN) as srv:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as h:
                t: Any = streamable_http_client(srv.url, http_client=h)
                async with Client(
                    t, cache=None, read_timeout_seconds=30, elicitation_callback=on_elicit
                ) as c:
                    await flow(c)

    anyio.run(main)
    assert len(seen) == 1 and "TPS report" in seen[0]["message"]
    assert (workspace / "projects" / "tps-report.md").exists() is (action != "accept")
