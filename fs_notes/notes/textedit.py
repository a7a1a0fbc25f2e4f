"""notes_edit's text operations, without I/O: exact replacements and the unified diff.

`apply_edits(text, edits)` applies every edit or none: each ``oldText`` must occur exactly once in
``text`` (the note as it is, not as earlier edits left it) and no two may overlap; otherwise
`EditRefused` says which edit (its index in ``edits``) and why, with how many times it matched.
`unified_diff` is difflib's, with the note id (made safe to show, `render.shown_id`) as both file
names and git's marker for a last line without a newline.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..render import shown_id

MAX_COUNTED = 1000
"""Matches are counted up to this (then reported as more than it)."""

Reason = Literal["empty", "notFound", "ambiguous", "overlaps"]


@dataclass(frozen=True)
class Edit:
    old: str
    new: str


class EditRefused(Exception):
    """An edit that cannot be applied; nothing was changed."""

    def __init__(self, index: int, reason: Reason, matches: int, other: int | None = None) -> None:
        self.index = index
        self.reason = reason
        self.matches = matches
        self.other = other  # "overlaps": the edit it overlaps
        super().__init__(self.describe())

    def describe(self) -> str:
        where = f"edits[{self.index}]"
        if self.reason == "empty":
            return f"{where}: oldText is empty; it must be text that occurs exactly once"
        if self.reason == "notFound":
            return f"{where}: oldText was not found (0 matches); it must occur exactly once"
        if self.reason == "ambiguous":
            count = f"more than {MAX_COUNTED}" if self.matches > MAX_COUNTED else self.matches
            return (
                f"{where}: oldText matches {count} times; it must occur exactly once "
                "(include more of the surrounding text)"
            )
        return f"{where}: oldText overlaps the text of edits[{self.other}]"


def count_matches(text: str, old: str, cap: int = MAX_COUNTED) -> tuple[int, int]:
    """(where ``old`` first occurs or -1, how many times it occurs: 0, 1, or, past one, the
    number of non-overlapping occurrences, at least 2, capped at ``cap`` + 1). Linear in
    ``text``: overlapping occurrences are not counted one by one (that was quadratic)."""
    first = text.find(old)
    if first < 0:
        return -1, 0
    if text.find(old, first + 1) < 0:
        return first, 1
    return first, min(cap + 1, max(2, text.count(old)))


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """``text`` with every edit applied (EditRefused, naming the first bad edit, otherwise)."""
    spans: list[tuple[int, int, int]] = []  # (start, end, index)
    for i, edit in enumerate(edits):
        if not edit.old:
            raise EditRefused(i, "empty", 0)
        at, n = count_matches(text, edit.old)
        if n != 1:
            raise EditRefused(i, "notFound" if n == 0 else "ambiguous", n)
        spans.append((at, at + len(edit.old), i))
    spans.sort()
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        if start < end:
            later, earlier = max(first, second), min(first, second)
            raise EditRefused(later, "overlaps", 1, earlier)
    out: list[str] = []
    pos = 0
    for start, end, i in spans:
        out += (text[pos:start], edits[i].new)
        pos = end
    out.append(text[pos:])
    return "".join(out)


NO_NEWLINE = "\\ No newline at end of file\n"


def _lines(text: str) -> list[str]:
    """``text`` cut after each "\\n" only (not at the other line breaks str.splitlines knows)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


MAX_DIFF_LINES = 5000
"""difflib is quadratic on some inputs: past this many changed lines (both sides, after the
common first and last lines are set aside) the diff is summarised instead."""
_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def unified_diff(before: str, after: str, note_id: str, context: int = 3) -> str:
    """The unified diff from ``before`` to ``after``, named a/<id> and b/<id>; "" if equal.
    Only the region between the common first and last lines is compared (with ``context``
    lines around it), so the work is bounded by what changed, and by `MAX_DIFF_LINES`."""
    name = shown_id(note_id, 300)
    old, new = _lines(before), _lines(after)
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    start = max(0, head - context)
    old_mid, new_mid = old[start : len(old) - tail], new[start : len(new) - tail]
    if len(old_mid) + len(new_mid) > MAX_DIFF_LINES + 2 * context:
        return (
            f"--- a/{name}\n+++ b/{name}\n(the diff is not shown: lines {head + 1} to "
            f"{len(old) - tail} of {len(old)} were replaced by {len(new) - tail - head} lines)\n"
        )
    keep = min(context, tail)  # context after the change, from the common tail
    old_mid += old[len(old) - tail : len(old) - tail + keep]
    new_mid += new[len(new) - tail : len(new) - tail + keep]
    lines = difflib.unified_diff(old_mid, new_mid, fromfile=f"a/{name}", tofile=f"b/{name}",
                                 n=context)  # fmt: skip
    out: list[str] = []
    for line in lines:
        out.append(_shifted(line, start))
        if not line.endswith("\n"):  # the last line of one side, without its newline
            out += ("\n", NO_NEWLINE)
    return "".join(out)


def _shifted(line: str, by: int) -> str:
    """A hunk header of the compared region, renumbered as lines of the whole note."""
    m = _HUNK.match(line)
    if m is None or by == 0:
        return line

    def at(number: str, count: str | None) -> str:
        n = int(number)
        return str(n + by if n or count != ",0" else by)

    old_at, new_at = at(m.group(1), m.group(2)), at(m.group(3), m.group(4))
    return f"@@ -{old_at}{m.group(2) or ''} +{new_at}{m.group(4) or ''} @@{line[m.end():]}"
