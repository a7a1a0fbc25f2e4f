"""The legacy adapter's pure parts: version negotiation, the translations between a 2025-era session
and the modern core, reading client responses, and the HTTP session table.

Rules: 2025-11-25 basic/lifecycle (version negotiation), basic/transports (session ids), 2026-07-28
basic/versioning (dual-era servers); the rest is ours (fs_notes/legacy/*.py docstrings).
"""

from __future__ import annotations

from typing import Any

import pytest
from clock import Clock

from fs_notes.legacy import LEGACY_VERSIONS, ClientResponse, SessionTable, negotiate, read_message
from fs_notes.legacy.session import LegacySession
from fs_notes.legacy.sessions import TooManySessions
from fs_notes.legacy.translate import (
    carries_modern_meta,
    initialize_result,
    legacy_result,
    modern_params,
    outbound_params,
    refusal,
)
from fs_notes.protocol.dispatch import Dispatcher
from fs_notes.protocol.envelope import EnvelopeError, Notification, Request

VERSION, CAPS, INFO = (
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
)


@pytest.mark.parametrize(
    ("asked", "answered"),
    [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2025-11-25"),  # too old: our latest, and the client decides
        ("2026-07-28", "2025-11-25"),  # modern versions never use the handshake
        ("nonsense", "2025-11-25"),
    ],
)
def test_initialize_answers_the_asked_version_or_our_latest(asked: str, answered: str) -> None:
    assert negotiate(asked) == answered
    assert LEGACY_VERSIONS[0] == "2025-11-25"


def test_the_synthesized_meta_carries_only_what_the_handshake_declared() -> None:
    caps: dict[str, object] = {"elicitation": {}}
    given: dict[str, Any] = {
        "name": "notes_delete",
        "arguments": {"title": "x"},
        "inputResponses": {"delete_choice": {"action": "accept"}},  # forged by the client
        "requestState": "v1.forged",
        "_meta": {
            "progressToken": 7,
            VERSION: "1999-01-01",
            CAPS: {"sampling": {}, "elicitation": {}},  # a claim the handshake did not make
            "io.modelcontextprotocol/anything": True,
        },
    }
    out = modern_params(given, caps, {"name": "old", "version": "1"})
    assert out["_meta"] == {
        "progressToken": 7,
        VERSION: "2026-07-28",
        CAPS: {"elicitation": {}},
        INFO: {"name": "old", "version": "1"},
    }
    assert "inputResponses" not in out and "requestState" not in out
    assert out["name"] == "notes_delete" and out["arguments"] == {"title": "x"}
    assert given["_meta"][VERSION] == "1999-01-01"  # the input is not modified
    assert carries_modern_meta(out) and not carries_modern_meta({"_meta": {"progressToken": 1}})


def test_legacy_results_lose_the_2026_only_fields_and_nothing_else() -> None:
    modern = {
        "resultType": "complete",
        "ttlMs": 5,
        "cacheScope": "public",
        "tools": [{"name": "t"}],
        "nextCursor": "c",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "fs-notes"}, "x.y/z": 1},
    }
    assert legacy_result(modern) == {
        "tools": [{"name": "t"}],
        "nextCursor": "c",
        "_meta": {"x.y/z": 1},
    }
    assert legacy_result({"content": [], "_meta": {"io.modelcontextprotocol/serverInfo": {}}}) == {
        "content": []
    }
    assert modern["resultType"] == "complete"


def test_the_initialize_result_comes_from_discover() -> None:
    discover = {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}, "resources": {}},
        "instructions": "hi",
        "ttlMs": 1,
        "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "fs-notes", "version": "9"}},
    }
    assert initialize_result("2025-06-18", discover) == {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {}, "resources": {}},
        "serverInfo": {"name": "fs-notes", "version": "9"},
        "instructions": "hi",
    }


