"""Layer 1 of containment: a strict, pure parser for ``file://`` URIs, note ids and folders.

What it guarantees
  * Every accepted name (a component of a ``WorkspacePath``, a ``NoteId`` or a folder) is
    non-empty, is not ``.`` or ``..``, contains no ``/`` and no NUL, is valid UTF-8 (no lone
    surrogates) and is at most 255 bytes. Those are exactly the rules that make it one name on
    Linux; everything else a Linux name may hold is allowed, so a note is served under its exact
    name: ``%``, ``#``, ``\\``, spaces at either end, NFD and other non-NFC forms, compatibility
    characters (U+2026 ellipsis, U+2105 care-of, U+FF05 fullwidth percent), emoji, any script,
    and control or bidi characters.
  * ``WorkspacePath`` and ``NoteId`` check these invariants in ``__post_init__``: an instance that
    exists is valid, however it was built.
  * ``contains`` compares components, never string prefixes (``/work/notes-evil`` is not inside
    ``/work/notes``); ``relative_note_id`` only returns valid note ids strictly inside the base.
  * Errors are ``LexicalError`` with a stable ``.rule``; the message is fixed per rule and never
    echoes any part of the input.

What it does NOT guarantee (decided, not overlooked)
  * Nothing here touches the file system: symlinks, hard links, mount points, case-insensitive or
    normalizing file systems (vfat, ext4 casefold) are layer 2's business. ``contains`` is purely
    lexical; it says nothing about where a path resolves.
  * That a name looks like what it is. Look-alikes (CYRILLIC SMALL LETTER A U+0430 vs ``a``, an
    NFD twin of an NFC name, FULLWIDTH SOLIDUS U+FF0F vs ``/``), control characters that would
    forge a line and bidi controls that reorder text are all valid names, so they are served
    exactly; the danger is in *showing* them, and ``fs_notes.render`` makes every name and title
    that reaches a person or a model as text unambiguous. Refusing them here protected nothing
    (the resolver never normalizes or decodes: ``a\uff0f..`` is one literal name beneath the
    workspace fd) and made real notes unreachable.

Decisions (each one is a case in tests/test_lexical.py)
  * URI syntax is RFC 3986, strictly: scheme ``file`` (case-insensitive, RFC 3986 section 3.1);
    ``//`` authority required; host empty or ``localhost`` (case-insensitive), no userinfo, port
    or IP literal; a path starting with ``//`` (UNC form, e.g. ``file:////etc``) is a host and is
    refused; no query, no fragment (not even empty ones); raw characters limited to RFC 3986
    ``pchar`` and ``/`` (a raw space, backslash, control or non-ASCII letter must be
    percent-encoded; no IRIs: we accept what we would emit). Percent-escapes are decoded exactly
    once, per segment, after splitting on raw ``/``; hex digits in either case. ``%2F`` is refused
    (a name cannot hold ``/``), and so is ``%00``; the decoded bytes must be strict UTF-8 (no
    overlong forms, no encoded surrogates).
  * A note id is never decoded: ``%2e%2e`` in an id, or a URI that decodes to a name holding
    ``%`` (``%252e`` -> ``%2e``), is that literal name. Only URIs are decoded, and only once.
  * Trailing slash: refused by ``parse_file_uri`` (a file); ``parse_workspace_uri`` accepts exactly
    one (``file:///work/notes/``), since folder URIs are often written that way. The file system
    root (``file:///``) is never a ``WorkspacePath``.
  * Unicode: names are compared exactly, code point by code point (Linux names are bytes; folding
    or normalizing would let two files alias one id, or make one unreachable).
  * Case-sensitive, like Linux; the note suffix is exactly ``.md`` (lowercase).
  * Note ids and folders may not have components starting with ``.`` (``.git``, ``.obsidian``,
    ``.trash`` are never notes). Workspace paths may (``/home/u/.notes`` is a fine workspace).
  * ``validate_note_id`` is also the one rule for what a file found on disk is as a note: a
    listing applies the same checks as to a client's id, so every id it returns can be read
    back; a name that fails (not UTF-8, too long) is skipped and counted under the reason
    ``LexicalError.skip_reason`` gives (``tools/context.py``, ``NotesEnv.notes``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

MAX_NAME_BYTES = 255
"""Longest single name, in UTF-8 bytes (Linux NAME_MAX)."""
MAX_ID_BYTES = 4095
"""Longest note id or folder, in UTF-8 bytes, separators included (the filesystem layer's
PATH_MAX, so every id accepted here can be resolved)."""
MAX_DEPTH = 32
"""Most components in a note id or folder."""
MAX_PATH_BYTES = 2 * MAX_ID_BYTES
"""Longest absolute path (``WorkspacePath.as_posix()``) in UTF-8 bytes."""
MAX_PATH_DEPTH = 2 * MAX_DEPTH
"""Most components in an absolute path."""
MAX_URI_CHARS = 3 * MAX_PATH_BYTES + len("file://localhost//")
"""Longest URI looked at; any path within the limits fits when fully percent-encoded."""
NOTE_SUFFIX = ".md"

RULE_MESSAGES: dict[str, str] = {
    "type": "the value is not a string",
    "scheme": "the URI scheme is not file",
    "authority": "the file URI has no '//' authority part",
    "host": "the file URI names a host other than localhost",
    "query": "the URI has a query part",
    "fragment": "the URI has a fragment part",
    "character": "the URI contains a character that must be percent-encoded",
    "control": "the URI contains a raw control character (percent-encode it)",
    "backslash": "the URI contains a raw backslash (percent-encode it as %5C)",
    "bad-escape": "the URI contains a malformed percent-escape",
    "encoded-separator": "the URI contains an encoded path separator (%2F)",
    "root": "the URI names no folder or file below the file system root",
    "empty": "the id is empty",
    "absolute": "the id is an absolute path; ids are relative to the workspace",
    "empty-segment": "the path has an empty component",
    "dot-segment": "the path has a '.' or '..' component",
    "separator": "a name contains a path separator",
    "nul": "the path contains a NUL character",
    "utf8": "the path is not valid UTF-8",
    "hidden": "a name starts with '.'; hidden files and folders are never notes",
    "not-md": "a note id must end in a name with the .md suffix",
    "too-long": "the path or one of its names is too long",
    "too-deep": "the path has too many components",
    "outside": "the path is not inside the workspace",
}
RULES = frozenset(RULE_MESSAGES)

SKIP_REASONS: dict[str, str] = {
    "utf8": "not UTF-8",
    "too-long": "too long",
    "too-deep": "too deep",
    "hidden": "hidden",
    "not-md": "not a .md name",
}
"""Why a file found on disk is not served, by rule (the counts a listing reports)."""


class LexicalError(ValueError):
    """A refused URI, id or folder. ``rule`` is a stable key of ``RULE_MESSAGES``."""

    def __init__(self, rule: str) -> None:
        if rule not in RULE_MESSAGES:
            raise KeyError(rule)
        super().__init__(RULE_MESSAGES[rule])
        self.rule = rule

    def __reduce__(self) -> tuple[type[LexicalError], tuple[str]]:
        return (LexicalError, (self.rule,))

    @property
    def skip_reason(self) -> str:
        """The reason a listing counts a file it cannot serve under (``SKIP_REASONS``)."""
        return SKIP_REASONS.get(self.rule, self.rule)


# Raw characters a URI may not carry (RFC 3986 has no place for them unencoded).
_URI_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
# RFC 3986 pchar minus pct-encoded (handled separately): unreserved, sub-delims, ':' and '@'.
_PCHAR = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@"
)
_PATH_CHARS = _PCHAR | frozenset("%/")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = frozenset("0123456789abcdefABCDEF")


def _check_name(name: str, *, allow_hidden: bool) -> None:
    """One name: what Linux takes as exactly one name, and nothing more is asked of it."""
    if not name:
        raise LexicalError("empty-segment")
    if name in (".", ".."):
        raise LexicalError("dot-segment")
    if "\x00" in name:
        raise LexicalError("nul")
    if "/" in name:
        raise LexicalError("separator")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: a JSON "\ud800", or os's surrogateescape
        raise LexicalError("utf8") from None
    if size > MAX_NAME_BYTES:
        raise LexicalError("too-long")
    if not allow_hidden and name.startswith("."):
        raise LexicalError("hidden")


def _check_names(
    parts: object, *, allow_hidden: bool, max_depth: int, max_bytes: int, absolute: bool
) -> None:
    if not isinstance(parts, tuple) or not all(isinstance(p, str) for p in parts):
        raise LexicalError("type")
    if len(parts) > max_depth:
        raise LexicalError("too-deep")
    joined = "/".join(parts)
    try:  # one encode for the whole path: every listed note goes through here
        size = len(joined.encode("utf-8")) + (len(parts) if absolute else 0)
    except UnicodeEncodeError:
        size = -1
    if size < 0 or size > MAX_NAME_BYTES or "\x00" in joined:
        for part in parts:  # the slow path names the rule a name breaks
            _check_name(part, allow_hidden=allow_hidden)
    else:
        for part in parts:
            if not part:
                raise LexicalError("empty-segment")
            if part[0] == ".":
                if part in (".", ".."):
                    raise LexicalError("dot-segment")
                if not allow_hidden:
                    raise LexicalError("hidden")
            if "/" in part:
                raise LexicalError("separator")
    if size > max_bytes:
        raise LexicalError("too-long")


@dataclass(frozen=True)
class NoteId:
    """A valid note id: relative, ``/``-separated, every name checked, ending in ``.md``."""

    parts: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.parts == ():
            raise LexicalError("empty")
        _check_names(
            self.parts,
            allow_hidden=False,
            max_depth=MAX_DEPTH,
            max_bytes=MAX_ID_BYTES,
            absolute=False,
        )
        last = self.parts[-1]
        if not (last.endswith(NOTE_SUFFIX) and len(last) > len(NOTE_SUFFIX)):
            raise LexicalError("not-md")

    @property
    def text(self) -> str:
        """The id as clients see it: ``"projects/tps-report.md"``."""
        return "/".join(self.parts)

    @property
    def folder(self) -> tuple[str, ...]:
        """The names of the folders holding the note (``()`` at the workspace root)."""
        return self.parts[:-1]

    @property
    def name(self) -> str:
        """The note's file name (the last component)."""
        return self.parts[-1]

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class WorkspacePath:
    """A valid absolute path below ``/``, by components: ``/work/notes`` is ``("work", "notes")``.

    Hidden components are allowed here (a workspace may live in ``~/.notes``).
    """

    parts: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.parts == ():
            raise LexicalError("root")
        _check_names(
            self.parts,
            allow_hidden=True,
            max_depth=MAX_PATH_DEPTH,
            max_bytes=MAX_PATH_BYTES,
            absolute=True,
        )

    def as_posix(self) -> str:
        return "/" + "/".join(self.parts)

    def joinpath(self, note_id: NoteId) -> WorkspacePath:
        """The absolute path of ``note_id`` beneath this path (may raise too-long/too-deep)."""
        return WorkspacePath(self.parts + note_id.parts)

    def __str__(self) -> str:
        return self.as_posix()


