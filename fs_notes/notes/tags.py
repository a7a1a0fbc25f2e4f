"""Tags, as the vault tools have them: `tags:` in front matter and inline `#tags` (issue 14).

A note's tags are the front-matter `tags` (or `tag`) key, a YAML list or a string of names
separated by commas or spaces, with any leading `#` dropped, and every inline `#tag` in the body
outside code (fenced blocks, indented blocks and `inline code`), at the start of a line or after
white space (as Obsidian has it: so never part of a word, of a link's target `](#section)` or of a
URL fragment), not a heading marker, and not on a link reference definition line
(`[label]: #section`). A tag is letters, digits, `_`, `-` and `/` (nesting: `#a/b`), with at
least one character that is not a digit (`#2024` is not a tag). Tags compare case-insensitively
and are shown as first met.

`notes_tags` (fs_notes/tools/structure_tools.py) lists them with counts, or, given a tag, the
notes that carry it (a nested tag's parent counts its children: `#project` finds
`#project/alpha`). Tags are kept in the workspace's index (fs_notes/search/index.py), brought up
to date from the same listing and the same filesystem layer as `notes_list` and `notes_read`
first (fs_notes/tools/indexed.py); each note listed for a tag, and each behind a count, is
re-checked through the filesystem layer. This module only reads tags from a note's text: pure.

Guarantees: work is bounded (at most `MAX_TAGS_PER_NOTE` per note, `MAX_TAG_CHARS` each; the front
matter is composed, never constructed). Does not: read tags from notes over their workspace's
read limit.
"""

from __future__ import annotations

import re

import yaml

from .titles import front_matter_block, front_matter_node, prose_lines

MAX_TAGS_PER_NOTE = 200
MAX_TAG_CHARS = 128
_TAG = re.compile(r"(?:^|(?<=\s))#([\w/-]{1,128})", re.UNICODE)
_LINK_DEFINITION = re.compile(r" {0,3}\[[^\]]+\]:\s")
_SEPARATORS = re.compile(r"[,\s]+")


def valid_tag(tag: str) -> str | None:
    tag = tag.strip().lstrip("#").strip("/")
    if not tag or len(tag) > MAX_TAG_CHARS or tag.isdigit():
        return None
    if not re.fullmatch(r"[\w/-]+", tag) or all(c.isdigit() or c in "/-_" for c in tag):
        return None
    return tag


def _front_matter_tags(text: str) -> list[str]:
    node = front_matter_node(text)
    if node is None:
        return []
    out: list[str] = []
    for key, value in node.value:
        if not (isinstance(key, yaml.ScalarNode) and key.value in ("tags", "tag")):
            continue
        if isinstance(value, yaml.SequenceNode):
            names = [v.value for v in value.value if isinstance(v, yaml.ScalarNode)]
        elif isinstance(value, yaml.ScalarNode):
            names = _SEPARATORS.split(value.value)
        else:
            names = []
        out += [t for t in (valid_tag(str(n)) for n in names) if t is not None]
    return out


def _inline_tags(body: str) -> list[str]:
    out: list[str] = []
    for line in prose_lines(body, "#"):
        if _LINK_DEFINITION.match(line):
            continue
        for m in _TAG.finditer(line):
            tag = valid_tag(m.group(1))
            if tag is not None:
                out.append(tag)
    return out


def tags_of(text: str) -> list[str]:
    """The note's tags, each once (case-insensitively), front matter first."""
    _, body = front_matter_block(text)
    seen: dict[str, str] = {}
    for tag in _front_matter_tags(text) + _inline_tags(body):
        seen.setdefault(tag.casefold(), tag)
        if len(seen) >= MAX_TAGS_PER_NOTE:
            break
    return list(seen.values())