def test_a_legacy_session_is_not_promised_resource_notifications() -> None:
    """The adapter serves no resources/subscribe and no listen stream (issue 17 item 4): the
    modern listChanged/subscribe are left out of its InitializeResult, the rest is kept."""
    discover = {
        "capabilities": {"tools": {}, "resources": {"listChanged": True, "subscribe": True}},
        "_meta": {},
    }
    result = initialize_result("2025-11-25", discover)
    assert result["capabilities"] == {"tools": {}, "resources": {}}


FORM = {"mode": "form", "message": "m", "requestedSchema": {"type": "object", "properties": {}}}


@pytest.mark.parametrize(
    ("method", "params", "caps", "code", "data"),
    [
        ("elicitation/create", FORM, {"elicitation": {}}, None, None),
        ("elicitation/create", FORM, {"elicitation": {"form": {}, "url": {}}}, None, None),
        (
            "elicitation/create",
            FORM,
            {"elicitation": {"url": {}}},
            -32021,
            {"requiredCapabilities": {"elicitation": {"form": {}}}},
        ),
        (
            "elicitation/create",
            FORM,
            {},
            -32021,
            {"requiredCapabilities": {"elicitation": {"form": {}}}},
        ),
        # URL mode (the approval page, issue 30 item 1): forwarded to a client that has it.
        ("elicitation/create", {**FORM, "mode": "url"}, {"elicitation": {"url": {}}}, None, None),
        (
            "elicitation/create",
            {**FORM, "mode": "url"},
            {"elicitation": {"form": {}}},
            -32021,
            {"requiredCapabilities": {"elicitation": {"url": {}}}},
        ),
        ("elicitation/create", {**FORM, "mode": "sms"}, {"elicitation": {"url": {}}}, -32603, None),
        ("sampling/createMessage", {}, {"sampling": {}}, None, None),
        ("sampling/createMessage", {}, {}, -32021, {"requiredCapabilities": {"sampling": {}}}),
        ("roots/list", {}, {"roots": {"listChanged": True}}, -32603, None),  # never forwarded
        ("tools/call", {}, {}, -32603, None),
    ],
)
def test_only_declared_elicitation_modes_and_sampling_are_forwarded(
    method: str, params: Any, caps: dict[str, Any], code: int | None, data: Any
) -> None:
    refused = refusal(method, params, caps)
    if code is None:
        assert refused is None
        return
    assert refused is not None and refused.code == code
    assert refused.data == data


DELETE_FORM: dict[str, Any] = {
    "mode": "form",
    "message": "Delete?",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "note_id": {
                "type": "string",
                "title": "Note to delete",
                "oneOf": [{"const": "a.md", "title": "A"}, {"const": "b/c.md", "title": "C"}],
            },
            "confirm": {"type": "boolean", "title": "Delete it", "default": False},
        },
        "required": ["note_id", "confirm"],
    },
}


def test_a_2025_06_18_session_gets_enum_names_and_no_mode() -> None:
    out = outbound_params("elicitation/create", DELETE_FORM, "2025-06-18")
    assert "mode" not in out and out["message"] == "Delete?"
    props = out["requestedSchema"]["properties"]
    assert props["note_id"] == {
        "title": "Note to delete",
        "type": "string",
        "enum": ["a.md", "b/c.md"],
        "enumNames": ["A", "C"],
    }
    assert props["confirm"] == DELETE_FORM["requestedSchema"]["properties"]["confirm"]
    assert out["requestedSchema"]["required"] == ["note_id", "confirm"]
    assert outbound_params("elicitation/create", DELETE_FORM, "2025-11-25") is DELETE_FORM
    assert outbound_params("sampling/createMessage", {"x": 1}, "2025-03-26") == {"x": 1}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            b'{"jsonrpc":"2.0","id":3,"result":{"action":"cancel"}}',
            ClientResponse(3, {"action": "cancel"}, None),
        ),
        (b'{"jsonrpc":"2.0","id":"s","result":{}}', ClientResponse("s", {}, None)),
        (
            b'{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}',
            ClientResponse(4, None, {"code": -1, "message": "no"}),
        ),
        (b'{"jsonrpc":"2.0","id":5,"method":"ping"}', Request(5, "ping", {})),
        (
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
            Notification("notifications/initialized", {}),
        ),
    ],
)
def test_a_legacy_session_reads_responses_as_well_as_requests(raw: bytes, expected: Any) -> None:
    assert read_message(raw) == expected


