"""Notes as MCP resources: `resources/list` and `resources/read` by `file://` URI.

The list is the same as notes_list's (`NotesEnv.notes`: every servable note, nothing else); each
URI is the note's canonical URI (`lexical.note_uri`: every byte outside RFC 3986's unreserved
set percent-encoded, so `100%.md` is `100%25.md`), which `resources/read` decodes exactly once.
`name` is the exact id (a programmatic identifier); `title`, a display field, is rendered
(`fs_notes.render.shown`).
A note over its workspace's read limit is listed with its size; reading it whole is refused with
-32602 naming the limit (the notes_read tool serves it in parts).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Any

from ..fs import FsError
from ..lexical import LexicalError, NoteId, note_uri
from ..policy import AccessDenied, Principal
from ..protocol.dispatch import Call
from ..protocol.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, ProtocolError
from ..protocol.models import (
    RESULT_META,
    PaginatedParams,
    ReadResourceParams,
    Resource,
    TextResourceContents,
    parse_params,
)
from ..render import shown, shown_id
from .context import NotesEnv
from .loading import load_note
from .provenance import mark, note_origin, result_meta

log = logging.getLogger("fs_notes.tools")
PAGE = 200
NOT_FOUND = RESOURCE_NOT_FOUND


def _cursor_after(cursor: str | None) -> tuple[str, str] | None:
    if cursor is None:
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()))
        ws, note = value["ws"], value["after"]
        if isinstance(ws, str) and isinstance(note, str):
            return ws, note
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeError):
        pass
    raise ProtocolError(INVALID_PARAMS, "Invalid params: invalid cursor")


def _cursor(ws: str, note: str) -> str:
    raw = json.dumps({"ws": ws, "after": note}, ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def build(env: NotesEnv) -> tuple[Any, Any]:
    def list_resources(call: Call) -> dict[str, Any]:
        after = _cursor_after(parse_params(PaginatedParams, call.params).cursor)
        assert isinstance(call.principal, Principal)
        out: list[dict[str, Any]] = []
        next_cursor: str | None = None
        last = ("", "")
        for ws in sorted(env.readable_workspaces(call.principal), key=lambda w: w.workspace.name):
            name = ws.workspace.name
            if after is not None and name < after[0]:
                continue
            start = after[1] if after is not None and name == after[0] else None
            for note_id, st in env.notes(ws, after=start):
                if len(out) == PAGE:
                    next_cursor = _cursor(*last)
                    break
                try:
                    uri = note_uri(ws.base, NoteId(tuple(note_id.split("/"))))
                    title = load_note(env, ws, note_id, st, need_text=False).title
                except LexicalError:  # the workspace path and the id together are too long
                    log.warning("a note has no URI within the limits: %s", shown_id(note_id, 300))
                    continue
                except FsError:
                    continue
                out.append(
                    Resource(
                        uri=uri,
                        name=note_id,
                        title=shown(title),  # a display field (MCP: for UI): rendered
                        size=st.st_size,
                    ).wire()
                )
                last = (name, note_id)
            if next_cursor is not None:
                break
        result: dict[str, Any] = {
            "resources": out,
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": RESULT_META,
        }
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    def read_resource(call: Call) -> dict[str, Any]:
        uri = parse_params(ReadResourceParams, call.params).uri
        assert isinstance(call.principal, Principal)
        try:
            grant, note_id = env.policy.locate(call.principal, uri, "read")
            note_id = env.ids.note_id(note_id)
        except (LexicalError, AccessDenied) as exc:
            raise ProtocolError(
                INVALID_PARAMS, NOT_FOUND, {"uri": uri}, log_detail=str(exc)
            ) from None
        ws = next(
            (w for w in env.readable_workspaces(call.principal) if w.workspace == grant.workspace),
            None,
        )
        if ws is None:
            raise ProtocolError(INVALID_PARAMS, NOT_FOUND, {"uri": uri})
        limit = ws.workspace.read_limit
        try:
            note = load_note(env, ws, note_id, None)
            text = note.text
            if text is None and not note.large:
                data, _ = ws.root.read_note(note_id, max_bytes=limit)
                text = data.decode("utf-8", errors="replace")
        except FsError as exc:
            raise ProtocolError(
                INVALID_PARAMS, NOT_FOUND, {"uri": uri}, log_detail=type(exc).__name__
            ) from None
        if text is None:
            raise ProtocolError(
                INVALID_PARAMS,
                f"Resource too large: it is over this workspace's read limit of {limit} bytes; "
                "read it in parts with the notes_read tool (offset, length)",
                {"uri": uri, "readLimit": limit},
            )
        origin = note_origin(env.journals, ws.workspace.name, note_id, note.key)
        marked = mark(note_id, text)  # the text stays exact: a resource is the note's bytes
        if marked.hidden:
            origin["hidden"] = marked.to_json()
            env.read_hidden(call.principal.name, ws)
        return {
            "contents": [TextResourceContents(uri=uri, text=text).wire()],
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": result_meta([origin]),
        }

    return list_resources, read_resource