def _decode_segment(raw: str) -> str:
    """Percent-decode one raw path segment exactly once."""
    data = bytearray()
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "%":
            data.append(ord(ch))  # _PCHAR only: ASCII
            i += 1
            continue
        hexdigits = raw[i + 1 : i + 3]
        if len(hexdigits) != 2 or not _HEX.issuperset(hexdigits):
            raise LexicalError("bad-escape")
        byte = int(hexdigits, 16)
        if byte == 0x2F:
            raise LexicalError("encoded-separator")
        if byte == 0:
            raise LexicalError("nul")
        data.append(byte)
        i += 3
    try:
        name = data.decode("utf-8")  # strict: refuses overlong forms and encoded surrogates
    except UnicodeDecodeError:
        raise LexicalError("utf8") from None
    return name


def _parse(uri: object, *, trailing_slash: bool) -> WorkspacePath:
    if not isinstance(uri, str):
        raise LexicalError("type")
    if len(uri) > MAX_URI_CHARS:
        raise LexicalError("too-long")
    if "\x00" in uri:
        raise LexicalError("nul")
    if _URI_CONTROL.search(uri):
        raise LexicalError("control")
    if "\\" in uri:
        raise LexicalError("backslash")
    scheme, colon, rest = uri.partition(":")
    if not colon or not _SCHEME.fullmatch(scheme) or scheme.lower() != "file":
        raise LexicalError("scheme")
    delimiter = re.search("[?#]", rest)
    if delimiter:
        raise LexicalError("query" if delimiter.group() == "?" else "fragment")
    if not rest.startswith("//"):
        raise LexicalError("authority")
    authority, slash, path = rest[2:].partition("/")
    if authority.lower() not in ("", "localhost"):
        raise LexicalError("host")
    path = slash + path
    if path.startswith("//"):
        raise LexicalError("host")
    if not _PATH_CHARS.issuperset(path):
        raise LexicalError("character")
    if trailing_slash and len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    if path in ("", "/"):
        raise LexicalError("root")
    segments = path[1:].split("/")
    if len(segments) > MAX_PATH_DEPTH:
        raise LexicalError("too-deep")
    for raw in segments:
        if not raw:
            raise LexicalError("empty-segment")
    return WorkspacePath(tuple(_decode_segment(raw) for raw in segments))


