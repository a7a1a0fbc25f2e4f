"""How a link resolves, by the rule in fs_notes/notes/links.py (the tool `notes_links` is in
structure_tools.py, notes_move's relinking in move_tool.py; issue 14). Here, not in
fs_notes/notes/, because `Resolver` queries the workspace's index.

Links are kept in the workspace's index (fs_notes/search/index.py, brought up to date first by
tools/indexed.py); backlinks are found among the links whose target has the note's file name.

Containment: links are resolved only against the index's ids, which the filesystem layer listed
(the same as notes_list): a link is never opened, stat'ed or followed on disk, so
`[x](../../outside/secret.md)` or a link to a symlinked note resolves to nothing. Work is bounded
(`MAX_LISTED`, `MAX_CANDIDATES`). Does not: resolve links to headings or blocks inside the target
(the `#Heading` part is kept as `heading`), or attachments that are not notes. Every note the
tools name in a result as existing (the note asked about, each resolved link, each backlink) is
re-checked through the filesystem layer first.
"""

from __future__ import annotations

import posixpath

from ..search.index import NoteIndex, stem_of

MAX_LISTED = 1000
MAX_CANDIDATES = 20_000  # links whose target has the note's file name, examined for backlinks


class Resolver:
    """Resolution against the index's ids (never the disk): `has(id)` and `named(stem)` (the
    ids of that case-folded file name, shortest path first, then by id)."""

    def __init__(self, index: NoteIndex) -> None:
        self._index = index

    def resolve(self, source: str, target: str) -> str | None:
        folder = posixpath.dirname(source)
        for base in (folder, ""):
            path = posixpath.normpath(posixpath.join(base, target)) if base else target
            path = path.lstrip("/") if base == "" else path
            if path.startswith("../") or path == ".." or path.startswith("/"):
                continue  # out of the workspace: resolves to nothing
            for candidate in (path, path + ".md"):
                if self._index.has(candidate):
                    return candidate
        if "/" not in target:
            named = self._index.named(stem_of(target))
            if named:
                return named[0]
        return None
