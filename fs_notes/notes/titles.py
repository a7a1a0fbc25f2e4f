"""A note's title (docs/interface.md): the front-matter ``title:``, else the first level-1
heading (ATX ``# Title`` or setext ``Title`` over ``===``), else the file name without ``.md``.

Why this order: a ``title:`` in front matter is the author saying what the note is called (the
vault tools and static site generators treat it so), while a heading is only the first line that
looks like one; a ``# Heading`` deep in the body must not beat it. Only level-1 headings count: a
note that opens with ``## Install`` is not called "Install".

The front matter is YAML between a first line ``---`` and a closing ``---`` or ``...``, read with a
real YAML parser (PyYAML's safe composer: folded and quoted scalars, comments, any key order),
after an optional byte-order mark. The title is the scalar exactly as written (``title: 2024-05``
is "2024-05", ``title: yes`` is "yes": no type guessing). A block that is not a YAML mapping, or
that fails to parse, is not front matter and is never an error: the headings are looked for from
the top. Headings inside front matter, fenced code blocks or indented code do not count.
Work is bounded: front matter up to ``MAX_FRONT_MATTER_CHARS``, headings in the first
``TITLE_SCAN_CHARS`` characters; aliases are never expanded (composing builds nodes, not values).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import yaml

MAX_TITLE_CHARS = 200
MAX_FRONT_MATTER_CHARS = 64 << 10
TITLE_SCAN_CHARS = 256 << 10
"""How much of a note is looked at for its title (also what is read of a note over the limit)."""

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
# No pattern here backtracks over a run of one character class (a line of 100,000 spaces is
# matched in one pass): trailing blanks and a closing "###" are removed in Python.
_ATX = re.compile(r" {0,3}#(?:[ \t]+(.*))?$")
_SETEXT_1 = re.compile(r" {0,3}=+[ \t]*$")
_BLOCK_START = re.compile(r" {0,3}(?:[#>]|[-*+][ \t]|\d{1,9}[.)][ \t]|<)")
_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"


def _front_matter_title(block: str) -> tuple[bool, str | None]:
    """(whether ``block`` is a YAML mapping, its ``title`` scalar if it has one)."""
    try:
        node = yaml.compose(block, Loader=_Loader)
    except (yaml.YAMLError, RecursionError, ValueError):
        return False, None
    if not isinstance(node, yaml.MappingNode):
        return False, None
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "title":
            if isinstance(value, yaml.ScalarNode) and value.tag != _NULL_TAG:
                title = " ".join(str(value.value).split())
                try:  # the pure-Python loader lets an escaped lone surrogate through
                    title.encode("utf-8")
                except UnicodeEncodeError:
                    return True, None
                return True, title or None
            return True, None
    return True, None


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(the front-matter title if any, the body after the front matter, BOM removed)."""
    block, body = front_matter_block(text)
    if block is None:
        return None, body
    is_mapping, title = _front_matter_title(block)
    if not is_mapping:
        return None, _without_bom(text)
    return title, body


def _without_bom(text: str) -> str:
    return text[1:] if text.startswith("\ufeff") else text


def front_matter_block(text: str) -> tuple[str | None, str]:
    """(the YAML between the opening and closing ``---`` lines, the body after it), or
    (None, the whole text) when the note does not open with a closed front-matter block."""
    text = _without_bom(text)
    if not text.startswith("---"):
        return None, text
    first_end = text.find("\n")
    if first_end < 0 or text[:first_end].rstrip() != "---":
        return None, text
    pos = first_end + 1
    limit = min(len(text), MAX_FRONT_MATTER_CHARS)
    while pos <= limit:
        end = text.find("\n", pos)
        line = text[pos : end if end >= 0 else len(text)]
        if line.rstrip() in ("---", "..."):
            return text[first_end + 1 : pos], text[end + 1 :] if end >= 0 else ""
        if end < 0:
            break
        pos = end + 1
    return None, text  # never closed (or too long): not front matter


