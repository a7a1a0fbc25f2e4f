"""The start-up class's cases: layouts `fs-notes serve` must refuse before it serves anything.

Each case builds, in a folder of its own, a hostile layout and the `serve` arguments for it
(always `--policy FILE --state-dir DIR`), or, for its control, the same layout made right, which
must start. The layouts (issue 27; tests/test_startup_refusals.py holds the same refusals):

- symlinked-folder-above: bob's folder above his workspace is a symbolic link to the folder
  above alice's notes, so his workspace would serve hers. As root the link is given to another
  uid (bob's; control: the link stays root's). A regular user cannot give a link away, so its
  link lies in a folder others can write, where anyone could have put it (control: not
  writable by others).
- two-workspaces-one-folder: a link on bob's way makes his workspace alice's very folder
  (control: bob's own folder there).
- workspace-inside-another, workspace-holding-another: a link makes bob's workspace a folder
  inside alice's, with his workspace listed after hers ("is inside") or before ("holds")
  (control: bob's own folder there).
- state-folder-others-can-write: --state-dir is 0777 (control: 0700).
- replay-folder-others-can-write: --replay-db lies in a folder others can write, sticky like
  /tmp (1777: another user may have put a file or a link at its name; control: 0700).
- audit-folder-others-can-write: the same for --audit-log (0777; control: 0700).

Guarantees: everything is built beneath the folder given, whose parents must be root's or this
user's and not writable by others (a fresh temporary folder is); the state folder (0700) and
the folders `XDG_STATE_HOME` and `XDG_CONFIG_HOME` name for the server are empty when built,
so serve never touches its caller's state folder; `refusal` is the exact last line serve must
print on stderr, written here from the layout, not taken from the product's code.
Does not: run serve or judge (`startup.py`); cover a bind mount (only root makes one, and the
same (device, inode) twice is two-workspaces-one-folder's refusal), another user's state folder
(a regular user cannot make one), or the folders of --state-key-file and --audit-log: serve
makes the replay database in the state folder before it checks those, which this class would
count as harm.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

NOT_TWO = "two workspaces must be two folders, neither inside the other"


@dataclass(frozen=True)
class Layout:
    args: tuple[str, ...]  # of `fs-notes serve`
    env: Mapping[str, str]  # set for the server, over the caller's environment
    # the notes and the folders holding them: must stay as they are (content, mode, owner,
    # modification time, inode; a folder's modification time moves when an entry is made in it)
    kept: tuple[Path, ...]
    untouched: tuple[Path, ...]  # folders, empty when built, in which nothing may be made
    refusal: str  # hostile: serve's last line on stderr; the control: ""


@dataclass(frozen=True)
class StartupCase:
    name: str
    why: str
    build: Callable[[Path, bool], Layout]  # (the case's own folder, hostile?)


def folder(path: Path, mode: int = 0o755) -> Path:
    """``path`` and its missing parents, each of exactly ``mode`` (whatever the umask)."""
    if not path.is_dir():
        folder(path.parent)
        path.mkdir()
        path.chmod(mode)
    return path


def _note(path: Path, text: str) -> Path:
    folder(path.parent).joinpath(path.name).write_text(text, encoding="utf-8")
    return path


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def unused_uid() -> int:
    """A uid no account has (bob, to whom root gives the link)."""
    uid = 12345
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


def _layout(
    root: Path,
    workspaces: tuple[tuple[str, Path], ...],
    kept: tuple[Path, ...],
    refusal: str,
    *,
    state_mode: int = 0o700,
    more: tuple[str, ...] = (),
    untouched: tuple[Path, ...] = (),
) -> Layout:
    """The policy (one local principal, alice, granted read on every workspace), the state
    folder and the server's XDG folders, around a case's own layout."""
    text = '[[principal]]\nname = "alice"\nlocal = true\n\n'
    for name, path in workspaces:
        text += f"[[workspace]]\nname = {json.dumps(name)}\npath = {json.dumps(str(path))}\n\n"
        text += f'[[grant]]\nprincipal = "alice"\nworkspace = "{name}"\noperations = ["read"]\n\n'
    policy = root / "policy.toml"
    policy.write_text(text, encoding="utf-8")
    state = folder(root / "state", state_mode)
    xdg_state, xdg_config = folder(root / "xdg-state", 0o700), folder(root / "xdg-config", 0o700)
    return Layout(
        ("--policy", str(policy), "--state-dir", str(state), *more),
        {"XDG_STATE_HOME": str(xdg_state), "XDG_CONFIG_HOME": str(xdg_config)},
        kept,
        (state, xdg_state, xdg_config, *untouched),
        refusal,
    )


def _symlinked_folder_above(root: Path, hostile: bool) -> Layout:
    diary = _note(root / "alice" / "notes" / "diary.md", "# Diary\nalice's\n")
    bob = folder(root / "bob")
    link = bob / "projects"
    link.symlink_to(root / "alice")
    ws = link / "notes"
    where = f'fs-notes: workspace "bob" ({ws}):'
    refusal = ""
    if hostile and os.geteuid() == 0:
        uid = unused_uid()
        os.lchown(link, uid, uid)
        refusal = (
            f"{where} {link} is a symbolic link of {_user(uid)}, not of root, the folder's "
            "owner: its owner could make the path lead to another folder"
        )
    elif hostile:
        bob.chmod(0o777)
        refusal = f"{where} {bob} can be written by others (mode 0777; chmod go-w fixes it)"
    return _layout(root, (("bob", ws),), (diary, diary.parent), refusal)


def _one_folder(root: Path, hostile: bool) -> Layout:
    alices = root / "alice"
    diary = _note(alices / "diary.md", "# Diary\nalice's\n")
    projects = root / "bob" / "projects"
    bobs = projects / "alice"
    refusal = ""
    if hostile:
        folder(projects.parent)
        projects.symlink_to(root)  # the folder above alice's
        refusal = (
            f'fs-notes: workspace "bob" ({bobs}) opens the same folder as workspace "alice" '
            f"({alices}): {NOT_TWO}"
        )
    else:
        _note(bobs / "plan.md", "# Plan\nbob's\n")
    return _layout(root, (("alice", alices), ("bob", bobs)), (diary, alices), refusal)


def _nested(root: Path, hostile: bool, *, bob_first: bool) -> Layout:
    alices = root / "alice"
    diary = _note(alices / "diary.md", "# Diary\nalice's\n")
    old = _note(alices / "archive" / "old.md", "# Old\nalice's\n")
    projects = root / "bob" / "projects"
    bobs = projects / "archive"
    if hostile:
        folder(projects.parent)
        projects.symlink_to(alices)
    else:
        _note(bobs / "plan.md", "# Plan\nbob's\n")
    alice, bob = f'workspace "alice" ({alices})', f'workspace "bob" ({bobs})'
    if bob_first:
        workspaces = (("bob", bobs), ("alice", alices))
        refusal = f"fs-notes: {alice} holds {bob}: {NOT_TWO}"
    else:
        workspaces = (("alice", alices), ("bob", bobs))
        refusal = f"fs-notes: {bob} is inside {alice}: {NOT_TWO}"
    kept = (diary, old, alices, old.parent)
    return _layout(root, workspaces, kept, refusal if hostile else "")


def _state_folder(root: Path, hostile: bool) -> Layout:
    note = _note(root / "notes" / "a.md", "# A\n")
    state = root / "state"
    refusal = (
        f"fs-notes: --state-dir {state} can be written by the group or others (mode 0777); "
        f"fix it with: chmod go-w {shlex.quote(str(state))}"
    )
    return _layout(root, (("notes", note.parent),), (note, note.parent),
                   refusal if hostile else "", state_mode=0o777 if hostile else 0o700)  # fmt: skip


def _replay_folder(root: Path, hostile: bool) -> Layout:
    note = _note(root / "notes" / "a.md", "# A\n")
    shared = folder(root / "shared", 0o1777 if hostile else 0o700)
    db = shared / "replay.sqlite3"
    refusal = (
        f"fs-notes: the replay database {db}: {shared} can be written by others (mode 1777; "
        "chmod go-w fixes it)"
    )
    return _layout(root, (("notes", note.parent),), (note, note.parent),
                   refusal if hostile else "", more=("--replay-db", str(db)),
                   untouched=(shared,))  # fmt: skip


def _audit_folder(root: Path, hostile: bool) -> Layout:
    note = _note(root / "notes" / "a.md", "# A\n")
    shared = folder(root / "logs", 0o777 if hostile else 0o700)
    log = shared / "audit.jsonl"
    refusal = (
        f"fs-notes: --audit-log {log}: {shared} can be written by others (mode 0777; "
        "chmod go-w fixes it)"
    )
    return _layout(root, (("notes", note.parent),), (note, note.parent),
                   refusal if hostile else "", more=("--audit-log", str(log)),
                   untouched=(shared,))  # fmt: skip


CASES: tuple[StartupCase, ...] = (
    StartupCase(
        "symlinked-folder-above",
        "a folder above bob's workspace is a link to alice's (as root: a link of bob's; as a "
        "regular user: in a folder others can write)",
        _symlinked_folder_above,
    ),
    StartupCase(
        "two-workspaces-one-folder",
        "a link on bob's way makes his workspace alice's very folder",
        _one_folder,
    ),
    StartupCase(
        "workspace-inside-another",
        "a link makes bob's workspace, listed after alice's, a folder inside hers",
        lambda root, hostile: _nested(root, hostile, bob_first=False),
    ),
    StartupCase(
        "workspace-holding-another",
        "a link makes bob's workspace, listed before alice's, a folder inside hers",
        lambda root, hostile: _nested(root, hostile, bob_first=True),
    ),
    StartupCase(
        "state-folder-others-can-write",
        "--state-dir can be written by others (0777): its replay database and key ring too",
        _state_folder,
    ),
    StartupCase(
        "replay-folder-others-can-write",
        "--replay-db lies in a folder others can write, sticky like /tmp (1777): a file or a "
        "link another user put at its name would be used",
        _replay_folder,
    ),
    StartupCase(
        "audit-folder-others-can-write",
        "--audit-log lies in a folder others can write (0777): they could replace it",
        _audit_folder,
    ),
)
