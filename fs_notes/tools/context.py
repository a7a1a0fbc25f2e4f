"""What every notes tool needs: authorization, the lexical check and the workspace root handle.

`NotesEnv.open(call, workspace_uri, op)` is the single door from a tool to a workspace: the
principal of the request (never clientInfo, never client roots) is authorized for `op` on exactly
that workspace URI (layer 1), and the tool gets the root handle opened at start-up (layer 2).
Failures become `ToolFailure`, whose message is safe to show: it never says whether anything
outside the workspace exists, and every id in it is rendered (`fs_notes.render`).

`NotesEnv.notes(ws, folder)` is the single door to a workspace's notes: every listing (notes_list,
search, resources/list, the delete and summarize candidates) takes what the filesystem layer lists
and keeps exactly the ids the id rules accept, the same rules a client's id meets, so every listed
id can be read back. A name the rules refuse (not UTF-8, too long) is skipped, counted by reason in
the caller's `Skipped`, and logged once per name (escaped).

Injection points (for the escape exercises' layer knock-out only; `serve` always uses the
defaults): `roots` may hold anything with the `NoteRoot` verbs, and `ids` (`IdRules`) says how raw
note ids and folders are checked before they reach a root (default: `fs_notes.lexical`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol

from ..fs import (
    Escape,
    FsError,
    Hardlinked,
    Identity,
    IdentityChanged,
    InvalidPath,
    NoteExists,
    NoteNotFound,
    NotRegular,
    SymlinkRefused,
    TooLarge,
)
from ..fs.errors import ResourceError
from ..fs.watch import FolderWatch
from ..journal.store import Journal
from ..lexical import LexicalError, WorkspacePath, validate_folder, validate_note_id
from ..policy import AccessDenied, Operation, Policy, Principal, Workspace
from ..protocol.cancel import checkpoint
from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent, tool_error
from ..render import shown, shown_id
from ..search.index import NoteIndex
from ..statefolder import index_name
from .granted import not_a_uri, sole_workspace, valid_choices
from .notecache import NoteCache

log = logging.getLogger("fs_notes.tools")
_P = ParamSpec("_P")


class ToolFailure(Exception):
    """A tool error the caller may read (`isError: true`); ``data``, if given, is its
    structuredContent (what a client program can act on: {"error": "versionMismatch", ...})."""

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.data = data


class NoteRoot(Protocol):
    """The verbs the tools use on a workspace: `fs.WorkspaceRoot` (layer 2) in the server.
    Reading only: a tool changes a note through the one door (fs/changes.py), so the change
    verbs are not here (a tool that called one on ``ws.root`` would not type-check)."""

    def read_note(self, relpath: str, *, max_bytes: int = ...) -> tuple[bytes, Identity]: ...
    def read_part(self, relpath: str, offset: int, length: int) -> tuple[bytes, Identity]: ...
    def stat_note(self, relpath: str) -> Identity: ...
    def note_entry(self, relpath: str) -> os.stat_result | None: ...
    def iter_notes(
        self,
        folder: str = "",
        *,
        after: str | None = None,
        on_skip: Callable[[str, str], None] | None = None,
        recursive: bool = True,
        on_folder: Callable[[str, int], None] | None = None,
    ) -> Iterator[tuple[str, os.stat_result]]: ...


def strict_note_id(raw: str) -> str:
    """Layer 1: the canonical text of a valid note id; LexicalError otherwise."""
    return validate_note_id(raw).text


def strict_folder(raw: str) -> str:
    """Layer 1: the canonical text of a valid folder ("" = the workspace); LexicalError."""
    return "/".join(validate_folder(raw))


@dataclass(frozen=True)
class IdRules:
    """How raw note ids and folders are checked: raw text in, canonical text out, LexicalError
    if refused. The default is the lexical layer; only the escape exercises pass other rules."""

    note_id: Callable[[str], str] = field(default=strict_note_id)
    folder: Callable[[str], str] = field(default=strict_folder)


WorkspaceRoots = Mapping[str, NoteRoot]


@dataclass(frozen=True)
class Opened:
    workspace: Workspace
    root: NoteRoot
    uri: str

    @property
    def base(self) -> WorkspacePath:
        return self.workspace.root


MAX_LOGGED_SKIPS = 10_000
"""Names remembered as already logged as skipped (then logging goes on, unremembered)."""
MAX_CHECKED_IDS = 1 << 18
"""Listed ids whose verdict under the id rules is remembered (a pure function of the string:
every search walks every note, and the check would otherwise be a third of a warm search)."""


class Skipped(Counter[str]):
    """Files a listing found but cannot serve, counted by reason ("not UTF-8": 2)."""

    def to_json(self) -> dict[str, int]:
        return dict(sorted(self.items()))


def fs_message(exc: FsError, raw_id: str) -> str:
    """A readable reason for a filesystem refusal that reveals nothing outside the workspace."""
    note_id = shown_id(raw_id, 300)
    if isinstance(exc, NoteNotFound):
        return f"note not found: {note_id}"
    if isinstance(exc, NoteExists):
        return f"a note already exists at {note_id}"
    if isinstance(exc, Escape | SymlinkRefused):
        return (
            f"refused: {note_id} is not a note inside the workspace "
            "(symbolic links, '..' and other mounts are not followed)"
        )
    if isinstance(exc, NotRegular):
        return f"refused: {note_id} is not a regular file"
    if isinstance(exc, Hardlinked):
        return f"refused: {note_id} has more than one hard link"
    if isinstance(exc, TooLarge):
        return f"refused: {note_id} is too large"
    if isinstance(exc, IdentityChanged):
        return f"refused: {note_id} changed since it was read; nothing was done"
    if isinstance(exc, InvalidPath):
        return f"invalid note id: {note_id}"
    if isinstance(exc, ResourceError):
        return f"the operation on {note_id} failed: {exc.message}; nothing was changed"
    return f"the operation on {note_id} failed"


class NotesEnv:
    """Per-server state shared by the tools: policy, root handles (opened once), caches."""

    def __init__(
        self,
        policy: Policy,
        roots: WorkspaceRoots,
        ids: IdRules | None = None,
        index_dir: str | None = None,
        journals: Mapping[str, Journal] | None = None,
    ) -> None:
        self.policy = policy
        #: Each workspace's journal of changes (journal/store.py): who last changed a note.
        self.journals: Mapping[str, Journal] = journals if journals is not None else {}
        #: (principal, workspace) that read a note hiding text, where the workspace says that
        #: their next deletion needs the person's approval outside the client.
        self._read_hidden: set[tuple[str, str]] = set()
        self._hidden_lock = threading.Lock()
        self.roots = roots
        self.ids = ids if ids is not None else IdRules()
        self.cache = NoteCache()
        self._index_dir = index_dir  # the state folder (the replay database's); None: in memory
        self._indexes: dict[str, tuple[NoteIndex, FolderWatch, threading.Lock]] = {}
        self._indexes_lock = threading.Lock()
        self._logged_skips: set[tuple[str, str]] = set()
        self._skips_lock = threading.Lock()
        self._verdicts: dict[str, str | None] = {}

    def _verdict(self, note_id: str) -> str | None:
        """None if the id rules accept the listed ``note_id`` as itself, else the skip reason."""
        verdict = self._verdicts.get(note_id, "")
        if verdict != "":
            return verdict
        try:
            verdict = None if self.ids.note_id(note_id) == note_id else "not its own id"
        except LexicalError as exc:
            verdict = exc.skip_reason
        if len(self._verdicts) >= MAX_CHECKED_IDS:
            self._verdicts.clear()
        self._verdicts[note_id] = verdict
        return verdict

    def notes(
        self,
        ws: Opened,
        folder: str = "",
        *,
        after: str | None = None,
        skipped: Skipped | None = None,
        recursive: bool = True,
        on_folder: Callable[[str, int], None] | None = None,
        on_skip: Callable[[str, str], None] | None = None,
    ) -> Iterator[tuple[str, os.stat_result]]:
        """(id, lstat) of every servable note beneath ``folder`` (only directly in it, with
        ``recursive=False``), in id order (see the module docstring); ``on_folder`` as for
        `WorkspaceRoot.iter_notes`, ``on_skip(id, reason)`` told of each name left out.
        FsError about ``folder`` itself surfaces on the first ``next()``."""
        verdict = self._verdict
        name = ws.workspace.name

        def left_out(note_id: str, reason: str) -> None:
            if skipped is not None:
                skipped[reason] += 1
            if on_skip is not None:
                on_skip(note_id, reason)
            self._log_skip(name, note_id, reason)

        listing = ws.root.iter_notes(
            folder, after=after, on_skip=left_out, recursive=recursive, on_folder=on_folder
        )
        for note_id, st in listing:
            checkpoint()  # a cancelled request stops here (protocol/cancel.py)
            reason = verdict(note_id)  # rules that rewrite an id would list another note: skip
            if reason is None:
                yield note_id, st
            else:
                left_out(note_id, reason)

    def note_entry(self, ws: Opened, note_id: str) -> os.stat_result | None:
        """The lstat of ``note_id`` if `notes` would list it (the filesystem layer's rules for
        one entry, then the id rules), else None."""
        if self._verdict(note_id) is not None:
            return None
        try:
            return ws.root.note_entry(note_id)
        except FsError:
            return None

    def _log_skip(self, workspace: str, note_id: str, reason: str) -> None:
        key = (workspace, note_id)
        with self._skips_lock:
            if key in self._logged_skips:
                return
            if len(self._logged_skips) < MAX_LOGGED_SKIPS:
                self._logged_skips.add(key)
        log.warning(
            "workspace %s: %s is not served as a note (%s)",
            shown(workspace),
            shown_id(note_id, 300),
            reason,
        )

    def index(self, ws: Opened) -> tuple[NoteIndex, FolderWatch, threading.Lock]:
        """The index of `ws` (fs_notes/search/index.py), its folder watch (fs/watch.py) and the
        lock that serializes its refreshes (tools/indexed.py keeps it current), opened on first
        use: a file in the state folder named by a digest of the workspace's name and path."""
        name = ws.workspace.name
        with self._indexes_lock:
            state = self._indexes.get(name)
            if state is None:
                path = None
                if self._index_dir is not None:
                    path = os.path.join(self._index_dir, index_name(name, ws.workspace.path))
                index = NoteIndex(path, label=f"workspace {name}")
                state = self._indexes[name] = (index, FolderWatch(), threading.Lock())
            return state

    def unindex(self, ws: Opened, note_id: str, *, gone: bool = True) -> None:
        """A note this server deleted (``gone``) or moved away: out of the workspace's search
        index now, its text scrubbed from the index's files (search/index.py): at once when
        gone, on the index's timer when moved (its text lives on under the new id). An index
        this process has not opened yet is opened for it if its file exists (a deletion
        before any search), so no word of the note waits there for the next start."""
        name = ws.workspace.name
        with self._indexes_lock:
            state = self._indexes.get(name)
        if state is None:
            if self._index_dir is None or not os.path.lexists(
                os.path.join(self._index_dir, index_name(name, ws.workspace.path))
            ):
                return
            try:
                state = self.index(ws)
            except (sqlite3.Error, OSError) as exc:
                log.warning("workspace %s: the search index could not be opened (%s)",
                            shown(name), exc)  # fmt: skip
                return
        try:
            state[0].remove(note_id, gone=gone)
        except sqlite3.Error as exc:  # the next refresh drops it (and scrubs) instead
            log.warning("workspace %s: the search index could not drop a note now (%s)",
                        shown(name), exc)  # fmt: skip

    def changed(self, ws: Opened, note_id: str) -> None:
        """A note this server wrote (or tried to): out of the note cache, and its indexed text
        out of the search index (replaced text: scrubbed on the index's timer; the next search
        reads the note again)."""
        self.cache.forget(ws.workspace.name, note_id)
        self.unindex(ws, note_id, gone=False)

    def close(self) -> None:
        """Close the search indexes opened (each scrubs what is pending: search/index.py)."""
        with self._indexes_lock:
            states, self._indexes = list(self._indexes.values()), {}
        for index, _watch, _lock in states:
            try:
                index.close()
            except sqlite3.Error as exc:
                log.warning("a search index could not be closed cleanly (%s)", exc)

    def note_id(self, raw: str) -> str:
        """A client-supplied note id, checked by the id rules (ToolFailure if refused)."""
        try:
            return self.ids.note_id(raw)
        except LexicalError as exc:
            raise ToolFailure(f"invalid note id: {exc}") from None

    def folder(self, raw: str) -> str:
        """A client-supplied folder, checked by the id rules (ToolFailure if refused)."""
        try:
            return self.ids.folder(raw)
        except LexicalError as exc:
            raise ToolFailure(f"invalid folder: {exc}") from None

    def read_hidden(self, principal: str, ws: Opened) -> None:
        """`principal` was given a note hiding text in `ws` (remembered where the workspace
        says `out_of_band_after_hidden`, for as long as this server runs)."""
        if ws.workspace.out_of_band_after_hidden:
            with self._hidden_lock:
                self._read_hidden.add((principal, ws.workspace.name))

    def has_read_hidden(self, principal: str, workspace: str) -> bool:
        with self._hidden_lock:
            return (principal, workspace) in self._read_hidden

    def forget_hidden(self, principal: str, workspace: str) -> None:
        with self._hidden_lock:
            self._read_hidden.discard((principal, workspace))

    def may_read(self, call: Call, workspace_uri: str | None) -> Opened | None:
        """The workspace opened for read, or None if this principal may not read there (what
        a tool then leaves out of its result: a note's size, version, links; issue 27). Quiet:
        the principal asked for nothing it was refused."""
        principal = call.principal
        assert isinstance(principal, Principal)
        uri = workspace_uri if workspace_uri is not None else sole_workspace(self.policy, principal)
        if uri is None:
            return None
        try:
            grant = self.policy.authorize(principal, uri, "read")
        except (LexicalError, AccessDenied):
            return None
        return Opened(grant.workspace, self.roots[grant.workspace.name], uri)

    def open(self, call: Call, workspace_uri: str | None, op: Operation) -> Opened:
        """Authorize ``op`` on the workspace named by ``workspace_uri``; None (the argument left
        out) names the principal's only workspace, and is refused when it has none or several.
        Every refusal ends with the workspaces this principal may use (tools/granted.py), the
        same text whether the URI names an ungranted workspace or none at all."""
        principal = call.principal
        assert isinstance(principal, Principal)
        if workspace_uri is None:
            workspace_uri = sole_workspace(self.policy, principal)
            if workspace_uri is None:
                raise ToolFailure(
                    "workspaceUri is required: "
                    + valid_choices(self.policy, principal)
                    + " (or call notes_workspaces)"
                )
        try:
            grant = self.policy.authorize(principal, workspace_uri, op)
        except LexicalError as exc:
            if exc.rule == "scheme" and ":" not in workspace_uri:  # a name or a path
                text = not_a_uri(self.policy, principal, workspace_uri)
                raise ToolFailure(f"invalid workspaceUri: {text}") from None
            raise ToolFailure(
                f"invalid workspaceUri: {exc}; {valid_choices(self.policy, principal)}"
            ) from None
        except AccessDenied as exc:
            log.info("%s refused %s on %s: %s", principal.name, op, shown(workspace_uri, 300), exc)
            raise ToolFailure(f"{exc}; {valid_choices(self.policy, principal)}") from None
        root = self.roots[grant.workspace.name]
        return Opened(grant.workspace, root, workspace_uri)

    def readable_workspaces(self, principal: Principal) -> list[Opened]:
        out = []
        for grant in self.policy.grants_for(principal):
            if "read" in grant.operations:
                ws = grant.workspace
                out.append(Opened(ws, self.roots[ws.name], ws.uri))
        return out


def guarded(fn: Callable[_P, dict[str, Any]]) -> Callable[_P, dict[str, Any]]:
    """Turn ToolFailure into a tool error result."""

    def run(*args: _P.args, **kwargs: _P.kwargs) -> dict[str, Any]:
        try:
            return fn(*args, **kwargs)
        except ToolFailure as exc:
            if exc.data is None:
                return tool_error(str(exc))
            return CallToolResult(
                content=[TextContent(text=str(exc))], structured_content=exc.data, is_error=True
            ).wire()

    run.__name__ = fn.__name__
    return run
