"""`fs-notes forget [FOLDER] [--stale]`, and the pruning of unused indexes when `serve` starts.

A search index holds copies of its notes' text (titles, headings, the body up to 256 KiB a
note). `forget FOLDER` removes the indexes of FOLDER (whatever workspace name it was served
under) from the state folder; `forget --stale` those whose folder is gone (deleted, or moved
away: nothing is a folder at that path), or not served for `--unused-days` days (default 30),
and those made before fs-notes recorded whose folder an index is (they are a cache: a server
that still serves one builds it again). Each file removed is named with its size, and with
--stale with why it was stale (the text's reason is the --json "why", with the folder).

Guarantees (statefolder.py's): an index a running server holds or has open is never removed
(it is reported, and the exit status is 1); nothing but an index's own regular files, by name
beneath the state folder's descriptor, is removed; a symbolic link is neither followed nor
removed. What is not per folder stays: the replay database (spent confirmation nonces: random
values and times, no note text) and the key ring; the README says how to remove them.

Exit status: 0 (also when there was nothing to remove), 1 when an index could not be removed
(in use, or an OS error), 2 for a usage error (no FOLDER and no --stale, or both; a state
folder that is a symbolic link or not a folder).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .config import expand_path
from .errors import ConfigError
from .policy import Policy, PolicyError
from .render import shown
from .statefolder import (
    Claim,
    Held,
    IndexFiles,
    exclusive,
    index_digest,
    open_folder,
    remove,
    scan,
    state_home,
)

log = logging.getLogger("fs_notes.forget")

DAY = 86400.0


@dataclass
class Outcome:
    removed: list[dict[str, object]] = field(default_factory=list)
    kept: list[dict[str, object]] = field(default_factory=list)

    def to_json(self, state_dir: str) -> dict[str, object]:
        total = sum(int(str(r["bytes"])) for r in self.removed)
        return {"state_dir": state_dir, "removed": self.removed, "kept": self.kept,
                "removed_bytes": total}  # fmt: skip


def _gone(folder: str) -> bool:
    """Whether nothing is a folder at `folder` (deleted, or moved away)."""
    try:
        return not os.path.isdir(folder)
    except (OSError, ValueError):
        return True


def stale_reason(entry: IndexFiles, now: float, unused_days: float) -> str | None:
    """Why `entry` is stale (None: it is not)."""
    if entry.folder is None:
        return "no record of its folder (made before fs-notes kept one)"
    if _gone(entry.folder):
        return "its folder is gone"
    return _unused(entry, now, unused_days)


def _unused(entry: IndexFiles, now: float, unused_days: float) -> str | None:
    seen = entry.last_seen
    if unused_days > 0 and seen is not None and now - seen > unused_days * DAY:
        return f"not served for {int((now - seen) // DAY)} days"
    return None


def sweep(
    state_dir: str,
    select: Callable[[IndexFiles], str | None],
    *,
    skip: frozenset[str] = frozenset(),
) -> Outcome:
    """Remove every index of `state_dir` that `select` gives a reason for (digests in `skip`
    are left). OSError/ConfigError for a state folder that cannot be opened."""
    try:
        dir_fd = open_folder(state_dir)
    except FileNotFoundError:
        return Outcome()
    except OSError as exc:
        what = "a symbolic link" if os.path.islink(state_dir) else exc.strerror
        raise ConfigError(f"the state folder {state_dir}: {what}; nothing was removed") from None
    out = Outcome()
    try:
        for entry in scan(dir_fd):
            reason = select(entry) if entry.digest not in skip else None
            if reason is None:
                continue
            about = {"workspace": entry.workspace, "folder": entry.folder, "why": reason}
            for name in entry.links:
                out.kept.append({**about, "path": os.path.join(state_dir, name),
                                 "reason": "a symbolic link (never followed)"})  # fmt: skip
            try:
                with exclusive(dir_fd, entry):
                    done = remove(dir_fd, entry)
            except Held as exc:
                for name in sorted(entry.files):
                    out.kept.append({**about, "path": os.path.join(state_dir, name),
                                     "reason": f"in use: {exc}; stop it first"})  # fmt: skip
                continue
            except OSError as exc:
                out.kept.append({**about, "path": os.path.join(state_dir, f"search-{entry.digest}"),
                                 "reason": exc.strerror or str(exc)})  # fmt: skip
                continue
            for name, size in sorted(done.items()):
                out.removed.append({**about, "path": os.path.join(state_dir, name), "bytes": size})
    finally:
        os.close(dir_fd)
    return out


def prune_unused(state_dir: str, unused_days: float, serving: frozenset[str]) -> Outcome:
    """At `serve`'s start: remove the indexes not served for `unused_days` days (0: never),
    except those of the workspaces it serves (`serving`: their digests); each logged at INFO."""
    if unused_days <= 0:
        return Outcome()
    now = time.time()
    try:
        out = sweep(state_dir, lambda e: _unused(e, now, unused_days), skip=serving)
    except (ConfigError, OSError) as exc:
        log.warning("unused search indexes were not pruned: %s", exc)
        return Outcome()
    for item in out.removed:
        log.info(
            "pruned %s (%s bytes): the search index of %s, %s",
            shown(str(item["path"])),
            item["bytes"],
            shown(str(item["folder"] or "an unknown folder")),
            item["why"],
        )
    for item in out.kept:
        log.info("not pruned %s: %s", shown(str(item["path"])), item["reason"])
    return out


def claim_and_prune(state_dir: str | None, policy: Policy, unused_days: float) -> Claim:
    """At `serve`'s start, before it confines itself (which may hide other files of the state
    folder): claim the index of each workspace served (statefolder.Claim: a running server's
    indexes are never removed), then prune the unused ones. ConfigError if a claim fails."""
    claim = Claim()
    if state_dir is None:  # in memory: nothing is kept
        return claim
    serving: set[str] = set()
    for ws in policy.workspaces:
        try:
            claim.take(state_dir, ws.name, ws.path)
        except OSError as exc:
            claim.release()
            raise ConfigError(
                f"the state folder {state_dir}: cannot record the search index of workspace "
                f'"{ws.name}": {exc.strerror or exc}'
            ) from None
        serving.add(index_digest(ws.name, ws.path))
    prune_unused(state_dir, unused_days, frozenset(serving))
    return claim


def _zero_config_digest(folder: str) -> str | None:
    """The digest `serve FOLDER` names FOLDER's index by (an index without a record is still
    FOLDER's if it has that name)."""
    try:
        ws = Policy.for_single_workspace(folder, "forget", token_sha256=None).workspaces[0]
    except (PolicyError, ValueError):
        return None
    return index_digest(ws.name, ws.path)


