"""Links between notes, as the vault tools write and resolve them (the tool `notes_links` is in
fs_notes/tools/structure_tools.py; issue 14): what a note links to, read from its text alone.

A note's outgoing links are its wikilinks (`[[Note]]`, `[[Note|alias]]`, `[[Note#Heading]]`,
`[[Note^block]]`, embeds `![[Note]]`) and markdown links to notes (`[text](path/note.md)`,
percent-escapes decoded once), outside code (fenced, indented and `inline code`). A link
resolves the way the common vault tools resolve it: first as a path relative to the linking
note's folder (then to the workspace), with or without its `.md`; else, for a bare name, to the
one note of that file name anywhere in the workspace (case-insensitively; several: the one
whose path is shortest, then first by id). A link that resolves to nothing is reported as it was
written, unresolved. Backlinks are the notes whose links resolve to the note.

`links_of` returns the links as written, in order (`Link.target`; a `#Heading` part is kept as
`heading`); a URL (`http:`, `mailto:`, `file:`) or an anchor on the same page is not a link to a
note. Resolving needs the workspace's index, so it is not done here: it is
fs_notes/tools/link_resolution.py's `Resolver`, against the index's ids.

Guarantees: pure (a link is never opened, stat'ed or followed on disk: this module reads
nothing); work is bounded (`MAX_LINKS_PER_NOTE`; every pattern is linear on any line). Does not:
read links in front matter.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from .titles import front_matter_block, prose_lines

MAX_LINKS_PER_NOTE = 1000
_WIKI = re.compile(r"(!?)\[\[([^\[\]\n]{1,512})\]\]")
# Linear on any line: the link text holds brackets only as balanced pairs one deep (so a scan
# from a "[" stops at the next unpaired one), the target holds no bracket or parenthesis (so it
# stops at the next link), and every repeat is possessive (no backtracking over a run).
_MARKDOWN = re.compile(
    r"(!?)\[(?:[^\[\]\n]|\[[^\[\]\n]*+\])*+\]"
    r"\(\s*+<?([^()\[\]\s<>]{1,2048}+)>?(?:\s++\"[^\"]*+\")?\s*+\)"
)


@dataclass(frozen=True)
class Link:
    target: str  # as written (the note part)
    heading: str | None
    embed: bool


def links_of(text: str) -> list[Link]:
    """The links of a note's text, in order (outside code)."""
    _, body = front_matter_block(text)
    out: list[Link] = []
    for line in prose_lines(body, "["):
        found: list[tuple[int, Link]] = []
        for m in _WIKI.finditer(line):
            inner = m.group(2).split("|", 1)[0]
            note, _, rest = inner.partition("#")
            note = note.split("^", 1)[0].strip()
            if note:
                found.append((m.start(), Link(note, rest.strip() or None, m.group(1) == "!")))
        for m in _MARKDOWN.finditer(line):
            raw = m.group(2)
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", raw) or raw.startswith("#"):
                continue  # a URL (http:, mailto:, file:) or an anchor on the same page
            path, _, heading = raw.partition("#")
            path = urllib.parse.unquote(path)
            if path:
                link = Link(path, urllib.parse.unquote(heading) or None, m.group(1) == "!")
                found.append((m.start(), link))
        out += [link for _, link in sorted(found, key=lambda item: item[0])]
        if len(out) >= MAX_LINKS_PER_NOTE:
            return out[:MAX_LINKS_PER_NOTE]
    return out
