"""notes_list, notes_read and notes_search: read-only tools over one workspace.

Every id and title put into text content goes through `fs_notes.render` (the structured content
keeps the exact id). A note over its workspace's read limit is still listed (flagged `tooLarge`,
its title taken from its first bytes) and found by title; `notes_read` serves it in parts
(`offset`/`length`, in bytes, cut to whole UTF-8 characters) and refuses a whole read with a
message that names the limit.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ..fs import FsError
from ..notes.properties import aliases_of, properties_of
from ..notes.tags import tags_of
from ..policy import READ_LIMIT_RANGE
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import isolated, shown, shown_id
from .context import NotesEnv, Opened, Skipped, ToolFailure, fs_message, guarded
from .indexed import current
from .loading import load_note, whole_utf8
from .notecache import CachedNote
from .outline_tools import SECTION_ARG, read_section
from .provenance import mark, note_origin, result_meta
from .registry import NOTE_ID, WORKSPACE_URI, ToolSpec
from .versions import load_current

LIST_PAGE_DEFAULT = 100
LIST_PAGE_MAX = 1000
SEARCH_LIMIT_DEFAULT = 20
SEARCH_LIMIT_MAX = 100
MIN_PART = 4  # bytes: one whole UTF-8 character always fits, so nextOffset always moves on
MAX_OFFSET = (1 << 62) - 1


def iso_time(ns: int) -> str:
    return (
        datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def too_large(note_id: str, size: int, limit: int) -> str:
    """The refusal of a whole read of a note over the read limit: what to do instead."""
    return (
        f"{shown_id(note_id, 300)} is {_size(size)} ({size} bytes), above this workspace's read "
        f"limit of {limit} bytes: read it in parts with offset (a byte offset, from 0) and "
        f"length (at most {limit} bytes)"
    )


def _encode_cursor(after: str) -> str:
    raw = json.dumps({"after": after}, ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_value(cursor: str) -> object:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        return json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        raise ToolFailure("invalid cursor: pass back the nextCursor of a previous page") from None


def _decode_cursor(cursor: str) -> str:
    value = _cursor_value(cursor)
    if not isinstance(value, dict) or not isinstance(value.get("after"), str):
        raise ToolFailure("invalid cursor: pass back the nextCursor of a previous page")
    return str(value["after"])


def _encode_recent_cursor(mtime_ns: int, after: str) -> str:
    raw = json.dumps({"recent": [mtime_ns, after]}, ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_recent_cursor(cursor: str) -> tuple[int, str]:
    """(modification time, id) of the last note of the previous newest-first page."""
    value = _cursor_value(cursor)
    last = value.get("recent") if isinstance(value, dict) else None
    if not (isinstance(last, list) and len(last) == 2 and isinstance(last[0], int)
            and not isinstance(last[0], bool) and isinstance(last[1], str)):  # fmt: skip
        raise ToolFailure("invalid cursor: pass back the nextCursor of a previous page")
    return int(last[0]), str(last[1])


_FOLDER_ARG: dict[str, Any] = {
    "type": "string",
    "maxLength": 4096,
    "description": "Only notes beneath this folder (relative to the workspace)",
}


class NotesList:
    """notes_list: the notes of a workspace (or a folder of it), a page at a time."""

    def __init__(self, env: NotesEnv) -> None:
        self.env = env

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_list",
            title="List notes",
            description="List the markdown notes in a workspace (id, title, size, modified), "
            "sorted by id, one page at a time.",
            properties={
                "workspaceUri": WORKSPACE_URI,
                "folder": _FOLDER_ARG,
                "cursor": {
                    "type": "string",
                    "maxLength": 8192,
                    "description": "nextCursor from the previous page",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": LIST_PAGE_MAX,
                    "description": f"Page size (default {LIST_PAGE_DEFAULT})",
                },
                "recent": {
                    "type": "boolean",
                    "description": "Newest first (by modification time): what changed recently",
                },
            },
            required=(),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        ws = env.open(call, args.get("workspaceUri"), "read")
        folder = env.folder(args.get("folder", ""))
        limit = int(args.get("limit", LIST_PAGE_DEFAULT))
        recent = args.get("recent") is True
        skipped = Skipped()
        try:
            if recent:  # newest first: every note is listed, then sorted (by time, then id)
                entries = _newest_first(env.notes(ws, folder, skipped=skipped), args, limit)
            else:  # ids come in order and the walk skips what lies before the cursor: O(page)
                after = _decode_cursor(args["cursor"]) if "cursor" in args else None
                listing = env.notes(ws, folder, after=after, skipped=skipped)
                entries = list(itertools.islice(listing, limit + 1))
        except FsError as exc:
            raise ToolFailure(fs_message(exc, folder or "(workspace root)")) from None
        page, more = entries[:limit], len(entries) > limit
        notes = []
        lines = []
        for note_id, st in page:
            try:
                note = load_note(env, ws, note_id, st, need_text=False)
            except FsError:  # vanished or replaced since the listing, or unreadable: counted
                skipped["unreadable"] += 1
                continue
            entry: dict[str, Any] = {
                "id": note_id,
                "title": note.title,
                "size": st.st_size,
                "modified": iso_time(st.st_mtime_ns),
            }
            line = f"- {isolated(shown_id(note_id))}: {isolated(shown(note.title))}"
            if note.large:
                entry["tooLarge"] = True
                line += f" ({_size(st.st_size)}: over the read limit, read it in parts)"
            notes.append(entry)
            lines.append(line)
        structured: dict[str, Any] = {"notes": notes}
        if more and page:
            last_id, last_st = page[-1]
            structured["nextCursor"] = (
                _encode_recent_cursor(last_st.st_mtime_ns, last_id)
                if recent
                else _encode_cursor(last_id)
            )
        if skipped:
            structured["skipped"] = skipped.to_json()
            counts = ", ".join(f"{n} {why}" for why, n in structured["skipped"].items())
            lines.append(f"(not served: {counts})")
        if not notes:
            lines.insert(0, "(no notes)")
        if "nextCursor" in structured:
            lines.append(f"(more: call again with cursor {structured['nextCursor']})")
        return CallToolResult(
            content=[TextContent(text="\n".join(lines))], structured_content=structured
        ).wire()


class NotesRead:
    """notes_read: one note's text (or a part of it) with its version."""

    def __init__(self, env: NotesEnv) -> None:
        self.env = env

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_read",
            title="Read a note",
            description="Read one note's markdown content by id (whole, one section by its "
            "heading, or a part of it with offset and length in bytes). A whole read also gives "
            "the note's tags, aliases and front-matter properties.",
            properties={
                "workspaceUri": WORKSPACE_URI,
                "id": NOTE_ID,
                "section": SECTION_ARG,
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_OFFSET,
                    "description": "Read a part: the first byte (default 0). For notes over "
                    "the workspace's read limit, which cannot be read whole.",
                },
                "length": {
                    "type": "integer",
                    "minimum": MIN_PART,
                    "maximum": READ_LIMIT_RANGE[1],
                    "description": "Read a part: how many bytes (default and most: the "
                    "workspace's read limit, 4 MiB unless its policy says otherwise).",
                },
            },
            required=("id",),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        ws = env.open(call, args.get("workspaceUri"), "read")
        note_id = env.note_id(args["id"])
        try:  # the identity first, so a cached title and text (or a large note's title) serve
            note = load_note(env, ws, note_id, ws.root.stat_note(note_id))
        except FsError as exc:
            raise ToolFailure(fs_message(exc, note_id)) from None
        if "section" in args:
            if "offset" in args or "length" in args:
                raise ToolFailure("notes_read takes section or offset/length, not both")
            found, part = read_section(ws, note_id, args["section"])
            return _note_text(env, call, ws, note_id, note.key, part, found)
        if "offset" in args or "length" in args:
            return _read_part(env, call, ws, note_id, note, args)
        if note.large:
            raise ToolFailure(too_large(note_id, note.key[2], ws.workspace.read_limit))
        data, version = _versioned_text(ws, note_id, note)
        properties = properties_of(data)
        structured: dict[str, Any] = {"id": note_id, "title": note.title, "content": data,
                      "tags": tags_of(data), "aliases": aliases_of(properties),
                      "properties": properties, "version": version}  # fmt: skip
        version_line = _version_line(version)
        return _note_text(env, call, ws, note_id, note.key, data, structured, version_line)


