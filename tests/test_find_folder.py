"""Models find their folder (issue 25): the server's instructions and notes_workspaces name the
workspaces of the request's principal, and of no other; with one workspace granted,
`workspaceUri` may be left out of every tool; a refused workspaceUri's error lists the valid
ones, the same text for a workspace that exists but is not granted and one that does not exist.
And delete as people ask: notes_delete by id, the same form as by title, with one option."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from inprocess import META, InProcess

from fs_notes.policy import Policy, Principal, hash_token
from fs_notes.policy_file import load_policy
from fs_notes.protocol.envelope import Request
from fs_notes.rounds.seal import KeyRing

KEYS = KeyRing([("k1", b"k" * 32)])
NO_FORM_DATA: dict[str, Any] = {"requiredCapabilities": {"elicitation": {"form": {}}}}
ALL = ["read", "write", "delete"]
ONE_OF = "notes_delete takes exactly one of title and id"


def _accept(note: str) -> dict[str, Any]:
    return {"delete_choice": {"action": "accept", "content": {"note_id": note, "confirm": True}}}


def _policy(tmp_path: Path, approval: str = "either") -> tuple[Policy, dict[str, Path]]:
    """alice: team (read, write, delete) and private (read); bob: team (read) only."""
    folders = {name: tmp_path / name for name in ("team", "private", "bobs")}
    for name, folder in folders.items():
        folder.mkdir()
        (folder / f"{name}.md").write_text(f"# {name.title()} note\n")
    text = (
        "".join(
            f'[[principal]]\nname = "{p}"\ntoken_sha256 = "{hash_token("tok-" + p * 8)}"\n\n'
            for p in ("alice", "bob")
        )
        + "".join(
            f'[[workspace]]\nname = "{name}"\npath = "{folder}"\napproval = "{approval}"\n\n'
            for name, folder in folders.items()
        )
        + (
            '[[grant]]\nprincipal = "alice"\nworkspace = "team"\n'
            'operations = ["read", "write", "delete"]\n\n'
            '[[grant]]\nprincipal = "alice"\nworkspace = "private"\noperations = ["read"]\n\n'
            '[[grant]]\nprincipal = "bob"\nworkspace = "bobs"\n'
            'operations = ["read", "write", "delete"]\n'
        )
    )
    (tmp_path / "policy.toml").write_text(text)
    return load_policy(str(tmp_path / "policy.toml")), folders


def _server(tmp_path: Path, policy: Policy) -> InProcess:
    (tmp_path / "state").mkdir(exist_ok=True)
    return InProcess(policy, tmp_path / "state", keyring=KEYS, clock=time.time)


def _ask(srv: InProcess, who: Principal, method: str) -> dict[str, Any]:
    params = {"_meta": {**META, "io.modelcontextprotocol/clientCapabilities": {}}}
    answer = srv.dispatcher.handle(Request(1, method, params), who, "test")
    assert answer is not None
    return answer["result"]  # type: ignore[no-any-return]


def test_the_instructions_name_this_principals_workspaces_and_no_others(tmp_path: Path) -> None:
    policy, folders = _policy(tmp_path)
    srv = _server(tmp_path, policy)
    try:
        alice = _ask(srv, Principal("alice"), "server/discover")
        bob = _ask(srv, Principal("bob"), "server/discover")
    finally:
        srv.close()
    for result in (alice, bob):
        assert result["cacheScope"] == "private"  # it depends on who asks
    team, private, bobs = (folders[n].as_uri() for n in ("team", "private", "bobs"))
    text = alice["instructions"]
    assert f'"team" {team} (read, write, delete)' in text
    assert f'"private" {private} (read)' in text
    assert "bobs" not in text and "workspaceUri may be left out" not in text
    text = bob["instructions"]
    assert f'"bobs" {bobs} (read, write, delete)' in text
    assert "It is the only one, so workspaceUri may be left out" in text
    assert "team" not in text and "private" not in text and str(tmp_path / "team") not in text


def test_notes_workspaces_lists_exactly_this_principals_grants_under_its_output_schema(
    tmp_path: Path,
) -> None:
    policy, folders = _policy(tmp_path)
    srv = _server(tmp_path, policy)
    try:
        tools = {t["name"]: t for t in _ask(srv, Principal("alice"), "tools/list")["tools"]}
        alice = srv.call(Principal("alice"), "notes_workspaces", {})["result"]
        bob = srv.call(Principal("bob"), "notes_workspaces", {})["result"]
        extra = srv.call(Principal("bob"), "notes_workspaces", {"workspaceUri": "x"})["result"]
    finally:
        srv.close()
    spec = tools["notes_workspaces"]
    assert spec["inputSchema"]["properties"] == {} and spec["inputSchema"]["required"] == []
    assert alice["structuredContent"] == {
        "workspaces": [
            {"name": "team", "uri": folders["team"].as_uri(), "operations": ALL},
            {"name": "private", "uri": folders["private"].as_uri(), "operations": ["read"]},
        ]
    }  # fmt: skip
    assert bob["structuredContent"] == {
        "workspaces": [
            {"name": "bobs", "uri": folders["bobs"].as_uri(), "operations": ALL}
        ]
    }  # fmt: skip
    assert "team" not in json.dumps(bob)
    for result in (alice, bob):
        jsonschema.validate(result["structuredContent"], spec["outputSchema"])
    assert extra["isError"] is True and "unexpected argument 'workspaceUri'" in json.dumps(extra)


def test_every_tool_schema_makes_workspace_uri_optional_and_says_when(tmp_path: Path) -> None:
    policy, _ = _policy(tmp_path)
    srv = _server(tmp_path, policy)
    try:
        tools = _ask(srv, Principal("alice"), "tools/list")["tools"]
    finally:
        srv.close()
    with_uri = [t for t in tools if "workspaceUri" in t["inputSchema"]["properties"]]
    assert len(with_uri) == len(tools) - 1  # all but notes_workspaces
    for tool in with_uri:
        assert "workspaceUri" not in tool["inputSchema"]["required"], tool["name"]
        described = tool["inputSchema"]["properties"]["workspaceUri"]["description"]
        assert "left out when exactly one workspace is granted" in described


def test_one_granted_workspace_needs_no_workspace_uri_to_list_read_and_delete(
    tmp_path: Path,
) -> None:
    policy, folders = _policy(tmp_path)
    bob = Principal("bob")
    srv = _server(tmp_path, policy)
    try:
        listed = srv.call(bob, "notes_list", {})["result"]
        assert [n["id"] for n in listed["structuredContent"]["notes"]] == ["bobs.md"]
        read = srv.call(bob, "notes_read", {"id": "bobs.md"})["result"]
        assert read["structuredContent"]["content"] == "# Bobs note\n"
        created = srv.call(bob, "notes_create", {"id": "new.md", "content": "# New\n"})["result"]
        assert created.get("isError") is not True and (folders["bobs"] / "new.md").exists()
        first = srv.call(bob, "notes_delete", {"id": "new.md"})["result"]
        assert first["resultType"] == "input_required"
        form = first["inputRequests"]["delete_choice"]["params"]
        assert folders["bobs"].as_uri() in form["message"]  # the defaulted workspace, named
        done = srv.call(
            bob,
            "notes_delete",
            {"id": "new.md"},
            requestState=first["requestState"],
            inputResponses=_accept("new.md"),
        )["result"]
        assert done["structuredContent"] == {"deleted": "new.md", "outcome": "deleted"}
        assert not (folders["bobs"] / "new.md").exists()
    finally:
        srv.close()


def test_with_several_workspaces_a_missing_workspace_uri_lists_them(tmp_path: Path) -> None:
    policy, folders = _policy(tmp_path)
    srv = _server(tmp_path, policy)
    try:
        answer = srv.call(Principal("alice"), "notes_list", {})["result"]
    finally:
        srv.close()
    assert answer["isError"] is True
    text = answer["content"][0]["text"]
    assert text.startswith("workspaceUri is required: the workspaces you may use: ")
    assert folders["team"].as_uri() in text and folders["private"].as_uri() in text
    assert "bobs" not in text


def test_a_refused_workspace_lists_the_valid_ones_and_never_tells_ungranted_from_absent(
    tmp_path: Path,
) -> None:
    policy, folders = _policy(tmp_path)
    bob = Principal("bob")
    srv = _server(tmp_path, policy)
    try:
        ungranted = srv.call(bob, "notes_list", {"workspaceUri": folders["team"].as_uri()})
        absent = srv.call(bob, "notes_list", {"workspaceUri": (tmp_path / "nowhere").as_uri()})
        inside = srv.call(
            bob, "notes_read", {"workspaceUri": folders["team"].as_uri(), "id": "team.md"}
        )
    finally:
        srv.close()
    texts = [a["result"]["content"][0]["text"] for a in (ungranted, absent, inside)]
    assert (
        texts[0]
        == texts[1]
        == texts[2]
        == (
            "workspace not found or not permitted; the workspaces you may use: "
            f'"bobs" {folders["bobs"].as_uri()} (read, write, delete)'
        )
    )
    assert all(a["result"]["isError"] is True for a in (ungranted, absent, inside))


def test_a_bare_workspace_name_is_not_a_uri_and_the_granted_one_of_that_name_is_suggested(
    tmp_path: Path,
) -> None:
    """A model that passes the workspace's name ("team") instead of its URI used to get "the
    URI scheme is not file"; now it is told the value is not a URI and offered the URI of its
    own workspace of that name (or folder path), the valid ones listed as before. Another
    principal's workspace of that name is never offered (bob asking for "team")."""
    policy, folders = _policy(tmp_path)
    alice, bob = Principal("alice"), Principal("bob")
    team, private = folders["team"].as_uri(), folders["private"].as_uri()
    valid = (
        f'the workspaces you may use: "team" {team} (read, write, delete); '
        f'"private" {private} (read)'
    )
    srv = _server(tmp_path, policy)
    try:
        asked = {
            value: srv.call(who, "notes_list", {"workspaceUri": value})["result"]
            for who, value in (
                (alice, "team"), (alice, "TEAM"), (alice, str(folders["team"])), (alice, "vault"),
            )
        }
        bobs = srv.call(bob, "notes_list", {"workspaceUri": "team"})["result"]
        scheme = srv.call(alice, "notes_list", {"workspaceUri": "notes://team"})["result"]
    finally:
        srv.close()
    assert all(a["isError"] is True for a in (*asked.values(), bobs, scheme))
    texts = {value: a["content"][0]["text"] for value, a in asked.items()}
    expected = "invalid workspaceUri: \"{}\" is not a URI: a workspace is named by its file:// URI"
    assert texts["team"] == expected.format("team") + f'; did you mean "{team}"?; ' + valid
    assert texts["TEAM"] == expected.format("TEAM") + f'; did you mean "{team}"?; ' + valid
    path = str(folders["team"])
    assert texts[path] == expected.format(path) + f'; did you mean "{team}"?; ' + valid
    assert texts["vault"] == expected.format("vault") + "; " + valid  # no such name: no guess
    assert bobs["content"][0]["text"] == (
        expected.format("team") + "; the workspaces you may use: "
        f'"bobs" {folders["bobs"].as_uri()} (read, write, delete)'
    )
    # a URI of another scheme keeps its own reason
    assert scheme["content"][0]["text"] == (
        "invalid workspaceUri: the URI scheme is not file; " + valid
    )


