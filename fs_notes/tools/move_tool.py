"""notes_move (added 2026-12-01): rename a note within its workspace, through the one door for
changes (fs/changes.py `move_note`), and report (or, with ``updateLinks``, rewrite) the
wikilinks that point to it.

The order of a move, each step refusing before anything is changed:
1. layer 1: the principal may "write" in exactly that workspace; `id` and `newId` pass the id
   rules (the lexical layer: a hidden or unservable target, '..', an absolute id are refused
   here, as for notes_create);
2. the door says whether moves can run here (`refusal(workspace, "move_note")`; fail closed:
   no OS layer, or a Landlock without REFER, refuses with its reason);
3. the source's identity: with `expectedVersion`, the note is read and its version compared
   (tools/versions.py); else it is stat'ed through layer 2. That identity travels with the move,
   and the filesystem layer behind the door (the confined write worker under `serve`) checks
   it on the source's parent fd right before renameat2(RENAME_NOREPLACE) (fs/rename.py): a
   source replaced, hard-linked or swapped for a symlink meanwhile is refused, and nothing is
   ever overwritten at the target;
4. the links: when the principal may also read, the notes whose links resolve to the source
   (link_resolution.py, against the index, each re-checked through layer 2) are found before
   the move; with ``updateLinks`` each one's new text is made from the bytes read then, and
   written after the move through the same door's `update_note` with that read's identity as
   ``expected`` (the same confined, identity-checked path as notes_update): a linking note
   changed meanwhile is left as it is and reported so.

Guarantees: the result names every linking note found (up to `MAX_LISTED`) and says for each
whether it was rewritten. Does not: rewrite markdown links (reported only), undo the move if a
rewrite fails (each note is its own atomic write), or see links the index cannot (notes over
the read limit are indexed by title only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..fs import FsError, Identity, IdentityChanged, NoteExists
from ..fs.changes import NoteChanges
from ..notes.relink import relink
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from ..render import isolated, shown_id
from ..search.index import stem_of
from .context import NotesEnv, Opened, ToolFailure, fs_message, guarded
from .indexed import current
from .link_resolution import MAX_CANDIDATES, MAX_LISTED, Resolver
from .registry import NOTE_ID, WORKSPACE_URI, ToolSpec
from .versions import VERSION_ARG, expected_version, mismatch, read_current


@dataclass
class Backlink:
    id: str
    links: int = 0  # wikilinks to the moved note in it (0: only markdown links)
    data: bytes | None = None  # its new bytes, when it is to be rewritten
    ident: Identity | None = None  # the identity they were made from
    updated: bool = False
    reason: str | None = None


def _backlinks(
    env: NotesEnv, ws: Opened, note_id: str, new_id: str, rewrite: bool
) -> list[Backlink]:
    """The notes linking to ``note_id`` (before the move), with their rewritten bytes."""
    indexed = current(env, ws)
    index = indexed.index
    found: list[Backlink] = []
    with indexed.answering():
        resolver = Resolver(index)
        seen: set[str] = set()
        for source, key, target in index.links_named(stem_of(note_id), MAX_CANDIDATES):
            if source == note_id or source in seen:
                continue
            if resolver.resolve(source, target) == note_id and indexed.recheck(source, key):
                seen.add(source)
                found.append(Backlink(source))
                if len(found) >= MAX_LISTED:
                    break
        for link in found:
            try:
                cur = read_current(ws, link.id)
            except ToolFailure as exc:
                link.reason = str(exc)
                continue
            try:
                text = cur.data.decode("utf-8")
            except UnicodeDecodeError:
                link.reason = "not UTF-8"
                continue
            new_text, link.links = relink(text, link.id, note_id, new_id, resolver.resolve)
            if rewrite and link.links:
                link.data, link.ident = new_text.encode("utf-8"), cur.ident
    return found


def _rewrite(env: NotesEnv, ws: Opened, changes: NoteChanges, links: list[Backlink]) -> None:
    for link in links:
        if link.data is None or link.ident is None:
            continue
        try:
            changes.update_note(ws.workspace.name, link.id, link.data, expected=link.ident)
            link.updated = True
        except IdentityChanged:
            link.reason = "it changed since it was read; its links were left as they are"
        except FsError as exc:
            link.reason = fs_message(exc, link.id)
        finally:
            env.changed(ws, link.id)


def _source_identity(ws: Opened, note_id: str, version: str | None) -> Identity:
    if version is not None:
        cur = read_current(ws, note_id)
        if cur.version != version:
            raise mismatch(note_id, version)
        return cur.ident
    try:
        return ws.root.stat_note(note_id)
    except FsError as exc:
        raise ToolFailure(fs_message(exc, note_id)) from None


class NotesMove:
    """notes_move: a note renamed within its workspace, its wikilinks rewritten on request."""

    def __init__(self, env: NotesEnv, changes: NoteChanges) -> None:
        self.env = env
        self.changes = changes

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_move",
            title="Move or rename a note",
            description="Move (rename) a note within its workspace; missing folders are "
            "created. Never overwrites: fails if a note already exists at newId. The notes "
            "that link to it are listed; with updateLinks their wikilinks are rewritten.",
            properties={
                "workspaceUri": WORKSPACE_URI,
                "id": NOTE_ID,
                "newId": {**NOTE_ID, "description": "The note's new id (path ending in .md)"},
                "updateLinks": {
                    "type": "boolean",
                    "description": "Rewrite the wikilinks that point to the note (default false)",
                },
                "expectedVersion": VERSION_ARG,
            },
            required=("id", "newId"),
            read_only=False,
            destructive=False,
            idempotent=False,
            handler=guarded(self.run),
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        env = self.env
        changes = self.changes
        if "expectedVersion" in args:  # comparing versions reads the note: read, and write
            env.open(call, args.get("workspaceUri"), "read")
        ws = env.open(call, args.get("workspaceUri"), "write")
        note_id = env.note_id(args["id"])
        new_id = env.note_id(args["newId"])
        update_links = args.get("updateLinks") is True
        version = expected_version(args)
        name = ws.workspace.name
        refusal = changes.refusal(name, "move_note")
        if refusal is not None:
            raise ToolFailure(f"moving is refused in this workspace: {refusal}")
        if new_id == note_id:
            raise ToolFailure(f"a note already exists at {shown_id(new_id, 300)}")
        expected = _source_identity(ws, note_id, version)
        reader = env.may_read(call, args.get("workspaceUri"))
        links = _backlinks(env, reader, note_id, new_id, update_links) if reader else None
        try:
            ident = changes.move_note(name, note_id, new_id, expected=expected)
        except FsError as exc:
            failed = new_id if isinstance(exc, NoteExists) else note_id
            raise ToolFailure(fs_message(exc, failed)) from None
        finally:
            env.cache.forget(name, note_id)
            env.cache.forget(name, new_id)
        env.unindex(ws, note_id, gone=False)  # the old id out of the index now (issue 27)
        if links is not None and update_links:
            _rewrite(env, ws, changes, links)
        return _result(note_id, new_id, ident, links, update_links)


def _result(
    note_id: str, new_id: str, ident: Identity, links: list[Backlink] | None, update: bool
) -> dict[str, Any]:
    # the size only to a principal who may read the note (a write-only one learns nothing of a
    # note it cannot read: issue 27); `links` is None exactly when the principal may not
    size = f" ({ident.size} bytes)" if links is not None else ""
    lines = [f"moved {shown_id(note_id, 300)} to {shown_id(new_id, 300)}{size}"]
    listed: list[dict[str, Any]] | None = None
    if links is None:
        lines.append("links to it: not examined (no read permission in this workspace)")
    else:
        listed = []
        lines.append(f"notes linking to it: {len(links)}" + (":" if links else ""))
        for link in links:
            entry: dict[str, Any] = {
                "id": link.id,
                "wikilinks": link.links,
                "updated": link.updated,
            }
            if link.reason is not None:
                entry["reason"] = link.reason
            listed.append(entry)
            state = "rewritten" if link.updated else ("not rewritten" if update else "unchanged")
            why = f" ({link.reason})" if link.reason else ""
            lines.append(f"- {isolated(shown_id(link.id))}: {link.links} wikilink(s), {state}{why}")
    structured: dict[str, Any] = {
        "id": note_id,
        "newId": new_id,
        **({"size": ident.size} if links is not None else {}),
        "backlinks": listed,
        "linksUpdated": update,
    }
    return CallToolResult(
        content=[TextContent(text="\n".join(lines))], structured_content=structured
    ).wire()
