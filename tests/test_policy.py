"""Policy files and authorization (fs_notes.policy): format, located errors, grants, tokens."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import inspect
import itertools
import json
import os
import pathlib
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fs_notes import policy as policy_mod
from fs_notes.lexical import LexicalError, WorkspacePath, parse_workspace_uri
from fs_notes.paths import expand_path
from fs_notes.policy import (
    NOT_PERMITTED,
    OPERATIONS,
    NotAuthenticated,
    NotAuthorized,
    Operation,
    Policy,
    PolicyError,
    Principal,
    Workspace,
    WorkspaceGrant,
    hash_token,
)
from fs_notes.policy_file import load_policy

REPO = pathlib.Path(__file__).resolve().parent.parent
BOB_TOKEN = "bob-secret-token-0123456789"
CAROL_TOKEN = "carol-secret-token-9876543210"
BOB_SHA = hashlib.sha256(BOB_TOKEN.encode()).hexdigest()
CAROL_SHA = hashlib.sha256(CAROL_TOKEN.encode()).hexdigest()

# Line numbers matter: the error tests below edit numbered lines of this text.
BASE = f"""\
# team policy
[[principal]]
name = "alice"
local = true

[[principal]]
name = "bob"
token_sha256 = "{BOB_SHA}"

[[workspace]]
name = "notes"
path = "/w/notes"
symlinks = "deny"

[[workspace]]
name = "archive"
path = "/w/archive"
sandbox = "chroot"

[[grant]]
principal = "alice"
workspace = "notes"
operations = ["read", "write", "delete"]

[[grant]]
principal = "bob"
workspace = "archive"
operations = ["read"]
""".splitlines()


def edited(changes: dict[int, str]) -> str:
    """BASE with 1-based line ``n`` replaced by ``changes[n]`` (which may hold several lines)."""
    lines = list(BASE)
    for n, text in changes.items():
        lines[n - 1] = text
    return "\n".join(lines) + "\n"


@pytest.fixture
def team(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A working directory holding ``team.toml``, so that messages read ``team.toml:N: ...``."""
    monkeypatch.chdir(tmp_path)
    return tmp_path / "team.toml"


def error_of(file: pathlib.Path, text: str) -> str:
    file.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        load_policy(file.name)
    return str(info.value)


# --- the bundled examples ----------------------------------------------------------------------


def test_example_policy_loads_with_its_documented_grants() -> None:
    policy = load_policy(str(REPO / "policies" / "example.toml"))
    alice, bot = policy.principals
    assert (alice.name, bot.name) == ("alice", "ci-bot")
    assert policy.local_principal() == alice
    team, private = policy.workspaces
    assert (team.name, team.path, team.symlinks, team.sandbox) == (
        "team",
        "/srv/fs-notes/team",
        "within",
        "chroot",
    )
    assert (private.path, private.symlinks, private.sandbox) == (
        "/home/alice/notes",
        "deny",
        "landlock",
    )
    assert policy.authorize(bot, "file:///srv/fs-notes/team", "read").workspace == team
    with pytest.raises(NotAuthorized):
        policy.authorize(bot, "file:///srv/fs-notes/team", "write")
    with pytest.raises(NotAuthorized, match=f"^{NOT_PERMITTED}$"):
        policy.authorize(bot, "file:///home/alice/notes", "read")
    assert {g.workspace.name for g in policy.grants_for(alice)} == {"team", "alice-private"}


def test_single_user_example_loads_and_serves_its_local_user_everything() -> None:
    policy = load_policy(str(REPO / "policies" / "single-user.toml"))
    me = policy.local_principal()
    for op in OPERATIONS:
        assert policy.authorize(me, "file:///home/me/notes", op).workspace.name == "notes"
    with pytest.raises(NotAuthenticated):
        policy.authenticate_token("anything")


def test_the_base_text_of_these_tests_is_itself_valid(team: pathlib.Path) -> None:
    team.write_text(edited({}), encoding="utf-8")
    assert [w.name for w in load_policy(team.name).workspaces] == ["notes", "archive"]


# --- every validation error names file, line and field (exact strings) -------------------------

