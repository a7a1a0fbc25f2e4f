"""Rewriting the wikilinks of one note's text that point to a moved note (notes_move, added
2026-12-01).

Guarantees: `relink(text, source, old_id, new_id, resolve)` changes only the note part of
wikilinks (`[[Note]]`, `[[Note|alias]]`, `[[Note#Heading]]`, `[[Note^block]]`, embeds
`![[Note]]`) outside fenced and indented code and `inline code`, in the body after any front
matter (the same places links.py reads links from), and only those whose note part resolves
(``resolve(source, part)``: fs_notes/tools/link_resolution.py's `Resolver` over the index as
it was before the move) to ``old_id``. The new note part is ``new_id``, a path from the workspace
root, without its `.md` when the old part had none; alias, heading and block parts are kept as
written. Every other byte is kept, line ends included. Pure: it reads and writes nothing.
Does not: rewrite markdown links (`[text](path.md)`: reported by notes_move, left as they are),
links in front matter, or check that the new text resolves to the moved note in every vault
tool (a relative link of the same name in the linking note's own folder would win there).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .links import _WIKI
from .titles import front_matter_block

__all__ = ["relink"]

_INLINE_CODE = re.compile(r"`[^`\n]*`")


def _new_part(part: str, new_id: str) -> str:
    if part.strip().lower().endswith(".md"):
        return new_id
    return new_id[:-3] if new_id.lower().endswith(".md") else new_id


def _relink_line(
    line: str, source: str, old_id: str, new_id: str, resolve: Callable[[str, str], str | None]
) -> tuple[str, int]:
    code = [m.span() for m in _INLINE_CODE.finditer(line)] if "`" in line else []
    out: list[str] = []
    pos = count = 0
    for m in _WIKI.finditer(line):
        start, end = m.span()
        if any(a < end and start < b for a, b in code):
            continue  # inside `inline code`
        inner = m.group(2)
        head, bar, alias = inner.partition("|")
        note_end = min((i for i in (head.find("#"), head.find("^")) if i >= 0), default=len(head))
        part = head[:note_end]
        if not part.strip() or resolve(source, part.strip()) != old_id:
            continue
        inner_start = m.start(2)
        out.append(line[pos:inner_start])
        out.append(_new_part(part, new_id) + head[note_end:] + bar + alias)
        pos = m.end(2)
        count += 1
    out.append(line[pos:])
    return "".join(out), count


def relink(
    text: str,
    source: str,
    old_id: str,
    new_id: str,
    resolve: Callable[[str, str], str | None],
) -> tuple[str, int]:
    """``text`` with its wikilinks to ``old_id`` pointing to ``new_id``, and how many changed."""
    _, body = front_matter_block(text)
    head = text[: len(text) - len(body)]
    if "[[" not in body:
        return text, 0
    out = [head]
    total = 0
    fence: str | None = None
    for line in body.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        marker = bare.lstrip()[:3]
        if marker in ("```", "~~~"):
            fence = None if fence == marker else (fence or marker)
            out.append(line)
            continue
        if fence is not None or "[[" not in bare or bare.startswith(("    ", "\t")):
            out.append(line)
            continue
        new, count = _relink_line(bare, source, old_id, new_id, resolve)
        out.append(new + line[len(bare) :])
        total += count
    return "".join(out), total
