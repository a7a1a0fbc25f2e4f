"""`fs-notes changes [FOLDER | --policy FILE] [--since WHEN] [--json]`: a day of changes to review.

What was changed through fs-notes (each workspace's journal, fs_notes/journal/store.py: when,
which tool, which principal, what it did, how many bytes it kept), and which notes another
program (the person's own editor, a sync client) changed meanwhile: a note modified since WHEN
whose file is not the one the last change through fs-notes left. `notes_history` and
`notes_restore` (or the journal's kept versions) put a version back.

Guarantees: the journals are opened read-only and never made (a missing one is "nothing kept"),
never through a symbolic link; the folder is listed through its root handle (layer 2: no
symbolic link followed, hidden names and other mounts skipped), nothing in it is opened or
changed; every name shown is made safe for the terminal (render.py).

Does not: see what other programs deleted or renamed (a listing shows what is there; the watch
of a running server sees more but keeps no record), or changes older than the journal's bounds
(`[limits] undo_days`, `undo_mib`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import time
from dataclasses import dataclass

from .config import expand_path
from .errors import ConfigError
from .fs import FsError, WorkspaceRoot
from .fs.identity import Identity
from .fs.trusted import UntrustedFolder, open_trusted
from .journal.store import Entry, Journal, journal_name
from .policy import Policy, PolicyError, Workspace
from .render import isolated, shown, shown_id
from .statefolder import index_digest, state_home

DAY = 86400.0
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([mhdw])")
_UNITS = {"m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}
_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M",
            "%Y-%m-%d %H:%M:%S")  # fmt: skip


def parse_since(text: str, now: float) -> float:
    """WHEN as a time: `30m`, `2h`, `1d`, `1w` ago, or a UTC date or time (`2026-12-07`,
    `2026-12-07T10:00`, a trailing `Z` allowed); ConfigError otherwise."""
    raw = text.strip()
    relative = _RELATIVE.fullmatch(raw)
    if relative:
        return now - float(relative[1]) * _UNITS[relative[2]]
    bare = raw[:-1] if raw.endswith("Z") else raw
    for fmt in _FORMATS:
        try:
            return float(_timegm(time.strptime(bare, fmt)))
        except ValueError:
            continue
    raise ConfigError(
        f"--since {shown(text, 80)}: give a time ago (30m, 2h, 1d, 1w) or a UTC date or time "
        "(2026-12-07, 2026-12-07T10:00)"
    )


def _timegm(t: time.struct_time) -> int:
    import calendar

    return calendar.timegm(t)


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


@dataclass(frozen=True)
class Change:
    """One change to review: through fs-notes (an entry of the journal) or by another program."""

    at: float
    id: str
    kind: str
    by: str  # "fs-notes" or "another program"
    entry: Entry | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"at": _stamp(self.at), "id": self.id, "kind": self.kind,
                                  "by": self.by}  # fmt: skip
        if self.entry is not None:
            out |= {"tool": self.entry.tool, "principal": self.entry.principal,
                    "size": self.entry.size, "version": self.entry.version}  # fmt: skip
            if self.entry.new_id is not None:
                out["newId"] = self.entry.new_id
            if not self.entry.finished:
                out["unfinished"] = True
        return out

    def line(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.at))
        note = shown_id(self.id, 300)
        if self.entry is None:
            return f"{when}  another program   changed {note}"
        e = self.entry
        who = f"{shown(e.tool, 40)} by {isolated(shown(e.principal, 60))}"
        if e.kind == "move":
            what = f"moved {note} to {shown_id(e.new_id or '', 300)}"
        elif e.kind == "create":
            what = f"created {note} ({e.size} bytes)"
        else:
            verb = "deleted" if e.kind == "delete" else "replaced"
            what = f"{verb} {note} ({e.size} bytes kept as {e.version})"
        return f"{when}  {who}  {what}" + ("  (unfinished)" if not e.finished else "")


def workspace_changes(
    ws: Workspace, journal: Journal | None, root: WorkspaceRoot, since: float
) -> list[Change]:
    """The workspace's changes from `since` on, oldest first."""
    changes: list[Change] = []
    left: dict[str, Identity | None] = {}  # id -> what the last fs-notes change left
    if journal is not None:
        for entry in journal.since(0.0):
            if entry.finished:
                left[entry.id] = None if entry.kind in ("delete", "move") else entry.after
                if entry.new_id is not None:
                    left[entry.new_id] = entry.after
            if entry.at >= since:
                changes.append(Change(entry.at, entry.id, entry.kind, "fs-notes", entry))
    try:
        for note_id, st in root.iter_notes():
            if st.st_mtime < since:
                continue
            ident = Identity.of(st)
            if note_id in left and left[note_id] == ident:
                continue  # as fs-notes left it
            changes.append(Change(st.st_mtime, note_id, "change", "another program"))
    except FsError as exc:
        raise ConfigError(f'workspace "{ws.name}": cannot list the folder: {exc}') from None
    changes.sort(key=lambda c: c.at)
    return changes