def _tree(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mode, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_delete_by_id_offers_the_one_note_in_the_same_form_as_by_title(tmp_path: Path) -> None:
    policy, folders = _policy(tmp_path)
    alice = Principal("alice")
    team = folders["team"].as_uri()
    srv = _server(tmp_path, policy)
    try:
        by_id = srv.call(alice, "notes_delete", {"workspaceUri": team, "id": "team.md"})["result"]
        by_title = srv.call(alice, "notes_delete", {"workspaceUri": team, "title": "Team note"})
        form_id = by_id["inputRequests"]["delete_choice"]["params"]
        form_title = by_title["result"]["inputRequests"]["delete_choice"]["params"]
        assert form_id["requestedSchema"] == form_title["requestedSchema"]
        options = form_id["requestedSchema"]["properties"]["note_id"]["oneOf"]
        assert [o["const"] for o in options] == ["team.md"]
        assert "The note team.md was asked for" in form_id["message"]
        done = srv.call(
            alice,
            "notes_delete",
            {"workspaceUri": team, "id": "team.md"},
            requestState=by_id["requestState"],
            inputResponses=_accept("team.md"),
        )["result"]
        assert done["structuredContent"] == {"deleted": "team.md", "outcome": "deleted"}
        assert not (folders["team"] / "team.md").exists()
    finally:
        srv.close()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"id": "team.md", "title": "Team note"}, f"{ONE_OF}: not both"),
        ({}, f"{ONE_OF}: give the title or the id of the note"),
        ({"id": "gone.md"}, "note not found: gone.md"),
        ({"id": "../private/private.md"}, "invalid note id: "),
    ],
)  # fmt: skip
def test_delete_by_id_refuses_both_neither_a_missing_note_and_a_bad_id(
    tmp_path: Path, args: dict[str, Any], expected: str
) -> None:
    policy, folders = _policy(tmp_path)
    before = {n: _tree(f) for n, f in folders.items()}
    srv = _server(tmp_path, policy)
    try:
        answer = srv.call(
            Principal("alice"), "notes_delete", {"workspaceUri": folders["team"].as_uri(), **args}
        )["result"]
    finally:
        srv.close()
    assert answer["isError"] is True and answer["content"][0]["text"].startswith(expected)
    assert "inputRequests" not in answer
    assert {n: _tree(f) for n, f in folders.items()} == before


