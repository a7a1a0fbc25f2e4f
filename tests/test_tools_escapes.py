"""The escape table (fs_notes/exercises/cases.py) through every tool, over the real protocol.

One server (stdio, real subprocess) serves one workspace per case from a policy file; for each case
every tool that takes a note id is tried with the hostile id, and the protected outside files must
stay unchanged, unread (no response contains their content) and, when they did not exist, absent.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from wire import StdioServer, call_tool, request, stdio_server

from fs_notes.exercises.cases import CASES, EscapeCase
from fs_notes.exercises.layout import SECRET, build


@dataclass
class Built:
    case: EscapeCase
    root: Path
    uri: str
    snapshot: dict[str, tuple[bytes, int] | None]


def _snapshot(root: Path, paths: tuple[str, ...]) -> dict[str, tuple[bytes, int] | None]:
    out: dict[str, tuple[bytes, int] | None] = {}
    for rel in paths:
        p = root / rel
        out[rel] = (
            (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() and not p.is_symlink() else None
        )
    return out


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StdioServer, dict[str, Built]]]:
    base = tmp_path_factory.mktemp("escapes")
    built: dict[str, Built] = {}
    lines = ['[[principal]]\nname = "me"\nlocal = true\n']
    for i, case in enumerate(CASES):
        root = base / f"c{i}"
        root.mkdir()
        build(root, case.layout)
        ws = root / "ws"
        uri = "file://" + urllib.parse.quote(str(ws))
        built[case.name] = Built(case, root, uri, _snapshot(root, case.protected))
        lines.append(f'[[workspace]]\nname = "w{i}"\npath = {json.dumps(str(ws))}\n')
        lines.append(
            f'[[grant]]\nprincipal = "me"\nworkspace = "w{i}"\noperations = ["read", "write"]\n'
        )
    policy = base / "policy.toml"
    policy.write_text("\n".join(lines))
    with stdio_server("--policy", str(policy)) as server:
        yield server, built


def _text(response: dict[str, Any]) -> str:
    return json.dumps(response, ensure_ascii=False)


def _assert_untouched(b: Built, response: dict[str, Any]) -> None:
    assert SECRET not in _text(response), f"{b.case.name}: outside content leaked"
    assert _snapshot(b.root, b.case.protected) == b.snapshot, (
        f"{b.case.name}: protected file changed"
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_tool_refuses_each_escape(
    served: tuple[StdioServer, dict[str, Built]], case: EscapeCase
) -> None:
    server, built = served
    b = built[case.name]
    note_id = case.note_id_in(b.root)
    read = server.ask(call_tool(1, "notes_read", {"workspaceUri": b.uri, "id": note_id}))
    _assert_untouched(b, read)
    if case.expect == "ok":
        assert read["result"].get("isError") is not True, read
        return
    assert read["result"]["isError"] is True, read
    for tool in ("notes_update", "notes_create"):
        response = server.ask(
            call_tool(2, tool, {"workspaceUri": b.uri, "id": note_id, "content": "PWNED"})
        )
        assert response["result"]["isError"] is True, (tool, response)
        _assert_untouched(b, response)
    # A lone surrogate has no UTF-8: its URI carries the bytes surrogatepass gives (invalid UTF-8).
    quoted = urllib.parse.quote(note_id, errors="surrogatepass")
    resource = server.ask(request(3, "resources/read", {"uri": b.uri + "/" + quoted}))
    assert resource.get("error", {}).get("code") == -32602, resource
    _assert_untouched(b, resource)
    for response in (
        server.ask(call_tool(4, "notes_list", {"workspaceUri": b.uri})),
        server.ask(call_tool(5, "notes_search", {"workspaceUri": b.uri, "query": SECRET})),
    ):
        _assert_untouched(b, response)
        assert "outside" not in _text(response.get("result", {}).get("structuredContent", {}))
    assert not any(
        "PWNED" in p.read_text(errors="replace")
        for p in b.root.rglob("*")
        if p.is_file() and not p.is_symlink() and not _special(p)
    )


def _special(p: Path) -> bool:
    import stat

    return not stat.S_ISREG(os.lstat(p).st_mode)
