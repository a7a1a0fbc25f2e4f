"""The note model's damage check (fs_notes/notes/damage.py): each kind of silent loss is named
with its figures, and an ordinary edit of the same note is none."""

from __future__ import annotations

import pytest

from fs_notes.notes.damage import Limits, damage

BEDS = "".join(
    f"## Bed {n}\n\nTomatoes and beans grow in bed {n}, watered each morning.\n\n"
    for n in range(1, 7)
)
NOTE = "---\ntitle: Garden\ntags: [home]\n---\n# Garden\n\n" + BEDS


def _codes(new: str, old: str = NOTE, limits: Limits | None = None) -> list[str]:
    return [loss.code for loss in damage(old, new, limits)]


def test_an_ordinary_edit_is_no_damage() -> None:
    """A word changed, a section added, one heading renamed, a line removed: none of it."""
    edited = NOTE.replace("beans", "peas").replace("## Bed 3", "## Bed three")
    edited = edited.replace("Tomatoes and peas grow in bed 6, watered each morning.\n", "")
    assert _codes(edited + "## Bed 7\n\nNew.\n") == []
    assert _codes(NOTE) == []


def test_a_note_clipped_to_a_few_lines_shrinks_and_loses_its_headings() -> None:
    clipped = NOTE[: NOTE.index("## Bed 2")]
    losses = damage(NOTE, clipped)
    assert [loss.code for loss in losses] == ["shrinks", "headings-lost"]
    assert losses[0].detail == (
        f"the note would lose {(len(NOTE) - len(clipped)) * 100 // len(NOTE)}% of its length "
        f"({len(NOTE)} characters, then {len(clipped)})"
    )
    assert losses[1].detail == "5 of the note's 7 headings would be gone (first: 'Bed 2')"


def test_front_matter_dropped_or_broken_is_named() -> None:
    body = NOTE.split("---\n", 2)[2]
    assert _codes(body) == ["front-matter-lost"]
    broken = NOTE.replace("tags: [home]", "tags: [home")
    assert _codes(broken) == ["front-matter-broken"]
    assert _codes(body, old=body) == []  # the control: a note without front matter keeps none


@pytest.mark.parametrize(
    "placeholder",
    [
        "...",
        "…",
        "[truncated]",
        "[...]",
        "... rest of the note unchanged ...",
        "(The rest of the file remains the same)",
        "<!-- existing content here -->",
        "// ... remaining sections omitted",
        "Content truncated",
    ],
)
def test_a_placeholder_where_text_was_is_named(placeholder: str) -> None:
    new = NOTE.replace("Tomatoes and beans grow in bed 4, watered each morning.", placeholder)
    losses = damage(NOTE, new)
    assert [loss.code for loss in losses] == ["placeholder"]
    assert losses[0].detail == (
        f"the new text stands a placeholder where text was: {placeholder!r}"
    )


def test_a_placeholder_the_note_already_had_or_prose_that_mentions_it_is_not() -> None:
    """The control for placeholders: a line of "..." already in the note, and sentences that
    only use the words ("the rest of the day", "truncated cones")."""
    old = NOTE + "...\n"
    assert _codes(old + "More.\n", old=old) == []
    prose = NOTE + "We rested for the rest of the day. Truncated cones hold the water.\n"
    assert _codes(prose) == []


def test_a_short_note_may_be_rewritten_and_the_limits_are_settable() -> None:
    short = "# Todo\n\nbuy milk and eggs and bread\n"
    assert _codes("# Todo\n", old=short) == []  # under min_chars
    assert _codes("# Todo\n", old=short, limits=Limits(min_chars=10)) == ["shrinks"]
    half = NOTE[: len(NOTE) * 6 // 10]
    assert "shrinks" not in _codes(half)
    assert "shrinks" in _codes(half, limits=Limits(max_shrink=0.3))