def parse_file_uri(uri: str) -> WorkspacePath:
    """Parse the ``file://`` URI of a file (no trailing slash) into its absolute path."""
    return _parse(uri, trailing_slash=False)


def parse_workspace_uri(uri: str) -> WorkspacePath:
    """Parse a workspace folder's ``file://`` URI; one trailing slash is allowed."""
    if type(uri) is str:  # exactly str: a subclass could hash or compare in its own way
        return _parse_workspace_cached(uri)
    return _parse(uri, trailing_slash=True)


@functools.lru_cache(maxsize=256)
def _parse_workspace_cached(uri: str) -> WorkspacePath:
    # Every request names its workspace, usually the same few: the parse is a pure function of
    # the string and its result immutable, so it is remembered (refusals are not: they raise).
    return _parse(uri, trailing_slash=True)


def contains(base: WorkspacePath, target: WorkspacePath) -> bool:
    """True if ``target`` is ``base`` or lies beneath it, by components (lexically)."""
    return target.parts[: len(base.parts)] == base.parts


def _split_relative(text: object, *, max_depth: int) -> tuple[str, ...]:
    if not isinstance(text, str):
        raise LexicalError("type")
    if len(text) > MAX_ID_BYTES:  # a bound before splitting; bytes are counted per name later
        raise LexicalError("too-long")
    if text.startswith("/"):
        raise LexicalError("absolute")
    parts = tuple(text.split("/"))
    if len(parts) > max_depth:
        raise LexicalError("too-deep")
    return parts