class NotesSearch:
    """notes_search: the workspace's notes ranked for a query (fs_notes/search/)."""

    def __init__(self, env: NotesEnv) -> None:
        self.env = env

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_search",
            title="Search notes",
            description="Ranked full-text search of note titles, aliases, tags, file names, "
            "headings and bodies: a note whose title, file name or alias is the query first, "
            "then by relevance (any of the words; "
            '"quoted phrases"; the last word may be unfinished), each with a snippet in which '
            "the matched words are marked **like this**.",
            properties={
                "workspaceUri": WORKSPACE_URI,
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 256,
                    "description": "Words to look for (case and accents do not matter)",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": SEARCH_LIMIT_MAX,
                    "description": f"Most matches to return (default {SEARCH_LIMIT_DEFAULT})",
                },
                "folder": _FOLDER_ARG,
                "tag": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 129,
                    "description": "Only notes with this tag, or one nested in it",
                },
                "cursor": {
                    "type": "string",
                    "maxLength": 16,
                    "description": "The nextCursor of an earlier search with the same query",
                },
            },
            required=("query",),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        """Ranked full-text search (fs_notes/search/index.py): the index is refreshed from the
        filesystem layer's listing first, and every hit is checked again through it."""
        ws = env.open(call, args.get("workspaceUri"), "read")
        query = args["query"].strip()
        if not query:
            raise ToolFailure("query must not be blank")
        limit = int(args.get("limit", SEARCH_LIMIT_DEFAULT))
        folder = env.folder(args.get("folder", ""))
        offset = _search_offset(args.get("cursor"))
        indexed = current(env, ws)  # the whole workspace: a folder narrows the search only
        tag = str(args.get("tag", "")).lstrip("#")
        with indexed.answering():
            hits = indexed.index.search(
                query, limit=limit + 1, offset=offset, folder=folder, tag=tag
            )
            kept = [
                hit for hit in hits[:limit] if indexed.recheck(hit.id, hit.key)
            ]  # a cache: the filesystem layer decides
            matches: list[dict[str, Any]] = [
                {"id": hit.id, "title": hit.title, "snippet": hit.snippet,
                 "score": round(-hit.score, 4)}
                for hit in kept
            ]  # fmt: skip
            origins = [note_origin(env.journals, ws.workspace.name, hit.id,
                                   tuple(int(n) for n in hit.key.split(":")))
                       for hit in kept]  # fmt: skip
        for origin, match in zip(origins, matches, strict=True):
            snippet = mark(match["id"], match["snippet"])  # (shown escaped in the text below)
            if snippet.hidden:
                origin["hidden"] = snippet.to_json()
                env.read_hidden(call.principal.name, ws)
        structured: dict[str, Any] = {"matches": matches}
        if len(hits) > limit:
            structured["nextCursor"] = str(offset + limit)
        lines = [
            f"- {isolated(shown_id(m['id']))} ({isolated(shown(m['title']))}): "
            f"{isolated(shown(m['snippet']))}"
            for m in matches
        ] or ["(no matches)"]
        if indexed.partial is not None:  # another server is building the index: what it has
            done, total = indexed.partial.indexed, indexed.partial.total
            structured.update(indexed=done, total=total)
            lines.append(f"(searched {done} of {total} notes: another fs-notes server is "
                         "indexing this folder; search again for the rest)")  # fmt: skip
        return CallToolResult(
            content=[TextContent(text="\n".join(lines))],
            structured_content=structured,
            meta=result_meta(origins),
        ).wire()