def test_a_title_that_matches_nothing_points_to_the_id(tmp_path: Path) -> None:
    policy, folders = _policy(tmp_path)
    srv = _server(tmp_path, policy)
    try:
        args = {"workspaceUri": folders["team"].as_uri(), "title": "team.md"}
        answer = srv.call(Principal("alice"), "notes_delete", args)["result"]
    finally:
        srv.close()
    assert answer["content"][0]["text"] == (
        'no note in this workspace has a title matching "team.md" '
        "(notes_delete also takes the note's id)"
    )


def test_a_client_without_forms_is_told_in_words_what_to_use(tmp_path: Path) -> None:
    """Where only the form approves (`approval = "form"`); under the default, such a client is
    sent to the person outside it (tests/test_approval.py)."""
    policy, folders = _policy(tmp_path, approval="form")
    srv = _server(tmp_path, policy)
    try:
        answer = srv.call(
            Principal("alice"),
            "notes_delete",
            {"workspaceUri": folders["team"].as_uri(), "id": "team.md"},
            caps={"sampling": {}},  # anything but a form
        )
    finally:
        srv.close()
    error = answer["error"]
    assert error["code"] == -32021 and error["data"] == NO_FORM_DATA  # the spec's exact data
    message = error["message"]
    assert message.startswith("Missing required client capability: elicitation (form mode). ")
    assert "This client cannot show a confirmation form" in message
    assert "nothing was deleted" in message
    for client in ("Claude Code", "VS Code", "Cursor", "MCP Inspector 2", "docs/clients.md"):
        assert client in message
    assert (folders["team"] / "team.md").exists()


