"""The team's shared table of escape cases, in a tiny layout notation (after Go's os.Root tests).

Each case is built in a fresh temporary folder ``root`` holding ``ws/`` (the workspace) and
``outside/`` (with ``outside/secret.md`` = "SECRET", always). Layout entries, relative to ``root``:

    "ws/a/"                              a folder
    "ws/a/b.md"                          a regular file, content "inside"
    "ws/a/b.md: text"                    a regular file with that content
    "ws/l.md => ../outside/secret.md"    a symlink; the target is written verbatim
    "ws/f.md |fifo"                      a FIFO
    "ws/s.md |socket"                    a bound unix socket
    "ws/h.md ~> outside/secret.md"       a hard link to an existing file (relative to ``root``)

``{root}`` in a layout entry or a note id stands for the absolute path of ``root`` (no trailing
slash); use ``EscapeCase.note_id_in(root)`` to get the id a client would send.

Fields: ``expect`` is the outcome with every layer on ("refused" or "ok"); ``lexical`` is what
layer 1 alone says about ``note_id`` (test_lexical.py checks it against fs_notes.lexical), so a
case with ``lexical="ok"`` and ``expect="refused"`` must be caught by the filesystem or OS layer.
``protected`` paths (relative to ``root``) must stay unread and unchanged; one that does not exist
before the operation must still not exist after it.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SECRET = "SECRET"
INSIDE = "inside"


@dataclass(frozen=True)
class EscapeCase:
    name: str  # stable, kebab-case: "symlink-final-to-outside"
    layout: tuple[str, ...]  # entries relative to the temp dir, in the notation above
    note_id: str  # the raw id a client sends (may be hostile; may hold "{root}")
    protected: tuple[str, ...]  # paths (relative to the temp dir) that must stay untouched
    expect: str  # "refused" or "ok", with every layer on
    why: str  # one line
    lexical: str = "ok"  # "refused" or "ok": what fs_notes.lexical alone says about note_id

    def note_id_in(self, root: Path) -> str:
        """The id a client sends for this case when the layout is built in ``root``."""
        return self.note_id.replace("{root}", str(root))


_SECRET = ("outside/secret.md",)


def _refused(
    name: str,
    layout: tuple[str, ...],
    note_id: str,
    why: str,
    *,
    lexical: str = "ok",
    protected: tuple[str, ...] = _SECRET,
) -> EscapeCase:
    return EscapeCase(name, layout, note_id, protected, "refused", why, lexical)


CASES: tuple[EscapeCase, ...] = (
    # Controls: with every layer on, these must work.
    EscapeCase(
        "plain-note", ("ws/note.md: hello",), "note.md", _SECRET, "ok", "a note at the root"
    ),
    EscapeCase(
        "nested-note",
        ("ws/projects/", "ws/projects/tps-report.md: # TPS"),
        "projects/tps-report.md",
        _SECRET,
        "ok",
        "a note in a folder",
    ),
    EscapeCase("unicode-note", ("ws/café.md",), "café.md", _SECRET, "ok", "an NFC non-ASCII name"),
    # Refused by the lexical layer.
    _refused(
        "dotdot",
        ("ws/note.md",),
        "../outside/secret.md",
        "'..' out of the workspace",
        lexical="refused",
    ),
    _refused(
        "dotdot-deep",
        ("ws/a/b/",),
        "a/b/../../../outside/secret.md",
        "'..' climbing out from a subfolder",
        lexical="refused",
    ),
    _refused(
        "absolute",
        ("ws/note.md",),
        "{root}/outside/secret.md",
        "an absolute path instead of an id",
        lexical="refused",
    ),
    _refused(
        "backslash",
        ("ws/note.md",),
        "..\\outside\\secret.md",
        "Windows separators are not separators here, and never accepted",
        lexical="refused",
    ),
    EscapeCase(
        "encoded-dotdot",
        ("ws/note.md", "ws/%2e%2e/outside/secret.md: inside"),
        "%2e%2e/outside/secret.md",
        _SECRET,
        "ok",
        "an id is never percent-decoded: '%2e%2e' is the literal name of a folder inside",
    ),
    EscapeCase(
        "nfd-note",
        ("ws/cafe\u0301.md",),
        "cafe\u0301.md",
        _SECRET,
        "ok",
        "an NFD name is served exactly as it is on disk (as macOS sync tools write it)",
    ),
    EscapeCase(
        "percent-and-newline-note",
        ("ws/100% done\nnext.md",),
        "100% done\nnext.md",
        _SECRET,
        "ok",
        "'%' and a newline are valid in a name; only where it is shown is it escaped",
    ),
    _refused(
        "fullwidth-solidus",
        ("ws/note.md",),
        "..\uff0foutside\uff0fsecret.md",
        "one name (U+FF0F is not a separator) starting with '.': hidden, never a note",
        lexical="refused",
    ),
    _refused(
        "nul-byte",
        ("ws/note.md",),
        "note.md\x00../../outside/secret.md",
        "NUL truncates C strings",
        lexical="refused",
    ),
    _refused(
        "hidden-git",
        ("ws/.git/", "ws/.git/config.md: token"),
        ".git/config.md",
        "hidden folders are never notes",
        lexical="refused",
        protected=("ws/.git/config.md", *_SECRET),
    ),
    _refused(
        "long-component",
        ("ws/note.md",),
        "a" * 253 + ".md",
        "a 256-byte name (NAME_MAX is 255)",
        lexical="refused",
    ),
    _refused(
        "deep-path",
        ("ws/" + "d/" * 32 + "x.md",),
        "d/" * 32 + "x.md",
        "33 components (the cap is 32); the file exists",
        lexical="refused",
    ),
    # Lexically fine ids: the filesystem (or OS) layer must refuse them.
    _refused(
        "symlink-final-to-outside",
        ("ws/l.md => ../outside/secret.md",),
        "l.md",
        "the note itself is a symlink out of the workspace",
    ),
    _refused(
        "symlink-final-absolute",
        ("ws/l.md => {root}/outside/secret.md",),
        "l.md",
        "the note itself is an absolute symlink out of the workspace",
    ),
    _refused(
        "symlink-final-inside",
        ("ws/note.md: hello", "ws/l.md => note.md"),
        "l.md",
        "a symlink to a note inside; refused under the default 'deny' symlink policy",
        protected=("ws/note.md", *_SECRET),
    ),
    _refused(
        "symlink-dir-to-outside",
        ("ws/d => ../outside",),
        "d/secret.md",
        "an intermediate folder is a symlink out of the workspace",
    ),
    _refused(
        "symlink-dir-absolute",
        ("ws/d => {root}/outside",),
        "d/secret.md",
        "an intermediate folder is an absolute symlink out of the workspace",
    ),
    _refused(
        "dangling-symlink",
        ("ws/new.md => ../outside/new.md",),
        "new.md",
        "creating through a dangling symlink would create outside/new.md",
        protected=("outside/new.md", *_SECRET),
    ),
    _refused(
        "symlink-loop",
        ("ws/a.md => b.md", "ws/b.md => a.md"),
        "a.md",
        "two symlinks pointing at each other (ELOOP)",
    ),
    _refused(
        "symlink-loop-dir", ("ws/loop => loop",), "loop/x.md", "a folder symlink pointing at itself"
    ),
    _refused(
        "symlink-chain",
        ("ws/a.md => b.md", "ws/b.md => c.md", "ws/c.md => ../outside/secret.md"),
        "a.md",
        "a chain of relative symlinks that ends outside",
    ),
    _refused(
        "magic-link-fd",
        ("ws/fd.md => /proc/self/fd/0",),
        "fd.md",
        "a /proc magic link to the server's own stdin",
    ),
    _refused(
        "magic-link-root",
        ("ws/root => /proc/self/root",),
        "root{root}/outside/secret.md",
        "a folder magic link to the process root, then down to the secret",
    ),
    _refused(
        "hardlink-to-outside",
        ("ws/h.md ~> outside/secret.md",),
        "h.md",
        "a hard link inside shares the outside file's inode (st_nlink > 1)",
    ),
    _refused(
        "fifo-as-note",
        ("ws/f.md |fifo",),
        "f.md",
        "a FIFO named like a note (opening it would block)",
    ),
    _refused("socket-as-note", ("ws/s.md |socket",), "s.md", "a unix socket named like a note"),
    _refused(
        "folder-named-x.md",
        ("ws/x.md/", "ws/x.md/inner.md"),
        "x.md",
        "a folder whose name ends in .md is not a note",
    ),
)


def _checked_relative(entry_path: str) -> Path:
    path = Path(entry_path)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"layout entries must be relative and without '..': {entry_path!r}")
    return path


def _make_parents(root: Path, relative: Path) -> Path:
    """Create the parent folders of ``root/relative``, never through a symlink."""
    current = root
    for name in relative.parts[:-1]:
        current = current / name
        if current.is_symlink():
            raise ValueError(f"layout would create something through a symlink: {relative}")
        current.mkdir(exist_ok=True)
    return root / relative


def _make_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) < 100:
            sock.bind(os.fsencode(path))
        else:  # sun_path is ~108 bytes: bind through a short /proc/self/fd path to the parent
            parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                sock.bind(f"/proc/self/fd/{parent}/{path.name}")
            finally:
                os.close(parent)
    finally:
        sock.close()


def build_layout(root: Path, layout: Iterable[str]) -> None:
    """Create ``root/ws/``, ``root/outside/secret.md`` ("SECRET") and every layout entry."""
    (root / "ws").mkdir(parents=True, exist_ok=True)
    (root / "outside").mkdir(exist_ok=True)
    (root / "outside" / "secret.md").write_text(SECRET, encoding="utf-8")
    for raw_entry in layout:
        entry = raw_entry.replace("{root}", str(root))
        if " => " in entry:
            name, target = entry.split(" => ", 1)
            _make_parents(root, _checked_relative(name)).symlink_to(target)
        elif " ~> " in entry:
            name, target = entry.split(" ~> ", 1)
            source = root / _checked_relative(target)
            os.link(source, _make_parents(root, _checked_relative(name)), follow_symlinks=False)
        elif entry.endswith(" |fifo"):
            os.mkfifo(_make_parents(root, _checked_relative(entry.removesuffix(" |fifo"))))
        elif entry.endswith(" |socket"):
            _make_socket(_make_parents(root, _checked_relative(entry.removesuffix(" |socket"))))
        elif entry.endswith("/"):
            _make_parents(root, _checked_relative(entry) / "-")  # makes the folder itself
        else:
            name, sep, content = entry.partition(": ")
            path = _make_parents(root, _checked_relative(name))
            path.write_text(content if sep else INSIDE, encoding="utf-8")


def file_kind(path: Path) -> str:
    """ "symlink", "fifo", "socket", "dir", "file" or "missing", without following symlinks."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return "missing"
    for kind, test in (
        ("symlink", stat.S_ISLNK),
        ("fifo", stat.S_ISFIFO),
        ("socket", stat.S_ISSOCK),
        ("dir", stat.S_ISDIR),
        ("file", stat.S_ISREG),
    ):
        if test(mode):
            return kind
    return "other"


__all__ = ["CASES", "INSIDE", "SECRET", "EscapeCase", "build_layout", "file_kind"]
