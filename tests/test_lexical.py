"""Layer 1: the strict file:// URI, note id and folder parser (fs_notes.lexical).

Rules marked "RFC 3986" come from the URI spec; all others are ours (see the module docstring).
"""

from __future__ import annotations

import ast
import contextlib
import pickle
import posixpath
import stat
import urllib.parse
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fs_notes.lexical as lexical
from fs_notes.exercises.cases import CASES, EscapeCase
from fs_notes.exercises.layout import INSIDE, SECRET, build, file_kind
from fs_notes.lexical import (
    MAX_DEPTH,
    MAX_ID_BYTES,
    MAX_NAME_BYTES,
    MAX_URI_CHARS,
    RULE_MESSAGES,
    RULES,
    LexicalError,
    NoteId,
    WorkspacePath,
    contains,
    file_uri,
    note_uri,
    parse_file_uri,
    parse_note_uri,
    parse_workspace_uri,
    relative_note_id,
    validate_folder,
    validate_note_id,
)

NOTES = WorkspacePath(("work", "notes"))
CYRILLIC_A = "\u0430"
LONG_NAME = "a" * (MAX_NAME_BYTES - 3) + ".md"  # exactly 255 bytes


def refused(rule: str, call: object, *args: object) -> LexicalError:
    assert callable(call)
    with pytest.raises(LexicalError) as info:
        call(*args)
    assert info.value.rule == rule
    return info.value


# --- file:// URIs: accepted ------------------------------------------------------------------

URI_ACCEPTED = [
    ("file:///work/notes/a.md", ("work", "notes", "a.md")),
    ("file://localhost/work/notes/a.md", ("work", "notes", "a.md")),
    ("file://LocalHost/work/a.md", ("work", "a.md")),  # RFC 3986: host is case-insensitive
    ("FILE:///work/a.md", ("work", "a.md")),  # RFC 3986 3.1: scheme is case-insensitive
    ("File:///work/a.md", ("work", "a.md")),
    ("file:///work/caf%C3%A9.md", ("work", "café.md")),
    ("file:///work/caf%c3%a9.md", ("work", "café.md")),  # hex digits in either case
    ("file:///work/%41.md", ("work", "A.md")),  # an encoded unreserved char is the char
    ("file:///work/what%3F.md", ("work", "what?.md")),  # encoded '?' is part of the name
    ("file:///work/%23tag.md", ("work", "#tag.md")),
    ("file:///work/a%20b.md", ("work", "a b.md")),
    ("file:///work/%D0%B0.md", ("work", CYRILLIC_A + ".md")),  # a look-alike is another name
    ("file:///work/%EF%BC%A1.md", ("work", "\uff21.md")),  # fullwidth A: harmless under NFKC
    ("file:///C:/notes/a.md", ("C:", "notes", "a.md")),  # no drive letters on Linux
    ("file:///work/.hidden/a.md", ("work", ".hidden", "a.md")),  # paths may hold hidden parts
    ("file:///work/a;b=c,d!$&'()*+@~.md", ("work", "a;b=c,d!$&'()*+@~.md")),  # pchar
    ("file:///work/x..md", ("work", "x..md")),  # not a dot segment
    ("file:///work/%E2%80%8Dx.md", ("work", "\u200dx.md")),  # ZWJ is not a control
    ("file:///w/" + "a" * MAX_NAME_BYTES, ("w", "a" * MAX_NAME_BYTES)),
    # Decoded exactly once: what a second decoder would turn into '..' or '%' stays literal.
    ("file:///work/notes/%252e%252e/private.md", ("work", "notes", "%2e%2e", "private.md")),
    ("file:///work/notes/%25.md", ("work", "notes", "%.md")),
    ("file:///work/notes/%2525.md", ("work", "notes", "%25.md")),
    ("file:///work/100%25%20done.md", ("work", "100% done.md")),
    ("file:///work/notes/..%5Csecret.md", ("work", "notes", "..\\secret.md")),  # one name
    ("file:///work/notes/..%5csecret.md", ("work", "notes", "..\\secret.md")),
    # Any valid UTF-8 name, exactly: controls, bidi, NFD, compatibility characters.
    ("file:///work/a%0A.md", ("work", "a\n.md")),
    ("file:///work/a%7F.md", ("work", "a\x7f.md")),
    ("file:///work/a%C2%85.md", ("work", "a\x85.md")),  # C1 NEL
    ("file:///work/a%E2%80%AE.md", ("work", "a\u202e.md")),  # RIGHT-TO-LEFT OVERRIDE
    ("file:///work/a%E2%80%A8.md", ("work", "a\u2028.md")),  # LINE SEPARATOR
    ("file:///work/..%EF%BC%8Fsecret.md", ("work", "..\uff0fsecret.md")),  # FULLWIDTH SOLIDUS
    ("file:///work/%E2%80%A5/a.md", ("work", "\u2025", "a.md")),  # TWO DOT LEADER
    ("file:///work/%EF%BC%8E%EF%BC%8E/a.md", ("work", "\uff0e\uff0e", "a.md")),
    ("file:///work/%E2%84%80.md", ("work", "\u2100.md")),  # ACCOUNT OF
    ("file:///work/e%CC%81.md", ("work", "e\u0301.md")),  # NFD, not the NFC 'é.md'
]