@pytest.mark.parametrize(
    ("raw", "code", "rid"),
    [
        (b"{", -32700, None),
        (b'{"jsonrpc":"2.0","id":1,"result":{},"error":{}}', -32600, 1),
        (b'{"jsonrpc":"2.0","id":1,"result":[1]}', -32600, 1),
        (b'{"jsonrpc":"2.0","id":null,"result":{}}', -32600, None),
        (b'{"jsonrpc":"1.0","id":2,"result":{}}', -32600, 2),
        (b'{"jsonrpc":"2.0","id":true,"result":{}}', -32600, None),
        (b"[]", -32600, None),
    ],
)
def test_malformed_responses_are_refused_like_any_bad_envelope(
    raw: bytes, code: int, rid: Any
) -> None:
    with pytest.raises(EnvelopeError) as caught:
        read_message(raw)
    assert caught.value.error.code == code
    assert caught.value.id == rid


def _session(principal: str = "alice") -> LegacySession:
    return LegacySession(
        Dispatcher({}),
        version="2025-11-25",
        capabilities={},
        client_info=None,
        principal=principal,
        transport="http",
    )



def test_a_session_id_is_random_and_found_only_by_the_principal_that_opened_it() -> None:
    table = SessionTable()
    alice = _session("alice")
    sid = table.add(alice)
    other = table.add(_session("alice"))
    assert sid != other and len(sid) >= 40
    assert all(0x21 <= ord(c) <= 0x7E for c in sid)  # visible ASCII (spec)
    assert table.get(sid, "alice") is alice
    assert table.get(sid, "bob") is None  # a stolen id is useless without the token
    assert table.get("nope", "alice") is None
    assert table.remove(sid, "bob") is False and table.get(sid, "alice") is alice
    assert table.remove(sid, "alice") is True and table.get(sid, "alice") is None


def test_sessions_expire_when_idle_and_the_table_stays_bounded() -> None:
    clock = Clock(1000.0)
    table = SessionTable(per_principal=2, idle_seconds=60, clock=clock)
    first = table.add(_session())
    clock.now += 59
    assert table.get(first, "alice") is not None  # a use refreshes it
    clock.now += 59
    assert table.get(first, "alice") is not None
    clock.now += 61
    assert table.get(first, "alice") is None  # idle too long
    a = table.add(_session())
    clock.now += 1
    b = table.add(_session())
    clock.now += 1
    table.get(a, "alice")  # b is now the least recently used
    c = table.add(_session())
    assert len(table) == 2
    assert table.get(b, "alice") is None
    assert table.get(a, "alice") is not None and table.get(c, "alice") is not None


def test_one_principal_filling_its_sessions_never_ends_another_s() -> None:
    # Issue 13: the table used to be one LRU for everyone; 1,030 initialize calls by bob ended
    # alice's session. Now bob's bound is bob's: his own oldest idle session goes.
    clock = Clock(1000.0)
    table = SessionTable(per_principal=3, idle_seconds=3600, clock=clock)
    alice = table.add(_session("alice"))
    bobs = []
    for _ in range(50):
        clock.now += 1
        bobs.append(table.add(_session("bob")))
    assert table.get(alice, "alice") is not None
    assert [table.get(sid, "bob") is not None for sid in bobs[-4:]] == [False, True, True, True]
    assert len(table) == 4


def test_a_principal_whose_sessions_are_all_busy_is_refused_one_more() -> None:
    table = SessionTable(per_principal=2, idle_seconds=3600, clock=Clock(1000.0))
    held = [_session("bob"), _session("bob")]
    for session in held:
        table.add(session)
        session._pending[1] = (1, None)  # type: ignore[assignment]  # awaiting its client
    with pytest.raises(TooManySessions):
        table.add(_session("bob"))
    assert table.add(_session("alice"))  # nobody else is affected
