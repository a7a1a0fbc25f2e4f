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
beneath the state folder's descriptor, is removed; a name that is not a regular file (a
symbolic link, a FIFO, a directory...) is never followed or opened, and is reported as what
it is; a file another hard link keeps is reported kept, not removed (its data would stay).
A record that is not believed (statefolder.py says when) is named with why, and its index
counts as one without a record. `--stale` and the pruning also remove temporary records an
interrupted write left (older than a minute), each named. One index that fails (whatever
the error) is reported kept and never stops the others, nor serve from starting. What is
not per folder stays: the replay database (spent confirmation nonces: random values and
times, no note text) and the key ring; the README says how to remove them.

Exit status: 0 (also when there was nothing to remove), 1 when a file of an index was not
removed (in use, not a regular file, another hard link, an OS error), 2 for a usage error (no
FOLDER and no --stale, or both; a state folder that is a symbolic link or not a folder).
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
    LEFTOVER_WHY,
    Claim,
    Held,
    IndexFiles,
    exclusive,
    index_digest,
    open_folder,
    record_name,
    remove,
    remove_leftovers,
    scan,
    state_home,
)

log = logging.getLogger("fs_notes.forget")

DAY = 86400.0


@dataclass
class Outcome:
    removed: list[dict[str, object]] = field(default_factory=list)
    kept: list[dict[str, object]] = field(default_factory=list)
    unbelieved: list[dict[str, str]] = field(default_factory=list)  # records: path, reason

    def to_json(self, state_dir: str) -> dict[str, object]:
        total = sum(int(str(r["bytes"])) for r in self.removed)
        return {"state_dir": state_dir, "removed": self.removed, "kept": self.kept,
                "unbelieved": self.unbelieved, "removed_bytes": total}  # fmt: skip


def _gone(folder: str) -> bool:
    """Whether nothing is a folder at `folder` (deleted, or moved away)."""
    try:
        return not os.path.isdir(folder)
    except (OSError, ValueError):
        return True


def stale_reason(entry: IndexFiles, now: float, unused_days: float) -> str | None:
    """Why `entry` is stale (None: it is not)."""
    if entry.unbelieved is not None:
        return f"its record is not believed: {entry.unbelieved}"
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
    leftovers: bool = False,
) -> Outcome:
    """Remove every index of `state_dir` that `select` gives a reason for (digests in `skip`
    are left), and with `leftovers` the old temporary records of every index. One index that
    fails is reported kept, never stops the others. OSError/ConfigError for a state folder
    that cannot be opened."""
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
            if entry.unbelieved is not None:
                out.unbelieved.append({"path": os.path.join(state_dir, record_name(entry.digest)),
                                       "reason": entry.unbelieved})  # fmt: skip
            try:
                _sweep_one(dir_fd, state_dir, entry, select, entry.digest in skip, leftovers, out)
            except Exception as exc:  # fail closed for this index: kept, and the others go on
                what = f"not handled: {type(exc).__name__}: {exc}"
                out.kept.append({"workspace": None, "folder": None, "why": None,
                                 "path": os.path.join(state_dir, f"search-{entry.digest}.*"),
                                 "reason": what})  # fmt: skip
    finally:
        os.close(dir_fd)
    return out


def _sweep_one(
    dir_fd: int,
    state_dir: str,
    entry: IndexFiles,
    select: Callable[[IndexFiles], str | None],
    skipped: bool,
    leftovers: bool,
    out: Outcome,
) -> None:
    reason = None if skipped else select(entry)
    if reason is None:
        if leftovers:
            done: dict[str, int] = {}
            remove_leftovers(dir_fd, entry, done)  # the young ones: being written, left
            _report(out, state_dir, entry, LEFTOVER_WHY, done, {})
        return
    about = {"workspace": entry.workspace, "folder": entry.folder, "why": reason}
    for name, what in sorted(entry.others.items()):
        out.kept.append({**about, "path": os.path.join(state_dir, name), "reason": what})
    try:
        with exclusive(dir_fd, entry):
            removed, kept = remove(dir_fd, entry)
    except Held as exc:
        for name in sorted([*entry.files, *entry.leftovers]):
            out.kept.append({**about, "path": os.path.join(state_dir, name),
                             "reason": f"in use: {exc}; stop it first"})  # fmt: skip
        return
    except OSError as exc:
        out.kept.append({**about, "path": os.path.join(state_dir, f"search-{entry.digest}.*"),
                         "reason": exc.strerror or str(exc)})  # fmt: skip
        return
    _report(out, state_dir, entry, reason, removed, kept)


