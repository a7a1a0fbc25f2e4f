"""Real folders, served whole and exactly (issue 11): awkward names through every tool over the real
protocol, in a workspace whose own path is awkward too, and the invariant list = readable =
resources = delete candidates over generated trees.

Every message the stdio server sends is validated against the official schema (tests/wire.py);
here every one must also be strict UTF-8 JSON (no lone surrogate from a file name)."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inprocess import FORM, META, InProcess
from wire import StdioServer, call_tool, request, stdio_server

from fs_notes.exercises import shown as judge
from fs_notes.fs import Identity
from fs_notes.fs.version import note_version
from fs_notes.lexical import LexicalError, file_uri, parse_workspace_uri, validate_note_id
from fs_notes.policy import Policy
from fs_notes.protocol.envelope import Request
from fs_notes.rounds.seal import KeyRing

# At least 40 names people really have, one per class of trouble (issue 11's list and more).
AWKWARD = [
    "%.md",
    "100% done.md",
    "%2e%2e.md",  # an id is never decoded
    "%252e%252e/x.md",
    "50%25 off.md",
    "#tag.md",
    "# heading.md",
    " leading space.md",
    "trailing space .md",
    "  two spaces.md",
    "Cafe\u0301.md",  # NFD, as macOS sync tools write it
    "Caf\u00e9.md",  # its NFC twin: another file
    "\u1100\u1161\u11a8.md",  # decomposed Hangul
    "\u2026.md",  # HORIZONTAL ELLIPSIS
    "\u2105 care of.md",  # CARE OF
    "\uff05 full width.md",  # FULLWIDTH PERCENT SIGN
    "a\uff0fb.md",  # FULLWIDTH SOLIDUS: a letter of the name
    "\u2025 two dots.md",
    "emoji \U0001f600\U0001f468\u200d\U0001f469\u200d\U0001f467.md",
    "\u65e5\u672c\u8a9e\u306e\u30ce\u30fc\u30c8.md",  # Japanese
    "\u4e2d\u6587\u7b14\u8bb0.md",  # Chinese
    "\ud55c\uad6d\uc5b4.md",  # Korean (precomposed)
    "\u05e2\u05d1\u05e8\u05d9\u05ea.md",  # Hebrew (RTL)
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629.md",  # Arabic (RTL)
    "\u0939\u093f\u0928\u094d\u0926\u0940.md",  # Devanagari
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22.md",  # Thai
    "\u0430pple.md",  # CYRILLIC SMALL LETTER A
    "tab\there.md",
    "new\nline.md",
    "zz\n- passwords.md",  # would forge a line in a naive listing
    "rlo \u202egpj.md",  # RIGHT-TO-LEFT OVERRIDE
    "rlm\u200f.md",  # RIGHT-TO-LEFT MARK
    "zero\u200bwidth.md",
    "bom\ufeff.md",
    "bell\x07.md",
    "del\x7f.md",
    "nel\x85.md",
    "ampersand & co.md",
    "quotes 'single' \"double\".md",
    "back\\slash.md",
    "brackets [[wiki]] (1) {2}.md",
    "shell $HOME `cmd` ;|<>*?.md",
    "colon: semi; eq=.md",
    "~tilde.md",
    "x..md",
    "a" * 252 + ".md",  # 255 bytes
    "\u00e9" * 126 + ".md",  # 255 bytes, 129 characters
    "d%/sub folder/\u65e5\u672c/cafe\u0301/deep.md",
    "/".join(["deep"] * 30) + "/bottom.md",
]


def _content(i: int) -> str:
    return f"# Awkward title {i:03d}\n\nbody of note {i}\n"


def _uri(ws: Path) -> str:
    return "file://" + urllib.parse.quote(str(ws))


def _strict(response: dict[str, Any]) -> dict[str, Any]:
    # Invalid JSON for a strict peer: a lone surrogate would fail this encode.
    json.dumps(response, ensure_ascii=False).encode("utf-8")
    return response


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StdioServer, Path]]:
    base = tmp_path_factory.mktemp("names")
    ws = base / "100% Cafe\u0301 #notes"  # the workspace's own path is awkward too
    ws.mkdir()
    for i, note in enumerate(AWKWARD):
        path = ws / note
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_content(i), encoding="utf-8")
    fd = os.open(os.fsencode(ws), os.O_RDONLY | os.O_DIRECTORY)
    try:  # names that cannot be served, each counted under its reason
        with open(os.open(b"bad\xffname.md", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd), "w") as f:
            f.write("# Not UTF-8\n")
    finally:
        os.close(fd)
    (base / "outside.md").write_text("# Outside\n")
    (ws / "link.md").symlink_to(base / "outside.md")
    (ws / "hard-a.md").write_text("# Hard\n")
    os.link(ws / "hard-a.md", ws / "hard-b.md")
    os.mkfifo(ws / "fifo.md")
    (ws / "big.md").write_text("# Big note\n" + "\u00e9" * 6000 + "\n", encoding="utf-8")
    policy = base / "policy.toml"
    policy.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "w"\npath = {json.dumps(str(ws))}\nread_limit = 8192\n\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "w"\noperations = ["read", "write", "delete"]\n',
        encoding="utf-8",
    )
    with stdio_server("--policy", str(policy), "--replay-db", str(base / "r.db")) as server:
        yield server, ws


def _ask(server: StdioServer, message: dict[str, Any]) -> dict[str, Any]:
    return _strict(server.ask(message))


def test_the_workspace_uri_round_trips_an_awkward_folder(served: tuple[StdioServer, Path]) -> None:
    _, ws = served
    assert parse_workspace_uri(_uri(ws)).as_posix() == str(ws)
    assert file_uri(parse_workspace_uri(_uri(ws))) == _uri(ws)


def test_every_awkward_name_is_listed_exactly_and_the_rest_counted(
    served: tuple[StdioServer, Path],
) -> None:
    server, ws = served
    listed = _ask(server, call_tool(1, "notes_list", {"workspaceUri": _uri(ws), "limit": 1000}))
    result = listed["result"]
    ids = [n["id"] for n in result["structuredContent"]["notes"]]
    assert sorted(ids) == sorted([*AWKWARD, "big.md"])
    assert ids == sorted(ids)  # code-point order
    assert result["structuredContent"]["skipped"] == {
        "hard-linked": 2,
        "not UTF-8": 1,
        "not a regular file": 1,
        "symbolic link": 1,
    }
    text = result["content"][0]["text"]
    lines = text.split("\n")
    # One line per note and one for the skipped: no name forged a line or hid a character.
    assert len([line for line in lines if line.startswith("- ")]) == len(ids)
    assert "- passwords.md: Awkward title 029" not in lines  # no forged line
    assert judge.harm([listed], ["- passwords.md: Awkward title 029"]) == []
    assert "- zz\\n- passwords.md: Awkward title 029" in lines
    assert (
        "(not served: 2 hard-linked, 1 not UTF-8, 1 not a regular file, 1 symbolic link)" in lines
    )
    big = next(n for n in result["structuredContent"]["notes"] if n["id"] == "big.md")
    assert big["tooLarge"] is True and big["title"] == "Big note"


@pytest.mark.parametrize("i", range(len(AWKWARD)))
def test_each_listed_note_reads_back_as_a_tool_and_as_a_resource(
    served: tuple[StdioServer, Path], i: int
) -> None:
    server, ws = served
    note = AWKWARD[i]
    read = _ask(server, call_tool(1, "notes_read", {"workspaceUri": _uri(ws), "id": note}))
    assert read["result"].get("isError") is not True, read
    assert read["result"]["structuredContent"] == {
        "id": note,
        "title": f"Awkward title {i:03d}",
        "content": _content(i),
        "tags": [],
        "aliases": [],
        "properties": {},
        "version": note_version(Identity.of(os.stat(ws / note)), (ws / note).read_bytes()),
    }
    uri = _uri(ws) + "/" + urllib.parse.quote(note, safe="/")
    resource = _ask(server, request(2, "resources/read", {"uri": uri}))
    assert resource["result"]["contents"][0]["text"] == _content(i)
    found = _ask(
        server,
        call_tool(3, "notes_search", {"workspaceUri": _uri(ws), "query": f"title {i:03d}"}),
    )
    # Ranked search (any of the words): the note whose title holds both comes first.
    assert found["result"]["structuredContent"]["matches"][0]["id"] == note
    form = _ask(
        server,
        call_tool(
            4, "notes_delete", {"workspaceUri": _uri(ws), "title": f"Awkward title {i:03d}"}, FORM
        ),
    )["result"]
    options = form["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]
    (option,) = options["note_id"]["oneOf"]
    assert option["const"] == note
    assert option["title"].startswith(f'"Awkward title {i:03d}" \u2014 ')
    assert judge.harm([{"result": form}], ()) == []


def test_resources_list_offers_exactly_the_listed_notes(served: tuple[StdioServer, Path]) -> None:
    server, ws = served
    names, cursor = [], None
    for n in range(10):
        params: dict[str, object] = {"cursor": cursor} if cursor else {}
        page = _ask(server, request(n, "resources/list", params))["result"]
        names += [r["name"] for r in page["resources"]]
        for r in page["resources"]:
            assert validate_note_id(r["name"]).text == r["name"]
            assert r["uri"] == _uri(ws) + "/" + urllib.parse.quote(r["name"], safe="/~")
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert sorted(names) == sorted([*AWKWARD, "big.md"])


def test_a_note_over_the_read_limit_is_read_in_parts(served: tuple[StdioServer, Path]) -> None:
    server, ws = served
    data = (ws / "big.md").read_bytes()
    whole = _ask(server, call_tool(1, "notes_read", {"workspaceUri": _uri(ws), "id": "big.md"}))
    assert whole["result"]["isError"] is True
    assert whole["result"]["content"][0]["text"] == (
        f"big.md is 11.7 KiB ({len(data)} bytes), above this workspace's read limit of 8192 "
        "bytes: read it in parts with offset (a byte offset, from 0) and length (at most 8192 "
        "bytes)"
    )
    got, offset = b"", 0
    while True:
        part = _ask(
            server,
            call_tool(
                2,
                "notes_read",
                {"workspaceUri": _uri(ws), "id": "big.md", "offset": offset, "length": 1001},
            ),
        )["result"]["structuredContent"]
        assert part["offset"] == offset and part["size"] == len(data)
        got += part["content"].encode("utf-8")
        assert len(got) == part["offset"] + part["length"]
        if "nextOffset" not in part:
            break
        offset = part["nextOffset"]
    assert got == data  # whole characters each time, nothing lost at the seams
    odd = _ask(
        server,
        call_tool(
            3, "notes_read", {"workspaceUri": _uri(ws), "id": "big.md", "offset": 12, "length": 4}
        ),
    )["result"]["structuredContent"]
    # Bytes 12..15 of "# Big note\n" + "é"*: a continuation byte first and a lone lead byte last
    # are left out: the part served is whole characters, and says which bytes it covers.
    assert (odd["offset"], odd["length"], odd["content"]) == (13, 2, "\u00e9")
    too_long = _ask(
        server,
        call_tool(4, "notes_read", {"workspaceUri": _uri(ws), "id": "big.md", "length": 9000}),
    )["result"]
    assert too_long["isError"] is True
    assert "at most this workspace's read limit of 8192 bytes" in too_long["content"][0]["text"]
    past = _ask(
        server,
        call_tool(5, "notes_read", {"workspaceUri": _uri(ws), "id": "big.md", "offset": 10**6}),
    )["result"]
    assert past["isError"] is True and "past the end" in past["content"][0]["text"]
    resource = _ask(server, request(6, "resources/read", {"uri": _uri(ws) + "/big.md"}))
    assert resource["error"]["code"] == -32602
    assert resource["error"]["data"] == {"uri": _uri(ws) + "/big.md", "readLimit": 8192}
    found = _ask(server, call_tool(7, "notes_search", {"workspaceUri": _uri(ws), "query": "big"}))
    assert [m["id"] for m in found["result"]["structuredContent"]["matches"]] == ["big.md"]


@pytest.mark.parametrize(
    "note", ["new/100% \u00e9t\u00e9\u2026 #1.md", "zz\n- forged.md", "cre\u0301e\u0301.md"]
)
def test_awkward_names_are_created_updated_and_deleted_exactly(
    served: tuple[StdioServer, Path], note: str
) -> None:
    server, ws = served
    uri = _uri(ws)
    made = _ask(
        server,
        call_tool(1, "notes_create", {"workspaceUri": uri, "id": note, "content": "# Made here\n"}),
    )
    assert made["result"].get("isError") is not True, made
    assert made["result"]["structuredContent"]["id"] == note
    assert "\n" not in made["result"]["content"][0]["text"]
    assert (ws / note).read_bytes() == b"# Made here\n"  # the exact bytes of the name on disk
    _ask(
        server,
        call_tool(
            2, "notes_update", {"workspaceUri": uri, "id": note, "content": "# Made here twice\n"}
        ),
    )
    assert (ws / note).read_text() == "# Made here twice\n"
    args = {"workspaceUri": uri, "title": "Made here twice"}
    first = _ask(server, call_tool(3, "notes_delete", args, FORM))["result"]
    answer = {"delete_choice": {"action": "accept", "content": {"note_id": note, "confirm": True}}}
    done = _ask(
        server,
        call_tool(
            4, "notes_delete", args, FORM, inputResponses=answer, requestState=first["requestState"]
        ),
    )["result"]
    assert done["structuredContent"] == {"deleted": note, "outcome": "deleted"}
    assert "\n" not in done["content"][0]["text"]
    assert not (ws / note).exists()


# --- the invariant over generated trees (in process) ---------------------------------------

NAME_CHARS = st.sampled_from(
    [*"ab Z%#&'\\.~", *"\u00e9\u0301\u2026\uff05\n\t\u202e\u200b\u65e5\u05e2\U0001f600\x7f"]
)
STEMS = st.text(NAME_CHARS, min_size=1, max_size=6)
BAD_BYTES = st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80abc"])


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[str], list[bytes]]:
    notes = draw(
        st.lists(
            st.lists(STEMS, min_size=1, max_size=3).map(lambda p: "/".join(p) + ".md"),
            max_size=8,
            unique=True,
        )
    )
    good: list[str] = []
    for n in notes:
        try:
            validate_note_id(n)
        except LexicalError:
            continue  # hidden names ('.a'), '.'/'..' parts: not notes by design
        if all(not g.startswith(n[:-3] + "/") and not n.startswith(g[:-3] + "/") for g in good):
            good.append(n)
    bad = [b"x" + b + b".md" for b in draw(st.lists(BAD_BYTES, max_size=2, unique=True))]
    return good, bad


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(trees())
def test_listed_equals_readable_equals_resources_equals_delete_candidates(
    tmp_path: Path, tree: tuple[list[str], list[bytes]]
) -> None:
    good, bad = tree
    case = Path(os.fsdecode(os.urandom(6).hex()))
    ws = tmp_path / case / "ws"
    ws.mkdir(parents=True)
    for i, note in enumerate(good):
        (ws / note).parent.mkdir(parents=True, exist_ok=True)
        (ws / note).write_text(f"# T{i:03d}\n", encoding="utf-8")
    for name in bad:
        with open(os.path.join(os.fsencode(ws), name), "wb") as f:
            f.write(b"# bad\n")
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    me = policy.local_principal()
    (tmp_path / case / "state").mkdir()
    srv = InProcess(
        policy, tmp_path / case / "state", keyring=KeyRing([("k", b"k" * 32)]), clock=time.time
    )
    uri = _uri(ws)
    try:
        result = _strict(srv.call(me, "notes_list", {"workspaceUri": uri, "limit": 1000}))["result"]
        listed = [n["id"] for n in result["structuredContent"]["notes"]]
        assert sorted(listed) == sorted(good)
        assert result["structuredContent"].get("skipped", {}) == (
            {"not UTF-8": len(bad)} if bad else {}
        )
        caps = {**META, "io.modelcontextprotocol/clientCapabilities": {}}
        res = srv.dispatcher.handle(Request(1, "resources/list", {"_meta": caps}), me, "test")
        assert res is not None
        assert sorted(r["name"] for r in _strict(res)["result"]["resources"]) == sorted(good)
        for i, note in enumerate(good):
            read = srv.call(me, "notes_read", {"workspaceUri": uri, "id": note})["result"]
            assert read["structuredContent"]["content"] == f"# T{i:03d}\n"
            form = srv.call(me, "notes_delete", {"workspaceUri": uri, "title": f"T{i:03d}"})
            schema = form["result"]["inputRequests"]["delete_choice"]["params"]["requestedSchema"]
            assert [o["const"] for o in schema["properties"]["note_id"]["oneOf"]] == [note]
    finally:
        srv.close()


def test_a_skipped_name_is_logged_once_on_one_line_with_its_bytes_escaped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "ok.md").write_text("# ok\n")
    with open(os.path.join(os.fsencode(ws), b"evil\n2026 fs-notes ERROR forged\xff.md"), "wb") as f:
        f.write(b"# x\n")
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    me = policy.local_principal()
    (tmp_path / "state").mkdir()
    srv = InProcess(
        policy, tmp_path / "state", keyring=KeyRing([("k", b"k" * 32)]), clock=time.time
    )
    try:
        with caplog.at_level("WARNING", logger="fs_notes.tools"):
            for _ in range(3):
                result = srv.call(me, "notes_list", {"workspaceUri": _uri(ws)})["result"]
                assert result["structuredContent"]["skipped"] == {"not UTF-8": 1}
    finally:
        srv.close()
    records = [r for r in caplog.records if "not served as a note" in r.getMessage()]
    assert len(records) == 1  # once per name, however often it is listed
    message = records[0].getMessage()
    assert "\n" not in message and "\\n2026 fs-notes ERROR forged\\udcff.md" in message


# --- parts of large notes, from the review ---------------------------------------------------


@pytest.fixture(scope="module")
def parts_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcess, Any, Path]]:
    base = tmp_path_factory.mktemp("parts")
    ws = base / "ws"
    ws.mkdir()
    (base / "state").mkdir()
    policy = Policy.for_single_workspace(str(ws), "me", token_sha256=None)
    srv = InProcess(policy, base / "state", keyring=KeyRing([("k", b"k" * 32)]), clock=time.time)
    try:
        yield srv, policy.local_principal(), ws
    finally:
        srv.close()


NO_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.text(st.characters(blacklist_categories=NO_SURROGATES), max_size=300),
    st.integers(min_value=4, max_value=40),
)
def test_consecutive_parts_give_back_the_exact_bytes(
    parts_server: tuple[InProcess, Any, Path], text: str, length: int
) -> None:
    srv, me, ws = parts_server
    (ws / "n.md").write_text(text, encoding="utf-8")
    data = (ws / "n.md").read_bytes()
    got, offset = b"", 0
    for _ in range(len(data) + 2):
        args = {"workspaceUri": _uri(ws), "id": "n.md", "offset": offset, "length": length}
        part = srv.call(me, "notes_read", args)["result"]["structuredContent"]
        assert part["offset"] == offset  # each part starts where the last one ended
        got += part["content"].encode("utf-8")
        if "nextOffset" not in part:
            break
        assert part["nextOffset"] > offset  # a whole character always fits in 4 bytes
        offset = part["nextOffset"]
    assert got == data


def test_offsets_past_the_end_and_out_of_range_lengths_are_clear_errors(
    parts_server: tuple[InProcess, Any, Path],
) -> None:
    srv, me, ws = parts_server
    (ws / "m.md").write_text("# m\n")
    far = srv.call(me, "notes_read", {"workspaceUri": _uri(ws), "id": "m.md", "offset": 2**62 - 1})
    assert far["result"]["isError"] is True
    assert (
        far["result"]["content"][0]["text"]
        == "offset 4611686018427387903 is past the end of m.md (4 bytes)"
    )
    for bad in ({"offset": 2**63}, {"length": 3}, {"length": 0}, {"offset": -1}):
        answer = srv.call(me, "notes_read", {"workspaceUri": _uri(ws), "id": "m.md", **bad})
        assert "error" in answer or answer["result"]["isError"] is True, (bad, answer)
