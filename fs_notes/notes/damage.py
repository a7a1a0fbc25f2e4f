"""Silent damage: what a rewrite of a note destroys without saying so (issue 30 item 3).

Models that rewrite a note "clip" it: the update keeps 3 lines of 200, drops the front matter or
the headings, or stands a placeholder where the text was ("... rest of the note unchanged ...").
`damage(old, new, limits)` compares the note's text before and after and names each kind of loss
it finds, with the figures a person needs to judge it; notes_update, notes_edit and notes_append
refuse a change with any (unless the caller says it means it: tools/versions.py), so the model
learns what it was about to do and the note is untouched.

What it finds
  * `shrinks`: the note loses more than `Limits.max_shrink` of its length (default half), for
    a note of at least `Limits.min_chars` characters (a short note may be rewritten freely);
  * `front-matter-lost`: the note had front matter (a YAML mapping between `---` lines) and
    the new text has none; `front-matter-broken`: the new text's front matter no longer parses
    as a YAML mapping (where the old one did);
  * `headings-lost`: of at least `Limits.min_headings` headings, more than
    `Limits.max_headings_lost` of them (default half) are gone (by their text, anywhere);
  * `placeholder`: a line the old text did not have that stands for text left out: a line of
    only `...` or `…`, `[truncated]`, `[...]`, or words such as "rest of the note unchanged",
    "remaining content omitted", "existing text here".

What it does not: judge whether the change is right (a person shortening their own note on
purpose passes `force`), look at links, tags or tasks, or catch a rewrite that keeps the
length and the headings but changes every sentence. No I/O (fs_notes/notes/ guarantees).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .titles import front_matter_block, front_matter_node, headings_of


@dataclass(frozen=True)
class Limits:
    """What a change may do without `force` (the policy's `[limits]` may set them)."""

    max_shrink: float = 0.5
    min_chars: int = 200
    max_headings_lost: float = 0.5
    min_headings: int = 2


@dataclass(frozen=True)
class Loss:
    """One kind of damage: a stable code and a sentence with the figures."""

    code: str
    detail: str


#: Lines that stand for text left out (compared as the stripped, case-folded line).
_PLACEHOLDER_LINE = re.compile(
    r"(?:\.{3,}|…+|\[(?:\.{3}|…|truncated|snip|omitted|cut)\]"
    r"|[-/#<!*\s(\[]*\.{3}\s*(?:rest|remaining|existing|unchanged|more|other|previous)\b.*)$"
)
_PLACEHOLDER_WORDS = re.compile(
    r"\b(?:(?:the\s+)?(?:rest|remainder)\s+of\s+(?:the\s+)?(?:note|file|document|content|text|"
    r"section|page)s?\s+(?:is\s+|are\s+|remains?\s+|stays?\s+)?(?:unchanged|the\s+same|omitted|"
    r"as\s+before|as\s+is|intact)"
    r"|(?:remaining|existing|previous|original|other|unchanged)\s+(?:content|text|notes?|"
    r"sections?|lines?)\s+(?:here|omitted|unchanged|continues?|goes\s+here|truncated|"
    r"left\s+out|not\s+shown)"
    r"|(?:content|text|output)\s+truncated)\b"
)


def _placeholders(old: str, new: str) -> list[str]:
    before = {line.strip().casefold() for line in old.splitlines()}
    found = []
    for line in new.splitlines():
        shown = line.strip()
        folded = shown.casefold()
        if not folded or folded in before or len(folded) > 200:
            continue
        if _PLACEHOLDER_LINE.fullmatch(folded) or _PLACEHOLDER_WORDS.search(folded):
            found.append(shown)
    return found


def _mapping(text: str) -> bool | None:
    """None without a front-matter block; else whether it parses as a YAML mapping."""
    block, _ = front_matter_block(text)
    if block is None:
        return None
    return front_matter_node(text) is not None


def damage(old: str, new: str, limits: Limits | None = None) -> list[Loss]:
    """Each kind of loss the change from `old` to `new` makes (see the module docstring), in
    a fixed order; [] when it makes none."""
    limits = limits or Limits()
    losses: list[Loss] = []
    if len(old) >= limits.min_chars and len(new) < len(old) * (1 - limits.max_shrink):
        lost = len(old) - len(new)
        losses.append(Loss("shrinks", f"the note would lose {lost * 100 // len(old)}% of its "
                           f"length ({len(old)} characters, then {len(new)})"))  # fmt: skip
    had, has = _mapping(old), _mapping(new)
    if had and has is None:
        losses.append(Loss("front-matter-lost", "the note's front matter (its properties) "
                           "would be gone"))  # fmt: skip
    elif had and has is False:
        losses.append(Loss("front-matter-broken", "the note's front matter would no longer "
                           "parse as YAML properties"))  # fmt: skip
    headings = headings_of(front_matter_block(old)[1])
    if len(headings) >= limits.min_headings:
        kept = set(headings_of(front_matter_block(new)[1]))
        gone = [h for h in headings if h not in kept]
        if len(gone) > len(headings) * limits.max_headings_lost:
            losses.append(Loss("headings-lost", f"{len(gone)} of the note's {len(headings)} "
                               f"headings would be gone (first: {gone[0]!r})"))  # fmt: skip
    placeholders = _placeholders(old, new)
    if placeholders:
        losses.append(Loss("placeholder", "the new text stands a placeholder where text was: "
                           f"{placeholders[0][:80]!r}"))  # fmt: skip
    return losses
