"""The official MCP Python SDK client (mcp==2.3.0) in legacy mode (`initialize`, 2025-11-25) and in
modern mode (2026-07-28): list, read and the whole confirmed delete flow on stdio and Streamable
HTTP, both eras against one running server, and notes_summarize through its sampling callback.

Issue 7 ("Done when"); the SDK's legacy behaviour is described in /tmp/sdk-research/REPORT.md.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from trees import files
from wire import HttpServer, sdk_stdio, token_http_server

TOKEN = "sdk-legacy-token-0123456789abcdef"
MODES = {"legacy": "2025-11-25", "2026-07-28": "2026-07-28"}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    files(tmp_path, {"secret.md": "# TPS report\nSECRET\n"})
    return files(tmp_path / "notes", {
        "projects/tps.md": "# TPS report\nThe old TPS report.\n",
        "groceries.md": "# Groceries\nmilk\n",
    })  # fmt: skip


def _uri(ws: Path) -> str:
    return "file://" + urllib.parse.quote(str(ws))


class Elicitations:
    """An elicitation callback that picks the first offered note and answers with `action`."""

    def __init__(self, action: str = "accept") -> None:
        self.action = action
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)  # the server asks in form mode
        schema: dict[str, Any] = params.requested_schema
        self.seen.append(schema)
        note = schema["properties"]["note_id"]["oneOf"][0]["const"]
        content = {"note_id": note, "confirm": True} if self.action == "accept" else None
        return types.ElicitResult(action=self.action, content=content)


@asynccontextmanager
async def _stdio_client(ws: Path, tmp: Path, mode: str, **kw: Any) -> AsyncIterator[Client]:
    params = sdk_stdio(str(ws), "--replay-db", str(tmp / "replay.db"))
    async with Client(params, mode=mode, cache=None, read_timeout_seconds=30, **kw) as client:
        yield client


@asynccontextmanager
async def _http_client(url: str, mode: str, **kw: Any) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as h:
        transport: Any = streamable_http_client(url, http_client=h)
        async with Client(transport, mode=mode, cache=None, read_timeout_seconds=30, **kw) as c:
            yield c


def _http(ws: Path, tmp: Path) -> Any:
    return token_http_server(ws, "--replay-db", str(tmp / "replay.db"), tmp=tmp, token=TOKEN)


async def _list_read_delete(client: Client, ws: Path, mode: str, action: str) -> None:
    assert client.protocol_version == MODES[mode]
    tools = await client.list_tools()
    assert len(tools.tools) == 17  # every tool of tests/wire.py TOOLS
    listed = await client.call_tool("notes_list", {"workspaceUri": _uri(ws)})
    assert listed.structured_content is not None
    assert [n["id"] for n in listed.structured_content["notes"]] == [
        "groceries.md",
        "projects/tps.md",
    ]
    read = await client.call_tool("notes_read", {"workspaceUri": _uri(ws), "id": "projects/tps.md"})
    assert read.structured_content is not None
    assert read.structured_content["content"] == "# TPS report\nThe old TPS report.\n"
    outside = await client.call_tool("notes_read", {"workspaceUri": _uri(ws), "id": "../secret.md"})
    assert outside.is_error is True and "SECRET" not in json.dumps(outside.model_dump())
    resources = await client.list_resources()
    assert {r.name for r in resources.resources} == {"groceries.md", "projects/tps.md"}
    deleted = await client.call_tool(
        "notes_delete", {"workspaceUri": _uri(ws), "title": "TPS report"}
    )
    assert deleted.is_error is not True, deleted
    assert deleted.structured_content is not None
    outcome = {"accept": "deleted", "decline": "declined", "cancel": "cancelled"}[action]
    assert deleted.structured_content["outcome"] == outcome


@pytest.mark.parametrize("action", ["accept", "decline"])
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_official_client_in_both_eras_lists_reads_and_deletes_with_confirmation(
    ws: Path, tmp_path: Path, transport: str, mode: str, action: str
) -> None:
    elicit = Elicitations(action)

    async def main() -> None:
        if transport == "stdio":
            async with _stdio_client(ws, tmp_path, mode, elicitation_callback=elicit) as c:
                await _list_read_delete(c, ws, mode, action)
            return
        with _http(ws, tmp_path) as srv:
            async with _http_client(srv.url, mode, elicitation_callback=elicit) as c:
                await _list_read_delete(c, ws, mode, action)

    anyio.run(main)
    assert len(elicit.seen) == 1  # the user was asked exactly once
    assert (ws / "projects" / "tps.md").exists() is (action != "accept")
    assert (tmp_path / "secret.md").read_text() == "# TPS report\nSECRET\n"


def test_a_2025_client_and_a_2026_client_share_one_running_http_server(
    ws: Path, tmp_path: Path
) -> None:
    legacy_elicit, modern_elicit = Elicitations(), Elicitations()

    async def main(srv: HttpServer) -> None:
        async with (
            _http_client(srv.url, "legacy", elicitation_callback=legacy_elicit) as old,
            _http_client(srv.url, "2026-07-28", elicitation_callback=modern_elicit) as new,
        ):
            assert (old.protocol_version, new.protocol_version) == ("2025-11-25", "2026-07-28")
            assert len((await old.list_tools()).tools) == len((await new.list_tools()).tools)
            async with anyio.create_task_group() as tg:  # both deletions in flight at once
                tg.start_soon(
                    old.call_tool, "notes_delete", {"workspaceUri": _uri(ws), "title": "TPS"}
                )
                tg.start_soon(
                    new.call_tool, "notes_delete", {"workspaceUri": _uri(ws), "title": "Groceries"}
                )

    with _http(ws, tmp_path) as srv:
        anyio.run(main, srv)
    assert len(legacy_elicit.seen) == 1 and len(modern_elicit.seen) == 1
    assert list(ws.rglob("*.md")) == []
    assert (tmp_path / "secret.md").exists()


class Sampler:
    """A scripted model: picks the candidates it is told to, then writes a fixed summary."""

    def __init__(self, pick: str) -> None:
        self.pick = pick
        self.requests: list[types.CreateMessageRequestParams] = []

    async def __call__(
        self, ctx: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.requests.append(params)
        first = len(self.requests) == 1
        text = self.pick if first else "Summary of the TPS report."
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=text),
            model="scripted-model",
            stop_reason="endTurn",
        )


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_notes_summarize_works_from_the_official_client(
    ws: Path, tmp_path: Path, transport: str, mode: str
) -> None:
    sampler = Sampler('["projects/tps.md"]')
    result: list[types.CallToolResult] = []

    async def run(client: Client) -> None:
        args = {"workspaceUri": _uri(ws), "query": "TPS report"}
        result.append(await client.call_tool("notes_summarize", args))

    async def main() -> None:
        if transport == "stdio":
            async with _stdio_client(ws, tmp_path, mode, sampling_callback=sampler) as c:
                await run(c)
            return
        with _http(ws, tmp_path) as srv:
            async with _http_client(srv.url, mode, sampling_callback=sampler) as c:
                await run(c)

    anyio.run(main)
    [done] = result
    assert done.is_error is not True, done
    assert done.structured_content == {
        "query": "TPS report",
        "chosen": ["projects/tps.md"],
        "summary": "Summary of the TPS report.",
        "model": "scripted-model",
    }
    pick, summarize = sampler.requests
    assert pick.include_context == "none" and summarize.include_context == "none"
    assert pick.model_preferences is not None and pick.model_preferences.hints
    body = summarize.messages[0].content
    assert isinstance(body, types.TextContent) and "The old TPS report." in body.text
    assert all("SECRET" not in r.model_dump_json() for r in sampler.requests)


def test_notes_summarize_without_a_sampling_callback_is_32021_in_both_eras(
    ws: Path, tmp_path: Path
) -> None:
    from mcp import MCPError

    async def main() -> None:
        for mode in ("legacy", "2026-07-28"):
            async with _stdio_client(ws, tmp_path, mode) as c:
                with pytest.raises(MCPError) as caught:
                    await c.call_tool("notes_summarize", {"workspaceUri": _uri(ws), "query": "TPS"})
                assert caught.value.code == -32021
                assert caught.value.data == {"requiredCapabilities": {"sampling": {}}}

    anyio.run(main)
    assert os.path.exists(ws / "projects" / "tps.md")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_a_model_given_only_tools_list_and_the_instructions_lists_reads_and_deletes(
    ws: Path, tmp_path: Path, mode: str
) -> None:
    """Issue 25, "Done when": nothing tells the client the folder. What the model reads (the
    server's instructions, from server/discover or initialize, and tools/list) says the one
    workspace may be left out, and every call below leaves workspaceUri out."""
    elicit = Elicitations("accept")

    async def main() -> None:
        async with _stdio_client(ws, tmp_path, mode, elicitation_callback=elicit) as c:
            if mode == "legacy":  # from the initialize result
                instructions = c.instructions
            else:  # pinned to 2026-07-28, the client synthesizes its discover: ask the server
                raw = await c.session.send_discover("2026-07-28")
                instructions = types.DiscoverResult.model_validate(raw).instructions
            assert instructions is not None
            assert f'"notes" {_uri(ws)} (read, write, delete)' in instructions
            assert "workspaceUri may be left out" in instructions
            tools = {t.name: t for t in (await c.list_tools()).tools}
            for tool in ("notes_list", "notes_read", "notes_delete"):
                assert "workspaceUri" not in tools[tool].input_schema.get("required", [])
            found = await c.call_tool("notes_workspaces", {})
            assert found.structured_content == {
                "workspaces": [
                    {"name": "notes", "uri": _uri(ws), "operations": ["read", "write", "delete"]}
                ]
            }
            listed = await c.call_tool("notes_list", {})
            assert listed.structured_content is not None
            ids = [n["id"] for n in listed.structured_content["notes"]]
            assert ids == ["groceries.md", "projects/tps.md"]
            read = await c.call_tool("notes_read", {"id": ids[1]})
            assert read.structured_content is not None
            assert read.structured_content["content"] == "# TPS report\nThe old TPS report.\n"
            deleted = await c.call_tool("notes_delete", {"id": ids[1]})
            assert deleted.is_error is not True, deleted
            assert deleted.structured_content == {"deleted": ids[1], "outcome": "deleted"}

    anyio.run(main)
    assert [[o["const"] for o in s["properties"]["note_id"]["oneOf"]] for s in elicit.seen] == [
        ["projects/tps.md"]
    ]
    assert not (ws / "projects" / "tps.md").exists() and (ws / "groceries.md").exists()


def test_without_an_elicitation_callback_notes_delete_asks_the_person_outside_it(
    ws: Path, tmp_path: Path
) -> None:
    """docs/clients.md's measured row: the official Python client (mcp 2.3.0) without an
    elicitation callback declares no elicitation; under the default `approval = "either"` it
    is told, in words and in both eras, where the person approves (issue 30 item 1)."""

    async def main() -> None:
        for mode in ("legacy", "2026-07-28"):
            async with _stdio_client(ws, tmp_path, mode) as c:
                result = await c.call_tool("notes_delete", {"id": "projects/tps.md"})
                assert result.is_error is not True
                assert result.structured_content is not None
                assert result.structured_content["outcome"] == "approval-needed"
                text = result.content[0].text  # type: ignore[union-attr]
                assert "an AI cannot give it" in text and "fs-notes approve" in text

    anyio.run(main)
    assert os.path.exists(ws / "projects" / "tps.md")