def _workspaces(args: argparse.Namespace) -> list[Workspace]:
    if (args.folder is None) == (args.policy is None):
        raise ConfigError("give a FOLDER or --policy FILE (fs-notes changes ~/notes)")
    if args.policy is not None:
        from .policy_file import load_policy

        return list(load_policy(expand_path(args.policy)).workspaces)
    folder = os.path.realpath(os.path.abspath(expand_path(args.folder)))
    try:
        return list(Policy.for_single_workspace(folder, "changes", token_sha256=None).workspaces)
    except (PolicyError, ValueError) as exc:
        raise ConfigError(f"{shown(args.folder)}: {exc}") from None


def _open_root(ws: Workspace) -> WorkspaceRoot:
    try:
        trusted = open_trusted(ws.path)
    except UntrustedFolder as exc:
        raise ConfigError(f'workspace "{ws.name}": {shown(exc.where)} {exc.why}') from None
    except OSError as exc:
        why = exc.strerror
        raise ConfigError(f'workspace "{ws.name}": cannot open the folder: {why}') from None
    return WorkspaceRoot.from_fd(trusted.fd, symlinks=ws.symlinks)


def review(args: argparse.Namespace) -> int:
    now = time.time()
    since = parse_since(args.since, now)
    state_dir = os.path.abspath(expand_path(args.state_dir)) if args.state_dir else state_home()
    report = []
    for ws in _workspaces(args):
        path = os.path.join(state_dir, journal_name(index_digest(ws.name, ws.path)))
        try:
            journal: Journal | None = Journal(path, days=0, max_bytes=0, read_only=True)
        except FileNotFoundError:
            journal = None
        except OSError as exc:
            raise ConfigError(f"{shown(path)}: {exc.strerror}") from None
        except sqlite3.Error as exc:
            raise ConfigError(f"{shown(path)}: not a journal fs-notes can read ({exc})") from None
        root = _open_root(ws)
        try:
            changes = workspace_changes(ws, journal, root, since)
        except sqlite3.Error as exc:
            raise ConfigError(f"{shown(path)}: not a journal fs-notes can read ({exc})") from None
        finally:
            root.close()
            if journal is not None:
                journal.close()
        report.append((ws, journal is not None, changes))
    if args.json:
        print(json.dumps({"since": _stamp(since), "workspaces": [
            {"name": ws.name, "folder": ws.path, "journal": kept,
             "changes": [c.to_json() for c in changes]}
            for ws, kept, changes in report
        ]}, indent=2))  # fmt: skip
        return 0
    for ws, kept, changes in report:
        print(f'workspace "{shown(ws.name, 100)}" ({shown(ws.path)}), since {_stamp(since)}:')
        if not kept:
            print("  (no journal: nothing was changed through fs-notes with this state folder)")
        for change in changes:
            print("  " + change.line())
        ours = sum(c.by == "fs-notes" for c in changes)
        print(
            f"  {ours} through fs-notes, {len(changes) - ours} by other programs"
            + ("; notes_history and notes_restore put a kept version back" if ours else "")
        )
    return 0
