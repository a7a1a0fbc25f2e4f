"""Note versions in the tools: a note read with its version, and the one compare-and-write that
every versioned write goes through (every notes_update, unless force without
expectedVersion, every notes_append and notes_edit; notes_move may use it too), with the damage
guard: an update or edit that would remove most of a note, its front matter or its headings,
or leave a placeholder where text was, is refused unless the caller passes force
(fs_notes/notes/damage.py; the bounds are the policy's `max_shrink`, `max_headings_lost`) and,
where the workspace's `force` is "out-of-band", the person approved that very change outside
the client (tools/forced.py, asked here as the guard's `person`).

Guarantees: `write_if` writes only when the note's bytes, read here through the root handle
(layer 2: contained, a regular file with one link, read whole under one identity that did not
change during the read), have the version the caller expects (`fs_notes.fs.version`), or any
version when it expects none (an append or edit still compares with what it read). The write
then goes through the one door for changes (fs/changes.py: the confined write worker under
`serve`, which has no right to read files), `update_note` with that identity as ``expected``:
the filesystem layer behind it compares
it with the note's lstat before the temp file is written and again right before the rename
(`WorkspaceRoot.update_note`). So a note changed, replaced, swapped for a symlink or hard-linked
between this read and the rename is refused there (IdentityChanged) and nothing is written; the
read is then done again, since the bytes may not have changed (a touch, a chmod), at most
`ATTEMPTS` times. A version that does not match is a `ToolFailure` with data
``{"error": "versionMismatch", "id", "expectedVersion"}``; nothing is written.

Does not (decided, not overlooked): notice a change that keeps all five identity fields
(fs/identity.py) between the read and the rename; protect a program outside fs-notes that writes
in place through an fd it opened before our rename (its bytes go to the replaced file); lock
anything: of two fs-notes writers racing on one note, one is refused (and an append or edit
without expectedVersion is then applied again to the new content).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..fs import FsError, Identity, IdentityChanged, TooLarge
from ..fs.changes import NoteChanges, Op
from ..fs.version import is_version, note_version
from ..limits import Limits
from ..notes.damage import Limits as DamageLimits
from ..notes.damage import damage
from ..render import shown_id
from .context import Opened, ToolFailure, fs_message

ATTEMPTS = 3

VERSION_ARG: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "The note's version as notes_read (or the last write) returned it: the write "
    "is refused, and nothing written, if the note changed since",
}


FORCE_ARG: dict[str, Any] = {
    "type": "boolean",
    "description": "Make the change even if it removes most of the note, its front matter or "
    "most of its headings, or leaves a placeholder where text was (such a change is refused "
    "otherwise, saying what it would remove): pass it only when that is what the user wants",
}

#: What a refusal says of each kind of damage to a principal who may not read the note (the
#: figures would tell of its content).
_UNSHOWN = {
    "shrinks": "the note would lose most of its length",
    "front-matter-lost": "the note's front matter (its properties) would be gone",
    "front-matter-broken": "the note's front matter would no longer parse as YAML properties",
    "headings-lost": "most of the note's headings would be gone",
    "placeholder": "the new text stands a placeholder where text was",
}


#: Asked when a forced change would destroy part of a note and only the person may wave it
#: through (tools/forced.py): (note id, the note as read, the new bytes, the losses as the
#: refusal says them) -> returns if the person approved exactly this change, else raises
#: ToolFailure (nothing written).
PersonCheck = Callable[[str, "Current", bytes, list[dict[str, str]]], None]


@dataclass(frozen=True)
class Guard:
    """The damage check a change is held to: its bounds, and `person` when the caller forced
    it and only the person's approval may let a damaging change through."""

    limits: DamageLimits
    person: PersonCheck | None = None


def damage_guard(
    limits: Limits, args: dict[str, Any], person: PersonCheck | None = None
) -> Guard | None:
    """The damage check a change is held to (None: the caller passed force, and the caller's
    force is enough here; `person`: what asks the person when it is not)."""
    bounds = DamageLimits(max_shrink=limits.max_shrink, max_headings_lost=limits.max_headings_lost)
    if args.get("force") is True:
        return None if person is None else Guard(bounds, person)
    return Guard(bounds)


def refuse_damage(
    note_id: str, before: Current, after: bytes, guard: Guard, *, figures: bool = True
) -> None:
    """ToolFailure naming what the change from `before` to `after` would destroy unsaid
    (fs_notes/notes/damage.py), with data ``{"error": "noteDamaged", "id", "losses": [{code,
    detail}]}``; nothing when it destroys nothing, or when it was forced and the person
    approved it (`guard.person`, which raises when they did not)."""
    old, new = before.data.decode("utf-8", "replace"), after.decode("utf-8", "replace")
    losses = damage(old, new, guard.limits)
    if not losses:
        return
    said = [{"code": x.code, "detail": x.detail if figures else _UNSHOWN[x.code]} for x in losses]
    if guard.person is not None:
        guard.person(note_id, before, after, said)
        return
    raise ToolFailure(
        f"refused: {shown_id(note_id, 300)}: " + "; ".join(d["detail"] for d in said)
        + ". Nothing was written. If the user wants exactly this, call again with "
        "force: true; otherwise change only what needs changing (notes_edit).",
        {"error": "noteDamaged", "id": note_id, "losses": said},
    )


