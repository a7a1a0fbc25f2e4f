"""The protocol core without I/O: envelopes, _meta, the capability gate, argument validation."""

from __future__ import annotations

from typing import Any

import pytest
from argschema import agrees_with_reference
from hypothesis import given, settings
from hypothesis import strategies as st
from wire import check_message, meta

from fs_notes.protocol.argcheck import check_schema
from fs_notes.protocol.dispatch import Call, Dispatcher, Method
from fs_notes.protocol.envelope import EnvelopeError, Notification, Request, parse
from fs_notes.protocol.errors import ProtocolError
from fs_notes.protocol.meta import (
    read_meta,
    require_form_elicitation,
    require_sampling,
    supports_form_elicitation,
)


class Who:
    name = "tester"


def test_a_message_without_id_is_a_notification_and_is_never_answered() -> None:
    ran: list[str] = []

    def handler(call: Call) -> dict[str, Any]:
        ran.append("ran")
        return {}

    disp = Dispatcher({"x/y": Method(handler)})
    msg = parse(b'{"jsonrpc":"2.0","method":"x/y","params":{}}')
    assert isinstance(msg, Notification)
    assert disp.handle(msg, Who(), "test") is None
    assert ran == []  # the handler never ran for a notification


@pytest.mark.parametrize(
    "raw,code",
    [
        (b"{", -32700),
        (b"\xc3\x28", -32700),
        (b"[]", -32600),
        (b'"x"', -32600),
        (b'{"jsonrpc":"2.0","id":null,"method":"m"}', -32600),
        (b'{"jsonrpc":"2.0","id":true,"method":"m"}', -32600),
        (b'{"jsonrpc":"2.0","id":1.0,"method":"m"}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"m","params":"p"}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}', -32600),
    ],
)
def test_envelope_rejections_have_the_json_rpc_codes(raw: bytes, code: int) -> None:
    with pytest.raises(EnvelopeError) as info:
        parse(raw)
    assert info.value.error.code == code


def test_a_valid_request_keeps_its_id_type() -> None:
    for raw_id in ("abc", 0, -5, 2**60):
        msg = parse(
            (
                '{"jsonrpc":"2.0","id":%s,"method":"m"}'
                % (f'"{raw_id}"' if isinstance(raw_id, str) else raw_id)
            ).encode()
        )
        assert isinstance(msg, Request) and msg.id == raw_id and msg.params == {}


def test_the_handler_never_runs_when_meta_is_invalid() -> None:
    ran: list[str] = []

    def handler(call: Call) -> dict[str, Any]:
        ran.append("ran")
        return {}

    disp = Dispatcher({"x/y": Method(handler)})
    for params in ({}, {"_meta": meta(version="1900-01-01")}, {"_meta": meta(version=None)}):
        response = disp.handle(Request(1, "x/y", params), Who(), "test")
        assert response is not None and response["error"]["code"] in (-32602, -32022)
    assert ran == []


def test_unexpected_exceptions_become_a_bare_internal_error() -> None:
    def boom(call: Any) -> dict[str, Any]:
        raise RuntimeError("/secret/path leaked?")

    disp = Dispatcher({"x/y": Method(boom)})
    response = disp.handle(Request(3, "x/y", {"_meta": meta()}), Who(), "test")
    assert response == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32603, "message": "Internal error"},
    }
    check_message(response)


@pytest.mark.parametrize(
    "caps,ok",
    [
        ({"elicitation": {}}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"form": {}, "url": {}}}, True),
        ({"elicitation": {"url": {}}}, False),
        ({}, False),
        ({"elicitation": None}, False),
        ({"elicitation": {"form": True}}, False),
        ({"sampling": {}}, False),
    ],
)
def test_form_elicitation_gate(caps: dict[str, Any], ok: bool) -> None:
    assert supports_form_elicitation(caps) is ok
    if ok:
        require_form_elicitation(caps)
        return
    with pytest.raises(ProtocolError) as info:
        require_form_elicitation(caps)
    assert info.value.code == -32021
    assert info.value.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


def test_sampling_gate() -> None:
    require_sampling({"sampling": {}})
    with pytest.raises(ProtocolError) as info:
        require_sampling({"elicitation": {}})
    assert info.value.code == -32021 and info.value.data == {
        "requiredCapabilities": {"sampling": {}}
    }


def test_client_info_is_optional_and_never_required() -> None:
    m = read_meta(
        {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        }
    )
    assert m.client_info is None and m.capabilities == {}


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "minLength": 1, "maxLength": 5},
        "n": {"type": "integer", "minimum": 1, "maximum": 10},
        "b": {"type": "boolean"},
    },
    "required": ["s"],
    "additionalProperties": False,
}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-20, 20)
    | st.floats(-20, 20, allow_nan=False)
    | st.text(max_size=7),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["s", "n", "b", "x"]), json_values, max_size=4) | json_values
)
def test_argument_validation_agrees_with_the_reference_jsonschema(arguments: Any) -> None:
    agrees_with_reference(SCHEMA, arguments)


def test_schemas_outside_the_supported_subset_are_refused_at_definition() -> None:
    for bad in (
        {**SCHEMA, "additionalProperties": True},
        {**SCHEMA, "properties": {"s": {"type": "string", "pattern": "a"}}},
        {**SCHEMA, "oneOf": []},
        {**SCHEMA, "required": ["missing"]},
    ):
        with pytest.raises(ValueError):
            check_schema(bad)


def test_a_pre_encoded_result_serializes_exactly_like_the_plain_dict() -> None:
    import json

    from fs_notes.protocol.envelope import PreEncoded, dumps, result_response

    value = {"resultType": "complete", "tools": [{"name": "é", "n": 1}], "ttlMs": 5}
    for rid in (1, "abc", 'q"uote'):
        fast = dumps(result_response(rid, PreEncoded(value)))
        assert json.loads(fast) == {"jsonrpc": "2.0", "id": rid, "result": value}
        assert fast == dumps(result_response(rid, dict(value)))
    with pytest.raises(TypeError):
        PreEncoded(value)["x"] = 1


def test_a_lone_surrogate_echoed_back_still_encodes_as_json() -> None:
    import json

    from fs_notes.protocol.envelope import dumps, error_response, parse

    msg = parse(b'{"jsonrpc":"2.0","id":"\\udcc0","method":"m","params":{}}')
    assert isinstance(msg, Request)
    out = dumps(error_response(msg.id, ProtocolError(-32602, "x", {"uri": "file:///\udcc0"})))
    assert json.loads(out)["id"] == "\udcc0"
