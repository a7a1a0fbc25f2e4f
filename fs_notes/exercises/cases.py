"""The one table of escape cases: each a hostile layout, the raw id a client sends, and what each
layer must make of it.

A case is built with the layout notation of `layout.py` (``root/ws`` is the workspace,
``root/outside/secret.md`` the secret); ``{root}`` in an id stands for the root's absolute path.
Its fields say what each layer does, and the tests run the one table over each of them:

- ``expect``: with every layer on, "refused" or "ok" (tests/test_tools_escapes.py, every tool);
- ``lexical``: what layer 1 alone says of the id (tests/test_lexical.py), so a case with
  ``lexical="ok"`` and ``expect="refused"`` is one the filesystem or OS layer must catch;
- ``layer2``: the exact FsError subclass (None: success) layer 2 alone raises, per symlink
  policy and operation, the same on each of its resolvers (tests/test_fs_root.py runs every case
  x resolver x policy x operation); keys, most specific first: "policy:op", "policy:kind",
  "op", "kind", "policy", "*" (kind: "read" or "write");
- ``protected``: paths (relative to the root) that must stay unread and unchanged, and absent if
  absent; the OS layer alone must keep those outside the workspace so (tests/test_sandbox_shared_
  table.py);
- ``kind``: the attack class (`classes.py`): every case is also an attack of the catalogue, by its
  name (`catalogue.py`), run through the real server with each layer knocked out.

Guarantees: names are unique (a test checks); the table is data, and imports nothing that runs.
Does not: cover races, mounts, devices or compromised code (those are attacks of the catalogue
only: a unit test cannot build them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..fs.errors import (
    Escape,
    FsError,
    Hardlinked,
    IdentityChanged,
    InvalidPath,
    NoteExists,
    NoteNotFound,
    NotRegular,
    SymlinkRefused,
)
from .classes import (
    ABSOLUTE,
    CHAINS,
    CONTROL,
    DANGLING,
    DIR_LINK,
    DIR_MD,
    DOTDOT,
    ENCODED,
    FINAL_LINK,
    HARDLINK,
    LONG,
    LOOKALIKE,
    MAGIC,
    MOVE,
    NUL,
    ODD_ID,
    SEPARATORS,
    SPECIAL,
    UTF8,
)

OPS = ("read", "stat", "create", "update", "unlink", "list")
KIND = {"read": "read", "stat": "read", "list": "read", "create": "write", "update": "write"}
KIND["unlink"] = "write"
Err = type[FsError] | None  # None: the operation succeeds (and must still change nothing outside)
SECRET_NOTE = "outside/secret.md"  # noqa: S105 (a path, not a password)


@dataclass(frozen=True)
class EscapeCase:
    name: str  # stable, kebab-case; also the name of its attack in the catalogue
    kind: str  # the attack class (classes.py)
    layout: tuple[str, ...]  # in the notation of layout.py
    note_id: str  # the raw id a client sends (may be hostile; may hold "{root}")
    why: str  # one line
    layer2: Mapping[str, Err]  # see the module docstring
    expect: str = "refused"  # "refused" or "ok", with every layer on
    lexical: str = "ok"  # "refused" or "ok": what fs_notes.lexical alone says about note_id
    protected: tuple[str, ...] = (SECRET_NOTE,)

    def note_id_in(self, root: Path) -> str:
        """The id a client sends for this case when the layout is built in ``root``."""
        return self.note_id.replace("{root}", str(root))

    def layer2_error(self, policy: str, op: str) -> Err:
        """What layer 2 alone gives for ``op`` under the symlink ``policy`` (None: success)."""
        for key in (f"{policy}:{op}", f"{policy}:{KIND[op]}", op, KIND[op], policy, "*"):
            if key in self.layer2:
                return self.layer2[key]
        raise KeyError(f"{self.name}: no layer 2 expectation for {policy} {op}")


# What layer 2 gives, by family: a served note; a final symlink leading out ('within' follows it
# for reads only, and finds it leads out); a folder symlink leading out; a loop; a hard link; a
# name that is one literal name inside (only create finds nothing in the way); not a file.
SERVED: Mapping[str, Err] = {"*": None, "create": NoteExists, "list": NoteNotFound}
FINAL_OUT: Mapping[str, Err] = {"deny": SymlinkRefused, "within": Escape, "write": SymlinkRefused}
FOLDER_OUT: Mapping[str, Err] = {"deny": SymlinkRefused, "within": Escape}
LOOP: Mapping[str, Err] = {"*": SymlinkRefused}
HARD: Mapping[str, Err] = {"*": Hardlinked, "create": NoteExists, "list": NoteNotFound}
LITERAL: Mapping[str, Err] = {"*": NoteNotFound, "create": None}  # one literal name, inside
NOT_REGULAR: Mapping[str, Err] = {"*": NotRegular, "create": NoteExists, "list": NoteNotFound}

_NOTE = ("ws/note.md",)
_NOTE_AND_FOLDER = ("ws/note.md", "ws/a/")


def _served(name: str, kind: str, layout: tuple[str, ...], note_id: str, why: str) -> EscapeCase:
    return EscapeCase(name, kind, layout, note_id, why, SERVED, expect="ok")


def _lexical(
    name: str, kind: str, note_id: str, why: str, error: type[FsError], **more: Err
) -> EscapeCase:
    """Refused by layer 1; layer 2 alone refuses it too, with ``error`` (``more``: per op)."""
    layer2 = {"*": error, **more}
    return EscapeCase(name, kind, _NOTE_AND_FOLDER, note_id, why, layer2, lexical="refused")


CASES: tuple[EscapeCase, ...] = (
    # Controls: with every layer on, these must work.
    _served("plain-note", CONTROL, ("ws/note.md: hello",), "note.md", "a note at the root"),
    _served(
        "nested-note",
        CONTROL,
        ("ws/projects/", "ws/projects/tps-report.md: # TPS"),
        "projects/tps-report.md",
        "a note in a folder",
    ),
    _served("unicode-note", CONTROL, ("ws/café.md",), "café.md", "an NFC non-ASCII name"),
    _served(
        "percent-and-newline-note",
        CONTROL,
        ("ws/100% done\nnext.md",),
        "100% done\nnext.md",
        "'%' and a newline are valid in a name; only where it is shown is it escaped",
    ),
    _served(
        "encoded-dotdot-id",
        ENCODED,
        ("ws/note.md", "ws/%2e%2e/outside/secret.md: inside"),
        "%2e%2e/outside/secret.md",
        "an id is never percent-decoded: '%2e%2e' is the literal name of a folder inside",
    ),
    _served(
        "nfd-note",
        LOOKALIKE,
        ("ws/cafe\u0301.md",),
        "cafe\u0301.md",
        "an NFD name is served exactly as it is on disk (as macOS sync tools write it)",
    ),
    # Refused by the lexical layer, and by layer 2 alone too (ids are canonical).
    _lexical("dotdot-id", DOTDOT, "../outside/secret.md", "'..' out of the workspace", Escape),
    EscapeCase(
        "dotdot-deep",
        DOTDOT,
        ("ws/a/b/",),
        "a/b/../../../outside/secret.md",
        "'..' climbing out from a subfolder",
        {"*": Escape},
        lexical="refused",
    ),
    _lexical(
        "dotdot-staying-inside", DOTDOT, "a/../note.md", "'..' even when it stays inside", Escape
    ),
    _lexical("id-dotdot", ODD_ID, "..", "the id '..'", Escape),
    _lexical(
        "absolute-id",
        ABSOLUTE,
        "{root}/outside/secret.md",
        "an absolute path instead of an id",
        Escape,
    ),
    _lexical(
        "absolute-proc-root",
        ABSOLUTE,
        "/proc/self/root{root}/outside/secret.md",
        "an absolute path through the process root's magic link",
        Escape,
    ),
    _lexical("absolute-slash", ABSOLUTE, "/", "the id '/'", Escape),
    _lexical(
        "nul-id", NUL, "note.md\x00../../outside/secret.md", "NUL truncates C strings", InvalidPath
    ),
    _lexical(
        "empty-id",
        ODD_ID,
        "",
        "an empty id (listing it lists the workspace)",
        InvalidPath,
        list=None,
    ),
    _lexical("id-dot", ODD_ID, ".", "the id '.' (the workspace itself)", InvalidPath),
    _lexical("dot-component", ODD_ID, "./note.md", "a '.' component", InvalidPath),
    _lexical("double-slash", ODD_ID, "a//note.md", "an empty component", InvalidPath),
    _lexical("id-trailing-slash", ODD_ID, "note.md/", "a trailing '/'", InvalidPath),
    _lexical(
        "long-component",
        LONG,
        "a" * 253 + ".md",
        "a 256-byte name (NAME_MAX is 255)",
        InvalidPath,
    ),
    EscapeCase(
        "deep-path",
        LONG,
        ("ws/" + "d/" * 32 + "x.md",),
        "d/" * 32 + "x.md",
        "33 components (the cap is 32); the file exists",
        {"*": InvalidPath},
        lexical="refused",
    ),
    _lexical("unencodable", UTF8, "\ud800.md", "a lone surrogate: no bytes on disk", InvalidPath),
    # Refused by the lexical layer; to layer 2 alone each is one literal name, or a hidden one.
    EscapeCase(
        "backslash-id",
        SEPARATORS,
        _NOTE,
        "..\\outside\\secret.md",
        "Windows separators are not separators here, and never accepted",
        LITERAL,
        lexical="refused",
    ),
    EscapeCase(
        "fullwidth-solidus",
        LOOKALIKE,
        _NOTE,
        "..\uff0foutside\uff0fsecret.md",
        "one name (U+FF0F is not a separator) starting with '.': hidden, never a note",
        LITERAL,
        lexical="refused",
    ),
    EscapeCase(
        "hidden-git",
        ODD_ID,
        ("ws/.git/", "ws/.git/config.md: token"),
        ".git/config.md",
        "hidden folders are never notes (the lexical layer's rule: layer 2 serves them)",
        {**SERVED, "unlink": IdentityChanged},  # unlink is given the outside file's identity
        lexical="refused",
        protected=("ws/.git/config.md", SECRET_NOTE),
    ),
    # Lexically fine ids: the filesystem (or OS) layer must refuse them.
    EscapeCase(
        "symlink-final",
        FINAL_LINK,
        ("ws/l.md => ../outside/secret.md",),
        "l.md",
        "the note itself is a symlink out of the workspace",
        FINAL_OUT,
    ),
    EscapeCase(
        "symlink-final-absolute",
        FINAL_LINK,
        ("ws/l.md => {root}/outside/secret.md",),
        "l.md",
        "the note itself is an absolute symlink out of the workspace",
        FINAL_OUT,
    ),
    EscapeCase(
        "symlink-final-deep",
        FINAL_LINK,
        ("ws/a/b/l.md => ../../../outside/secret.md",),
        "a/b/l.md",
        "a note in a subfolder is a symlink out of the workspace",
        FINAL_OUT,
    ),
    EscapeCase(
        "symlink-final-inside-then-out",
        FINAL_LINK,
        ("ws/sub/", "ws/sub/l.md => ../../outside/secret.md"),
        "sub/l.md",
        "a symlink whose target climbs through the workspace and out",
        FINAL_OUT,
    ),
    EscapeCase(
        "symlink-final-inside",
        FINAL_LINK,
        ("ws/note.md: hello", "ws/l.md => note.md"),
        "l.md",
        "a symlink to a note inside; refused under the default 'deny' symlink policy",
        {
            "deny": SymlinkRefused,
            "within": None,
            "write": SymlinkRefused,
            "within:list": NoteNotFound,
        },
        protected=("ws/note.md", SECRET_NOTE),
    ),
    EscapeCase(
        "symlink-dir",
        DIR_LINK,
        ("ws/d => ../outside",),
        "d/secret.md",
        "an intermediate folder is a symlink out of the workspace",
        FOLDER_OUT,
    ),
    EscapeCase(
        "symlink-dir-absolute",
        DIR_LINK,
        ("ws/d => {root}/outside",),
        "d/secret.md",
        "an intermediate folder is an absolute symlink out of the workspace",
        FOLDER_OUT,
    ),
    EscapeCase(
        "symlink-dir-dotdot-target",
        DIR_LINK,
        ("ws/a/", "ws/a/up => ../.."),
        "a/up/outside/secret.md",
        "a folder symlink to '../..', then down to the secret",
        FOLDER_OUT,
    ),
    EscapeCase(
        "symlink-dir-inside-then-out",
        DIR_LINK,
        ("ws/sub/", "ws/sub/up => ..", "ws/out => ../outside"),
        "sub/up/out/secret.md",
        "a folder symlink that stays inside, then one that leads out",
        FOLDER_OUT,
    ),
    EscapeCase(
        "dangling-symlink-create",
        DANGLING,
        ("ws/new.md => ../outside/new.md",),
        "new.md",
        "creating through a dangling symlink would create outside/new.md",
        FINAL_OUT,
        protected=("outside/new.md", SECRET_NOTE),
    ),
    EscapeCase(
        "symlink-dir-dangling",
        DANGLING,
        ("ws/nd => ../outside/newdir",),
        "nd/x.md",
        "a dangling folder symlink: creating through it would need outside/newdir",
        FOLDER_OUT,
        protected=("outside/newdir", SECRET_NOTE),
    ),
    EscapeCase(
        "symlink-chain",
        CHAINS,
        ("ws/a.md => b.md", "ws/b.md => c.md", "ws/c.md => ../outside/secret.md"),
        "a.md",
        "a chain of relative symlinks that ends outside",
        FINAL_OUT,
    ),
    EscapeCase(
        "symlink-loop",
        CHAINS,
        ("ws/a.md => b.md", "ws/b.md => a.md"),
        "a.md",
        "two symlinks pointing at each other (ELOOP)",
        LOOP,
    ),
    EscapeCase(
        "symlink-loop-dir",
        CHAINS,
        ("ws/loop => loop",),
        "loop/x.md",
        "a folder symlink pointing at itself",
        LOOP,
    ),
    EscapeCase(
        "magic-link-stdin",
        MAGIC,
        ("ws/fd.md => /proc/self/fd/0",),
        "fd.md",
        "a /proc magic link to the server's own stdin",
        FINAL_OUT,
    ),
    EscapeCase(
        "magic-link-self-exe",
        MAGIC,
        ("ws/exe.md => /proc/self/exe",),
        "exe.md",
        "a /proc magic link to the server's own executable",
        FINAL_OUT,
    ),
    EscapeCase(
        "magic-link-root",
        MAGIC,
        ("ws/root => /proc/self/root",),
        "root{root}/outside/secret.md",
        "a folder magic link to the process root, then down to the secret",
        FOLDER_OUT,
    ),
    EscapeCase(
        "magic-link-cwd",
        MAGIC,
        ("ws/cwd => /proc/self/cwd",),
        "cwd/secret.md",
        "a folder magic link to the server's current folder",
        FOLDER_OUT,
    ),
    EscapeCase(
        "hardlink",
        HARDLINK,
        ("ws/h.md ~> outside/secret.md",),
        "h.md",
        "a hard link inside shares the outside file's inode (st_nlink > 1)",
        HARD,
    ),
    EscapeCase(
        "hardlink-in-folder",
        HARDLINK,
        ("ws/a/", "ws/a/h.md ~> outside/secret.md"),
        "a/h.md",
        "a hard link to the outside file, in a subfolder",
        HARD,
    ),
    EscapeCase(
        "fifo-note",
        SPECIAL,
        ("ws/f.md |fifo",),
        "f.md",
        "a FIFO named like a note (opening it would block)",
        NOT_REGULAR,
    ),
    EscapeCase(
        "socket-note",
        SPECIAL,
        ("ws/s.md |socket",),
        "s.md",
        "a unix socket named like a note",
        NOT_REGULAR,
    ),
    EscapeCase(
        "folder-named-md",
        DIR_MD,
        ("ws/x.md/", "ws/x.md/inner.md"),
        "x.md",
        "a folder whose name ends in .md is not a note",
        {"*": NotRegular, "create": NoteExists, "list": None},
    ),
    # Moves (notes_move, added 2026-12-01): the id is the move's hostile end, the target or the
    # source; the catalogue's attacks of these names move note.md to it, or it to stolen.md.
    EscapeCase(
        "move-target-dotdot",
        MOVE,
        _NOTE_AND_FOLDER,
        "../outside/moved.md",
        "a move's target climbs out with '..'",
        {"*": Escape},
        lexical="refused",
        protected=("outside/moved.md", SECRET_NOTE),
    ),
    EscapeCase(
        "move-target-absolute",
        MOVE,
        _NOTE_AND_FOLDER,
        "{root}/outside/moved.md",
        "a move's target is an absolute path outside",
        {"*": Escape},
        lexical="refused",
        protected=("outside/moved.md", SECRET_NOTE),
    ),
    EscapeCase(
        "move-target-folder-symlink",
        MOVE,
        ("ws/note.md", "ws/d => ../outside"),
        "d/moved.md",
        "a move's target folder is a symlink to outside",
        FOLDER_OUT,
        protected=("outside/moved.md", SECRET_NOTE),
    ),
    EscapeCase(
        "move-source-folder-symlink",
        MOVE,
        ("ws/note.md", "ws/d => ../outside"),
        "d/secret.md",
        "a move's source folder is a symlink to outside: the secret would be moved in",
        FOLDER_OUT,
    ),
    EscapeCase(
        "move-hardlinked-source",
        MOVE,
        ("ws/h.md ~> outside/secret.md",),
        "h.md",
        "a hard-linked source: moving it changes the outside file's inode (its ctime)",
        HARD,
    ),
)

BY_NAME: Mapping[str, EscapeCase] = {case.name: case for case in CASES}
