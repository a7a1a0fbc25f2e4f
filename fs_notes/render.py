"""Names and titles made safe to show: the half of layer 1 that faces a person or a model.

A note is served under its exact name (``lexical.py``): a newline, a bidi override, a zero-width
space or an NFD accent are all valid in a Linux file name, and a shared notes folder is written by
people other than the one reading it. The danger is in how such a name *reads*, so every place that
puts a note id, a title or a client-supplied string into text a person or a model reads (the text
content of every tool, error messages, the delete form's message and option labels) goes through
``shown`` / ``shown_id``. The structured content keeps the exact id.

What it guarantees
  * ``shown`` never returns a character that is a control (Cc), a format character (Cf: the bidi
    marks, embeddings, overrides and isolates, the zero-width space and joiners, the BOM, tag
    characters), a line or paragraph separator, a space other than U+0020, a surrogate, a private
    use or unassigned code point, or one of the invisible letters and marks (Hangul fillers,
    variation selectors, COMBINING GRAPHEME JOINER, BRAILLE PATTERN BLANK, ...): each is written
    as an escape (``\\n``, ``\\t``, ``\\r``, ``\\u202e``, ``\\U000e0041``). ``\\`` itself is written
    ``\\\\``, so an escape in the output can always be told from the same characters in a name.
    So no name can start a new line, reorder the text around it, or hide a character. A
    combining mark at the very start (it would attach to the text before the name) or past the
    second in a row (stacks that draw over neighbouring lines) is escaped too.
  * ``isolated`` wraps a shown field that holds right-to-left letters in FIRST STRONG ISOLATE ...
    POP DIRECTIONAL ISOLATE (UAX #9), so a Hebrew or Arabic title cannot pull the text around it
    into its direction (``Plan א — ב/x.md`` would otherwise read as another option's
    label). These two marks are the only format characters the server itself ever emits, always
    as a balanced pair around one field; a name's own are escaped by ``shown``.
  * ``shown_id`` also writes a U+0020 space at either end of a path component as ``\\u0020``, so
    ``" plan.md"`` and ``"plan.md"`` do not look alike; ``/`` stays the separator.
  * ``skeleton`` maps names that look alike to one key (NFKC, case folding, invisible characters
    and combining marks dropped, the commonest cross-script homoglyphs folded), and
    ``spelled`` writes every non-ASCII character of a name as its escape: the delete form marks
    candidates whose ids or titles share a skeleton and spells their ids out, so two options never
    look identical.

What it does NOT guarantee
  * That look-alikes are all caught: ``skeleton`` folds NFKC, case, marks and a small table of
    Cyrillic/Greek letters that look Latin, not all of Unicode's confusables (TR39). Outside the
    delete form, look-alike names are shown as they are (escaped where invisible).
  * Anything about content: a note's body is returned as it is by ``notes_read``.
"""

from __future__ import annotations

import json
import unicodedata

__all__ = [
    "FSI",
    "PDI",
    "escaped_char",
    "isolated",
    "json_shown",
    "shown",
    "shown_id",
    "skeleton",
    "spelled",
]

# Categories that never show as themselves: controls, format characters (bidi, zero-width, BOM,
# tags), surrogates, private use, unassigned, line and paragraph separators, spaces but U+0020.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
# Letters and marks that render as nothing (or as a blank) although their category is visible.
_INVISIBLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u2800\u3164\uffa0"
    + "".join(chr(c) for c in range(0xFE00, 0xFE10))
    + "".join(chr(c) for c in range(0xE0100, 0xE01F0))
)
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
_MARKS = frozenset({"Mn", "Me"})
MAX_MARKS = 2
"""Combining marks in a row shown as they are (more are escaped: stacks that overdraw)."""
FSI, PDI = "\u2068", "\u2069"
_RTL = frozenset({"R", "AL"})
# Cross-script letters that look like Latin ones (a small, common subset of TR39's table).
_HOMOGLYPHS = str.maketrans(
    {
        "\u0430": "a", "\u0435": "e", "\u043e": "o", "\u0440": "p", "\u0441": "c",
        "\u0443": "y", "\u0445": "x", "\u0456": "i", "\u0458": "j", "\u0455": "s",
        "\u0501": "d", "\u051b": "q", "\u051d": "w", "\u04bb": "h", "\u0261": "g",
        "\u03bf": "o", "\u03b1": "a", "\u03bd": "v", "\u03c1": "p", "\u03b9": "i",
        "\u03ba": "k", "\u03c4": "t", "\u0131": "i", "\u0237": "j", "\u2010": "-",
        "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2212": "-", "\u0138": "k",
        "\u0432": "b", "\u043a": "k", "\u043c": "m", "\u043d": "h", "\u0442": "t",
        "\u0585": "o", "\u057d": "u", "\u0570": "h", "\u0566": "q",
        "\u2215": "/", "\u2044": "/", "\u29f8": "/", "\u2571": "/", "\u29f5": "\\",
        "\u2216": "\\", "\u2572": "\\", "\u01c0": "l", "\u05c0": "l", "\u0399": "l",
        "0": "o", "1": "l", "|": "l",
    }
)  # fmt: skip
# Latin look-alikes decided before case folding (which would make them differ): I/l, rn/m.
_BEFORE_FOLD = (("I", "l"), ("rn", "m"), ("vv", "w"))


