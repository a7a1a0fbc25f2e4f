"""What every notes tool needs: authorization, the lexical check and the workspace root handle.

`NotesEnv.open(call, workspace_uri, op)` is the single door from a tool to a workspace: the
principal of the request (never clientInfo, never client roots) is authorized for `op` on exactly
that workspace URI (layer 1), and the tool gets the root handle opened at start-up (layer 2).
Failures become `ToolFailure`, whose message is safe to show: it never says whether anything
outside the workspace exists.

Injection points (for the escape exercises' layer knock-out only; `serve` always uses the
defaults): `roots` may hold anything with the `NoteRoot` verbs, and `ids` (`IdRules`) says how raw
note ids and folders are checked before they reach a root (default: `fs_notes.lexical`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

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
from ..lexical import LexicalError, NoteId, WorkspacePath, validate_folder, validate_note_id
from ..policy import AccessDenied, Operation, Policy, Principal, Workspace
from ..protocol.dispatch import Call
from ..protocol.models import tool_error
from .notecache import NoteCache

log = logging.getLogger("fs_notes.tools")


class ToolFailure(Exception):
    """A tool error the caller may read (`isError: true`)."""


class NoteRoot(Protocol):
    """The verbs the tools use on a workspace: `fs.WorkspaceRoot` (layer 2) in the server."""

    def read_note(self, relpath: str, *, max_bytes: int = ...) -> tuple[bytes, Identity]: ...
    def stat_note(self, relpath: str) -> Identity: ...
    def create_note(self, relpath: str, data: bytes) -> Identity: ...
    def update_note(
        self, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity: ...
    def unlink_note(self, relpath: str, expected: Identity) -> None: ...
    def iter_notes(
        self, folder: str = "", *, after: str | None = None
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


def fs_message(exc: FsError, note_id: str) -> str:
    """A readable reason for a filesystem refusal that reveals nothing outside the workspace."""
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
    return f"the operation on {note_id} failed"


class NotesEnv:
    """Per-server state shared by the tools: policy, root handles (opened once), caches."""

    def __init__(self, policy: Policy, roots: WorkspaceRoots, ids: IdRules | None = None) -> None:
        self.policy = policy
        self.roots = roots
        self.ids = ids if ids is not None else IdRules()
        self.cache = NoteCache()

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

    def open(self, call: Call, workspace_uri: str, op: Operation) -> Opened:
        principal = call.principal
        assert isinstance(principal, Principal)
        try:
            grant = self.policy.authorize(principal, workspace_uri, op)
        except LexicalError as exc:
            raise ToolFailure(f"invalid workspaceUri: {exc}") from None
        except AccessDenied as exc:
            log.info("%s refused %s on %r: %s", principal.name, op, workspace_uri[:300], exc)
            raise ToolFailure(str(exc)) from None
        root = self.roots[grant.workspace.name]
        return Opened(grant.workspace, root, workspace_uri)

    def readable_workspaces(self, principal: Principal) -> list[Opened]:
        out = []
        for grant in self.policy.grants_for(principal):
            if "read" in grant.operations:
                ws = grant.workspace
                out.append(Opened(ws, self.roots[ws.name], ws.uri))
        return out


def note_id_arg(raw: str) -> NoteId:
    try:
        return validate_note_id(raw)
    except LexicalError as exc:
        raise ToolFailure(f"invalid note id: {exc}") from None


def guarded(
    fn: Callable[[Call, dict[str, Any]], dict[str, Any]],
) -> Callable[[Call, dict[str, Any]], dict[str, Any]]:
    """Turn ToolFailure into a tool error result."""

    def run(call: Call, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return fn(call, args)
        except ToolFailure as exc:
            return tool_error(str(exc))

    run.__name__ = fn.__name__
    return run
