"""The damage guard in the tools (issue 30 item 3): an update or edit that clips a note, drops
its front matter or headings, or leaves a placeholder is refused with what it would remove, and
the note is left as it was (bytes, identity and times); `force` makes it; the policy sets
the bounds; a principal who may not read is told no figures. In process (layers 1 and 2)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inprocess import InProcess

from fs_notes.policy import Policy
from fs_notes.policy_file import load_policy
from fs_notes.rounds.seal import KeyRing

SECTIONS = "".join(
    f"## Step {n}\n\nWater the seedlings in tray {n} and write down how tall they are.\n\n"
    for n in range(1, 9)
)
NOTE = "---\ntags: [garden]\n---\n# Seedlings\n\n" + SECTIONS
STEP_5 = "Water the seedlings in tray 5 and write down how tall they are."


def _policy(tmp_path: Path, operations: str = '"read", "write"', limits: str = "") -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "notes"\npath = "{tmp_path / "notes"}"\n\n'
        f'[[grant]]\nprincipal = "me"\nworkspace = "notes"\noperations = [{operations}]\n'
        + (f"\n[limits]\n{limits}\n" if limits else "")
    )
    return load_policy(str(path))


class _Served:
    def __init__(self, tmp_path: Path, **policy: str) -> None:
        notes = tmp_path / "notes"
        notes.mkdir(exist_ok=True)
        self.note = notes / "seedlings.md"
        self.note.write_text(NOTE)
        self.policy = _policy(tmp_path, **policy)
        state = tmp_path / "state"
        state.mkdir(exist_ok=True)
        self.srv = InProcess(self.policy, state, keyring=KeyRing.ephemeral(), clock=time.time)
        self.uri = self.policy.workspaces[0].uri

    def call(self, name: str, **args: Any) -> dict[str, Any]:
        response = self.srv.call(
            self.policy.local_principal(), name, {"workspaceUri": self.uri, **args}
        )
        result: dict[str, Any] = response["result"]
        return result

    def unchanged(self) -> None:
        st = os.stat(self.note)
        assert self.note.read_text() == NOTE
        assert (st.st_ino, st.st_mtime_ns, st.st_mode) == self.before

    def __enter__(self) -> _Served:
        st = os.stat(self.note)
        self.before = (st.st_ino, st.st_mtime_ns, st.st_mode)
        return self

    def __exit__(self, *exc: object) -> None:
        self.srv.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[_Served]:
    with _Served(tmp_path) as s:
        yield s


def _codes(result: dict[str, Any]) -> list[str]:
    assert result["isError"] is True, result
    data = result["structuredContent"]
    assert data["error"] == "noteDamaged" and data["id"] == "seedlings.md"
    return [loss["code"] for loss in data["losses"]]


def test_an_update_that_clips_the_note_is_refused_and_nothing_is_written(
    served: _Served,
) -> None:
    clipped = NOTE[: NOTE.index("## Step 2")]
    result = served.call("notes_update", id="seedlings.md", content=clipped)
    assert _codes(result) == ["shrinks", "headings-lost"]
    text = result["content"][0]["text"]
    assert text.startswith("refused: seedlings.md: the note would lose ")
    assert "7 of the note's 9 headings would be gone (first: 'Step 2')" in text
    assert text.endswith(
        "Nothing was written. If the user wants exactly this, call again with force: "
        "true; otherwise change only what needs changing (notes_edit)."
    )
    served.unchanged()
    forced = served.call("notes_update", id="seedlings.md", content=clipped, force=True)
    assert forced.get("isError") is not True, forced  # the control: it can be done on purpose
    assert served.note.read_text() == clipped


@pytest.mark.parametrize(
    ("content", "codes"),
    [
        (NOTE.split("---\n", 2)[2], ["front-matter-lost"]),
        (NOTE.replace("[garden]", "[garden"), ["front-matter-broken"]),
        (NOTE.replace(STEP_5, "... rest of the note unchanged ..."), ["placeholder"]),
    ],
)
def test_an_update_that_drops_front_matter_or_leaves_a_placeholder_is_refused(
    served: _Served, content: str, codes: list[str]
) -> None:
    assert _codes(served.call("notes_update", id="seedlings.md", content=content)) == codes
    served.unchanged()


def test_an_ordinary_update_and_edit_pass(served: _Served) -> None:
    """The control: a sentence changed, a step added; the note is written each time."""
    changed = NOTE.replace("tray 3", "tray three") + "## Step 9\n\nPlant them out.\n"
    assert served.call("notes_update", id="seedlings.md", content=changed).get("isError") is None
    edit = [{"oldText": "tray 4", "newText": "tray four"}]
    assert served.call("notes_edit", id="seedlings.md", edits=edit).get("isError") is None
    assert served.note.read_text() == changed.replace("tray 4", "tray four")


def test_an_edit_that_removes_most_of_the_note_is_refused_also_as_a_dry_run(
    served: _Served,
) -> None:
    edit = [{"oldText": SECTIONS[SECTIONS.index("## Step 2"):], "newText": ""}]
    assert _codes(served.call("notes_edit", id="seedlings.md", edits=edit, dryRun=True)) == [
        "shrinks", "headings-lost"]  # fmt: skip
    assert _codes(served.call("notes_edit", id="seedlings.md", edits=edit)) == [
        "shrinks", "headings-lost"]  # fmt: skip
    served.unchanged()
    done = served.call("notes_edit", id="seedlings.md", edits=edit, force=True)
    assert done.get("isError") is not True, done
    assert "## Step 2" not in served.note.read_text()


def test_the_policy_sets_the_bounds(tmp_path: Path) -> None:
    """`max_shrink = 1` and `max_headings_lost = 1`: a clipped update passes (the policy's
    owner chose no bound); a placeholder is still refused."""
    with _Served(tmp_path, limits="max_shrink = 1\nmax_headings_lost = 1") as served:
        clipped = NOTE[: NOTE.index("## Step 2")]
        passed = served.call("notes_update", id="seedlings.md", content=clipped)
        assert passed.get("isError") is None
        assert served.note.read_text() == clipped
        placeholder = clipped + "[truncated]\n"
        assert _codes(served.call("notes_update", id="seedlings.md", content=placeholder)) == [
            "placeholder"]  # fmt: skip


def test_a_principal_who_may_not_read_is_refused_without_figures(tmp_path: Path) -> None:
    """Granted write but not read: the refusal names the kinds of damage, never the note's
    length or a heading (issue 27: what a note holds is not shown to a writer)."""
    with _Served(tmp_path, operations='"write"') as served:
        result = served.call("notes_update", id="seedlings.md", content="# Seedlings\n")
        assert _codes(result) == ["shrinks", "front-matter-lost", "headings-lost"]
        losses = result["structuredContent"]["losses"]
        assert [x["detail"] for x in losses] == [
            "the note would lose most of its length",
            "the note's front matter (its properties) would be gone",
            "most of the note's headings would be gone",
        ]
        assert "Step" not in str(result) and str(len(NOTE)) not in str(result)
        served.unchanged()