def _report(
    out: Outcome,
    state_dir: str,
    entry: IndexFiles,
    reason: str,
    removed: dict[str, int],
    kept: dict[str, str],
) -> None:
    for name, size in sorted(removed.items()):
        why = LEFTOVER_WHY if name in entry.leftovers else reason
        out.removed.append({"workspace": entry.workspace, "folder": entry.folder, "why": why,
                            "path": os.path.join(state_dir, name), "bytes": size})  # fmt: skip
    for name, what in sorted(kept.items()):
        out.kept.append({"workspace": entry.workspace, "folder": entry.folder, "why": reason,
                         "path": os.path.join(state_dir, name), "reason": what})  # fmt: skip


def _folder_key(path: str | None) -> tuple[int, int] | None:
    try:
        st = os.stat(path) if path else None
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if st is not None else None


def prune_unused(
    state_dir: str,
    unused_days: float,
    serving: frozenset[str],
    served: frozenset[tuple[int, int]] = frozenset(),
) -> Outcome:
    """At `serve`'s start: remove the indexes not served for `unused_days` days (0: never),
    except those of the workspaces it serves (`serving`: their digests); each logged at INFO.
    An index of a folder served now under another name or path (`served`: the folders'
    device and inode) is removed whatever `unused_days` says: nothing keeps it current, so a
    note deleted from the folder would stay in it (issue 27)."""
    now = time.time()

    def select(entry: IndexFiles) -> str | None:
        if served and _folder_key(entry.folder) in served:
            return "its folder is served now under another workspace name or path"
        return _unused(entry, now, unused_days)

    if unused_days <= 0 and not served:
        return Outcome()
    try:
        out = sweep(state_dir, select, skip=serving, leftovers=True)
    except Exception as exc:  # serve starts all the same: pruning is housekeeping
        log.warning("unused search indexes were not pruned: %s", shown(str(exc)))
        return Outcome()
    for record in out.unbelieved:
        log.warning("record not believed %s: %s", shown(record["path"]), shown(record["reason"]))
    for item in out.removed:
        if item["why"] == LEFTOVER_WHY:
            log.info("removed %s (%s bytes): %s", shown(str(item["path"])), item["bytes"],
                     LEFTOVER_WHY)  # fmt: skip
            continue
        log.info(
            "pruned %s (%s bytes): the search index of %s, %s",
            shown(str(item["path"])),
            item["bytes"],
            shown(str(item["folder"] or "an unknown folder")),
            item["why"],
        )
    for item in out.kept:
        log.info("not pruned %s: %s", shown(str(item["path"])), shown(str(item["reason"])))
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
    served = frozenset(k for k in (_folder_key(ws.path) for ws in policy.workspaces) if k)
    prune_unused(state_dir, unused_days, frozenset(serving), served)
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
        outcome = sweep(
            state_dir, lambda e: stale_reason(e, now, args.unused_days), leftovers=True
        )
    if args.json:
        print(json.dumps(outcome.to_json(state_dir), indent=2))
    else:
        _print(outcome, state_dir, args.folder and target)
    return 1 if outcome.kept else 0


def _print(outcome: Outcome, state_dir: str, folder: str | None) -> None:
    for record in outcome.unbelieved:
        print(f"record not believed {shown(record['path'])}: {shown(record['reason'])}; "
              "its index counts as one without a record")  # fmt: skip
    for item in outcome.removed:
        line = f"removed {shown(str(item['path']))} ({_human(int(str(item['bytes'])))})"
        if item["why"] == LEFTOVER_WHY:
            print(f"{line}: {LEFTOVER_WHY}")
        else:
            print(line if folder else f"{line}: {_why(item)}")
    for item in outcome.kept:
        print(f"not removed {shown(str(item['path']))}: {shown(str(item['reason']))}")
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
    if item.get("folder") is None:
        return str(item["why"])
    return f"the index of {shown(str(item['folder']))}: {item['why']}"


REMINDER = (
    "the replay database and the key ring in the state folder, and fs-notes init's files in "
    "~/.config/fs-notes; to remove everything, stop every server and delete both folders"
)