HINT = (
    "never store a token in clear; store its SHA-256 as token_sha256 "
    '(e.g. printf %s "$TOKEN" | sha256sum)'
)

NOT_NORMAL = 'must be normalized (no "//", ".", ".." or trailing "/")'

ERRORS: list[tuple[str, dict[int, str], str]] = [
    (
        "symlinks-value",
        {13: 'symlinks = "sometimes"'},
        'team.toml:13: workspace "notes": symlinks: must be "deny" or "within"',
    ),
    (
        "sandbox-value",
        {18: 'sandbox = "docker"'},
        'team.toml:18: workspace "archive": sandbox: must be "landlock", "chroot" or "none"',
    ),
    (
        "clear-token",
        {8: 'token = "bob-secret-token-0123456789"'},
        f'team.toml:8: principal "bob": token: {HINT}',
    ),
    (
        "clear-token-beside-hash",
        {4: 'local = true\ntoken = "x"'},
        f'team.toml:5: principal "alice": token: {HINT}',
    ),
    (
        "hash-not-hex",
        {8: 'token_sha256 = "bob-secret-token-0123456789"'},
        'team.toml:8: principal "bob": token_sha256: '
        "must be 64 hexadecimal digits: the SHA-256 of the token, not the token",
    ),
    (
        "hash-of-empty-token",
        {8: f'token_sha256 = "{hashlib.sha256(b"").hexdigest()}"'},
        'team.toml:8: principal "bob": token_sha256: '
        "is the SHA-256 of the empty string; use a real token",
    ),
    ("unknown-key", {13: 'colour = "red"'}, 'team.toml:13: workspace "notes": colour: unknown key'),
    ("unknown-top-level-key", {1: 'workspaces = "all"'}, "team.toml:1: workspaces: unknown key"),
    (
        "relative-path",
        {12: 'path = "w/notes"'},
        'team.toml:12: workspace "notes": path: must be an absolute path',
    ),
    (
        "dotdot-path",
        {12: 'path = "/w/archive/../notes"'},
        'team.toml:12: workspace "notes": path: ' + NOT_NORMAL,
    ),
    (
        "trailing-slash",
        {12: 'path = "/w/notes/"'},
        'team.toml:12: workspace "notes": path: ' + NOT_NORMAL,
    ),
    (
        "root-path",
        {12: 'path = "/"'},
        'team.toml:12: workspace "notes": path: must not be the filesystem root',
    ),
    (
        "nul-in-path",
        {12: 'path = "/w/no\\u0000tes"'},
        'team.toml:12: workspace "notes": path: must not contain NUL',
    ),
    (
        "nested-inside",
        {17: 'path = "/w/notes/archive"'},
        'team.toml:17: workspace "archive": path: nested with workspace "notes" (line 12)',
    ),
    (
        "nested-around",
        {17: 'path = "/w"'},
        'team.toml:17: workspace "archive": path: nested with workspace "notes" (line 12)',
    ),
    (
        "same-folder",
        {17: 'path = "/w/notes"'},
        'team.toml:17: workspace "archive": path: same folder as workspace "notes" (line 12)',
    ),
    ("missing-path", {12: ""}, 'team.toml:10: workspace "notes": path: required'),
    ("missing-name", {16: ""}, "team.toml:15: workspace #2: name: required"),
    (
        "duplicate-workspace-name",
        {16: 'name = "notes"'},
        'team.toml:16: workspace "notes": name: same as workspace #1 (line 11)',
    ),
    (
        "duplicate-principal-name",
        {7: 'name = "alice"'},
        'team.toml:7: principal "alice": name: same as principal #1 (line 3)',
    ),
    (
        "shared-token-hash",
        {4: f'token_sha256 = "{BOB_SHA.upper()}"'},
        'team.toml:8: principal "bob": token_sha256: same as principal #1 (line 4)',
    ),
    (
        "no-credential",
        {4: ""},
        'team.toml:2: principal "alice": needs token_sha256 or local = true (or both)',
    ),
    (
        "two-locals",
        {8: "local = true"},
        'team.toml:8: principal "bob": local: principal "alice" is already local',
    ),
    (
        "local-not-bool",
        {4: 'local = "yes"'},
        'team.toml:4: principal "alice": local: must be true or false',
    ),
    ("name-not-string", {3: "name = 7"}, "team.toml:3: principal #1: name: must be a string"),
    (
        "name-with-quote",
        {3: "name = 'al\"ice'"},
        "team.toml:3: principal #1: name: must be printable, without quotes or surrounding spaces",
    ),
    (
        "grant-unknown-principal",
        {21: 'principal = "mallory"'},
        'team.toml:21: grant #1: principal: no principal named "mallory"',
    ),
    (
        "grant-unknown-workspace",
        {27: 'workspace = "nowhere"'},
        'team.toml:27: grant #2: workspace: no workspace named "nowhere"',
    ),
    (
        "grant-unknown-operation",
        {28: 'operations = ["read", "erase"]'},
        "team.toml:28: grant #2: operations: "
        'unknown operation "erase" (must be "read", "write" or "delete")',
    ),
    (
        "grant-no-operation",
        {28: "operations = []"},
        "team.toml:28: grant #2: operations: must list at least one operation",
    ),
    (
        "grant-operation-twice",
        {28: 'operations = ["read", "read"]'},
        "team.toml:28: grant #2: operations: lists an operation twice",
    ),
    (
        "grant-operations-not-array",
        {28: 'operations = "read"'},
        "team.toml:28: grant #2: operations: must be an array",
    ),
    (
        "grant-twice",
        {26: 'principal = "alice"', 27: 'workspace = "notes"'},
        'team.toml:25: grant #2: a second grant for "alice" on "notes"',
    ),
    ("toml-syntax", {22: "workspace = "}, "team.toml:22: invalid TOML: Invalid value (column 13)"),
    (
        "single-table-not-array",
        {10: "[workspace]", 15: "[archive]"},
        "team.toml:10: workspace: must be an array of tables ([[workspace]])",
    ),
]