@pytest.mark.parametrize(("uri", "parts"), URI_ACCEPTED)
def test_accepted_uris_decode_exactly_once_into_components(
    uri: str, parts: tuple[str, ...]
) -> None:
    assert parse_file_uri(uri) == WorkspacePath(parts)
    assert parse_workspace_uri(uri) == WorkspacePath(parts)


def test_a_cyrillic_look_alike_is_a_different_file_not_an_alias() -> None:
    latin = parse_file_uri("file:///work/a.md")
    cyrillic = parse_file_uri("file:///work/%D0%B0.md")
    assert latin != cyrillic
    assert latin.parts[-1].encode() != cyrillic.parts[-1].encode()


def test_names_are_case_sensitive() -> None:
    assert parse_file_uri("file:///work/Notes/a.md") != parse_file_uri("file:///work/notes/a.md")
    assert not contains(NOTES, parse_file_uri("file:///work/Notes/a.md"))


# --- file:// URIs: refused -------------------------------------------------------------------

URI_REFUSED = [
    ("", "scheme"),
    ("/work/notes/a.md", "scheme"),
    ("http://localhost/work/a.md", "scheme"),
    ("files:///work/a.md", "scheme"),
    ("fi le:///work/a.md", "scheme"),
    (":///work/a.md", "scheme"),
    ("file:notes/x", "authority"),
    ("file:/x", "authority"),
    ("file:", "authority"),
    ("file://evil/x", "host"),
    ("file://127.0.0.1/x", "host"),
    ("file://[::1]/x", "host"),
    ("file://user@localhost/x", "host"),  # userinfo
    ("file://localhost:22/x", "host"),  # port
    ("file://localhost:/x", "host"),
    ("file://localhost./x", "host"),
    ("file://%6Cocalhost/x", "host"),  # the host is never decoded
    ("file:////etc/passwd", "host"),  # empty host, then a UNC-style '//' path
    ("file://localhost//etc/passwd", "host"),
    ("file:///work/a.md?q", "query"),
    ("file:///work/a.md?", "query"),
    ("file:///work/a.md#f", "fragment"),
    ("file:///work/a.md#", "fragment"),
    ("file:///work/a.md#f?q", "fragment"),
    ("file://", "root"),
    ("file://localhost", "root"),
    ("file:///", "root"),
    ("file://localhost/", "root"),
    ("file:///a//b", "empty-segment"),
    ("file:///work/notes/", "empty-segment"),  # a file URI has no trailing slash
    ("file:///a/./b", "dot-segment"),
    ("file:///a/../b", "dot-segment"),
    ("file:///..", "dot-segment"),
    ("file:///work/notes/%2e%2e/private.md", "dot-segment"),
    ("file:///work/notes/%2E%2E/private.md", "dot-segment"),
    ("file:///work/notes/.%2e/private.md", "dot-segment"),
    ("file:///work/notes/%2e/a.md", "dot-segment"),
    ("file:///work/notes/..%2Fsecret.md", "encoded-separator"),
    ("file:///work/notes/..%2fsecret.md", "encoded-separator"),
    ("file:///work/notes/..\\secret.md", "backslash"),
    ("file:///work/a\x00.md", "nul"),
    ("file:///work/a%00.md", "nul"),
    ("file:///work/%ff.md", "utf8"),
    ("file:///work/%C3.md", "utf8"),  # truncated sequence
    ("file:///work/%C0%AE%C0%AE/a.md", "utf8"),  # overlong '..'
    ("file:///work/%ED%A0%80.md", "utf8"),  # an encoded surrogate
    ("file:///work/a\n.md", "control"),
    ("file:///work/a\x7f.md", "control"),
    ("file:///work/a\x85.md", "control"),
    ("file:///work/a%2.md", "bad-escape"),
    ("file:///work/a%zz.md", "bad-escape"),
    ("file:///work/a%", "bad-escape"),
    ("file:///work/a b.md", "character"),  # RFC 3986: a space must be encoded
    ("file:///work/café.md", "character"),  # no IRIs
    ("file:///work/a<b>.md", "character"),
    ("file:///work/a|b.md", "character"),
    ("file:///work/a\u202e.md", "character"),  # raw non-ASCII: must be encoded
    ("file:///w/" + "a" * (MAX_NAME_BYTES + 1), "too-long"),
    ("file:///w/" + "%C3%A9" * 128, "too-long"),  # 128 chars but 256 bytes
    ("file:///" + "a" * (MAX_URI_CHARS + 1), "too-long"),
    ("file:///" + "/".join(["d"] * 65), "too-deep"),
]