def test_the_legacy_initialize_result_carries_each_principals_own_instructions(
    tmp_path: Path,
) -> None:
    import asyncio

    from fs_notes.legacy.adapter import LegacyAdapter

    policy, folders = _policy(tmp_path)
    srv = _server(tmp_path, policy)
    adapter = LegacyAdapter(srv.dispatcher)

    async def welcome(who: Principal) -> dict[str, Any]:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
        req = Request(1, "initialize", params)
        session = adapter.open(req, who, "test")
        return (await adapter.welcome(session, req, who))["result"]  # type: ignore[no-any-return]

    try:
        alice = asyncio.run(welcome(Principal("alice")))
        bob = asyncio.run(welcome(Principal("bob")))
    finally:
        srv.close()
    assert alice["protocolVersion"] == bob["protocolVersion"] == "2025-11-25"
    assert folders["team"].as_uri() in alice["instructions"]
    assert folders["private"].as_uri() in alice["instructions"]
    assert folders["bobs"].as_uri() not in alice["instructions"]
    assert f'"bobs" {folders["bobs"].as_uri()} (read, write, delete)' in bob["instructions"]
    assert "team" not in bob["instructions"] and "private" not in bob["instructions"]


def test_a_workspace_name_is_escaped_in_text_and_exact_in_structured_content(
    tmp_path: Path,
) -> None:
    """A policy name may hold an invisible letter (U+3164 HANGUL FILLER is printable) or a
    backslash: text a model reads shows them escaped (fs_notes.render), so a name cannot hide
    a character or fake an escape; the structured listing keeps the exact name."""
    folder = tmp_path / "notes"
    folder.mkdir()
    name = "team\u3164\\u0041"
    (tmp_path / "p.toml").write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "{name.replace(chr(92), chr(92) * 2)}"\npath = "{folder}"\n\n'
        f'[[grant]]\nprincipal = "me"\nworkspace = "{name.replace(chr(92), chr(92) * 2)}"\n'
        'operations = ["read"]\n'
    )
    policy = load_policy(str(tmp_path / "p.toml"))
    assert policy.workspaces[0].name == name
    srv = _server(tmp_path, policy)
    me = policy.local_principal()
    try:
        text = _ask(srv, me, "server/discover")["instructions"]
        listed = srv.call(me, "notes_workspaces", {})["result"]
    finally:
        srv.close()
    assert '"team\\u3164\\\\u0041"' in text and "\u3164" not in text
    assert listed["structuredContent"]["workspaces"][0]["name"] == name
    assert "\u3164" not in listed["content"][0]["text"]


def test_a_call_without_workspace_uri_is_logged_under_the_principals_only_workspace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The request line names the workspace the call used: bob's only one ("bobs") although
    the policy has three; alice has two, so hers names none (the call is refused)."""
    policy, _ = _policy(tmp_path)
    srv = _server(tmp_path, policy)
    try:
        with caplog.at_level(logging.INFO, logger="fs_notes.requests"):
            assert srv.call(Principal("bob"), "notes_list", {})["result"].get("isError") is not True
            assert srv.call(Principal("alice"), "notes_list", {})["result"]["isError"] is True
    finally:
        srv.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "fs_notes.requests"]
    assert len(lines) == 2
    assert "principal=bob workspace=bobs method=tools/call tool=notes_list" in lines[0]
    assert "principal=alice workspace=- method=tools/call tool=notes_list" in lines[1]
