"""The supervisor <-> worker wire format and the worker's request handling (pure logic)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fs_notes.fs import AccessDenied, Escape, Identity, NoteNotFound
from sandbox.protocol import (
    MAX_RELPATH,
    Channel,
    ProtocolError,
    encode,
    encode_data,
    parse_request,
)
from sandbox.worker import _State, handle

IDENT = [1, 2, 3, 4, 5]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, Channel]]:
    a, b = socket.socketpair()
    with a, b:
        yield a, Channel(b, max_incoming=1024)


def test_a_frame_round_trips(pair: tuple[socket.socket, Channel]) -> None:
    raw, channel = pair
    raw.sendall(encode({"op": "delete", "n": 1}) + encode({"second": True}))
    assert channel.recv() == {"op": "delete", "n": 1}
    assert channel.recv() == {"second": True}


@pytest.mark.parametrize(
    ("payload", "result"),
    [
        (b"", None),  # clean EOF between frames
        (b"\x00\x00", ProtocolError),  # EOF inside the header
        (struct.pack(">I", 10) + b"{}", ProtocolError),  # EOF inside the body
        (struct.pack(">I", 1 << 30), ProtocolError),  # over the bound: refused unread
        (struct.pack(">I", 3) + b"[1]", ProtocolError),  # not an object
        (struct.pack(">I", 3) + b"{x}", ProtocolError),  # not JSON
        (struct.pack(">I", 2) + b"\xff\xfe", ProtocolError),  # not UTF-8
    ],
)
def test_bad_frames_are_refused(
    pair: tuple[socket.socket, Channel], payload: bytes, result: Any
) -> None:
    raw, channel = pair
    raw.sendall(payload)
    raw.shutdown(socket.SHUT_WR)
    if result is None:
        assert channel.recv() is None
    else:
        with pytest.raises(result):
            channel.recv()


def test_recv_gives_up_at_the_deadline(pair: tuple[socket.socket, Channel]) -> None:
    _raw, channel = pair
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        channel.recv(time.monotonic() + 0.1)
    assert time.monotonic() - started < 1.0


VALID = [
    ("delete", {"op": "delete", "relpath": "a.md", "expected": IDENT}),
    ("write", {"op": "create", "relpath": "a.md", "data": encode_data(b"x")}),
    ("write", {"op": "update", "relpath": "a.md", "data": ""}),
    ("write", {"op": "update", "relpath": "a.md", "data": "", "expected": IDENT}),
]


@pytest.mark.parametrize(("kind", "message"), VALID)
def test_well_formed_requests_are_accepted(kind: str, message: dict[str, Any]) -> None:
    req = parse_request(message, kind, debug=False)
    assert req.op == message["op"]
    assert req.relpath == "a.md"


INVALID = [
    ("delete", {"op": "create", "relpath": "a.md", "data": ""}),  # wrong kind
    ("write", {"op": "delete", "relpath": "a.md", "expected": IDENT}),  # wrong kind
    ("delete", {"op": "unlink_raw", "path": "/etc/passwd"}),  # debug op, no debug flag
    ("delete", {"op": "sleep", "seconds": 1}),  # debug op, no debug flag
    ("delete", {"op": "rmtree", "relpath": "a"}),  # unknown op
    ("delete", {"relpath": "a.md", "expected": IDENT}),  # no op
    ("delete", {"op": "delete", "relpath": "", "expected": IDENT}),
    ("delete", {"op": "delete", "relpath": "a\0.md", "expected": IDENT}),
    ("delete", {"op": "delete", "relpath": "a" * (MAX_RELPATH + 1), "expected": IDENT}),
    ("delete", {"op": "delete", "relpath": 7, "expected": IDENT}),
    ("delete", {"op": "delete", "relpath": "a.md"}),  # delete needs an identity
    ("delete", {"op": "delete", "relpath": "a.md", "expected": [1, 2, 3, 4]}),
    ("delete", {"op": "delete", "relpath": "a.md", "expected": [True, 2, 3, 4, 5]}),
    ("delete", {"op": "delete", "relpath": "a.md", "expected": "1,2,3,4,5"}),
    ("write", {"op": "create", "relpath": "a.md", "data": "not base64!"}),
    ("write", {"op": "create", "relpath": "a.md", "data": b"bytes".hex() + "="}),
    ("write", {"op": "create", "relpath": "a.md"}),
]


@pytest.mark.parametrize(("kind", "message"), INVALID)
def test_malformed_or_foreign_requests_are_refused(kind: str, message: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        parse_request(message, kind, debug=False)


@pytest.mark.parametrize(
    "message",
    [
        {"op": "unlink_raw", "path": "x", "dir_fd": -1},
        {"op": "unlink_raw", "path": "x", "dir_fd": "3"},
        {"op": "sleep", "seconds": 61},
        {"op": "sleep", "seconds": "1"},
    ],
)
def test_debug_ops_are_validated_too(message: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        parse_request(message, "delete", debug=True)


class _PrivateEscape(Escape):
    """A subclass fs_notes.fs does not export: the reply must name the public parent."""


class FakeRoot:
    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc
        self.calls: list[tuple[str, Identity]] = []

    def unlink_note(self, relpath: str, expected: Identity) -> None:
        self.calls.append((relpath, expected))
        if self.exc is not None:
            raise self.exc

    def create_note(self, relpath: str, data: bytes) -> Identity:
        raise AssertionError("not used")

    def update_note(
        self, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        raise AssertionError("not used")


@pytest.mark.parametrize(
    ("exc", "reply"),
    [
        (None, {"ok": True}),
        (NoteNotFound(), {"ok": False, "error": "NoteNotFound"}),
        (AccessDenied(), {"ok": False, "error": "AccessDenied"}),
        (_PrivateEscape(), {"ok": False, "error": "Escape"}),
        (PermissionError(13, "denied"), {"ok": False, "error": "OSError", "errno": 13}),
        (RuntimeError("bug"), {"ok": False, "error": "InternalError"}),
    ],
)
def test_the_worker_maps_each_outcome_to_one_reply(
    exc: BaseException | None, reply: dict[str, Any]
) -> None:
    root = FakeRoot(exc)
    state = _State("delete", False, root)
    message = {"op": "delete", "relpath": "a.md", "expected": IDENT}
    assert handle(state, message) == reply
    assert root.calls == [("a.md", Identity(*IDENT))]


def test_the_worker_answers_bad_requests_without_acting() -> None:
    root = FakeRoot(None)
    state = _State("delete", False, root)
    out_of_range = {"op": "delete", "relpath": "a.md", "expected": [-1, 2, 3, 4, 5]}
    assert handle(state, out_of_range) == {"ok": False, "error": "BadRequest"}
    assert handle(state, {"op": "unlink_raw", "path": "/x"}) == {
        "ok": False,
        "error": "BadRequest",
    }
    assert root.calls == []