@pytest.mark.parametrize(("uri", "rule"), URI_REFUSED)
def test_refused_uris_name_the_rule_they_break(uri: str, rule: str) -> None:
    refused(rule, parse_file_uri, uri)


def test_the_two_classic_escapes_are_outside_the_workspace() -> None:
    sibling = parse_file_uri("file:///work/notes-evil/secret.md")
    assert sibling.as_posix().startswith(NOTES.as_posix())  # a string prefix would be fooled
    assert not contains(NOTES, sibling)
    refused("outside", relative_note_id, NOTES, sibling)
    refused("dot-segment", parse_file_uri, "file:///work/notes/%2e%2e/private.md")
    refused("dot-segment", parse_note_uri, NOTES, "file:///work/notes/%2e%2e/private.md")


def test_non_strings_are_refused() -> None:
    for value in (None, b"file:///a.md", 3, ["file:///a.md"]):
        refused("type", parse_file_uri, value)
        refused("type", validate_note_id, value)
        refused("type", validate_folder, value)


# --- workspace URIs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "rule"),
    [
        ("file:///work/notes/", None),
        ("file://localhost/work/notes/", None),
        ("file:///work/notes", None),
        ("file:///work/notes//", "empty-segment"),
        ("file:///", "root"),
        ("file:////", "host"),
        ("file:///work/notes/?", "query"),
    ],
)
def test_a_workspace_uri_may_end_in_exactly_one_slash(uri: str, rule: str | None) -> None:
    if rule is None:
        assert parse_workspace_uri(uri) == NOTES
    else:
        refused(rule, parse_workspace_uri, uri)


# --- containment by components ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "inside"),
    [
        ("file:///work/notes", True),
        ("file:///work/notes/a.md", True),
        ("file:///work/notes/x/y/z.md", True),
        ("file:///work/notes-evil/secret.md", False),
        ("file:///work/notesx", False),
        ("file:///work/not", False),
        ("file:///work", False),
        ("file:///work/Notes/a.md", False),
        ("file:///other/work/notes/a.md", False),
        ("file:///notes/work/a.md", False),
    ],
)
def test_contains_compares_components_not_string_prefixes(target: str, inside: bool) -> None:
    assert contains(NOTES, parse_file_uri(target)) is inside


@pytest.mark.parametrize(
    ("target", "result"),
    [
        ("file:///work/notes/a.md", "a.md"),
        ("file:///work/notes/projects/tps-report.md", "projects/tps-report.md"),
        ("file:///work/notes", "outside"),  # the workspace itself is not a note
        ("file:///work/notes-evil/secret.md", "outside"),
        ("file:///etc/passwd", "outside"),
        ("file:///work/notes/.git/config.md", "hidden"),
        ("file:///work/notes/a.txt", "not-md"),
        ("file:///work/notes/a%25.md", "a%.md"),
        ("file:///work/notes/%252e%252e/x.md", "%2e%2e/x.md"),
        ("file:///work/notes/" + "d/" * MAX_DEPTH + "x.md", "too-deep"),
    ],
)
def test_relative_note_id_only_yields_notes_strictly_inside(target: str, result: str) -> None:
    if result in RULES:
        refused(result, lambda: relative_note_id(NOTES, parse_file_uri(target)))
        refused(result, parse_note_uri, NOTES, target)
    else:
        assert relative_note_id(NOTES, parse_file_uri(target)) == result
        assert parse_note_uri(NOTES, target) == validate_note_id(result)


