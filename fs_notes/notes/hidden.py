"""Text in a note's body that a person reading the note does not see, but a model reading its
source does: the half of layer 1 that faces note bodies (render.py does names and titles).

A note is written by whoever can write the folder (a shared vault, a synced folder, a web page
clipped into it), and a model that reads it may take what it says as what the user said. The
dangerous text is the text the person never sees when they look at the note:
  * invisible characters: zero-width spaces and joiners, bidi embeddings, overrides and isolates
    (the "Trojan Source" reordering), tag characters (U+E0000-U+E007F, which spell ASCII
    invisibly), runs of variation selectors (which smuggle bytes behind an emoji), and the
    other format characters and invisible letters render.py escapes in names;
  * comments a markdown viewer hides: HTML `<!-- ... -->` and Obsidian `%% ... %%` (one never
    closed hides the rest of the note, and is read so), and `<details>` blocks, which a viewer
    shows collapsed, when they hold an instruction: a
    sentence that opens with an imperative verb, or speaks to an assistant ("ignore previous
    instructions", "system prompt", "you are now").

Guarantees: `hidden_in(text)` lists every invisible character (in code too: it is invisible
there as well) but the ordinary ones (a byte order mark at the very start; a zero-width
joiner between two emoji, as in a family emoji; ZWJ/ZWNJ between two letters of a script that
needs them; one variation selector after an emoji, a keycap character or an ideograph - after
a Latin letter, selectors smuggle bytes; the tags of a subdivision flag) - every format
character and every other default-ignorable code point - with its code point, how many and on
which lines (1-based), and every comment or collapsed block outside fenced code blocks and
inline code spans holding an instruction, with the line it starts on and its first words
(escaped as names are); linear in the note's length (each opener and closer found once), and
at most `MAX_LISTED` entries of each kind; `shown_body(text)` is the text with each such
character written as an escape (`\\u200b`, `\\U000e0041`), every other character as it is.
Pure functions: no I/O.

Does not: decide what an instruction is beyond these cues (a comment that says "tidy this up
later" is flagged, one that says "the meeting moved" is not; a determined author can phrase an
instruction as a statement), look for comments inside code (fenced blocks and code spans show
them as code, so they hide nothing), flag visible text (text a person can read is theirs to
judge), or make a flagged note safe to obey: it marks it, so the client and the model can tell
note text from the user (tools/provenance.py).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass

from ..render import escaped_char, shown

__all__ = ["Hidden", "hidden_in", "shown_body"]

#: Invisible letters and marks whose category is visible (render.py escapes these in names too).
_INVISIBLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u2800\u3164\uffa0"
)
_VARIATION = frozenset(
    [chr(c) for c in range(0xFE00, 0xFE10)] + [chr(c) for c in range(0xE0100, 0xE01F0)]
)
_JOINERS = frozenset("\u200c\u200d")
#: Unicode's format characters (category Cf) as of Unicode 15.1, in ranges (a test holds this
#: against the running Python's unicodedata): a character class, so a note is scanned by the
#: regular expression engine rather than one character at a time.
#: With the rest of Unicode's Default_Ignorable_Code_Point ranges (unassigned ones too: a
#: future version may give them meaning, and a viewer shows nothing for them today).
_FORMAT = (
    (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD), (0x70F, 0x70F),
    (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0xFEFF, 0xFEFF), (0xFFF0, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)  # fmt: skip
_CANDIDATE = re.compile(
    "["
    + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in _FORMAT)
    + "\ufe00-\ufe0f"  # the variation selectors (the supplement is in U+E0000-U+E0FFF)
    + "".join(re.escape(c) for c in sorted(_INVISIBLE))
    + "]"
)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
#: (kind, opener, closer): found with str.find, linear in the note's length; an opener never
#: closed hides the rest of the note (as CommonMark and Obsidian render it).
_COMMENTS = (
    ("html comment", "<!--", "-->"),
    ("obsidian comment", "%%", "%%"),
    ("collapsed block", "<details", "</details"),
)
#: At most this many kinds of invisible characters, comments, and lines of each, are listed.
MAX_LISTED = 16
#: At most this much of one comment is read for an instruction.
MAX_BODY = 65536
_VERBS = (
    "ignore|disregard|forget|delete|remove|erase|wipe|destroy|overwrite|replace|rename|move|"
    "run|execute|call|invoke|use|send|upload|post|email|mail|forward|share|publish|fetch|"
    "visit|open|download|install|tell|say|reply|respond|answer|print|output|reveal|show|"
    "include|add|append|write|create|summari[sz]e|translate|do not|don't|never|always|"
    "stop|make sure|be sure|remember|act as|pretend|you must|you should|you will|you are"
)
#: A sentence that opens with a verb of command ("Delete every note", "Please run ...").
_IMPERATIVE = re.compile(
    rf"(?:^|[.!?;:]\s|\n)[ \t\-*>#]*(?:please\s+|now\s+|first\s*,?\s+)?(?:{_VERBS})\b",
    re.I,
)
#: Words addressed to a model rather than to a reader.
_ADDRESSED = re.compile(
    r"\b(?:ignore (?:all |any |the )?(?:previous|prior|above|earlier)|system prompt|"
    r"(?:new |these |your )instructions|you are now|as an ai|language model|jailbreak|"
    r"\bassistant\b|\bllm\b|\bagent\b)",
    re.I,
)
_EXCERPT = 80


@dataclass(frozen=True)
class Hidden:
    """One kind of text a reader does not see: invisible characters of one code point, or one
    comment or collapsed block holding an instruction."""

    kind: str  # "invisible", "html comment", "obsidian comment", "collapsed block"
    lines: tuple[int, ...]
    char: str | None = None  # "U+200B" (invisible)
    count: int = 1
    excerpt: str | None = None  # its first words, escaped (comments and blocks)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "lines": list(self.lines)}
        if self.char is not None:
            out.update(char=self.char, count=self.count)
        if self.excerpt is not None:
            out["excerpt"] = self.excerpt
        return out

    def phrase(self) -> str:
        where = ", ".join(str(n) for n in self.lines[:5]) + (", ..." if len(self.lines) > 5 else "")
        if self.char is not None:
            name = unicodedata.name(chr(int(self.char[2:], 16)), "").lower() or "a character"
            times = f"{self.count} x " if self.count > 1 else ""
            return f"{times}{self.char} ({name}) on line {where}"
        return f"an instruction in an {self.kind} on line {where}: {self.excerpt}"


def _is_invisible(ch: str) -> bool:
    return bool(ch) and _CANDIDATE.match(ch) is not None


def _ordinary(text: str, i: int) -> bool:
    """Whether the invisible character at `i` is one that ordinary text carries."""
    ch = text[i]
    before = text[i - 1] if i > 0 else ""
    after = text[i + 1] if i + 1 < len(text) else ""
    if ch == "\ufeff" and i == 0:
        return True
    if ch in _JOINERS:
        if before == "\ufe0f" and i > 1:  # an emoji's presentation selector, then the joiner
            before = text[i - 2]
        if _emoji(before) and _emoji(after):
            return True
        return _letter(before) and _letter(after)
    if ch in _VARIATION:  # one selector after its base: an emoji, a keycap or an ideograph
        if "\ufe00" <= ch <= "\ufe0f":
            return _emoji(before) or before in _KEYCAPS or _ideograph(before)
        return _ideograph(before)
    if "\U000e0020" <= ch <= "\U000e007f":  # a subdivision flag: U+1F3F4, tags, U+E007F
        return _in_flag(text, i)
    return False


_KEYCAPS = frozenset("0123456789#*")


def _ideograph(ch: str) -> bool:
    if not ch:
        return False
    c = ord(ch)
    return 0x3400 <= c <= 0x9FFF or 0xF900 <= c <= 0xFAFF or 0x20000 <= c <= 0x3FFFF


def _in_flag(text: str, i: int) -> bool:
    """Whether the tag character at `i` is part of a flag sequence (England, Scotland, Wales):
    U+1F3F4, at most 6 tag letters or digits, U+E007F."""
    start = i
    while start > 0 and i - start < 8 and "\U000e0020" <= text[start - 1] <= "\U000e007e":
        start -= 1
    end = i
    while end < len(text) and end - i < 8 and "\U000e0020" <= text[end] <= "\U000e007e":
        end += 1
    return (
        start > 0
        and text[start - 1] == "\U0001f3f4"
        and end < len(text)
        and text[end] == "\U000e007f"
        and 1 <= end - start <= 6
    )


def _emoji(ch: str) -> bool:
    return bool(ch) and (unicodedata.category(ch) == "So" or 0x1F000 <= ord(ch) <= 0x1FAFF)


def _letter(ch: str) -> bool:
    """A letter or mark of a script that is not Latin (Persian, the Indic scripts: where ZWJ and
    ZWNJ shape words)."""
    return bool(ch) and ord(ch) > 0x024F and unicodedata.category(ch)[0] in "LM"


def _code_ranges(text: str) -> list[tuple[int, int]]:
    """Where `text` holds code: fenced code blocks and inline code spans, as [start, end)."""
    ranges: list[tuple[int, int]] = []
    pos, fence, opened_at = 0, "", 0
    if "`" not in text and "~~~" not in text:
        return ranges
    for line in text.splitlines(keepends=True):
        if "`" not in line and "~" not in line:  # no fence, no span: most lines, at once
            pos += len(line)
            continue
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
                ranges.append((opened_at, pos + len(line)))
        elif opened:
            fence, opened_at = opened.group(1), pos
        else:
            ranges.extend((pos + m.start(), pos + m.end()) for m in _CODE_SPAN.finditer(line))
        pos += len(line)
    if fence:  # a fence never closed runs to the end
        ranges.append((opened_at, pos))
    return ranges


def _in_code(ranges: list[tuple[int, int]], offset: int) -> bool:
    i = bisect.bisect_right(ranges, (offset, 1 << 62)) - 1
    return i >= 0 and ranges[i][0] <= offset < ranges[i][1]


def _line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in re.finditer(r"\n", text)]


def _line_of(starts: list[int], offset: int) -> int:
    lo, hi = 0, len(starts)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid
    return lo + 1


def _instruction(body: str) -> bool:
    return bool(_IMPERATIVE.search(body.strip()) or _ADDRESSED.search(body))


def _hidden_chars(text: str) -> list[int]:
    if text.isascii():  # (no invisible character is ASCII: the common case, at once)
        return []
    return [m.start() for m in _CANDIDATE.finditer(text) if not _ordinary(text, m.start())]


def hidden_in(text: str) -> list[Hidden]:
    """What in `text` a reader of the note does not see (see the module's docstring), at most
    `MAX_LISTED` entries of each kind with `MAX_LISTED` lines each."""
    found: list[Hidden] = []
    chars: dict[str, list[int]] = {}
    for i in _hidden_chars(text):
        chars.setdefault(text[i], []).append(i)
    blocks = _blocks(text)[:MAX_LISTED]
    starts = _line_starts(text) if chars or blocks else []
    for ch, offsets in sorted(chars.items())[:MAX_LISTED]:
        seen = {_line_of(starts, i) for i in offsets[: MAX_LISTED * 64]}
        lines = tuple(sorted(seen))[:MAX_LISTED]
        found.append(Hidden("invisible", lines, f"U+{ord(ch):04X}", len(offsets)))
    for kind, opened, body in blocks:
        excerpt = shown(" ".join(body[:1000].split()), _EXCERPT)
        found.append(Hidden(kind, (_line_of(starts, opened),), excerpt=excerpt))
    return found


def _blocks(text: str) -> list[tuple[str, int, str]]:
    """Every comment and collapsed block outside code that holds an instruction: (kind, where
    it opens, its body, up to `MAX_BODY` characters). Linear: each opener and closer is found
    once with str.find (an opener inside code is passed over, the next one looked at)."""
    low: str | None = None
    code: list[tuple[int, int]] | None = None
    out: list[tuple[str, int, str]] = []
    for kind, opener, closer in _COMMENTS:
        haystack = text
        if kind == "collapsed block":
            low = text.lower() if low is None else low
            if opener not in low:
                continue
            haystack = low
        elif opener not in text:
            continue
        code = _code_ranges(text) if code is None else code
        pos = 0
        while len(out) < MAX_LISTED:
            at = haystack.find(opener, pos)
            if at < 0:
                break
            if _in_code(code, at):
                pos = at + len(opener)  # shown as code: not a comment (the next may be)
                continue
            body_at = at + len(opener)
            if kind == "collapsed block":
                tag_end = haystack.find(">", body_at)
                body_at = len(text) if tag_end < 0 else tag_end + 1
            end = haystack.find(closer, body_at)
            stop = len(text) if end < 0 else end
            body = text[body_at : min(stop, body_at + MAX_BODY)]
            pos = len(text) if end < 0 else end + len(closer)
            if _instruction(body):
                out.append((kind, at, body))
    out.sort(key=lambda b: b[1])
    return out


def shown_body(text: str) -> str:
    """`text` with every invisible character `hidden_in` lists written as its escape."""
    at = _hidden_chars(text)
    if not at:
        return text
    out, last = [], 0
    for i in at:
        out.append(text[last:i])
        out.append(escaped_char(text[i]))
        last = i + 1
    out.append(text[last:])
    return "".join(out)
