"""A note's outline and its sections (issue 31): the ATX headings outside front matter and code,
each with its level, its path (its own text after those of the headings it is under, joined by
" / "), where its section starts in the note's UTF-8 bytes and how long it is; and the section
a client names by a heading's text or by such a path.

A section is the heading's line and everything below it up to the next heading of the same or a
higher level (a smaller number of #s), or the end of the note: what an author means by "the
section Plan", its subsections included. The lines are the note's own, split on LF only (a CR
before it belongs to the line; a form feed or U+2028 does not end one), so the offsets are
those of the file.

Guarantees: linear in the note's length (one pass over its lines, the heading patterns of
titles.py, which do not backtrack); at most `MAX_OUTLINE` headings are listed (`complete`
False after that); a name that fits no heading, or more than one, is an error that lists the
nearest headings, never a guess. Does not: treat setext headings (`Title` over `===`) as
sections, or HTML headings.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .titles import _ANY_ATX, _FENCE, MAX_TITLE_CHARS, _closes, _without_closing, front_matter_block

__all__ = ["MAX_OUTLINE", "Heading", "Outline", "SectionNotFound", "find_section", "outline_of"]

MAX_OUTLINE = 2000
#: Characters per token, for the estimate a client plans its reads by (about 4 for English
#: prose with the common tokenizers; an estimate, never a bound).
CHARS_PER_TOKEN = 4
SEPARATOR = " / "


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    path: tuple[str, ...]
    #: Byte offsets in the note: where the heading's line starts, and where its section ends.
    offset: int
    end: int
    #: Characters of the section (for the token estimate).
    chars: int

    @property
    def size(self) -> int:
        return self.end - self.offset

    @property
    def tokens(self) -> int:
        return -(-self.chars // CHARS_PER_TOKEN)

    def to_json(self) -> dict[str, object]:
        return {
            "level": self.level, "text": self.text, "path": SEPARATOR.join(self.path),
            "offset": self.offset, "size": self.size,
            "tokens": self.tokens,
        }  # fmt: skip


@dataclass(frozen=True)
class Outline:
    headings: tuple[Heading, ...]
    complete: bool


class SectionNotFound(ValueError):
    """No heading, or more than one, fits the name; `nearest`: headings' paths to offer."""

    def __init__(self, message: str, nearest: list[str]) -> None:
        super().__init__(message)
        self.nearest = nearest


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def outline_of(text: str) -> Outline:
    """The headings of `text`, with their sections (see the module docstring)."""
    found: list[tuple[int, str, int, int]] = []  # (level, text, byte offset, char offset)
    fence: str | None = None
    previous_blank = True
    complete = True
    body = front_matter_block(text)[1]  # (a suffix of text: after the front matter and BOM)
    char_pos = len(text) - len(body)
    pos = _bytes(text[:char_pos])
    for raw in body.split("\n"):
        line = raw[:-1] if raw.endswith("\r") else raw
        here, here_chars = pos, char_pos
        pos += len(raw.encode("utf-8", "surrogateescape")) + 1
        char_pos += len(raw) + 1
        if fence is not None:
            fence = None if _closes(fence, line) else fence
            continue
        opened = _FENCE.match(line)
        if opened:
            fence = opened.group(1)
            continue
        if previous_blank and line.startswith(("    ", "\t")):
            continue  # indented code
        previous_blank = not line.strip()
        atx = _ANY_ATX.match(line) if "#" in line else None
        if atx is None:
            continue
        heading = _without_closing(atx.group(1) or "")
        if not heading:
            continue
        if len(found) >= MAX_OUTLINE:
            complete = False
            break
        level = len(line.lstrip(" ")) - len(line.lstrip(" ").lstrip("#"))
        found.append((level, heading[:MAX_TITLE_CHARS], here, here_chars))
    total, total_chars = _bytes(text), len(text)
    ends = [(total, total_chars)] * len(found)
    open_ones: list[int] = []  # the headings whose section has not ended yet, outermost first
    paths: list[tuple[str, ...]] = []
    for i, (level, name, offset, chars_at) in enumerate(found):
        while open_ones and found[open_ones[-1]][0] >= level:
            ends[open_ones.pop()] = (offset, chars_at)
        paths.append((*(found[j][1] for j in open_ones), name))
        open_ones.append(i)
    headings = [
        Heading(level, name, paths[i], offset, ends[i][0], ends[i][1] - chars_at)
        for i, (level, name, offset, chars_at) in enumerate(found)
    ]
    return Outline(tuple(headings), complete)


def find_section(outline: Outline, name: str) -> Heading:
    """The one heading `name` names: its text, or its path (headings joined by "/" or " / ",
    from any ancestor down: "Plan/Week 1" is the "Week 1" under "Plan"). SectionNotFound if
    none or several fit."""
    wanted = name.strip()
    exact = [h for h in outline.headings if h.text == wanted]
    if len(exact) == 1:
        return exact[0]
    parts = tuple(p.strip() for p in wanted.split("/") if p.strip())
    by_path = [h for h in outline.headings if _ends_with(h.path, parts)] if parts else []
    if len(by_path) == 1:
        return by_path[0]
    many = by_path if len(by_path) > 1 else exact
    if many:
        paths = [SEPARATOR.join(h.path) for h in many[:10]]
        raise SectionNotFound(
            f"{len(many)} headings are named {wanted!r}: name one by its path", paths
        )
    every = [SEPARATOR.join(h.path) for h in outline.headings]
    names = {h.text: SEPARATOR.join(h.path) for h in outline.headings}
    close = difflib.get_close_matches(parts[-1] if parts else wanted, list(names), n=5)
    raise SectionNotFound(
        f"no heading {wanted!r} in the note", [names[c] for c in close] or every[:5]
    )


def _ends_with(path: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    """Whether `parts` names `path`: its last part is the heading, and the others are some of
    its ancestors, in order."""
    if not parts or path[-1] != parts[-1]:
        return False
    ancestors = iter(path[:-1])
    return all(any(a == p for a in ancestors) for p in parts[:-1])