def _human(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def forget(args: argparse.Namespace) -> int:
    if (args.folder is None) == (not args.stale):
        raise ConfigError("give a FOLDER or --stale (fs-notes forget FOLDER, or forget --stale)")
    if args.unused_days < 0:
        raise ConfigError("--unused-days takes a number of days, 0 or more")
    state_dir = os.path.abspath(expand_path(args.state_dir)) if args.state_dir else state_home()
    if args.folder is not None:
        given = os.path.abspath(expand_path(args.folder))
        target = os.path.realpath(given)
        names = {given, target}  # a policy's path may hold a symlink: as written, or resolved
        legacy = _zero_config_digest(target)

        def select(entry: IndexFiles) -> str | None:
            if entry.folder is None:
                return "asked for" if entry.digest == legacy else None
            if entry.folder in names or os.path.realpath(entry.folder) in names:
                return "asked for"
            return None

        outcome = sweep(state_dir, select)
    else:
        now = time.time()
        outcome = sweep(state_dir, lambda e: stale_reason(e, now, args.unused_days))
    if args.json:
        print(json.dumps(outcome.to_json(state_dir), indent=2))
    else:
        _print(outcome, state_dir, args.folder and target)
    return 1 if outcome.kept else 0


def _print(outcome: Outcome, state_dir: str, folder: str | None) -> None:
    for item in outcome.removed:
        line = f"removed {shown(str(item['path']))} ({_human(int(str(item['bytes'])))})"
        print(line if folder else f"{line}: {_why(item)}")
    for item in outcome.kept:
        print(f"not removed {shown(str(item['path']))}: {item['reason']}")
    total = sum(int(str(r["bytes"])) for r in outcome.removed)
    if outcome.removed:
        print(f"{len(outcome.removed)} files, {_human(total)}, removed from {shown(state_dir)}")
    elif not outcome.kept:
        what = f"for {shown(folder)}" if folder else "stale"
        print(f"nothing {what} in {shown(state_dir)}: nothing was removed")
    print(
        f"kept (not per folder): {REMINDER}",
    )


def _why(item: dict[str, object]) -> str:
    """Why --stale removed an index's file, as its JSON "why" says, with the folder it was the
    index of: "the index of /home/me/old: its folder is gone"."""
    if item["folder"] is None:
        return str(item["why"])
    return f"the index of {shown(str(item['folder']))}: {item['why']}"


REMINDER = (
    "the replay database and the key ring in the state folder, and fs-notes init's files in "
    "~/.config/fs-notes; to remove everything, stop every server and delete both folders"
)