# --- note ids --------------------------------------------------------------------------------

ID_ACCEPTED = [
    "a.md",
    "a/b.md",
    "projects/tps-report.md",
    "café.md",
    CYRILLIC_A + ".md",
    "a b.md",
    "what?.md",
    "#tag.md",
    "~.md",
    "C:.md",
    "x..md",
    "a..b/c.md",
    "\uff21.md",  # fullwidth A
    "\ufb01le.md",  # 'fi' ligature: NFKC 'file.md', harmless
    "\u30ce.md",  # KATAKANA LETTER NO looks like '/' but is a letter
    "a.md/b.md",  # a folder named like a note
    LONG_NAME,
    "é" * 126 + ".md",  # 255 bytes
    "d/" * (MAX_DEPTH - 1) + "x.md",
    # Exact, not strict: every valid UTF-8 name, as it is on disk (issue 11).
    "100%.md",
    "100% done.md",
    "%2e%2e/secret.md",  # an id is never decoded: a folder literally named '%2e%2e'
    "a\\b.md",
    " lead.md",
    "trail /x.md",
    "e\u0301.md",  # NFD
    "caf\u00e9.md",  # NFC: another name than the NFD one
    "a\uff0fb.md",  # FULLWIDTH SOLIDUS is a letter of the name, not a separator
    "x\uff0f..\uff0f..\uff0fsecret.md",
    "\u2025/x.md",  # TWO DOT LEADER
    "\uff0e\uff0e/x.md",  # fullwidth '..'
    "\uff0egit/x.md",  # fullwidth '.': not hidden, the name does not start with '.'
    "a\u2215b.md",
    "\u2100.md",
    "\u2026.md",
    "a\uff05.md",
    "a\n.md",
    "a\t.md",
    "zz\n- passwords.md",
    "a\x1b.md",
    "a\x7f.md",
    "a\x9b.md",
    "a\u202e.md",
    "a\u2066.md",
    "a\u2029.md",
    "a\u200b.md",
    "\U0001f600.md",
    "\u65e5\u672c\u8a9e.md",
    "\u05e2\u05d1\u05e8\u05d9\u05ea.md",
    "/".join(["d" * 240] * 16) + "/" + "x" * 236 + ".md",  # exactly MAX_ID_BYTES
]


@pytest.mark.parametrize("note_id", ID_ACCEPTED)
def test_accepted_note_ids_keep_their_exact_text(note_id: str) -> None:
    parsed = validate_note_id(note_id)
    assert parsed.text == note_id
    assert parsed.parts == tuple(note_id.split("/"))
    assert str(parsed) == note_id
    assert parsed.name == note_id.split("/")[-1]
    assert parsed.folder == tuple(note_id.split("/")[:-1])


def test_the_longest_accepted_id_is_exactly_the_limit() -> None:
    assert len(ID_ACCEPTED[-1].encode()) == MAX_ID_BYTES
    assert len(LONG_NAME.encode()) == MAX_NAME_BYTES


ID_REFUSED = [
    ("", "empty"),
    ("/etc/passwd", "absolute"),
    ("/a.md", "absolute"),
    ("//a.md", "absolute"),
    (".", "dot-segment"),
    ("..", "dot-segment"),
    ("../outside/secret.md", "dot-segment"),
    ("a/../../b.md", "dot-segment"),
    ("a/./b.md", "dot-segment"),
    ("a/", "empty-segment"),
    ("a//b.md", "empty-segment"),
    ("a\x00.md", "nul"),
    ("a\ud800.md", "utf8"),  # a lone surrogate, as JSON "\ud800" can carry
    ("bad\udcffname.md", "utf8"),  # os's surrogateescape of the byte 0xff
    ("..\uff0foutside\uff0fsecret.md", "hidden"),  # one name, starting with '.'
    ("..\\outside\\secret.md", "hidden"),  # one name with backslashes, starting with '.'
    (".git/config.md", "hidden"),
    (".obsidian/workspace.md", "hidden"),
    ("a/.secret.md", "hidden"),
    (".md", "hidden"),
    ("..a.md", "hidden"),
    ("a.txt", "not-md"),
    ("a.MD", "not-md"),  # case-sensitive suffix
    ("a", "not-md"),
    ("a.md/", "empty-segment"),
    ("a.md/b", "not-md"),
    ("a" * (MAX_NAME_BYTES - 2) + ".md", "too-long"),  # 256 bytes
    ("é" * 127 + ".md", "too-long"),  # 130 characters, 257 bytes
    ("/".join(["d" * 240] * 16) + "/" + "x" * 237 + ".md", "too-long"),  # MAX_ID_BYTES + 1
    ("a" * (MAX_ID_BYTES * 4), "too-long"),
    ("d/" * MAX_DEPTH + "x.md", "too-deep"),
    ("/".join(["a"] * 2000), "too-deep"),
]


