"""The door that keeps the journal: every change to a note, kept before it is made.

`KeptChanges` is a `NoteChanges` (fs/changes.py) put around whichever door the composition root
opened (the confined workers, the filesystem layer in this process, a test's), so no tool can
change a note without its row in the journal (journal/store.py): the composition root wraps every
door it opens, and the tools are only ever given the wrapped one.

Guarantees:
- Before an update or a deletion, the note's bytes are read beneath the workspace's root handle
  (layer 2) with the identity they were read under, committed to the journal, and the change is
  then made only if the note still is that file (`expected`, checked by the inner door where the
  change happens: in the confined worker under `serve`). So the bytes kept are the bytes the
  change replaced, or nothing is changed (IdentityChanged).
- A change whose previous bytes cannot be kept is not made: a note above the workspace's read
  limit, a journal that cannot be written (a full disk), or one whose size bound is filled by
  the versions of the last day (journal/store.py), refuses the change with `NotKept`.
- A change that did not go through leaves no row; one that did records what it left.
- Who changed it: the tool and principal of the request (`authored`, set once per tools/call by
  app.py); a change outside a request is kept as by "fs-notes".

Does not: keep the previous bytes in the confined worker (this process reads and keeps them, the
worker only checks the identity: the worker's view holds the workspace alone, never the state
folder), keep a copy of a moved note's bytes (a move replaces nothing: it is kept as the names),
or undo anything by itself (tools/history_tools.py restores through this same door).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..fs.changes import NoteChanges, Op
from ..fs.errors import IdentityChanged, ResourceError, TooLarge
from ..fs.identity import Identity
from ..fs.version import note_version
from .store import Journal, JournalFull, Kind

__all__ = ["Author", "KeptChanges", "NotKept", "authored"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Author:
    """Who a change is by, as the journal names it."""

    tool: str
    principal: str


_NOBODY = Author("fs-notes", "fs-notes")
_AUTHOR: ContextVar[Author] = ContextVar("fs_notes_author", default=_NOBODY)


@contextmanager
def authored(tool: str, principal: str) -> Iterator[None]:
    """The changes made inside are by `tool` for `principal` (one tools/call)."""
    token = _AUTHOR.set(Author(tool, principal))
    try:
        yield
    finally:
        _AUTHOR.reset(token)


class NotKept(ResourceError):
    """The change was refused: what it would replace could not be kept to undo it. Its message
    (safe to show: it names no path) says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ReadableRoot(Protocol):
    """What the door reads a note's bytes through (`fs.WorkspaceRoot`)."""

    def read_note(self, relpath: str, *, max_bytes: int = ...) -> tuple[bytes, Identity]: ...
    def stat_note(self, relpath: str) -> Identity: ...


class KeptChanges:
    """`inner`, each change kept first in its workspace's journal."""

    def __init__(
        self,
        inner: NoteChanges,
        roots: Mapping[str, ReadableRoot],
        journals: Mapping[str, Journal],
        read_limits: Mapping[str, int],
    ) -> None:
        self._inner = inner
        self._roots = roots
        self.journals = journals
        self._limits = read_limits

    def _before(
        self, workspace: str, relpath: str, expected: Identity | None
    ) -> tuple[bytes, Identity]:
        """The note's bytes and identity now; IdentityChanged if it is not `expected`."""
        try:
            data, ident = self._roots[workspace].read_note(
                relpath, max_bytes=self._limits[workspace]
            )
        except TooLarge:
            raise NotKept(
                "it is above this workspace's read limit, so fs-notes cannot keep a copy to "
                "undo the change"
            ) from None
        if expected is not None and ident != expected:
            raise IdentityChanged()
        return data, ident

    def _kept(
        self,
        workspace: str,
        change: Callable[[], _T],
        after: Callable[[_T], Identity | None],
        *,
        note_id: str,
        kind: Kind,
        version: str | None = None,
        content: bytes | None = None,
        new_id: str | None = None,
        size: int | None = None,
    ) -> _T:
        """Keep the row, make the change, record what it left (or drop the row)."""
        journal = self.journals[workspace]
        who = _AUTHOR.get()
        try:
            seq = journal.keep(
                note_id=note_id, kind=kind, tool=who.tool, principal=who.principal,
                version=version, content=content, new_id=new_id, size=size,
            )  # fmt: skip
        except JournalFull as full:
            if full.alone:
                raise NotKept(
                    f"its text is larger than this workspace's [limits] undo_mib "
                    f"({full.max_bytes >> 20} MiB), so fs-notes cannot keep a copy to undo the "
                    "change; raise undo_mib"
                ) from None
            raise NotKept(
                f"the journal of changes is full: the versions kept in the last day fill this "
                f"workspace's [limits] undo_mib ({full.max_bytes >> 20} MiB), and fs-notes "
                "prunes none of those for space; raise undo_mib, or restore or wait a day"
            ) from None
        except sqlite3.Error as exc:
            raise NotKept(
                f"the journal of changes could not be written ({type(exc).__name__})"
            ) from None
        try:
            result = change()
        except BaseException:
            journal.drop(seq)
            raise
        # If this fails, the row stays as a change in flight: the bytes before are kept the same.
        with contextlib.suppress(sqlite3.Error):
            journal.done(seq, after(result))
        return result

    def create_note(self, workspace: str, relpath: str, data: bytes) -> Identity:
        return self._kept(
            workspace,
            lambda: self._inner.create_note(workspace, relpath, data),
            _same,
            note_id=relpath, kind="create", size=len(data),
        )  # fmt: skip

    def update_note(
        self, workspace: str, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        before, ident = self._before(workspace, relpath, expected)
        return self._kept(
            workspace,
            lambda: self._inner.update_note(workspace, relpath, data, expected=ident),
            _same,
            note_id=relpath, kind="update", version=note_version(ident, before),
            content=before,
        )  # fmt: skip

    def unlink_note(self, workspace: str, relpath: str, expected: Identity) -> None:
        before, ident = self._before(workspace, relpath, expected)
        self._kept(
            workspace,
            lambda: self._inner.unlink_note(workspace, relpath, ident),
            _gone,
            note_id=relpath, kind="delete", version=note_version(ident, before),
            content=before,
        )  # fmt: skip

    def trash_note(
        self, workspace: str, relpath: str, trash_relpath: str, expected: Identity
    ) -> Identity:
        """A deletion into the folder's trash: kept as a deletion (its bytes, so notes_history
        lists it and notes_restore puts it back at its id), made as a move to `trash_relpath`
        (never over anything) only if the note still is that file."""
        before, ident = self._before(workspace, relpath, expected)
        return self._kept(
            workspace,
            lambda: self._inner.move_note(workspace, relpath, trash_relpath, expected=ident),
            _same,
            note_id=relpath, kind="delete", version=note_version(ident, before),
            content=before,
        )  # fmt: skip

    def move_note(
        self, workspace: str, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        size = expected.size if expected is not None else 0
        return self._kept(
            workspace,
            lambda: self._inner.move_note(workspace, relpath, new_relpath, expected=expected),
            _same,
            note_id=relpath, kind="move", new_id=new_relpath, size=size,
        )  # fmt: skip

    def refusal(self, workspace: str, op: Op) -> str | None:
        return self._inner.refusal(workspace, op)


def _same(ident: Identity) -> Identity:
    return ident


def _gone(_: None) -> None:
    return None