@dataclass(frozen=True)
class Current:
    """A note's bytes, the identity they were read under, and their version."""

    data: bytes
    ident: Identity
    version: str


@dataclass(frozen=True)
class Written:
    """What `write_if` did: the note before, the bytes now there and their identity (None:
    nothing needed writing)."""

    before: Current
    data: bytes
    ident: Identity | None

    @property
    def version(self) -> str:
        if self.ident is None:
            return self.before.version
        return note_version(self.ident, self.data)


def expected_version(args: dict[str, Any]) -> str | None:
    """The client's expectedVersion, if it passed one (ToolFailure if it is not a version)."""
    raw = args.get("expectedVersion")
    if raw is None:
        return None
    if not is_version(raw):
        raise ToolFailure(
            "invalid expectedVersion: pass the version notes_read returned "
            '("v1:" and 32 hexadecimal digits)'
        )
    return str(raw)


def load_current(ws: Opened, note_id: str) -> Current:
    """The note's bytes (at most the workspace's read limit: TooLarge past it) and version."""
    data, ident = ws.root.read_note(note_id, max_bytes=ws.workspace.read_limit)
    return Current(data, ident, note_version(ident, data))


def read_current(ws: Opened, note_id: str, too_large: str | None = None) -> Current:
    """`load_current` for a write: its refusals as ToolFailure (`too_large`: what a note above
    the read limit means for this write)."""
    try:
        return load_current(ws, note_id)
    except TooLarge:
        raise ToolFailure(
            f"refused: {shown_id(note_id, 300)} is above this workspace's read limit of "
            f"{ws.workspace.read_limit} bytes, so "
            f"{too_large or 'it cannot be edited or appended to here'} (nothing was written)"
        ) from None
    except FsError as exc:
        raise ToolFailure(fs_message(exc, note_id)) from None


def mismatch(note_id: str, expected: str) -> ToolFailure:
    return ToolFailure(
        f"refused: {shown_id(note_id, 300)} changed since version {expected}; nothing was "
        "written: read it again (notes_read) and retry with its new version",
        {"error": "versionMismatch", "id": note_id, "expectedVersion": expected},
    )


def require_writable(changes: NoteChanges, ws: Opened, op: Op = "update_note") -> None:
    """Refuse before anything else when the door says `op` cannot run here now."""
    refusal = changes.refusal(ws.workspace.name, op)
    if refusal is not None:
        raise ToolFailure(f"writing is refused in this workspace: {refusal}")


def write_if(
    ws: Opened,
    changes: NoteChanges,
    note_id: str,
    expected: str | None,
    make: Callable[[Current], bytes | None],
    *,
    forget: Callable[[], None],
    guard: Guard | None = None,
    figures: bool = True,
    too_large: str | None = None,
) -> Written:
    """Read the note, check ``expected``, write ``make(current)`` (None: nothing to write) only
    if the note is still the file read (see the module docstring); ``forget()`` drops what the
    caches hold of the note after a write was tried. With `guard`, a change that would destroy
    part of the note unsaid is refused first (`refuse_damage`; `figures` False: without the
    figures, for a principal who may not read it; forced, and the person approved it: written
    over exactly the version they approved, since this read is the one they saw)."""
    limit = ws.workspace.read_limit
    for _ in range(ATTEMPTS):
        current = read_current(ws, note_id, too_large)
        if expected is not None and current.version != expected:
            raise mismatch(note_id, expected)
        data = make(current)
        if data is None:
            return Written(current, current.data, None)
        if len(data) > limit:
            raise ToolFailure(
                f"refused: {shown_id(note_id, 300)} would be {len(data)} bytes, above this "
                f"workspace's read limit of {limit} bytes; nothing was written"
            )
        if guard is not None:
            refuse_damage(note_id, current, data, guard, figures=figures)
        try:
            ident = changes.update_note(ws.workspace.name, note_id, data, expected=current.ident)
        except IdentityChanged:
            continue  # changed between our read and the door's check: read it again
        except FsError as exc:
            raise ToolFailure(fs_message(exc, note_id)) from None
        finally:
            forget()
        return Written(current, data, ident)
    raise ToolFailure(
        f"refused: {shown_id(note_id, 300)} kept changing while it was being written; nothing "
        "was written: read it again",
        {"error": "noteBusy", "id": note_id},
    )