@pytest.mark.parametrize(("note_id", "rule"), ID_REFUSED)
def test_refused_note_ids_name_the_rule_they_break(note_id: str, rule: str) -> None:
    refused(rule, validate_note_id, note_id)


# --- folders ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "result"),
    [
        ("", ()),
        ("projects", ("projects",)),
        ("a/b", ("a", "b")),
        ("x.md", ("x.md",)),  # a folder may be named like a note
        ("/".join(["d"] * MAX_DEPTH), ("d",) * MAX_DEPTH),
        ("/", "absolute"),
        ("/etc", "absolute"),
        (".", "dot-segment"),
        ("..", "dot-segment"),
        ("a/../..", "dot-segment"),
        ("a/", "empty-segment"),
        ("a//b", "empty-segment"),
        (".git", "hidden"),
        ("a\\b", ("a\\b",)),
        ("a\x00", "nul"),
        ("a\uff0fb", ("a\uff0fb",)),
        ("100%/x", ("100%", "x")),
        ("/".join(["d"] * (MAX_DEPTH + 1)), "too-deep"),
    ],
)
def test_folders_follow_the_id_rules_without_the_md_suffix(
    folder: str, result: tuple[str, ...] | str
) -> None:
    if isinstance(result, str):
        refused(result, validate_folder, folder)
    else:
        assert validate_folder(folder) == result


# --- canonical URIs --------------------------------------------------------------------------


def test_note_uri_encodes_everything_but_unreserved_characters_and_slash() -> None:
    note = validate_note_id("a b/caf\u00e9?#;~-_.md")
    uri = note_uri(NOTES, note)
    assert uri == "file:///work/notes/a%20b/caf%C3%A9%3F%23%3B~-_.md"
    assert parse_note_uri(NOTES, uri) == note
    assert parse_file_uri(uri) == NOTES.joinpath(note)


def test_file_uri_round_trips_a_workspace_with_hidden_and_odd_names() -> None:
    path = WorkspacePath(("home", "u", ".notes", "a b", "C:"))
    assert file_uri(path) == "file:///home/u/.notes/a%20b/C%3A"
    assert parse_workspace_uri(file_uri(path)) == path
    assert parse_workspace_uri(file_uri(path) + "/") == path


def test_note_uri_refuses_a_path_too_long_to_represent() -> None:
    deep_base = WorkspacePath(("d",) * (lexical.MAX_PATH_DEPTH - 1))
    refused("too-deep", note_uri, deep_base, validate_note_id("a/b.md"))


# --- the types enforce their invariants ------------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "rule"),
    [
        ((), "root"),
        (("work", ".."), "dot-segment"),
        (("work", ""), "empty-segment"),
        (("work/notes",), "separator"),
        (("work", "a\x00"), "nul"),
        (("work", "a\ud800"), "utf8"),
        (["work", "notes"], "type"),
        (("work", 3), "type"),
    ],
)
def test_a_workspace_path_cannot_be_built_invalid(parts: object, rule: str) -> None:
    refused(rule, WorkspacePath, parts)


@pytest.mark.parametrize(
    ("parts", "rule"),
    [
        ((), "empty"),
        (("..", "secret.md"), "dot-segment"),
        (("a/b.md",), "separator"),
        (("a", "b.txt"), "not-md"),
        ((".git", "x.md"), "hidden"),
    ],
)
def test_a_note_id_cannot_be_built_invalid(parts: object, rule: str) -> None:
    refused(rule, NoteId, parts)


def test_parsed_values_are_frozen() -> None:
    note = validate_note_id("a.md")
    with pytest.raises(AttributeError):
        note.parts = ("..", "x.md")  # type: ignore[misc]
    with pytest.raises(AttributeError):
        NOTES.parts = ()  # type: ignore[misc]


# --- errors ----------------------------------------------------------------------------------


