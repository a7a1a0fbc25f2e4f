"""Undo through the real `fs-notes serve` (the confined workers, self-confinement) from the
official Python SDK client over stdio: an update and a confirmed deletion are each kept in the
state folder's journal before they are made, notes_history lists them, notes_restore puts both
back byte for byte, and `fs-notes changes` lists them with the person's own edit beside them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, types
from mcp.client.context import ClientRequestContext
from trees import files
from wire import sdk_stdio

PLAN = "# Plan\n\n## Beds\n\nTomatoes by the wall.\n\n## Paths\n\nGravel.\n"
OLD = "# Old ideas\n\nA pond, one day.\n"


def _structured(result: Any) -> dict[str, Any]:
    assert result.is_error is not True, result
    assert result.structured_content is not None
    out: dict[str, Any] = result.structured_content
    return out


def test_official_client_undoes_an_update_and_a_deletion(tmp_path: Path) -> None:
    ws = files(tmp_path / "notes", {"plan.md": PLAN, "old.md": OLD})
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    uri = "file://" + urllib.parse.quote(str(ws))

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        choice = params.requested_schema["properties"]["note_id"]["oneOf"][0]["const"]
        return types.ElicitResult(action="accept", content={"note_id": choice, "confirm": True})

    async def main() -> None:
        params = sdk_stdio(str(ws), "--state-dir", str(state),
                           "--replay-db", str(state / "replay.sqlite3"))  # fmt: skip
        async with Client(params, cache=None, read_timeout_seconds=30,
                          elicitation_callback=on_elicit) as client:  # fmt: skip
            read = _structured(await client.call_tool(
                "notes_read", {"workspaceUri": uri, "id": "plan.md"}))  # fmt: skip
            _structured(await client.call_tool("notes_update", {
                "workspaceUri": uri, "id": "plan.md", "content": PLAN.replace("Gravel", "Bark"),
                "expectedVersion": read["version"]}))  # fmt: skip
            deleted = _structured(await client.call_tool(
                "notes_delete", {"workspaceUri": uri, "id": "old.md"}))  # fmt: skip
            assert deleted["outcome"] == "deleted"
            assert not (ws / "old.md").exists()
            for note_id, tool in (("plan.md", "notes_update"), ("old.md", "notes_delete")):
                history = _structured(await client.call_tool(
                    "notes_history", {"workspaceUri": uri, "id": note_id}))  # fmt: skip
                [kept] = history["versions"]
                assert kept["tool"] == tool
                restored = _structured(await client.call_tool("notes_restore", {
                    "workspaceUri": uri, "id": note_id, "version": kept["version"]}))  # fmt: skip
                assert restored["restored"] == kept["version"]
            # Note text is marked as such, through the real server: after the restore, the
            # note is the file notes_restore left.
            again = await client.call_tool("notes_read", {"workspaceUri": uri, "id": "plan.md"})
            assert again.meta is not None
            [origin] = again.meta["io.github.fs-notes/origin"]["notes"]
            assert (origin["id"], origin["modifiedBy"], origin["tool"]) == (
                "plan.md", "fs-notes", "notes_restore")  # fmt: skip
            assert read["version"] in {
                v["version"] for v in _structured(await client.call_tool(
                    "notes_history", {"workspaceUri": uri, "id": "plan.md"}))["versions"]
            }  # fmt: skip

    anyio.run(main)
    assert (ws / "plan.md").read_text() == PLAN
    assert (ws / "old.md").read_text() == OLD
    journals = [n for n in os.listdir(state) if n.startswith("journal-")]
    assert journals and all(stat.S_IMODE(os.stat(state / n).st_mode) == 0o600 for n in journals)

    (ws / "diary.md").write_text("# Diary\n\nWritten in the person's own editor.\n")
    out = subprocess.run(
        [sys.executable, "-m", "fs_notes", "changes", str(ws), "--state-dir", str(state),
         "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    [report] = json.loads(out.stdout)["workspaces"]
    seen = [(c["id"], c["kind"], c["by"], c.get("tool")) for c in report["changes"]]
    assert seen == [
        ("plan.md", "update", "fs-notes", "notes_update"),
        ("old.md", "delete", "fs-notes", "notes_delete"),
        ("plan.md", "update", "fs-notes", "notes_restore"),
        ("old.md", "create", "fs-notes", "notes_restore"),
        ("diary.md", "change", "another program", None),
    ]