def validate_note_id(note_id: str) -> NoteId:
    """Check a client-supplied note id (``"projects/tps-report.md"``)."""
    if note_id == "":
        raise LexicalError("empty")
    return NoteId(_split_relative(note_id, max_depth=MAX_DEPTH))


def validate_folder(folder: str) -> tuple[str, ...]:
    """Check the optional ``folder`` argument of notes_list; ``""`` is the workspace root."""
    if folder == "":
        return ()
    parts = _split_relative(folder, max_depth=MAX_DEPTH)
    _check_names(
        parts, allow_hidden=False, max_depth=MAX_DEPTH, max_bytes=MAX_ID_BYTES, absolute=False
    )
    return parts


def _note_in(base: WorkspacePath, target: WorkspacePath) -> NoteId:
    if len(target.parts) <= len(base.parts) or not contains(base, target):
        raise LexicalError("outside")
    return NoteId(target.parts[len(base.parts) :])


def relative_note_id(base: WorkspacePath, target: WorkspacePath) -> str:
    """The id of the note at ``target`` inside ``base``; raises LexicalError ("outside", ...)."""
    return _note_in(base, target).text


def parse_note_uri(base: WorkspacePath, uri: str) -> NoteId:
    """The note a resource URI names inside the workspace ``base``."""
    return _note_in(base, parse_file_uri(uri))


def _encode(names: Iterable[str]) -> str:
    out: list[str] = []
    for name in names:
        out.append("/")
        for byte in name.encode("utf-8"):
            out.append(chr(byte) if byte in _UNRESERVED else f"%{byte:02X}")
    return "".join(out)


def file_uri(path: WorkspacePath) -> str:
    """The canonical URI of an absolute path: ``file:///work/notes``."""
    return "file://" + _encode(path.parts)


def note_uri(base: WorkspacePath, note_id: NoteId) -> str:
    """The canonical URI of a note; ``parse_note_uri(base, note_uri(base, n)) == n``."""
    return file_uri(base.joinpath(note_id))


__all__ = [
    "MAX_DEPTH",
    "MAX_ID_BYTES",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "MAX_PATH_DEPTH",
    "MAX_URI_CHARS",
    "NOTE_SUFFIX",
    "RULES",
    "RULE_MESSAGES",
    "SKIP_REASONS",
    "LexicalError",
    "NoteId",
    "WorkspacePath",
    "contains",
    "file_uri",
    "note_uri",
    "parse_file_uri",
    "parse_note_uri",
    "parse_workspace_uri",
    "relative_note_id",
    "validate_folder",
    "validate_note_id",
]