def test_error_messages_are_fixed_per_rule_and_never_echo_the_input() -> None:
    hostile = [uri for uri, _ in URI_REFUSED] + [note_id for note_id, _ in ID_REFUSED]
    calls = [parse_file_uri] * len(URI_REFUSED) + [validate_note_id] * len(ID_REFUSED)
    assert len(hostile) > 90
    for text, call in zip(hostile, calls, strict=True):
        with pytest.raises(LexicalError) as info:
            call(text)
        assert str(info.value) == RULE_MESSAGES[info.value.rule]
        for token in ("passwd", "secret", "evil", "private", "outside", "etc", "C0"):
            assert token not in str(info.value)


def test_every_rule_has_a_message_and_unknown_rules_are_a_bug() -> None:
    assert set(RULE_MESSAGES) == RULES
    assert all(RULE_MESSAGES[rule] for rule in RULES)
    with pytest.raises(KeyError):
        LexicalError("no-such-rule")


def test_lexical_error_is_a_value_error_that_survives_pickling() -> None:
    error = refused("dot-segment", validate_note_id, "../x.md")
    assert isinstance(error, ValueError)
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.rule, str(again)) == (LexicalError, error.rule, str(error))


def test_the_module_is_pure_it_imports_nothing_that_reaches_the_file_system() -> None:
    source = Path(lexical.__file__).read_text(encoding="utf-8")
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported <= {
        "__future__",
        "re",
        "unicodedata",
        "collections.abc",
        "dataclasses",
        "functools",  # lru_cache of parsed workspace URIs
    }
    for name in ("open(", "os.", "pathlib", "realpath"):
        assert name not in source.split('"""', 2)[2]


# --- properties (hypothesis) -----------------------------------------------------------------

FAST = settings(max_examples=300, deadline=None)
BAD_NAMES = {"", ".", ".."}


def is_valid_name(name: str) -> bool:
    try:
        WorkspacePath((name,))
    except LexicalError:
        return False
    return True


NAME_CHARS = st.one_of(
    st.sampled_from([*"abc.-_ ~:", "é", CYRILLIC_A, "\u30ce", "\uff21", "\u200d", "\U0001f600"]),
    st.characters(categories=("L", "N", "P", "S")),
)
NAMES = st.text(NAME_CHARS, min_size=1, max_size=8).filter(is_valid_name)
PATHS = st.lists(NAMES, min_size=1, max_size=5).map(lambda p: WorkspacePath(tuple(p)))


def assert_valid_parts(parts: tuple[str, ...]) -> None:
    for part in parts:
        assert part not in BAD_NAMES
        assert "/" not in part and "\x00" not in part
        assert len(part.encode("utf-8")) <= MAX_NAME_BYTES  # strict UTF-8: no lone surrogate


# Characters that matter to a path parser (a few of them control characters), plus printable ones.
TRICKY = st.sampled_from([*"/\\.%?#:@~ 2eEfF5cC0a-", "\x00", "\n", "\uff0f", "\u2025", "é"])
PRINTABLE = st.characters(categories=("L", "N", "P", "S"))
ANY_CHAR = st.one_of(TRICKY, PRINTABLE, st.characters())
URI_CHAR = st.one_of(TRICKY, PRINTABLE)


HOW_SAFE = ["raw", "raw", "raw", "upper", "lower", "double"]
HOW_UNSAFE = ["raw", "upper", "upper", "upper", "upper", "lower", "lower", "double"]


def encode_randomly(draw: st.DrawFn, text: str) -> str:
    out = []
    for ch in text:
        safe = ch.isascii() and (ch.isalnum() or ch in "-._~!$&'()*+,;=:@")
        how = draw(st.sampled_from(HOW_SAFE if safe else HOW_UNSAFE))
        if how == "raw":
            out.append(ch)
            continue
        data = ch.encode("utf-8", "surrogatepass")
        escaped = "".join(f"%{b:02X}" if how != "lower" else f"%{b:02x}" for b in data)
        out.append(escaped.replace("%", "%25") if how == "double" else escaped)
    return "".join(out)


@st.composite
def hostile_tails(draw: st.DrawFn) -> str:
    """A URI path after its first '/': random segments, randomly percent-encoded."""
    segments = draw(st.lists(st.text(URI_CHAR, min_size=1, max_size=6), min_size=1, max_size=4))
    body = "/".join(encode_randomly(draw, s) for s in segments)
    return body + draw(st.sampled_from(["", "", "", ".md", "/", "?q", "#f"]))