@pytest.mark.parametrize(
    "path", ["/w/100%notes", "/w/cafe\u0301", "/w/no\ttes", "/w/\u202eevil", "/w/a\\b"]
)
def test_a_workspace_path_may_hold_any_valid_name(team: pathlib.Path, path: str) -> None:
    # Issue 11: the workspace folder's own path is served exactly, like note names.
    text = edited({12: f"path = {json.dumps(path)}"})
    team.write_text(text, encoding="utf-8")
    policy = load_policy(str(team))
    (notes,) = [w for w in policy.workspaces if w.name == "notes"]
    assert notes.path == path
    assert parse_workspace_uri(notes.uri).as_posix() == path


@pytest.mark.parametrize(
    ("changes", "message"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS]
)
def test_each_validation_error_names_file_line_and_field(
    team: pathlib.Path, changes: dict[int, str], message: str
) -> None:
    assert error_of(team, edited(changes)) == message


def test_the_error_carries_its_parts_as_attributes(team: pathlib.Path) -> None:
    team.write_text(edited({13: 'symlinks = "follow"'}), encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        load_policy(team.name)
    assert (info.value.file, info.value.line) == ("team.toml", 13)
    assert info.value.reason == 'workspace "notes": symlinks: must be "deny" or "within"'


def test_an_empty_file_needs_a_workspace(team: pathlib.Path) -> None:
    assert error_of(team, "# nothing\n") == (
        "team.toml:1: workspace: at least one [[workspace]] table is required"
    )


def test_the_first_problem_in_file_order_is_reported(team: pathlib.Path) -> None:
    text = edited({4: 'local = "yes"', 13: 'symlinks = "x"', 28: "operations = []"})
    assert error_of(team, text).startswith("team.toml:4: ")


def test_a_missing_file_and_a_non_utf8_file_are_named(team: pathlib.Path) -> None:
    with pytest.raises(
        PolicyError, match=r"^absent\.toml: does not exist$"
    ):
        load_policy("absent.toml")
    team.write_bytes(b'# ok\n\n[[workspace]]\nname = "\xff"\n')
    with pytest.raises(PolicyError, match=r"^team\.toml:4: not valid UTF-8$"):
        load_policy(team.name)


def test_a_clear_token_is_never_echoed_in_the_error(team: pathlib.Path) -> None:
    message = error_of(team, edited({8: f'token = "{BOB_TOKEN}"'}))
    assert BOB_TOKEN not in message and "token_sha256" in message


def test_lines_are_found_past_multiline_strings_arrays_and_inline_tables(
    team: pathlib.Path,
) -> None:
    # A multi-line string holding header-like text must not shift or confuse the located line.
    text = '''\
[[principal]]
"name" = "alice"  # quoted key
local = true
[[workspace]]
name = "notes"
path = "/w/notes"
[[grant]]
principal = "alice"
workspace = "notes"
operations = [
  "read",  # ] a bracket in a comment
  "write",
]
[[workspace]]
name = """
[[workspace]]
symlinks = "x"
"""
path = "/w/other"
symlinks = 'nope'
'''
    assert (
        error_of(team, text) == "team.toml:15: workspace #2: name: "
        "must be printable, without quotes or surrounding spaces"
    )
    fixed = text.replace('name = """\n[[workspace]]\nsymlinks = "x"\n"""', 'name = "other"\n\n\n')
    assert (
        error_of(team, fixed)
        == 'team.toml:20: workspace "other": symlinks: must be "deny" or "within"'
    )
    inline = 'workspace = [{ name = "a", path = "/a" },\n  { name = "b", path = "b" }]\n'
    assert error_of(team, inline) == 'team.toml:1: workspace "b": path: must be an absolute path'


@settings(max_examples=60, deadline=None)
@given(
    padding=st.lists(
        st.sampled_from(["", "# comment", "   ", "# [[workspace]]"]), min_size=28, max_size=28
    ),
    bad_line=st.sampled_from([4, 8, 13, 18, 28]),
)
def test_the_reported_line_follows_the_bad_key_wherever_blank_lines_and_comments_are(
    tmp_path_factory: pytest.TempPathFactory, padding: list[str], bad_line: int
) -> None:
    bad = {
        4: "local = 1",
        8: 'token_sha256 = "00"',
        13: 'symlinks = "x"',
        18: 'sandbox = "x"',
        28: 'operations = ["x"]',
    }[bad_line]
    out: list[str] = []
    expected = 0
    for n, (line, pad) in enumerate(zip(BASE, padding, strict=True), start=1):
        out.append(pad)
        out.append(bad if n == bad_line else line)
        if n == bad_line:
            expected = len(out)
    file = tmp_path_factory.mktemp("pad") / "p.toml"
    file.write_text("\n".join(out) + "\n", encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        load_policy(str(file))
    assert info.value.line == expected


# --- authorization matrix ------------------------------------------------------------------------

MATRIX_TOML = f"""
[[principal]]
name = "alice"
local = true
[[principal]]
name = "bob"
token_sha256 = "{BOB_SHA}"
[[principal]]
name = "carol"
token_sha256 = "{CAROL_SHA}"
[[workspace]]
name = "notes"
path = "/w/notes"
[[workspace]]
name = "archive"
path = "/w/archive"
symlinks = "within"
sandbox = "none"
[[grant]]
principal = "alice"
workspace = "notes"
operations = ["read", "write", "delete"]
[[grant]]
principal = "alice"
workspace = "archive"
operations = ["read"]
[[grant]]
principal = "bob"
workspace = "archive"
operations = ["write", "read"]
"""
ALLOWED: dict[tuple[str, str], set[str]] = {
    ("alice", "notes"): {"read", "write", "delete"},
    ("alice", "archive"): {"read"},
    ("bob", "archive"): {"read", "write"},
}
URIS = {"notes": "file:///w/notes", "archive": "file:///w/archive"}


@pytest.fixture
def matrix(tmp_path: pathlib.Path) -> Policy:
    file = tmp_path / "matrix.toml"
    file.write_text(MATRIX_TOML, encoding="utf-8")
    return load_policy(str(file))


@pytest.mark.parametrize(
    ("who", "where", "op"), list(itertools.product(["alice", "bob", "carol"], URIS, OPERATIONS))
)
def test_authorization_matrix(matrix: Policy, who: str, where: str, op: Operation) -> None:
    principal = Principal(who)
    if op in ALLOWED.get((who, where), set()):
        grant = matrix.authorize(principal, URIS[where], op)
        assert (grant.principal, grant.workspace.name) == (principal, where)
        assert grant.operations == frozenset(ALLOWED[(who, where)])
        located, note = matrix.locate(principal, URIS[where] + "/a/b.md", op)
        assert (located, note) == (grant, "a/b.md")
    else:
        with pytest.raises(NotAuthorized):
            matrix.authorize(principal, URIS[where], op)
        with pytest.raises(NotAuthorized):
            matrix.locate(principal, URIS[where] + "/a/b.md", op)


def test_workspace_settings_travel_with_the_grant(matrix: Policy) -> None:
    grant = matrix.authorize(Principal("bob"), "file:///w/archive", "write")
    assert (grant.workspace.symlinks, grant.workspace.sandbox) == ("within", "none")
    assert grant.workspace.root == WorkspacePath(("w", "archive"))
    assert grant.workspace.uri == "file:///w/archive"


@pytest.mark.parametrize(
    "uri",
    [
        "file:///w/nowhere",
        "file:///w",
        "file:///w/notes/sub",
        "file:///w/notesx",
        "file:///w/Notes",
    ],
)
def test_an_unauthorized_workspace_and_a_nonexistent_one_are_indistinguishable(
    matrix: Policy, uri: str
) -> None:
    carol = Principal("carol")  # no grant anywhere; /w/notes exists but is not hers
    with pytest.raises(NotAuthorized) as existing:
        matrix.authorize(carol, "file:///w/notes", "read")
    with pytest.raises(NotAuthorized) as absent:
        matrix.authorize(carol, uri, "read")
    assert type(existing.value) is type(absent.value) is NotAuthorized
    assert str(existing.value) == str(absent.value) == NOT_PERMITTED
    with pytest.raises(NotAuthorized) as located:
        matrix.locate(carol, "file:///w/notes/a.md", "read")
    with pytest.raises(NotAuthorized) as located_absent:
        matrix.locate(carol, "file:///w/nowhere/a.md", "read")
    assert str(located.value) == str(located_absent.value) == NOT_PERMITTED
    # bob may use /w/archive but not /w/notes: still the very same refusal.
    with pytest.raises(NotAuthorized, match=f"^{NOT_PERMITTED}$"):
        matrix.authorize(Principal("bob"), "file:///w/notes", "read")


def test_a_missing_operation_on_a_granted_workspace_says_so(matrix: Policy) -> None:
    # Ours: the principal already knows this workspace exists; naming the op reveals nothing.
    with pytest.raises(
        NotAuthorized, match=r'^operation "delete" is not permitted in this workspace$'
    ):
        matrix.authorize(Principal("bob"), "file:///w/archive", "delete")


def test_a_principal_unknown_to_the_policy_is_refused_like_a_nonexistent_workspace(
    matrix: Policy,
) -> None:
    with pytest.raises(NotAuthorized, match=f"^{NOT_PERMITTED}$"):
        matrix.authorize(Principal("mallory"), "file:///w/notes", "read")


def test_an_unknown_operation_is_a_programming_error(matrix: Policy) -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        matrix.authorize(Principal("alice"), "file:///w/notes", "erase")  # type: ignore[arg-type]


def test_equivalent_spellings_of_the_workspace_uri_match_by_components(matrix: Policy) -> None:
    alice = Principal("alice")
    spellings = [
        "file://localhost/w/notes",
        "file:///w/%6Eotes",
        "FILE:///w/notes",
        "file:///w/notes/",
    ]
    for uri in spellings:
        assert matrix.authorize(alice, uri, "read").workspace.name == "notes"


@pytest.mark.parametrize(
    "uri",
    [
        "file:///w/notes/../archive",
        "file:///w/notes/%2e%2e/archive",
        "file://evil/w/notes",
        "file:notes",
        "file:///w/notes?x",
        "http:///w/notes",
        "file:///",
        "file:////w/notes",
        "file:///w//notes",
    ],
)
def test_a_malformed_uri_is_refused_by_the_lexical_layer_before_any_policy(
    matrix: Policy, uri: str
) -> None:
    with pytest.raises(LexicalError):
        matrix.authorize(Principal("alice"), uri, "read")
    with pytest.raises(LexicalError):
        matrix.authorize(Principal("carol"), uri, "read")  # same answer with or without grants


# --- component containment, never string prefixes ----------------------------------------------


def test_a_prefix_sibling_is_not_inside_the_workspace(matrix: Policy) -> None:
    alice = Principal("alice")
    for uri in ["file:///w/notes-evil/x.md", "file:///w/notesx.md", "file:///w/notes.md"]:
        with pytest.raises(NotAuthorized, match=f"^{NOT_PERMITTED}$"):
            matrix.locate(alice, uri, "read")
    with pytest.raises(NotAuthorized, match=f"^{NOT_PERMITTED}$"):
        matrix.authorize(alice, "file:///w/notes-evil", "read")


def test_a_prefix_sibling_may_be_its_own_workspace_and_is_told_apart(team: pathlib.Path) -> None:
    team.write_text(edited({17: 'path = "/w/notes-evil"'}), encoding="utf-8")
    policy = load_policy(team.name)
    grant, note = policy.locate(Principal("bob"), "file:///w/notes-evil/x.md", "read")
    assert (grant.workspace.name, note) == ("archive", "x.md")
    with pytest.raises(NotAuthorized, match=f"^{NOT_PERMITTED}$"):
        policy.locate(Principal("bob"), "file:///w/notes/x.md", "read")


def test_locate_places_a_note_in_the_longest_matching_workspace() -> None:
    # load_policy refuses nested workspaces; locate stays correct if a Policy is built with them.
    me = Principal("me")
    outer = Workspace("outer", WorkspacePath(("w",)), "deny", "landlock")
    inner = Workspace("inner", WorkspacePath(("w", "notes")), "deny", "landlock")
    everything = frozenset(OPERATIONS)
    grants = [WorkspaceGrant(me, outer, everything), WorkspaceGrant(me, inner, frozenset({"read"}))]
    policy = Policy([me], [outer, inner], grants)
    assert policy.locate(me, "file:///w/notes/a/b.md", "read") == (grants[1], "a/b.md")
    assert policy.locate(me, "file:///w/other/b.md", "delete") == (grants[0], "other/b.md")
    with pytest.raises(NotAuthorized):  # the inner workspace's rules apply, not the outer's
        policy.locate(me, "file:///w/notes/a/b.md", "delete")


def test_locate_of_the_workspace_folder_itself_is_not_a_note(matrix: Policy) -> None:
    with pytest.raises(LexicalError):
        matrix.locate(Principal("alice"), "file:///w/notes", "read")


def test_no_authorization_api_takes_anything_from_the_request_but_the_principal() -> None:
    # Ours: client roots, clientInfo and _meta must never widen access: no API even accepts them.
    assert list(inspect.signature(Policy.authorize).parameters) == [
        "self",
        "principal",
        "workspace_uri",
        "op",
    ]
    assert list(inspect.signature(Policy.locate).parameters) == ["self", "principal", "uri", "op"]
    assert list(inspect.signature(Policy.grants_for).parameters) == ["self", "principal"]


# --- bearer tokens: hashes only, constant-time over every entry --------------------------------


def test_token_authentication(matrix: Policy) -> None:
    assert matrix.authenticate_token(BOB_TOKEN) == Principal("bob")
    assert matrix.authenticate_token(CAROL_TOKEN) == Principal("carol")
    refused = ["", "wrong", BOB_TOKEN + " ", " " + BOB_TOKEN, BOB_TOKEN.upper(), BOB_TOKEN[:-1]]
    # Presenting a stored hash (or its bytes' hex) as the token is a different token: refused.
    refused += [BOB_SHA, CAROL_SHA, BOB_SHA.upper(), "\ud800"]
    for token in refused:
        with pytest.raises(NotAuthenticated, match=r"^missing or invalid bearer token$"):
            matrix.authenticate_token(token)


def test_each_token_selects_only_its_own_principal(tmp_path: pathlib.Path) -> None:
    # bob's entry comes first: carol's token must still find carol, and bob's must not find carol.
    file = tmp_path / "p.toml"
    file.write_text(MATRIX_TOML, encoding="utf-8")
    policy = load_policy(str(file))
    assert policy.authenticate_token(CAROL_TOKEN).name == "carol"
    assert policy.authenticate_token(BOB_TOKEN).name == "bob"
    assert policy.authorize(policy.authenticate_token(BOB_TOKEN), URIS["archive"], "write")
    with pytest.raises(NotAuthorized):
        policy.authorize(policy.authenticate_token(CAROL_TOKEN), URIS["archive"], "read")


def test_every_stored_hash_is_compared_even_after_a_match(
    matrix: Policy, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for token in (BOB_TOKEN, CAROL_TOKEN, "wrong", ""):
        calls.clear()
        with contextlib.suppress(NotAuthenticated):
            matrix.authenticate_token(token)
        assert len(calls) == 2  # bob's and carol's hashes, whichever matched
        assert {b for _, b in calls} == {bytes.fromhex(BOB_SHA), bytes.fromhex(CAROL_SHA)}


def test_an_empty_token_is_refused_even_if_an_empty_hash_slipped_into_a_policy() -> None:
    # load_policy refuses the empty string's hash; authentication refuses an empty token regardless.
    me = Principal("me")
    ws = Workspace("w", WorkspacePath(("w",)), "deny", "landlock")
    grants = [WorkspaceGrant(me, ws, frozenset(OPERATIONS))]
    policy = Policy([me], [ws], grants, token_hashes={"me": hashlib.sha256(b"").hexdigest()})
    for token in ("", "\ud800"):  # a lone surrogate cannot be encoded: treated as empty
        with pytest.raises(NotAuthenticated):
            policy.authenticate_token(token)


def test_the_local_principal_is_not_reachable_by_any_token(matrix: Policy) -> None:
    assert matrix.local_principal() == Principal("alice")
    for token in ("", "alice", "local", "true"):
        with pytest.raises(NotAuthenticated):
            matrix.authenticate_token(token)


def test_hash_token_is_what_a_policy_stores() -> None:
    assert hash_token(BOB_TOKEN) == BOB_SHA
    assert hash_token("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


# --- zero-config: fs-notes serve WORKSPACE -------------------------------------------------------


def test_single_workspace_for_the_local_user() -> None:
    policy = Policy.for_single_workspace("/home/me/notes", "me", token_sha256=None)
    me = policy.local_principal()
    assert me == Principal("me")
    for op in OPERATIONS:
        grant = policy.authorize(me, "file:///home/me/notes", op)
        assert (grant.workspace.name, grant.workspace.symlinks, grant.workspace.sandbox) == (
            "notes",
            "deny",
            "landlock",
        )
    with pytest.raises(NotAuthenticated):
        policy.authenticate_token("")
    with pytest.raises(NotAuthorized, match=f"^{NOT_PERMITTED}$"):
        policy.authorize(me, "file:///home/me/notes-evil", "read")


def test_single_workspace_over_http_serves_only_the_token() -> None:
    policy = Policy.for_single_workspace(
        "/srv/n", "token-user", token_sha256=BOB_SHA, sandbox="chroot"
    )
    principal = policy.authenticate_token(BOB_TOKEN)
    assert policy.authorize(principal, "file:///srv/n", "delete").workspace.sandbox == "chroot"
    with pytest.raises(NotAuthenticated):
        policy.authenticate_token(CAROL_TOKEN)
    with pytest.raises(PolicyError, match="no principal has local = true"):
        policy.local_principal()


def test_single_workspace_names_the_workspace_after_its_folder_when_it_can() -> None:
    for path, name in [
        ("/srv/my notes", "my notes"),
        ('/srv/a"b', "workspace"),
        ("/srv/ x", "workspace"),
    ]:
        policy = Policy.for_single_workspace(path, "me", token_sha256=None)
        assert [(w.name, w.path) for w in policy.workspaces] == [(name, path)]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("notes", 'workspace "notes": path: must be an absolute path'),
        ("/a/../b", 'workspace "b": path: must be normalized (no "//", ".", ".." or trailing "/")'),
        ("/", 'workspace "workspace": path: must not be the filesystem root'),
    ],
)
def test_single_workspace_refuses_a_path_that_is_not_absolute_and_normal(
    path: str, message: str
) -> None:
    with pytest.raises(PolicyError) as info:
        Policy.for_single_workspace(path, "me", token_sha256=None)
    assert str(info.value) == message


# --- small facts ---------------------------------------------------------------------------------


def test_sandbox_levels_are_ordered_landlock_chroot_none() -> None:
    levels = ["none", "chroot", "landlock"]
    assert sorted(get_args(policy_mod.SandboxLevel)) == sorted(levels)
    for i, required in enumerate(levels):
        ws = Workspace("w", WorkspacePath(("w",)), "deny", required)  # type: ignore[arg-type]
        assert [ws.accepts(m) for m in levels] == [j >= i for j in range(3)]  # type: ignore[arg-type]


def test_workspace_uri_is_percent_encoded_and_parses_back(team: pathlib.Path) -> None:
    team.write_text(edited({12: 'path = "/w/my notes/é"'}), encoding="utf-8")
    ws = load_policy(team.name).workspaces[0]
    assert ws.uri == "file:///w/my%20notes/%C3%A9"
    assert load_policy(team.name).authorize(Principal("alice"), ws.uri, "read").workspace == ws


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_a_policy_file_others_can_write_is_refused(tmp_path: pathlib.Path, mode: int) -> None:
    """Whoever can change the policy decides who may do what where (a reviewer's finding)."""
    f = tmp_path / "p.toml"
    f.write_text(_ONE_WORKSPACE.format(path=tmp_path))
    f.chmod(mode)
    with pytest.raises(PolicyError) as info:
        load_policy(str(f))
    assert str(info.value) == (
        f"{f}: writable by others (mode {mode:04o}); fix it with: chmod go-w {f}"
    )
    f.chmod(0o644)  # positive control: readable by all, writable by its owner only
    assert [ws.path for ws in load_policy(str(f)).workspaces] == [str(tmp_path)]


def test_a_policy_file_owned_by_another_user_is_refused(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(_ONE_WORKSPACE.format(path=tmp_path))
    if os.geteuid() != 0:  # only root can give a file away; CI runs as root
        assert load_policy(str(f)).workspaces
        return
    os.chown(f, 65534, 65534)
    with pytest.raises(PolicyError, match=r": owned by another user \(uid 65534\)$"):
        load_policy(str(f))
    os.chown(f, 0, 0)
    assert load_policy(str(f)).workspaces


_ONE_WORKSPACE = """
[[principal]]
name = "me"
local = true

[[workspace]]
name = "w"
path = "{path}"
"""


@pytest.mark.parametrize(
    ("written", "served"),
    [("~/notes", "{home}/notes"), ("~", "{home}"), ("$HOME/notes", "{home}/notes"),
     ("${HOME}/a/b", "{home}/a/b")],
)  # fmt: skip
def test_tilde_and_home_in_a_workspace_path_are_expanded_as_on_the_command_line(
    team: pathlib.Path, monkeypatch: pytest.MonkeyPatch, written: str, served: str
) -> None:
    # Issue 25: `~` was refused in the policy although `serve ~/notes` expands it.
    home = team.parent / "home"
    monkeypatch.setenv("HOME", str(home))
    team.write_text(edited({12: f"path = {json.dumps(written)}"}), encoding="utf-8")
    (notes,) = [w for w in load_policy(team.name).workspaces if w.name == "notes"]
    assert notes.path == served.format(home=home)
    assert notes.path == expand_path(written)  # one expansion: the command line's


@pytest.mark.parametrize(
    ("written", "home", "message"),
    [
        ("~/notes", "relative/home", "HOME is 'relative/home', not an absolute path"),
        ("~nosuchuser-h5/notes", None, "must be an absolute path"),
        ("notes/~", None, "must be an absolute path"),
        ("~/notes/", None, 'must be normalized (no "//", ".", ".." or trailing "/")'),
    ],
)
def test_a_workspace_path_that_does_not_expand_to_a_normal_absolute_one_is_refused(
    team: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    written: str,
    home: str | None,
    message: str,
) -> None:
    if home is not None:
        monkeypatch.setenv("HOME", home)
    error = error_of(team, edited({12: f"path = {json.dumps(written)}"}))
    assert error.startswith('team.toml:12: workspace "notes": path: ')
    assert message in error