def _hidden(char: str) -> bool:
    return char in _INVISIBLE or (char != " " and unicodedata.category(char) in _HIDDEN_CATEGORIES)


def escaped_char(char: str) -> str:
    """The escape ``shown`` writes for one character (``\\n``, ``\\u202e``, ``\\U000e0041``)."""
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _shown(text: str) -> str:
    out: list[str] = []
    marks = MAX_MARKS  # a mark at the start attaches to what precedes the name: escape it
    for c in text:
        if c == "\\" or _hidden(c):
            out.append(escaped_char(c))
            marks = MAX_MARKS
        elif unicodedata.category(c) in _MARKS:
            marks += 1
            out.append(escaped_char(c) if marks > MAX_MARKS else c)
        else:
            out.append(c)
            marks = 0
    return "".join(out)


def _plain(text: str) -> bool:
    """Nothing in ``text`` for ``_shown`` to escape (the fast path: ASCII-printable text)."""
    if text.isascii():
        return text.isprintable() and "\\" not in text
    return False


def shown(text: str, limit: int | None = None) -> str:
    """``text`` safe to put in a line a person reads: invisible characters and ``\\`` escaped,
    then cut to ``limit`` characters (with an ellipsis) if given."""
    out = text if _plain(text) else _shown(text)
    if limit is not None and len(out) > limit:
        return out[: limit - 1] + "\u2026"
    return out


def isolated(shown_text: str) -> str:
    """A field already ``shown``, wrapped in FSI ... PDI when it holds right-to-left letters."""
    if shown_text.isascii() or not any(
        unicodedata.bidirectional(c) in _RTL for c in shown_text
    ):
        return shown_text
    return FSI + shown_text + PDI


def _edges(component: str) -> str:
    body = component.strip(" ")
    if body == component:
        return component
    lead = len(component) - len(component.lstrip(" "))
    trail = len(component) - len(component.rstrip(" "))
    if not body:
        return "\\u0020" * len(component)
    return "\\u0020" * lead + body + "\\u0020" * trail


def shown_id(note_id: str, limit: int | None = None) -> str:
    """A note id (or folder) safe to show: ``shown`` per component, with spaces at either end of
    a component escaped too."""
    if _plain(note_id) and " " not in note_id:
        out = note_id  # the common case: printable ASCII without a space to mark
    else:
        out = "/".join(_edges(shown(part)) for part in note_id.split("/"))
    if limit is not None and len(out) > limit:
        return out[: limit - 1] + "\u2026"
    return out


def spelled(text: str) -> str:
    """``text`` with every character outside printable ASCII escaped: how the delete form spells
    out ids that look like another candidate's."""
    return "".join(c if " " <= c <= "~" and c != "\\" else escaped_char(c) for c in text)


def json_shown(text: str) -> str:
    """``text`` as a JSON string literal with no invisible character in it (each hidden one is
    a ``\\u`` escape of four hex digits, astral ones as surrogate pairs): what a model is shown
    where it must answer with the exact string, which ``json.loads`` of its answer gives back."""
    out = json.dumps(text, ensure_ascii=False)
    if out.isprintable() and not _INVISIBLE.intersection(out):
        return out
    parts = []
    for char in out:
        if _hidden(char):
            code = ord(char)
            if code > 0xFFFF:
                code -= 0x10000
                parts.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            else:
                parts.append(f"\\u{code:04x}")
        else:
            parts.append(char)
    return "".join(parts)


def skeleton(text: str) -> str:
    """A key shared by strings that look alike: NFKC, case-folded, invisible characters and
    combining marks dropped, common cross-script homoglyphs folded to Latin."""
    folded = unicodedata.normalize("NFKC", text)
    for before, after in _BEFORE_FOLD:
        folded = folded.replace(before, after)
    folded = folded.casefold()
    decomposed = unicodedata.normalize("NFD", folded)
    kept = "".join(
        c for c in decomposed if not _hidden(c) and unicodedata.category(c) not in ("Mn", "Me")
    )
    return kept.translate(_HOMOGLYPHS)