PREFIXES = ["file:///"] * 4 + ["file://localhost/", "FILE:///", "file:", "file:/", "file://evil/"]
PREFIXES += ["file:////", "http:///", ""]


@st.composite
def hostile_uris(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(PREFIXES)) + draw(hostile_tails())


def reference_decode(uri: str) -> tuple[str, ...]:
    """An independent decoder for accepted URIs: urllib on the path after the authority."""
    rest = uri.split(":", 1)[1][2:]
    path = rest[rest.index("/") :]
    return tuple(urllib.parse.unquote_to_bytes(raw).decode("utf-8") for raw in path[1:].split("/"))


@FAST
@given(st.text(ANY_CHAR, max_size=40))
def test_any_text_is_refused_or_parsed_into_safe_components(text: str) -> None:
    for candidate in (text, "file:///" + text, "file://localhost/" + text):
        try:
            path = parse_file_uri(candidate)
        except LexicalError as error:
            assert error.rule in RULES
        else:
            assert_valid_parts(path.parts)


@FAST
@given(hostile_uris())
def test_random_percent_encodings_are_refused_or_decoded_once_into_safe_components(
    uri: str,
) -> None:
    try:
        path = parse_file_uri(uri)
    except LexicalError as error:
        assert error.rule in RULES
        return
    assert_valid_parts(path.parts)
    assert path.parts == reference_decode(uri)
    assert parse_file_uri(file_uri(path)) == path


@FAST
@given(st.lists(NAMES, min_size=1, max_size=5), st.data())
def test_any_legal_encoding_of_valid_names_decodes_to_exactly_those_names(
    names: list[str], data: st.DataObject
) -> None:
    segments = []
    for name in names:
        encoded = []
        for ch in name:
            safe = ch.isascii() and (ch.isalnum() or ch in "-._~!$&'()*+,;=:@")
            how = data.draw(
                st.sampled_from(["raw", "upper", "lower"] if safe else ["upper", "lower"])
            )
            hexes = [f"%{b:02X}" if how == "upper" else f"%{b:02x}" for b in ch.encode()]
            encoded.append(ch if how == "raw" else "".join(hexes))
        segments.append("".join(encoded))
    host = data.draw(st.sampled_from(["", "localhost", "LOCALHOST"]))
    assert parse_file_uri(f"file://{host}/" + "/".join(segments)).parts == tuple(names)


@FAST
@given(st.text(ANY_CHAR, max_size=40))
def test_any_text_is_refused_or_a_note_id_with_safe_components(text: str) -> None:
    try:
        note = validate_note_id(text)
    except LexicalError as error:
        assert error.rule in RULES
        return
    assert_valid_parts(note.parts)
    assert note.text == text and not text.startswith("/")
    assert note.parts[-1].endswith(".md") and not any(p.startswith(".") for p in note.parts)


@st.composite
def base_and_target(draw: st.DrawFn) -> tuple[WorkspacePath, WorkspacePath]:
    base = draw(PATHS)
    extra = tuple(draw(st.lists(NAMES, max_size=4)))
    if draw(st.booleans()) and extra:
        extra = (*extra[:-1], extra[-1] + ".md")
    sibling = (*base.parts[:-1], base.parts[-1] + draw(NAMES))
    choice = draw(st.sampled_from(["below", "sibling", "prefix", "any"]))
    if choice == "below":
        parts = base.parts + extra
    elif choice == "sibling":
        parts = sibling + extra
    elif choice == "prefix":
        parts = base.parts[: draw(st.integers(1, len(base.parts)))]
    else:
        parts = draw(PATHS).parts
    try:
        target = WorkspacePath(parts)
    except LexicalError:  # e.g. a sibling name grown past 255 bytes or hidden under NFKC
        target = base
    return base, target


@FAST
@given(base_and_target())
def test_contains_is_true_exactly_when_the_components_start_with_the_base(
    pair: tuple[WorkspacePath, WorkspacePath],
) -> None:
    base, target = pair
    b, t = base.as_posix(), target.as_posix()
    expected = PurePosixPath(t).is_relative_to(PurePosixPath(b))
    assert contains(base, target) is expected
    assert expected is (t == b or t.startswith(b + "/"))
    assert contains(base, parse_file_uri(file_uri(target))) is expected


