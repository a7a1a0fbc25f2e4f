"""A note read by its structure (issue 31 item 1): notes_outline lists the headings outside front
matter and code with the byte offsets and sizes of their sections, and notes_read's `section`
returns exactly those bytes of the file; a name that fits no heading, or several, is refused
with the nearest headings. In process (layers 1 and 2)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from inprocess import InProcess

from fs_notes.notes.outline import SectionNotFound, find_section, outline_of
from fs_notes.policy_file import load_policy
from fs_notes.rounds.seal import KeyRing

NOTE = (
    "\ufeff---\ntitle: Garden\ntags: [plan]\n# not a heading\n---\n"
    "# Garden\r\n\r\nIntro with é.\r\n\r\n"
    "## Plan\n\nDig.\n\n```sh\n# not a heading either\n```\n\n"
    "### Week 1\n\nSow.\n\n### Week 2\n\nWater.\n\n"
    "## Log\n\n### Week 1\n\nRained.\n\n    # indented code\n\n"
    "# Appendix #\n\nEnd.\n"
)


def test_the_outline_is_the_notes_own_bytes() -> None:
    outline = outline_of(NOTE)
    assert [(h.level, h.text, " / ".join(h.path)) for h in outline.headings] == [
        (1, "Garden", "Garden"),
        (2, "Plan", "Garden / Plan"),
        (3, "Week 1", "Garden / Plan / Week 1"),
        (3, "Week 2", "Garden / Plan / Week 2"),
        (2, "Log", "Garden / Log"),
        (3, "Week 1", "Garden / Log / Week 1"),
        (1, "Appendix", "Appendix"),
    ]
    data = NOTE.encode()
    plan = outline.headings[1]
    assert data[plan.offset : plan.end] == data[data.index(b"## Plan") : data.index(b"## Log")]
    garden = outline.headings[0]
    assert data[garden.offset : garden.offset + 8] == b"# Garden"
    assert garden.end == data.index(b"# Appendix")
    last = outline.headings[-1]
    assert last.end == len(data) and data[last.offset :] == b"# Appendix #\n\nEnd.\n"
    assert plan.to_json()["tokens"] == -(-len(data[plan.offset : plan.end].decode()) // 4)
    assert outline.complete


def test_a_section_is_named_by_its_text_or_its_path() -> None:
    outline = outline_of(NOTE)
    assert find_section(outline, "Plan").path == ("Garden", "Plan")
    assert find_section(outline, "Log/Week 1").path == ("Garden", "Log", "Week 1")
    assert find_section(outline, "Garden / Plan / Week 1").path[-2] == "Plan"
    with pytest.raises(SectionNotFound) as many:
        find_section(outline, "Week 1")
    assert many.value.nearest == ["Garden / Plan / Week 1", "Garden / Log / Week 1"]
    with pytest.raises(SectionNotFound) as none:
        find_section(outline, "Plam")
    assert none.value.nearest[0] == "Garden / Plan"


def test_no_heading_no_section() -> None:
    assert outline_of("just text\n").headings == ()
    assert outline_of("---\na: 1\n---\n").headings == ()


class _Served:
    def __init__(self, tmp_path: Path, read_limit: int | None = None) -> None:
        notes = tmp_path / "notes"
        notes.mkdir()
        (notes / "garden.md").write_bytes(NOTE.encode())
        limit = f"read_limit = {read_limit}\n" if read_limit else ""
        path = tmp_path / "policy.toml"
        path.write_text(
            '[[principal]]\nname = "me"\nlocal = true\n\n'
            f'[[workspace]]\nname = "notes"\npath = "{notes}"\n{limit}\n'
            '[[grant]]\nprincipal = "me"\nworkspace = "notes"\noperations = ["read"]\n'
        )
        self.policy = load_policy(str(path))
        self.srv = InProcess(self.policy, tmp_path, keyring=KeyRing.ephemeral(), clock=time.time)
        self.notes = notes

    def call(self, name: str, **args: Any) -> dict[str, Any]:
        uri = self.policy.workspaces[0].uri
        response = self.srv.call(self.policy.local_principal(), name,
                                 {"workspaceUri": uri, "id": "garden.md", **args})  # fmt: skip
        result: dict[str, Any] = response["result"]
        return result


@pytest.fixture
def served(tmp_path: Path) -> Any:
    s = _Served(tmp_path)
    yield s
    s.srv.close()


def test_notes_outline_and_a_section_read(served: _Served) -> None:
    outline = served.call("notes_outline")
    assert outline.get("isError") is not True, outline
    data = outline["structuredContent"]
    assert data["title"] == "Garden" and data["properties"] == ["title", "tags"]
    assert data["complete"] is True and data["size"] == len(NOTE.encode())
    plan = next(h for h in data["headings"] if h["path"] == "Garden / Plan")
    read = served.call("notes_read", section="Plan")
    assert read.get("isError") is not True, read
    got = read["structuredContent"]
    whole = NOTE.encode()
    assert (got["offset"], got["length"]) == (plan["offset"], plan["size"])
    assert got["content"].encode() == whole[plan["offset"] : plan["offset"] + plan["size"]]
    assert got["section"] == "Garden / Plan" and got["version"] == data["version"]
    assert "### Week 2" in got["content"] and "## Log" not in got["content"]
    # The version is the note's: it is what notes_read gives for the whole note.
    assert served.call("notes_read")["structuredContent"]["version"] == got["version"]


def test_a_section_that_is_not_one_is_refused_with_the_nearest(served: _Served) -> None:
    result = served.call("notes_read", section="Week 1")
    assert result["isError"] is True
    assert result["structuredContent"] == {
        "error": "sectionNotFound", "id": "garden.md", "section": "Week 1",
        "nearest": ["Garden / Plan / Week 1", "Garden / Log / Week 1"],
    }  # fmt: skip
    both = served.call("notes_read", section="Plan", offset=0)
    assert both["isError"] is True
    assert both["content"][0]["text"] == "notes_read takes section or offset/length, not both"


def test_a_note_above_the_read_limit_is_outlined_from_its_first_part(tmp_path: Path) -> None:
    s = _Served(tmp_path, read_limit=4096)
    try:
        big = "# Big\n\n" + "".join(f"## Part {n}\n\n{'word ' * 80}\n\n" for n in range(40))
        (s.notes / "garden.md").write_text(big)
        data = s.call("notes_outline")["structuredContent"]
        assert data["complete"] is False and "version" not in data
        assert data["size"] == len(big.encode())
        assert 1 < len(data["headings"]) < 41
        assert all(h["offset"] + h["size"] <= 4096 for h in data["headings"])
    finally:
        s.srv.close()
