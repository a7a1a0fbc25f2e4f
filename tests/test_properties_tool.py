"""Front-matter properties changed in place (issue 31 item 2): notes_properties sets and removes
the asked keys and leaves every other byte of the note as it was (comments, order, quoting, the
other keys, the body, CRLF line endings); what cannot be done exactly is refused with the
reason and the note untouched on the disk. In process (layers 1 and 2)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from argschema import agrees_with_reference
from hypothesis import given, settings
from hypothesis import strategies as st
from inprocess import InProcess

from fs_notes.notes.properties import properties_of
from fs_notes.notes.property_edit import MAX_KEYS, PropertiesRefused, change_properties
from fs_notes.policy_file import load_policy
from fs_notes.rounds.seal import KeyRing

FM = (
    "---\n"
    "title: 'Garden'   # what it is called\n"
    'tags:\n  - plan\n  - "out door"\n'
    "status: draft\n"
    "# a comment line of the user's\n"
    "unknown_key: {a: 1, b: [x, y]}\n"
    "---\n"
)
BODY = "# Garden\n\nstatus: not a property\n---\nnot front matter\n"


def test_only_the_asked_keys_change() -> None:
    after = change_properties(FM + BODY, {"status": "done"}, [])
    assert after == FM.replace("status: draft", "status: done") + BODY
    added = change_properties(FM + BODY, {"due": "2026-12-24", "n": 3}, ["unknown_key"])
    assert added.endswith("---\n" + BODY)
    assert "title: 'Garden'   # what it is called\n" in added
    assert "# a comment line of the user's" in added and "unknown_key" not in added
    props = properties_of(added)
    assert props["due"] == "2026-12-24" and props["n"] == 3 and props["status"] == "draft"


@pytest.mark.parametrize(
    "value", ["yes", "1", "true", "null", "2026-05-01", "a: b", "- x", "#tag", "", "multi\nline"]
)
def test_a_string_that_yaml_would_type_is_kept_a_string(value: str) -> None:
    after = change_properties(FM + BODY, {"status": value}, [])
    assert properties_of(after)["status"] == value
    assert after.endswith("---\n" + BODY)


def test_a_layout_the_writer_does_not_reproduce_is_changed_line_by_line() -> None:
    """Trailing blanks and unusual indentation (as in Obsidian's own help vault): the lines of
    the asked keys change, every other line is the note's own."""
    text = (
        "---\naliases: \ntags:\n    -   plan\n# kept\nmobile: true \nlong: >\n  folded\n\n"
        "  text\npublish: true \n---\nbody\n"
    )
    after = change_properties(text, {"mobile": False, "new": "x"}, ["long"])
    assert after == (
        "---\naliases: \ntags:\n    -   plan\n# kept\nmobile: false\npublish: true \nnew: x\n"
        "---\nbody\n"
    )
    assert properties_of(after)["tags"] == ["plan"]


def test_crlf_bom_and_a_note_without_front_matter() -> None:
    crlf = "\ufeff" + (FM + BODY).replace("\n", "\r\n")
    after = change_properties(crlf, {"status": "done"}, [])
    assert after == crlf.replace("status: draft", "status: done")
    assert change_properties("# Just a note\n", {"status": "new"}, []) == (
        "---\nstatus: new\n---\n# Just a note\n"
    )


@pytest.mark.parametrize(
    ("text", "set_", "unset", "why"),
    [
        ("---\ntitle: [unclosed\n---\nbody\n", {"a": 1}, [], "does not parse"),
        ("---\n- a\n- b\n---\nbody\n", {"a": 1}, [], "does not parse as YAML properties"),
        ("---\ntitle: x\nbody without end\n", {"a": 1}, [], "never closed"),
        (FM + BODY, {}, ["missing"], "no property 'missing'"),
        (FM + BODY, {"a\u202eb": 1}, [], "control or format"),
        (FM + BODY, {"a": 1}, ["a"], "both set and removed"),
    ],
)
def test_what_cannot_be_done_exactly_is_refused(
    text: str, set_: dict[str, Any], unset: list[str], why: str
) -> None:
    with pytest.raises(PropertiesRefused) as refused:
        change_properties(text, set_, unset)
    assert why in str(refused.value)


class _Served:
    def __init__(self, tmp_path: Path, operations: str = '"read", "write"') -> None:
        notes = tmp_path / "notes"
        notes.mkdir()
        self.note = notes / "garden.md"
        self.note.write_text(FM + BODY)
        path = tmp_path / "policy.toml"
        path.write_text(
            '[[principal]]\nname = "me"\nlocal = true\n\n'
            f'[[workspace]]\nname = "notes"\npath = "{notes}"\n\n'
            f'[[grant]]\nprincipal = "me"\nworkspace = "notes"\noperations = [{operations}]\n'
        )
        self.policy = load_policy(str(path))
        self.srv = InProcess(self.policy, tmp_path, keyring=KeyRing.ephemeral(), clock=time.time)

    def call(self, **args: Any) -> dict[str, Any]:
        uri = self.policy.workspaces[0].uri
        response = self.srv.call(self.policy.local_principal(), "notes_properties",
                                 {"workspaceUri": uri, "id": "garden.md", **args})  # fmt: skip
        result: dict[str, Any] = response["result"]
        return result

    def snapshot(self) -> tuple[bytes, int, int, int, int]:
        st = os.stat(self.note)
        return self.note.read_bytes(), st.st_mode, st.st_uid, st.st_ino, st.st_mtime_ns


@pytest.fixture
def served(tmp_path: Path) -> Any:
    s = _Served(tmp_path)
    yield s
    s.srv.close()


def test_the_tool_reads_sets_and_keeps_the_old_bytes(served: _Served) -> None:
    read = served.call()["structuredContent"]
    assert read["properties"]["status"] == "draft" and read["changed"] == []
    done = served.call(set={"status": "done"}, unset=["unknown_key"],
                       expectedVersion=read["version"])  # fmt: skip
    assert done.get("isError") is not True, done
    text = served.note.read_text()
    assert "status: done" in text and "unknown_key" not in text and text.endswith(BODY)
    assert done["structuredContent"]["changed"] == ["status", "unknown_key"]
    history = served.srv.call(served.policy.local_principal(), "notes_history",
                              {"workspaceUri": served.policy.workspaces[0].uri,
                               "id": "garden.md"})["result"]  # fmt: skip
    assert any(
        v["size"] == len((FM + BODY).encode()) for v in history["structuredContent"]["versions"]
    )


def test_the_tool_refuses_and_writes_nothing(served: _Served) -> None:
    before = served.snapshot()
    stale = served.call(set={"status": "done"}, expectedVersion="v1:" + "0" * 32)
    assert stale["structuredContent"]["error"] == "versionMismatch"
    refused = served.call(unset=["missing"])
    assert refused["isError"] is True
    assert refused["structuredContent"] == {
        "error": "propertiesRefused", "id": "garden.md",
        "reason": "the note has no property 'missing' to remove",
    }  # fmt: skip
    assert served.snapshot() == before


def test_a_read_only_grant_reads_but_cannot_set(tmp_path: Path) -> None:
    s = _Served(tmp_path, operations='"read"')
    try:
        before = s.snapshot()
        assert s.call()["structuredContent"]["properties"]["status"] == "draft"
        refused = s.call(set={"status": "done"})
        assert refused["isError"] is True and "not permitted" in refused["content"][0]["text"]
        assert s.snapshot() == before
    finally:
        s.srv.close()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=8,
)  # fmt: skip
_ARGS = st.dictionaries(
    st.sampled_from(["id", "set", "unset", "x"]),
    st.one_of(
        st.text(max_size=3),
        st.dictionaries(st.text(max_size=4), _JSON, max_size=MAX_KEYS + 2),
        st.lists(st.one_of(st.text(max_size=3), st.integers()), max_size=MAX_KEYS + 2),
        _JSON,
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(_ARGS)
def test_the_argument_check_agrees_with_the_reference(arguments: dict[str, Any]) -> None:
    """The two schema forms added for this tool (an object of any JSON values with a bound on
    its keys; an array of bounded strings) are checked exactly as JSON Schema says."""
    from fs_notes.tools.properties_tool import NotesProperties

    schema = NotesProperties(None, None).spec().input_schema  # type: ignore[arg-type]
    agrees_with_reference(schema, arguments)
