"""Layer 1 of containment: a strict, pure parser for ``file://`` URIs, note ids and folders.

What it guarantees
  * Every accepted name (a component of a ``WorkspacePath``, a ``NoteId`` or a folder) is
    non-empty, is not ``.`` or ``..``, is valid UTF-8 in Unicode NFC, is at most 255 bytes, and
    contains no ``/``, ``\\``, ``%``, NUL, C0/DEL/C1 control, line/paragraph separator or bidi
    control. It stays so after NFKC compatibility normalization: FULLWIDTH SOLIDUS U+FF0F, TWO DOT
    LEADER U+2025 or ACCOUNT OF U+2100 (NFKC: ``/``, ``..``, ``a/c``) are refused, so a tool that
    NFKC-normalizes cannot turn a name into a separator or a dot segment; so are a few slash-shaped
    math symbols NFKC leaves alone (U+2044, U+2215, U+2216, U+2571, U+2572, U+29F5, U+29F8, U+29F9).
  * ``WorkspacePath`` and ``NoteId`` check these invariants in ``__post_init__``: an instance that
    exists is valid, however it was built.
  * ``contains`` compares components, never string prefixes (``/work/notes-evil`` is not inside
    ``/work/notes``); ``relative_note_id`` only returns valid note ids strictly inside the base.
  * Errors are ``LexicalError`` with a stable ``.rule``; the message is fixed per rule and never
    echoes any part of the input.

What it does NOT guarantee
  * Nothing here touches the file system: symlinks, hard links, mount points, case-insensitive or
    normalizing file systems (vfat, ext4 casefold) are layer 2's business. ``contains`` is purely
    lexical; it says nothing about where a path resolves.
  * Visual look-alikes that are letters (CYRILLIC SMALL LETTER A U+0430 vs ``a``, KATAKANA LETTER
    NO U+30CE vs ``/``) are just other names, accepted; showing ids unambiguously is the UI's job.

Decisions (each one is a case in tests/test_lexical.py)
  * URI syntax is RFC 3986, strictly: scheme ``file`` (case-insensitive, RFC 3986 section 3.1);
    ``//`` authority required; host empty or ``localhost`` (case-insensitive), no userinfo, port
    or IP literal; a path starting with ``//`` (UNC form, e.g. ``file:////etc``) is a host and is
    refused; no query, no fragment (not even empty ones); raw characters limited to RFC 3986
    ``pchar`` and ``/`` (a raw space or non-ASCII letter must be percent-encoded; no IRIs: we accept
    what we would emit). Percent-escapes are decoded exactly once, per segment, after splitting on
    raw ``/``; hex digits in either case.
  * A decoded name that still contains ``%`` is refused as double encoding (``%252e%252e`` would
    become ``..`` for any second decoder down the line). For the same reason, and so that every
    note id has a URI that round-trips, note ids and folders may not contain ``%`` either.
  * Trailing slash: refused by ``parse_file_uri`` (a file); ``parse_workspace_uri`` accepts exactly
    one (``file:///work/notes/``), since folder URIs are often written that way. The file system
    root (``file:///``) is never a ``WorkspacePath``.
  * Unicode: names are compared exactly, code point by code point (Linux names are bytes; folding
    would let two files alias one id). Names must be NFC: an NFD twin of an NFC name would look
    identical to a user confirming a deletion, so non-NFC files are simply not notes.
  * Case-sensitive, like Linux; the note suffix is exactly ``.md`` (lowercase).
  * Note ids and folders may not have components starting with ``.`` (``.git``, ``.obsidian``,
    ``.trash`` are never notes). Workspace paths may (``/home/u/.notes`` is a fine workspace).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

MAX_NAME_BYTES = 255
"""Longest single name, in UTF-8 bytes (Linux NAME_MAX)."""
MAX_ID_BYTES = 4096
"""Longest note id or folder, in UTF-8 bytes, separators included."""
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
    "bad-escape": "the URI contains a malformed percent-escape",
    "double-encoding": "a name is percent-encoded more than once",
    "encoded-separator": "the URI contains an encoded path separator",
    "root": "the URI names no folder or file below the file system root",
    "empty": "the id is empty",
    "absolute": "the id is an absolute path; ids are relative to the workspace",
    "empty-segment": "the path has an empty component",
    "dot-segment": "the path has a '.' or '..' component",
    "separator": "a name contains a path separator",
    "backslash": "the path contains a backslash",
    "nul": "the path contains a NUL character",
    "control": "the path contains a control or bidirectional formatting character",
    "utf8": "the path is not valid UTF-8",
    "nfc": "a name is not in Unicode normalization form C",
    "lookalike": "a name contains a character that stands for a separator, a dot or a control",
    "percent": "a name contains '%', which names may not contain",
    "hidden": "a name starts with '.'; hidden files and folders are never notes",
    "not-md": "a note id must end in a name with the .md suffix",
    "too-long": "the path or one of its names is too long",
    "too-deep": "the path has too many components",
    "outside": "the path is not inside the workspace",
}
RULES = frozenset(RULE_MESSAGES)


class LexicalError(ValueError):
    """A refused URI, id or folder. ``rule`` is a stable key of ``RULE_MESSAGES``."""

    def __init__(self, rule: str) -> None:
        if rule not in RULE_MESSAGES:
            raise KeyError(rule)
        super().__init__(RULE_MESSAGES[rule])
        self.rule = rule

    def __reduce__(self) -> tuple[type[LexicalError], tuple[str]]:
        return (LexicalError, (self.rule,))


# C0, DEL, C1, LINE/PARAGRAPH SEPARATOR and the bidi embedding/override/isolate/mark characters.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
# Slash-shaped symbols that NFKC leaves alone; letters that look like slashes stay letters.
_SLASH_SYMBOLS = frozenset("\u2044\u2215\u2216\u2571\u2572\u29f5\u29f8\u29f9")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
# RFC 3986 pchar minus pct-encoded (handled separately): unreserved, sub-delims, ':' and '@'.
_PCHAR = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@"
)
_PATH_CHARS = _PCHAR | frozenset("%/")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = frozenset("0123456789abcdefABCDEF")


def _check_chars(name: str, *, allow_hidden: bool) -> None:
    """The character rules shared by a name as written and its NFKC form."""
    if name in (".", ".."):
        raise LexicalError("dot-segment")
    if "\x00" in name:
        raise LexicalError("nul")
    if "/" in name:
        raise LexicalError("separator")
    if "\\" in name:
        raise LexicalError("backslash")
    if _CONTROL.search(name):
        raise LexicalError("control")
    if "%" in name:
        raise LexicalError("percent")
    if not allow_hidden and name.startswith("."):
        raise LexicalError("hidden")


def _check_name(name: str, *, allow_hidden: bool) -> None:
    if not name:
        raise LexicalError("empty-segment")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates, e.g. from a JSON "\ud800"
        raise LexicalError("utf8") from None
    _check_chars(name, allow_hidden=allow_hidden)
    if size > MAX_NAME_BYTES:
        raise LexicalError("too-long")
    if not unicodedata.is_normalized("NFC", name):
        raise LexicalError("nfc")
    if not _SLASH_SYMBOLS.isdisjoint(name):
        raise LexicalError("lookalike")
    compat = unicodedata.normalize("NFKC", name)
    if compat != name:
        try:
            _check_chars(compat, allow_hidden=allow_hidden)
        except LexicalError:
            raise LexicalError("lookalike") from None


def _check_names(
    parts: object, *, allow_hidden: bool, max_depth: int, max_bytes: int, absolute: bool
) -> None:
    if not isinstance(parts, tuple) or not all(isinstance(p, str) for p in parts):
        raise LexicalError("type")
    if len(parts) > max_depth:
        raise LexicalError("too-deep")
    for part in parts:
        _check_name(part, allow_hidden=allow_hidden)
    separators = len(parts) if absolute else len(parts) - 1
    if sum(len(p.encode("utf-8")) for p in parts) + separators > max_bytes:
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
        if byte in (0x2F, 0x5C):
            raise LexicalError("encoded-separator")
        if byte == 0:
            raise LexicalError("nul")
        data.append(byte)
        i += 3
    try:
        name = data.decode("utf-8")  # strict: refuses overlong forms and encoded surrogates
    except UnicodeDecodeError:
        raise LexicalError("utf8") from None
    if "%" in name:
        raise LexicalError("double-encoding")
    return name


def _parse(uri: object, *, trailing_slash: bool) -> WorkspacePath:
    if not isinstance(uri, str):
        raise LexicalError("type")
    if len(uri) > MAX_URI_CHARS:
        raise LexicalError("too-long")
    if "\x00" in uri:
        raise LexicalError("nul")
    if _CONTROL.search(uri):
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
    if len(text) > MAX_ID_BYTES:
        raise LexicalError("too-long")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise LexicalError("utf8") from None
    if size > MAX_ID_BYTES:
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