def _newest_first(
    listing: Iterator[tuple[str, os.stat_result]], args: dict[str, Any], limit: int
) -> list[tuple[str, os.stat_result]]:
    """One newest-first page (and one more entry, if there is one) of `listing`."""
    ordered = sorted(listing, key=lambda item: (-item[1].st_mtime_ns, item[0]))
    if "cursor" in args:
        mtime, after = _decode_recent_cursor(args["cursor"])
        ordered = [e for e in ordered if (-e[1].st_mtime_ns, e[0]) > (-mtime, after)]
    return ordered[: limit + 1]


MAX_SEARCH_OFFSET = 10_000


def _search_offset(cursor: object) -> int:
    if cursor is None:
        return 0
    if not (isinstance(cursor, str) and cursor.isdigit() and int(cursor) <= MAX_SEARCH_OFFSET):
        raise ToolFailure("invalid cursor: pass the nextCursor of an earlier search")
    return int(cursor)


def _versioned_text(ws: Opened, note_id: str, note: CachedNote) -> tuple[str, str]:
    """The note's text and its version (fs/version.py), from one read: the cached text with
    the version of the bytes it came from, else the bytes read again (a note whose text the
    cache does not keep). Never a second open of what was just read: a FIFO would block it."""
    if note.text is not None and note.version is not None:
        return note.text, note.version
    try:
        current = load_current(ws, note_id)
    except FsError as exc:  # TooLarge too: it grew past the limit since it was looked at
        raise ToolFailure(fs_message(exc, note_id)) from None
    return current.data.decode("utf-8", errors="replace"), current.version