def front_matter_node(text: str) -> yaml.MappingNode | None:
    """The front matter of `text` as a composed YAML mapping (never constructed: no alias is
    expanded, no type guessed), or None."""
    block, _ = front_matter_block(text)
    if block is None:
        return None
    try:
        node = yaml.compose(block, Loader=_Loader)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    return node if isinstance(node, yaml.MappingNode) else None


def _without_closing(text: str) -> str:
    """An ATX heading's text without trailing blanks and its closing sequence of #s (which
    counts only after a blank, or as the whole text: "# C#" is "C#")."""
    text = text.strip()
    bare = text.rstrip("#")
    if bare != text and (not bare or bare[-1] in " \t"):
        return bare.strip()
    return text


def _closes(fence: str, line: str) -> bool:
    """Whether ``line`` closes the code block ``fence`` opened (the same character, at least as
    many of it, nothing else)."""
    stripped = line.strip()
    return stripped.startswith(fence) and not stripped.strip(fence[0])


def first_heading(body: str) -> str | None:
    """The first level-1 ATX or setext heading of ``body`` outside code, cleaned; or None."""
    fence: str | None = None
    paragraph: list[str] = []
    for line in body[:TITLE_SCAN_CHARS].splitlines():
        if fence is not None:
            fence = None if _closes(fence, line) else fence
            continue
        opened = _FENCE.match(line)
        if opened:
            fence, paragraph = opened.group(1), []
            continue
        if not line.strip():
            paragraph = []
            continue
        if not paragraph and line.startswith(("    ", "\t")):
            continue  # indented code
        atx = _ATX.match(line)
        if atx:
            heading = _without_closing(atx.group(1) or "")
            if heading:
                return heading
            paragraph = []
            continue
        if paragraph and _SETEXT_1.match(line):
            heading = " ".join(" ".join(paragraph).split())
            if heading:
                return heading
            paragraph = []
            continue
        if paragraph or not _BLOCK_START.match(line):
            paragraph.append(line.strip())
        else:
            paragraph = []
    return None


def title_of(text: str, note_name: str) -> str:
    fm_title, body = split_front_matter(text)
    title = fm_title or first_heading(body)
    if not title:
        title = note_name[: -len(".md")] if note_name.endswith(".md") else note_name
    return title[:MAX_TITLE_CHARS]


MAX_HEADINGS = 500
_ANY_ATX = re.compile(r" {0,3}#{1,6}(?:[ \t]+(.*))?$")


def headings_of(body: str, limit: int = TITLE_SCAN_CHARS) -> list[str]:
    """The ATX headings (any level) of ``body`` outside fenced and indented code, cleaned, in
    order (at most ``MAX_HEADINGS``, in the first ``limit`` characters)."""
    out: list[str] = []
    fence: str | None = None
    previous_blank = True
    for line in body[:limit].splitlines():
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
        if atx:
            heading = _without_closing(atx.group(1) or "")
            if heading:
                out.append(heading[:MAX_TITLE_CHARS])
                if len(out) >= MAX_HEADINGS:
                    break
    return out


_INLINE_CODE = re.compile(r"`[^`\n]*`")


def prose_lines(body: str, needle: str) -> Iterator[str]:
    """The lines of ``body`` outside fenced and indented code that hold ``needle``, with their
    `inline code` blanked (what links.py and tags.py look for links and #tags in). Linear: a
    line without ``needle`` is only tested for a fence."""
    if needle not in body:
        return
    fence: str | None = None
    fences = "```" in body or "~~~" in body
    for line in body.splitlines():
        if fences and ("`" in line or "~" in line):
            marker = line.lstrip()[:3]
            if marker in ("```", "~~~"):
                fence = None if fence == marker else (fence or marker)
                continue
        if fence is not None or needle not in line or line.startswith(("    ", "\t")):
            continue
        yield _INLINE_CODE.sub(" ", line) if "`" in line else line
