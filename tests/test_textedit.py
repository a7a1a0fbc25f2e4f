"""notes_edit's pure text operations (fs_notes/notes/textedit.py) and the array arguments it
needs (fs_notes/protocol/argcheck.py, checked against the reference jsonschema)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from argschema import agrees_with_reference
from hypothesis import given, settings
from hypothesis import strategies as st

from fs_notes.notes.textedit import Edit, EditRefused, apply_edits, count_matches, unified_diff
from fs_notes.protocol.argcheck import ArgumentError, check_schema, validate

# (text, edits as (old, new), the result or (index, reason, matches) of the refusal)
CASES: list[tuple[str, list[tuple[str, str]], str | tuple[int, str, int]]] = [
    ("hello world", [("world", "there")], "hello there"),
    ("a b c", [("c", "C"), ("a", "A")], "A b C"),  # applied to the note as read, in any order
    ("a b", [("a", "b"), ("b", "c")], "b c"),  # not one after the other: no chaining
    ("abc", [("b", "")], "ac"),
    ("x", [("x", "x")], "x"),
    ("abc", [("d", "e")], (0, "notFound", 0)),
    ("ok then", [("ok", "OK"), ("zz", "y")], (1, "notFound", 0)),
    ("a a a", [("a", "b")], (0, "ambiguous", 3)),
    ("aaa", [("aa", "b")], (0, "ambiguous", 2)),  # overlapping occurrences count too
    ("abcd", [("bc", "x"), ("cd", "y")], (1, "overlaps", 1)),
    ("abcd", [("cd", "y"), ("abc", "x")], (1, "overlaps", 1)),
    ("abc", [("", "x")], (0, "empty", 0)),
]


@pytest.mark.parametrize(("text", "edits", "outcome"), CASES)
def test_every_edit_applies_exactly_once_or_nothing_does(
    text: str, edits: list[tuple[str, str]], outcome: str | tuple[int, str, int]
) -> None:
    parsed = [Edit(old, new) for old, new in edits]
    if isinstance(outcome, str):
        assert apply_edits(text, parsed) == outcome
        return
    with pytest.raises(EditRefused) as info:
        apply_edits(text, parsed)
    assert (info.value.index, info.value.reason, info.value.matches) == outcome


def test_refusals_say_which_edit_and_how_many_matches() -> None:
    with pytest.raises(EditRefused, match=r"^edits\[0\]: oldText matches 3 times; it must"):
        apply_edits("a a a", [Edit("a", "b")])
    with pytest.raises(EditRefused, match=r"^edits\[1\]: oldText was not found \(0 matches\)"):
        apply_edits("a", [Edit("a", "b"), Edit("q", "r")])
    with pytest.raises(EditRefused, match=r"^edits\[1\]: oldText overlaps the text of edits\[0\]$"):
        apply_edits("abcd", [Edit("bc", "x"), Edit("cd", "y")])
    with pytest.raises(EditRefused, match=r"matches more than 1000 times"):
        apply_edits("a" * 5000, [Edit("a", "b")])


def test_the_diff_names_the_note_safely_and_marks_a_missing_last_newline() -> None:
    assert unified_diff("a\nb\n", "a\nb\n", "n.md") == ""
    assert unified_diff("a\nb\nc", "a\nB\nc", "x.md") == (
        "--- a/x.md\n+++ b/x.md\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\\ No newline at end of file\n"
    )
    # An id with a control character and a line separator in the text: the id is escaped in
    # the file names, and U+2028 does not cut a line (only "\n" does).
    diff = unified_diff("x\u2028y\n", "z\n", "evil\x1b[2J.md")
    assert diff.splitlines()[:2] == ["--- a/evil\\u001b[2J.md", "+++ b/evil\\u001b[2J.md"]
    assert "-x\u2028y\n+z\n" in diff


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "edits": {
            "type": "array",
            "minItems": 1,
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {
                    "o": {"type": "string", "minLength": 1, "maxLength": 3},
                    "n": {"type": "string", "maxLength": 3},
                },
                "required": ["o", "n"],
                "additionalProperties": False,
            },
        },
        "d": {"type": "boolean"},
    },
    "required": ["edits"],
    "additionalProperties": False,
}

_leaf = st.none() | st.booleans() | st.integers(-2, 2) | st.text(max_size=4)
_item = st.dictionaries(st.sampled_from(["o", "n", "x"]), _leaf, max_size=3) | _leaf
_edits = st.lists(_item, max_size=3) | _leaf


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["edits", "d", "x"]), _edits, max_size=3))
def test_array_arguments_agree_with_the_reference_jsonschema(arguments: Any) -> None:
    agrees_with_reference(SCHEMA, arguments)


def test_array_errors_name_the_item_and_nested_arrays_are_refused() -> None:
    with pytest.raises(ArgumentError, match=r"^argument 'edits\[1\]' is missing 'n'$"):
        validate(SCHEMA, {"edits": [{"o": "a", "n": "b"}, {"o": "c"}]})
    with pytest.raises(ArgumentError, match=r"^argument 'edits\[0\].o' must be at most 3"):
        validate(SCHEMA, {"edits": [{"o": "abcd", "n": "b"}]})
    with pytest.raises(ArgumentError, match=r"^argument 'edits' must have at least 1 items$"):
        validate(SCHEMA, {"edits": []})
    items = SCHEMA["properties"]["edits"]["items"]
    for bad in (
        {"type": "array", "items": {"type": "array"}},
        {"type": "array", "items": {**items, "additionalProperties": True}},
        {"type": "array", "items": {**items, "properties": {"o": {"type": "array"}}}},
        {"type": "array"},
    ):
        with pytest.raises(ValueError):
            check_schema({**SCHEMA, "properties": {"edits": bad}})


def _plain_diff(before: str, after: str, name: str) -> str:
    import difflib

    from fs_notes.notes.textedit import NO_NEWLINE, _lines

    out: list[str] = []
    for line in difflib.unified_diff(_lines(before), _lines(after), f"a/{name}", f"b/{name}"):
        out.append(line)
        if not line.endswith("\n"):
            out += ("\n", NO_NEWLINE)
    return "".join(out)


def _apply(before: str, diff: str) -> str:
    """`patch` for one file: every hunk's context and removed lines must be `before`'s lines at
    the numbers its header states; the result is what the diff says `after` is."""
    from fs_notes.notes.textedit import NO_NEWLINE, _lines

    old = _lines(before)
    body = diff.split("\n", 2)[2] if diff else ""
    out: list[str] = []
    at = 0  # lines of `old` consumed
    rows = body.splitlines(keepends=True)
    i = 0
    while i < len(rows):
        m = re.match(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@\n$", rows[i])
        assert m is not None, rows[i]
        start, count = int(m.group(1)), int(m.group(2) or "1")
        first = start - 1 if count else start  # a ",0" hunk names the line before it
        assert first >= at
        out += old[at:first]
        at = first
        i += 1
        while i < len(rows) and not rows[i].startswith("@@"):
            row = rows[i]
            last = i + 1 < len(rows) and rows[i + 1] == NO_NEWLINE  # "\\ No newline ..."
            text = row[1:].removesuffix("\n") if last else row[1:]
            i += 2 if last else 1
            if row[0] in " -":
                assert old[at] == text, (at, old[at], text)
                at += 1
            if row[0] in " +":
                out.append(text)
    return "".join(out + old[at:])


@given(
    st.lists(st.sampled_from(["a\n", "b\n", "c\n", "# H\n", "\n", "x"]), max_size=40),
    st.lists(st.sampled_from(["a\n", "b\n", "z\n", "\n", "y"]), max_size=6),
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=0, max_value=6),
)
def test_the_bounded_diff_is_a_true_diff_of_the_whole_note(
    lines: list[str], inserted: list[str], at: int, cut: int
) -> None:
    """Comparing only the changed region gives a diff that, applied to the whole note as its
    line numbers say, makes the new note. (Not always the whole-note diff's text: on repeated
    lines difflib may align a shorter sequence differently, and both are true diffs.)"""
    before = "".join(lines)
    at = min(at, len(lines))
    after = "".join(lines[:at] + inserted + lines[at + cut :])
    diff = unified_diff(before, after, "n.md")
    if before == after:
        assert diff == ""
        return
    assert diff.startswith("--- a/n.md\n+++ b/n.md\n@@ -")
    assert _apply(before, diff) == after


def test_a_diff_on_repeated_lines_applies_and_a_misnumbered_one_does_not() -> None:
    before, after = "a\na\nb\na\na\na\na\n", "a\na\na\na\na\na\n"
    diff = unified_diff(before, after, "n.md")
    assert _apply(before, diff) == after
    assert _apply(before, _plain_diff(before, after, "n.md")) == after
    # the control: the same hunk said to start one line later is caught
    shifted = "--- a/n.md\n+++ b/n.md\n@@ -2,6 +2,5 @@\n a\n a\n-b\n a\n a\n a\n"
    with pytest.raises(AssertionError):
        _apply(before, shifted)
    # and a bounded diff of a change far into a long note is numbered as the whole note
    long = "".join(f"line {i}\n" for i in range(100))
    diff = unified_diff(long, long.replace("line 50\n", "fifty\n"), "n.md")
    assert "@@ -48,7 +48,7 @@\n" in diff
    assert _apply(long, diff) == long.replace("line 50\n", "fifty\n")


def test_a_huge_or_pathological_change_is_summarised_and_counting_is_linear() -> None:
    import random

    rng = random.Random(3)
    values = [f"line {i % 101}\n" for i in range(40_000)]
    shuffled = values[:]
    rng.shuffle(shuffled)
    diff = unified_diff("".join(values), "".join(shuffled), "big.md")
    assert diff.startswith("--- a/big.md\n+++ b/big.md\n(the diff is not shown: lines ")
    assert count_matches("a" * (4 << 20), "a" * (1 << 20)) == (0, 4)
