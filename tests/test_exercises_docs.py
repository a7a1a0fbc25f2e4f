"""docs/design.md's MRTR wire shape and state fields are what the real server sends today.

The review document shows a capture; this test captures again (real `fs-notes serve`, stdio) and
compares the shape (keys, list lengths, JSON types, and the values that never vary), so the
document cannot drift from the server.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

from wire import REPO, call_tool, stdio_server

from fs_notes.rounds.seal import KeyRing

FORM: dict[str, Any] = {"elicitation": {"form": {}}}
VARYING = {"message", "title", "requestState", "text", "uri", "workspaceUri", "deleted", "const"}


def _doc_blocks() -> list[Any]:
    text = (Path(REPO) / "docs" / "design.md").read_text(encoding="utf-8")
    section = text[text.index("Wire shape, captured") : text.index("**State fields**")]
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", section, re.S)]


def _shape(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v, key) for v in value]
    if isinstance(value, str) and key in VARYING:
        return "<string>"
    return value


def _capture(tmp_path: Path) -> tuple[list[Any], dict[str, Any]]:
    notes = tmp_path / "notes" / "projects"
    notes.mkdir(parents=True)
    (notes / "tps-report.md").write_text("# TPS report\nold\n")
    (notes / "tps-report-2026.md").write_text("# TPS report 2026\nnew\n")
    uri = "file://" + urllib.parse.quote(str(tmp_path / "notes"))
    args = {"workspaceUri": uri, "title": "TPS report"}
    key = tmp_path / "state.keys"  # a key the test holds: the state is encrypted (seal.py)
    key.write_text("k1:" + base64.b64encode(bytes(range(40, 72))).decode() + "\n")
    key.chmod(0o600)
    with stdio_server(
        str(tmp_path / "notes"), "--replay-db", str(tmp_path / "r.db"), "--state-key-file", str(key)
    ) as server:
        first = server.ask(call_tool(1, "notes_delete", args, FORM))["result"]
        extra = {
            "inputResponses": {
                "delete_choice": {
                    "action": "accept",
                    "content": {"note_id": "projects/tps-report.md", "confirm": True},
                }
            },
            "requestState": first["requestState"],
        }
        done = server.ask(call_tool(2, "notes_delete", args, FORM, **extra))["result"]
        again = server.ask(call_tool(3, "notes_delete", args, FORM, **extra))["error"]
    retry = {"name": "notes_delete", "arguments": args, **extra}
    version, kid, body, tag = first["requestState"].split(".")

    def unb64u(text: str) -> bytes:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    opened = KeyRing.from_file(key).open_box(
        kid, f"{version}.{kid}".encode(), unb64u(body), unb64u(tag)
    )
    state = json.loads(opened)
    return [first, retry, done, again], state


def test_the_captured_wire_shape_in_the_design_review_matches_the_server(tmp_path: Path) -> None:
    live, _ = _capture(tmp_path)
    documented = _doc_blocks()
    assert len(documented) == 4
    for doc, now in zip(documented, live, strict=True):
        assert _shape(doc) == _shape(now)


def test_the_state_fields_listed_in_the_design_review_are_the_sealed_ones(tmp_path: Path) -> None:
    _, state = _capture(tmp_path)
    text = (Path(REPO) / "docs" / "design.md").read_text(encoding="utf-8")
    section = text[text.index("**State fields**") : text.index("**Response branches**")]
    listed = set(re.findall(r"`([a-z]+)`", section)) & set(state)
    assert listed == set(state), set(state) - listed
