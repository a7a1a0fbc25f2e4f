"""A lone surrogate ("\\ud800": valid JSON, not valid Unicode) in any string argument of any tool
is a tool error naming the argument, never -32603, and nothing is written (issue 25: found by
sending odd values to every argument of every tool; content, text and tag in notes_create,
notes_update, notes_append and notes_search were the internal errors). The check is one place,
the argument check every tools/call goes through (protocol/argcheck.py), so the test walks
every string argument, and every string field of an array argument's items, of every tool
that tools/list publishes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inprocess import META, InProcess
from trees import files
from wire import call_tool, stdio_server

from fs_notes.policy import Policy
from fs_notes.protocol.envelope import Request
from fs_notes.rounds.seal import KeyRing

KEYS = KeyRing([("k1", b"k" * 32)])
LONE = "before \ud800 after"


def _folder(tmp_path: Path) -> Path:
    return files(tmp_path / "notes", {
        "projects/plan.md": "---\ntags: [alpha]\n---\n# Plan\nSee [[todo]].\n",
        "todo.md": "# Todo\n#alpha milk\n",
    })  # fmt: skip


def _snapshot(root: Path) -> dict[str, Any]:
    """Every file and folder beneath root: bytes, mode, owner, inode and times."""
    out: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if path.is_file() else None
        out[str(path.relative_to(root))] = (data, st.st_mode, st.st_uid, st.st_ino, st.st_mtime_ns)
    return out


def _value(prop: dict[str, Any]) -> Any:
    """A value of the property's type (the arguments are checked in order, the odd one first)."""
    kind = prop["type"]
    if kind == "string":
        return "x.md"
    if kind == "integer":
        return prop.get("minimum", 1)
    if kind == "boolean":
        return False
    items = prop["items"]
    return [{k: _value(items["properties"][k]) for k in items.get("required", [])}]


def _cases(tools: list[dict[str, Any]]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(tool, argument name as the error names it, arguments) for every string slot."""
    for tool in tools:
        schema = tool["inputSchema"]
        props: dict[str, Any] = schema["properties"]
        rest = {k: _value(props[k]) for k in schema["required"]}
        for name, prop in props.items():
            if prop["type"] == "string":
                yield (
                    tool["name"],
                    name,
                    {name: LONE, **{k: v for k, v in rest.items() if k != name}},
                )
            elif prop["type"] == "object":  # any JSON values: a string inside, and a key
                others = {k: v for k, v in rest.items() if k != name}
                yield tool["name"], name, {name: {"k": LONE}, **others}
                yield tool["name"], name, {name: {LONE: 1}, **others}
            elif prop["type"] == "array" and prop["items"]["type"] == "string":
                others = {k: v for k, v in rest.items() if k != name}
                yield tool["name"], f"{name}[0]", {name: [LONE], **others}
            elif prop["type"] == "array":
                item_props = prop["items"]["properties"]
                for key, item in item_props.items():
                    if item["type"] != "string":
                        continue
                    entry = (
                        {key: LONE, **_value(prop)[0]}
                        if key not in _value(prop)[0]
                        else {**_value(prop)[0], key: LONE}
                    )
                    others = {k: v for k, v in rest.items() if k != name}
                    yield tool["name"], f"{name}[0].{key}", {name: [entry], **others}


def test_a_lone_surrogate_in_every_string_argument_of_every_tool_is_a_tool_error(
    tmp_path: Path,
) -> None:
    ws = _folder(tmp_path)
    (tmp_path / "state").mkdir()
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    me = policy.local_principal()
    srv = InProcess(policy, tmp_path / "state", keyring=KEYS, clock=time.time)
    try:
        caps: dict[str, Any] = {"io.modelcontextprotocol/clientCapabilities": {}}
        listed = srv.dispatcher.handle(
            Request(0, "tools/list", {"_meta": {**META, **caps}}), me, "test"
        )
        assert listed is not None
        tools = listed["result"]["tools"]
        cases = list(_cases(tools))
        named = {(tool, arg) for tool, arg, _ in cases}
        # The four the issue found, among all the others.
        for tool, arg in [("notes_create", "content"), ("notes_update", "content"),
                          ("notes_append", "content"), ("notes_search", "tag"),
                          ("notes_edit", "edits[0].oldText"), ("notes_delete", "id"),
                          ("notes_properties", "set"),
                          ("notes_properties", "unset[0]")]:  # fmt: skip
            assert (tool, arg) in named
        with_text = {
            t["name"]
            for t in tools
            if any(
                p["type"] in ("string", "array", "object")
                for p in t["inputSchema"]["properties"].values()
            )
        }
        assert {tool for tool, _ in named} == with_text
        before = _snapshot(ws)
        for tool, arg, args in cases:
            answer = srv.call(me, tool, args)
            assert "error" not in answer, (
                tool,
                arg,
                answer,
            )  # never -32603 (nor any protocol error)
            result = answer["result"]
            assert result["isError"] is True, (tool, arg)
            text = result["content"][0]["text"]
            assert text == (
                f"Invalid arguments for {tool}: argument '{arg}' is not valid Unicode text: "
                "a lone surrogate (\\ud800) at character 7; nothing was done"
            ), (tool, arg)
            json.dumps(answer, ensure_ascii=False).encode()  # the answer itself is valid UTF-8
        assert _snapshot(ws) == before
        # Positive control: the same slots with valid text reach the tools.
        fine = srv.call(me, "notes_create", {"id": "ok.md", "content": "before \u2603 after"})
        assert fine["result"].get("isError") is not True and (ws / "ok.md").exists()
    finally:
        srv.close()


@pytest.mark.parametrize(
    ("tool", "arg", "args"),
    [
        ("notes_create", "content", {"id": "new.md", "content": LONE}),
        ("notes_update", "content", {"id": "todo.md", "content": LONE}),
        ("notes_append", "content", {"id": "todo.md", "content": LONE}),
        ("notes_search", "tag", {"query": "milk", "tag": LONE}),
    ],
)
def test_over_the_wire_the_four_found_answer_a_tool_error_and_write_nothing(
    tmp_path: Path, tool: str, arg: str, args: dict[str, Any]
) -> None:
    ws = _folder(tmp_path)
    before = _snapshot(ws)
    with stdio_server(str(ws), "--replay-db", str(tmp_path / "replay.db")) as server:
        message = call_tool(1, tool, {"workspaceUri": ws.as_uri(), **args})
        raw = json.dumps(message)  # ensure_ascii: the surrogate travels as the escape \ud800
        assert "\\ud800" in raw
        server.send_raw(raw.encode() + b"\n")
        answer = server.recv()
    assert "error" not in answer, answer
    assert answer["result"]["isError"] is True
    assert f"argument '{arg}' is not valid Unicode text" in answer["result"]["content"][0]["text"]
    assert _snapshot(ws) == before
    assert not os.path.exists(ws / "new.md")