@FAST
@given(base_and_target(), hostile_tails())
def test_relative_note_id_never_yields_dot_dot(
    pair: tuple[WorkspacePath, WorkspacePath], tail: str
) -> None:
    base, target = pair
    targets = [target]
    with contextlib.suppress(LexicalError):
        targets.append(parse_file_uri(file_uri(base) + "/" + tail))
    for candidate in targets:
        try:
            note = relative_note_id(base, candidate)
        except LexicalError as error:
            assert error.rule in RULES
            continue
        assert ".." not in note.split("/") and "." not in note.split("/")
        assert not note.startswith("/")
        assert posixpath.normpath(note) == note
        assert contains(base, candidate) and base.parts + tuple(note.split("/")) == candidate.parts
        assert validate_note_id(note).text == note


@FAST
@given(PATHS, st.lists(NAMES, min_size=1, max_size=4))
def test_note_uri_round_trips_every_valid_note(base: WorkspacePath, names: list[str]) -> None:
    names[-1] = names[-1].lstrip(".") + ".md"
    try:
        note = NoteId(tuple(names))
    except LexicalError:  # hidden or too long: not a note
        return
    uri = note_uri(base, note)
    assert uri.startswith("file:///")
    assert parse_note_uri(base, uri) == note
    assert validate_note_id(note.text) == note


# --- the escape-case table (fs_notes/exercises/cases.py) -----------------------------------------

REQUIRED_CASES = {
    "dotdot-id", "dotdot-deep", "absolute-id", "symlink-final", "symlink-final-inside",
    "symlink-dir", "symlink-dir-absolute", "dangling-symlink-create", "symlink-loop",
    "symlink-chain", "magic-link-stdin", "magic-link-root", "hardlink", "fifo-note",
    "socket-note", "folder-named-md", "long-component", "deep-path",
}  # fmt: skip


def test_the_escape_table_has_every_required_case_once_with_known_outcomes() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED_CASES
    assert {case.name for case in CASES if case.expect == "ok"} >= {"plain-note", "nested-note"}
    for case in CASES:
        assert case.expect in {"ok", "refused"} and case.lexical in {"ok", "refused"}
        assert case.name == case.name.lower() and " " not in case.name and case.why
        assert "outside/secret.md" in case.protected
        assert case.expect == "refused" or case.lexical == "ok"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_escape_table_says_what_the_lexical_layer_does(case: EscapeCase) -> None:
    note_id = case.note_id_in(Path("/tmp/fs-notes-escape"))
    if case.lexical == "refused":
        with pytest.raises(LexicalError):
            validate_note_id(note_id)
    else:
        assert validate_note_id(note_id).text == note_id


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_build_layout_builds_each_escape_case(tmp_path: Path, case: EscapeCase) -> None:
    build(tmp_path, case.layout)
    assert (tmp_path / "ws").is_dir()
    assert (tmp_path / "outside" / "secret.md").read_text(encoding="utf-8") == SECRET
    for entry in case.layout:
        entry = entry.replace("{root}", str(tmp_path))
        if " => " in entry:
            name, target = entry.split(" => ")
            assert file_kind(tmp_path / name) == "symlink"
            assert (tmp_path / name).readlink() == Path(target)
        elif " ~> " in entry:
            name, target = entry.split(" ~> ")
            assert (tmp_path / name).stat().st_ino == (tmp_path / target).stat().st_ino
        elif entry.endswith((" |fifo", " |socket")):
            name, kind = entry.split(" |")
            assert file_kind(tmp_path / name) == kind
        elif entry.endswith("/"):
            assert file_kind(tmp_path / entry) == "dir"
        else:
            name, sep, content = entry.partition(": ")
            assert (tmp_path / name).read_text(encoding="utf-8") == (content if sep else INSIDE)
    for protected in case.protected:
        path = tmp_path / protected
        assert file_kind(path) in {"file", "missing"}
        assert not path.exists() or stat.S_ISREG(path.lstat().st_mode)


def test_build_layout_refuses_entries_that_would_escape_its_root(tmp_path: Path) -> None:
    for bad in ("../x.md", "/tmp/x.md", "ws/../../x.md"):
        with pytest.raises(ValueError):
            build(tmp_path / "root", (bad,))
    with pytest.raises(ValueError):
        build(tmp_path / "root", ("ws/d => ../outside", "ws/d/planted.md"))
    assert not (tmp_path / "root" / "outside" / "planted.md").exists()
    assert not (tmp_path / "x.md").exists()
