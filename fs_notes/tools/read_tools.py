"""notes_list, notes_read and notes_search: read-only tools over one workspace."""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import os
from datetime import UTC, datetime
from typing import Any

from ..fs import FsError, Identity
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from .context import NotesEnv, Opened, ToolFailure, fs_message, guarded
from .notecache import CachedNote
from .registry import NOTE_ID, WORKSPACE_URI, ToolSpec
from .titles import title_of

MAX_NOTE_BYTES = 4 << 20
LIST_PAGE_DEFAULT = 100
LIST_PAGE_MAX = 1000
SEARCH_LIMIT_DEFAULT = 20
SEARCH_LIMIT_MAX = 100
SNIPPET_CHARS = 160


def iso_time(ns: int) -> str:
    return (
        datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def _key(ident: Identity) -> tuple[int, int, int, int, int]:
    return (ident.dev, ident.ino, ident.size, ident.mtime_ns, ident.ctime_ns)


def stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """The identity of a listed note as a cache key (the fields of ``Identity.of(st)``)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def load_note(env: NotesEnv, ws: Opened, note_id: str, st: os.stat_result | None) -> CachedNote:
    """The cached title/text of a note, (re)reading it through the root handle when needed."""
    if st is not None:
        hit = env.cache.get(ws.workspace.name, note_id, stat_key(st))
        if hit is not None and hit.text is not None:
            return hit
    data, ident = ws.root.read_note(note_id, max_bytes=MAX_NOTE_BYTES)
    text = data.decode("utf-8", errors="replace")
    return env.cache.put(
        ws.workspace.name, note_id, _key(ident), title_of(text, note_id.rsplit("/", 1)[-1]), text
    )


def _encode_cursor(after: str) -> str:
    raw = json.dumps({"after": after}, ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        raise ToolFailure("invalid cursor: pass back the nextCursor of a previous page") from None
    if not isinstance(value, dict) or not isinstance(value.get("after"), str):
        raise ToolFailure("invalid cursor: pass back the nextCursor of a previous page")
    return str(value["after"])


def build(env: NotesEnv) -> list[ToolSpec]:
    @guarded
    def notes_list(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        ws = env.open(call, args["workspaceUri"], "read")
        folder = env.folder(args.get("folder", ""))
        limit = int(args.get("limit", LIST_PAGE_DEFAULT))
        after = _decode_cursor(args["cursor"]) if "cursor" in args else None
        try:  # ids come in order and the walk skips what lies before the cursor: O(page)
            entries = list(itertools.islice(ws.root.iter_notes(folder, after=after), limit + 1))
        except FsError as exc:
            raise ToolFailure(fs_message(exc, folder or "(workspace root)")) from None
        page, more = entries[:limit], len(entries) > limit
        notes = []
        for note_id, st in page:
            try:
                title = load_note(env, ws, note_id, st).title
            except FsError:
                continue  # vanished or replaced since the listing: skip it
            notes.append(
                {
                    "id": note_id,
                    "title": title,
                    "size": st.st_size,
                    "modified": iso_time(st.st_mtime_ns),
                }
            )
        structured: dict[str, Any] = {"notes": notes}
        if more and page:
            structured["nextCursor"] = _encode_cursor(page[-1][0])
        lines = [f"- {n['id']}: {n['title']}" for n in notes] or ["(no notes)"]
        if "nextCursor" in structured:
            lines.append(f"(more: call again with cursor {structured['nextCursor']})")
        return CallToolResult(
            content=[TextContent(text="\n".join(lines))], structured_content=structured
        ).wire()

    @guarded
    def notes_read(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        ws = env.open(call, args["workspaceUri"], "read")
        note_id = env.note_id(args["id"])
        try:
            note = load_note(env, ws, note_id, None)
        except FsError as exc:
            raise ToolFailure(fs_message(exc, note_id)) from None
        data = note.text if note.text is not None else _reread(ws, note_id)
        return CallToolResult(
            content=[TextContent(text=data)],
            structured_content={"id": note_id, "title": note.title, "content": data},
        ).wire()

    @guarded
    def notes_search(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        ws = env.open(call, args["workspaceUri"], "read")
        query = args["query"].strip().lower()
        if not query:
            raise ToolFailure("query must not be blank")
        limit = int(args.get("limit", SEARCH_LIMIT_DEFAULT))
        title_hits: list[dict[str, str]] = []
        body_hits: list[dict[str, str]] = []
        for note_id, st in ws.root.iter_notes(""):
            try:
                note = load_note(env, ws, note_id, st)
            except FsError:
                continue
            in_title = query in note.title.lower()
            if not in_title and len(body_hits) >= limit:
                continue  # enough body matches; only title matches can still rank higher
            text = note.text if note.text is not None else _reread(ws, note_id)
            lowered = note.lowered if note.lowered is not None else text.lower()
            at = lowered.find(query)
            if not in_title and at < 0:
                continue
            hit = {"id": note_id, "title": note.title, "snippet": _snippet(text, lowered, at)}
            (title_hits if in_title else body_hits).append(hit)
            if len(title_hits) >= limit:
                break
        matches = (title_hits + body_hits)[:limit]
        lines = [f"- {m['id']} ({m['title']}): {m['snippet']}" for m in matches] or ["(no matches)"]
        return CallToolResult(
            content=[TextContent(text="\n".join(lines))], structured_content={"matches": matches}
        ).wire()

    folder_arg = {
        "type": "string",
        "maxLength": 4096,
        "description": "Only notes beneath this folder (relative to the workspace)",
    }
    return [
        ToolSpec(
            name="notes_list",
            title="List notes",
            description="List the markdown notes in a workspace (id, title, size, modified), "
            "sorted by id, one page at a time.",
            properties={
                "workspaceUri": WORKSPACE_URI,
                "folder": folder_arg,
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
            },
            required=("workspaceUri",),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=notes_list,
        ),
        ToolSpec(
            name="notes_read",
            title="Read a note",
            description="Read one note's markdown content by id.",
            properties={"workspaceUri": WORKSPACE_URI, "id": NOTE_ID},
            required=("workspaceUri", "id"),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=notes_read,
        ),
        ToolSpec(
            name="notes_search",
            title="Search notes",
            description="Case-insensitive search of note titles and bodies; title matches first, "
            "each with a snippet.",
            properties={
                "workspaceUri": WORKSPACE_URI,
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 256,
                    "description": "Text to look for (case-insensitive)",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": SEARCH_LIMIT_MAX,
                    "description": f"Most matches to return (default {SEARCH_LIMIT_DEFAULT})",
                },
            },
            required=("workspaceUri", "query"),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=notes_search,
        ),
    ]


def _reread(ws: Opened, note_id: str) -> str:
    try:
        data, _ = ws.root.read_note(note_id, max_bytes=MAX_NOTE_BYTES)
    except FsError as exc:
        raise ToolFailure(fs_message(exc, note_id)) from None
    return data.decode("utf-8", errors="replace")


def _snippet(text: str, lowered: str, at: int) -> str:
    if at < 0 or len(lowered) != len(text):
        start = 0 if at < 0 else max(0, min(at, len(text)) - SNIPPET_CHARS // 2)
    else:
        start = max(0, at - SNIPPET_CHARS // 2)
    piece = " ".join(text[start : start + SNIPPET_CHARS].split())
    return ("…" if start > 0 else "") + piece + ("…" if start + SNIPPET_CHARS < len(text) else "")