def _version_line(version: str) -> str:
    return (
        f"(version {version}: pass it as expectedVersion to notes_update, notes_append, "
        "notes_edit or notes_move, so that they refuse if the note changes meanwhile)"
    )


def _read_part(
    env: NotesEnv, call: Call, ws: Opened, note_id: str, note: CachedNote, args: dict[str, Any]
) -> dict[str, Any]:
    """notes_read with offset/length: whole UTF-8 characters from the asked byte range."""
    limit = ws.workspace.read_limit
    offset, length = int(args.get("offset", 0)), int(args.get("length", limit))
    if length > limit:
        raise ToolFailure(f"length must be at most this workspace's read limit of {limit} bytes")
    try:
        data, ident = ws.root.read_part(note_id, offset, length)
    except FsError as exc:
        raise ToolFailure(fs_message(exc, note_id)) from None
    if offset > ident.size:
        raise ToolFailure(
            f"offset {offset} is past the end of {shown_id(note_id, 300)} ({ident.size} bytes)"
        )
    at_end = offset + len(data) >= ident.size
    start, end = whole_utf8(data, at_start=offset == 0, at_end=at_end)
    text = data[start:end].decode("utf-8", errors="replace")
    structured: dict[str, Any] = {
        "id": note_id,
        "title": note.title,
        "content": text,
        "offset": offset + start,
        "length": end - start,
        "size": ident.size,
    }
    if offset + end < ident.size:
        structured["nextOffset"] = offset + end
    return _note_text(env, call, ws, note_id, tuple(ident), text, structured)


def _note_text(
    env: NotesEnv,
    call: Call,
    ws: Opened,
    note_id: str,
    key: tuple[int, ...],
    text: str,
    structured: dict[str, Any],
    *after: str,
) -> dict[str, Any]:
    """A result carrying a note's text, marked as such (tools/provenance.py): its origin in
    `_meta`, hidden text flagged and its invisible characters escaped in the text content."""
    marked = mark(note_id, text)
    origin = note_origin(env.journals, ws.workspace.name, note_id, key)
    lines = [marked.text, *after]
    if marked.hidden:
        structured["hidden"] = origin["hidden"] = marked.to_json()
        lines.append(marked.notice() or "")
        env.read_hidden(call.principal.name, ws)
    return CallToolResult(
        content=[TextContent(text=line) for line in lines],
        structured_content=structured,
        meta=result_meta([origin]),
    ).wire()
