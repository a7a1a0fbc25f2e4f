"""The supervisor <-> worker request and reply layouts, and the worker's handling (pure logic).

Request bodies are built here with an independent struct, from the layout the docstring of
sandbox/protocol.py documents, so these tests pin the wire format itself.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from fs_notes.fs import Escape, Identity, NoteNotFound, OsRefused, WorkspaceRoot
from fs_notes.sandbox.protocol import (
    BAD_REQUEST_FRAME,
    INTERNAL_ERROR_FRAME,
    MAX_RELPATH,
    MAX_REQUEST,
    OK_FRAME,
    OP_CODES,
    OPS_BY_KIND,
    REQUEST_HEAD_SIZE,
    Channel,
    OversizedRequest,
    ProtocolError,
    Reply,
    decode_reply,
    encode_identity,
    encode_move_note,
    encode_unlink_note,
    encode_write,
    fs_error_frame,
    ok_frame,
    os_error_frame,
    parse_request,
)
from fs_notes.sandbox.worker import State, handle, serve

HEAD = struct.Struct(">BBHQQQqQqQ")  # op, flags, path_len, dev, ino, size, mtime, ctime
LEN = struct.Struct(">I")
UNLINK_NOTE, CREATE_NOTE, UPDATE_NOTE, MOVE_NOTE = 0x01, 0x02, 0x03, 0x04
UNLINK_RAW, CREATE_RAW, READ_RAW, SLEEP = 0x81, 0x82, 0x83, 0x84
HAS_IDENTITY = 0x01
IDENT = Identity(1, 2, 3, 4, 5)
T96 = 1 << 96


def wire(dev: int, ino: int, size: int, mtime: int, ctime: int) -> tuple[int, ...]:
    low = (1 << 64) - 1
    return (dev, ino, size, mtime >> 64, mtime & low, ctime >> 64, ctime & low)


NO_IDENT = (0,) * 7
IDENT_WIRE = wire(1, 2, 3, 4, 5)


def body(
    op: int,
    flags: int = 0,
    path: bytes = b"a.md",
    ident: tuple[int, ...] = NO_IDENT,
    tail: bytes = b"",
    path_len: int | None = None,
) -> bytes:
    length = len(path) if path_len is None else path_len
    return HEAD.pack(op, flags, length, *ident) + path + tail


def unframe(frame: bytes) -> bytes:
    (length,) = LEN.unpack_from(frame)
    assert length == len(frame) - LEN.size
    return frame[LEN.size :]


# -- the encoders produce exactly the documented layout ---------------------------------------


def test_an_unlink_note_request_is_the_fixed_head_then_the_path() -> None:
    assert HEAD.size == REQUEST_HEAD_SIZE == 60
    frame = encode_unlink_note("a.md", IDENT)
    assert unframe(frame) == body(UNLINK_NOTE, HAS_IDENTITY, ident=IDENT_WIRE)


def test_write_requests_carry_the_note_bytes_raw() -> None:
    data = bytes(range(256))
    assert unframe(encode_write("create_note", "a.md", data)) == body(CREATE_NOTE, tail=data)
    assert unframe(encode_write("update_note", "a.md", data)) == body(UPDATE_NOTE, tail=data)
    assert unframe(encode_write("update_note", "a.md", data, IDENT)) == body(
        UPDATE_NOTE, HAS_IDENTITY, ident=IDENT_WIRE, tail=data
    )


def test_a_move_note_request_carries_the_target_as_its_tail() -> None:
    assert unframe(encode_move_note("a.md", "b/c.md")) == body(MOVE_NOTE, tail=b"b/c.md")
    assert unframe(encode_move_note("a.md", "b/c.md", IDENT)) == body(
        MOVE_NOTE, HAS_IDENTITY, ident=IDENT_WIRE, tail=b"b/c.md"
    )


def test_each_op_is_named_after_the_filesystem_method_the_worker_runs() -> None:
    # Issue 28: `grep unlink_note` leads from a tool through the protocol to fs/ (and unlinkat).
    assert OP_CODES == {
        "unlink_note": UNLINK_NOTE,
        "create_note": CREATE_NOTE,
        "update_note": UPDATE_NOTE,
        "move_note": MOVE_NOTE,
    }
    assert all(callable(getattr(WorkspaceRoot, op, None)) for op in OP_CODES)
    assert {kind: set(ops) for kind, ops in OPS_BY_KIND.items()} == {
        "delete": {"unlink_note"},
        "write": {"create_note", "update_note", "move_note"},
    }
    requests = [
        ("delete", encode_unlink_note("a.md", IDENT)),
        ("write", encode_write("create_note", "a.md", b"x")),
        ("write", encode_write("update_note", "a.md", b"x", IDENT)),
        ("write", encode_move_note("a.md", "b.md", IDENT)),
    ]
    ops = [parse_request(unframe(frame), kind).op for kind, frame in requests]
    assert ops == ["unlink_note", "create_note", "update_note", "move_note"]
    assert parse_request(unframe(encode_move_note("a.md", "b.md")), "write").target == "b.md"


def test_the_old_debug_op_codes_are_not_part_of_the_production_protocol() -> None:
    # Issue 12: no unchecked operation in the product; the attacker worker speaks its own frames.
    for code in (UNLINK_RAW, CREATE_RAW, READ_RAW, SLEEP):
        for kind in ("delete", "write"):
            with pytest.raises(ProtocolError, match="operation not accepted"):
                parse_request(body(code, path=b"/etc/passwd"), kind)


@pytest.mark.parametrize(
    "relpath",
    [
        "a.md",
        "é/ü.md",
        "\U0001f600.md",
        "\udcc0x.md",
        "a" * MAX_RELPATH,
        "\U0001f600" * MAX_RELPATH,
    ],
)
def test_every_relpath_crosses_unchanged(relpath: str) -> None:
    # surrogatepass: a surrogate-escaped byte crosses as it did in the JSON format (as \udcc0).
    req = parse_request(unframe(encode_unlink_note(relpath, IDENT)), "delete")
    assert (req.op, req.relpath, req.expected) == ("unlink_note", relpath, IDENT)


EXTREME = [
    Identity(0, 0, 0, 0, 0),
    Identity((1 << 64) - 1, (1 << 64) - 1, (1 << 63) - 1, T96 - 1, -T96),
    Identity(7, 8, 9, -1, -(1 << 64) - 1),
    Identity(7, 8, 9, 1 << 64, 1_700_000_000_123_456_789),
]


@pytest.mark.parametrize("ident", EXTREME)
def test_identities_in_range_round_trip(ident: Identity) -> None:
    req = parse_request(unframe(encode_unlink_note("a.md", ident)), "delete")
    assert req.expected == ident
    reply = decode_reply(unframe(ok_frame(ident)))
    assert reply == Reply(0, identity=ident)


@pytest.mark.parametrize("relpath", ["", "a\0.md", "a" * (MAX_RELPATH + 1), 7, b"a.md"], ids=repr)
def test_the_encoders_refuse_what_the_worker_would_refuse(relpath: object) -> None:
    with pytest.raises(ProtocolError):
        encode_unlink_note(relpath, IDENT)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        encode_write("create_note", relpath, b"")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "ident",
    [Identity(-1, 0, 0, 0, 0), Identity(1 << 64, 0, 0, 0, 0), Identity(0, 0, 1 << 64, 0, 0),
     Identity(0, 0, 0, 1 << 127, 0), Identity(0, 0, 0, 0, 1.5)],  # type: ignore[arg-type]
    ids=repr,
)  # fmt: skip
def test_an_identity_the_layout_cannot_hold_is_refused_by_the_encoder(ident: Identity) -> None:
    with pytest.raises(ProtocolError):
        encode_unlink_note("a.md", ident)


def test_a_request_past_max_request_is_refused_before_it_is_built() -> None:
    largest = MAX_REQUEST - REQUEST_HEAD_SIZE - len("a.md")
    frame = encode_write("create_note", "a.md", b"x" * largest)
    assert len(frame) == LEN.size + MAX_REQUEST
    with pytest.raises(OversizedRequest):
        encode_write("create_note", "a.md", b"x" * (largest + 1))
    with pytest.raises(OversizedRequest):
        encode_write("update_note", "a.md", b"x" * (largest + 1), IDENT)


# -- parse_request: exactly the documented layouts, for the worker's kind --------------------

VALID = [
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, ident=IDENT_WIRE), IDENT, b""),
    ("write", body(CREATE_NOTE, tail=b"x"), None, b"x"),
    ("write", body(CREATE_NOTE), None, b""),
    ("write", body(UPDATE_NOTE, tail=b"\0\xff"), None, b"\0\xff"),
    ("write", body(UPDATE_NOTE, HAS_IDENTITY, ident=IDENT_WIRE), IDENT, b""),
]


@pytest.mark.parametrize(("kind", "raw", "expected", "data"), VALID)
def test_well_formed_requests_are_accepted(
    kind: str, raw: bytes, expected: Identity | None, data: bytes
) -> None:
    req = parse_request(raw, kind)
    assert (req.relpath, req.expected, req.data) == ("a.md", expected, data)


DEL = body(UNLINK_NOTE, HAS_IDENTITY, ident=IDENT_WIRE)
TOO_LONG = b"a" * (MAX_RELPATH + 1)
INVALID = [
    ("delete", body(CREATE_NOTE), "operation not accepted"),  # wrong kind
    ("delete", body(UPDATE_NOTE), "operation not accepted"),
    ("write", DEL, "operation not accepted"),
    ("delete", body(UNLINK_RAW, path=b"/etc/passwd"), "operation not accepted"),
    ("delete", body(SLEEP, path=b"", tail=struct.pack(">d", 1)), "operation not accepted"),
    ("delete", body(MOVE_NOTE), "operation not accepted"),
    ("delete", body(0x05), "operation not accepted"),  # unknown op codes
    ("delete", body(0x00), "operation not accepted"),
    ("delete", b"", "shorter"),
    ("delete", DEL[: REQUEST_HEAD_SIZE - 1], "shorter"),
    ("delete", body(UNLINK_NOTE, ident=IDENT_WIRE), "flags"),  # unlink_note needs an identity
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY | 0x80, ident=IDENT_WIRE), "flags"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY | 0x02, ident=IDENT_WIRE), "flags"),
    ("write", body(CREATE_NOTE, HAS_IDENTITY, ident=IDENT_WIRE), "flags"),
    ("write", body(CREATE_NOTE, ident=IDENT_WIRE), "identity fields set"),
    ("write", body(UPDATE_NOTE, ident=(0, 0, 0, 0, 0, 0, 1)), "identity fields set"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, path=b"", ident=IDENT_WIRE), "non-empty"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, ident=IDENT_WIRE, path_len=5), "past the end"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, ident=IDENT_WIRE, path_len=0xFFFF), "past the end"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, path=b"a\0.md", ident=IDENT_WIRE), "NUL"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, path=b"\xff.md", ident=IDENT_WIRE), "UTF-8"),
    # an overlong encoding, then a relpath one character too long
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, path=b"\xc0\xae", ident=IDENT_WIRE), "UTF-8"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, path=TOO_LONG, ident=IDENT_WIRE), "long"),
    ("delete", DEL + b"x", "trailing"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, ident=wire(0, 0, 1 << 63, 0, 0)), "out of range"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, ident=wire(0, 0, 0, T96, 0)), "out of range"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, ident=wire(0, 0, 0, -T96 - 1, 0)), "out of range"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, ident=wire(0, 0, 0, 0, T96)), "out of range"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, ident=wire(0, 0, 0, 0, -T96 - 1)), "out of range"),
    ("delete", body(UNLINK_NOTE, HAS_IDENTITY, ident=(0, 0, 0, 1 << 62, 0, 0, 0)), "out of range"),
    ("write", body(UPDATE_NOTE, HAS_IDENTITY, ident=wire(0, 0, 0, T96, 0)), "out of range"),
]


@pytest.mark.parametrize(("kind", "raw", "why"), INVALID)
def test_malformed_or_foreign_requests_are_refused(kind: str, raw: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        parse_request(raw, kind)


BOUNDARY = [0, 1, (1 << 63) - 1, 1 << 63, T96 - 1, T96, -T96, -T96 - 1, (1 << 64) - 1]


@pytest.mark.parametrize("value", BOUNDARY)
@pytest.mark.parametrize("field", ["size", "mtime_ns", "ctime_ns"])
def test_the_identity_ranges_are_those_of_identity_from_json(field: str, value: int) -> None:
    fields = {"dev": 1, "ino": 2, "size": 3, "mtime_ns": 4, "ctime_ns": 5, field: value}
    try:
        ident = Identity.from_json(list(fields.values()))
    except ValueError:
        ident = None
    if field == "size" and not 0 <= value < 1 << 64:
        return  # the u64 field cannot even carry it
    raw = body(UNLINK_NOTE, HAS_IDENTITY, ident=wire(*fields.values()))
    if ident is None:
        with pytest.raises(ProtocolError, match="out of range"):
            parse_request(raw, "delete")
    else:
        assert parse_request(raw, "delete").expected == ident


# -- replies ---------------------------------------------------------------------------------


def test_each_reply_layout_decodes() -> None:
    assert unframe(OK_FRAME) == b"\x00"
    assert decode_reply(unframe(OK_FRAME)) == Reply(0)
    assert decode_reply(unframe(ok_frame(IDENT))) == Reply(0, identity=IDENT)
    assert unframe(fs_error_frame("NoteNotFound")) == b"\x01NoteNotFound"
    assert decode_reply(b"\x01NoteNotFound") == Reply(1, error="NoteNotFound")
    assert unframe(os_error_frame(13)) == b"\x02\x00\x00\x00\x0d"
    assert decode_reply(b"\x02\x00\x00\x00\x0d") == Reply(2, errno=13)
    assert unframe(os_error_frame(None)) == b"\x02\x00\x00\x00\x00"
    assert decode_reply(unframe(BAD_REQUEST_FRAME)) == Reply(3)
    assert decode_reply(unframe(INTERNAL_ERROR_FRAME)) == Reply(4)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x05",  # unknown status
        b"\xff",
        b"\x00\x00\x00\x00",  # OK with a payload that is no identity
        b"\x00" + encode_identity(IDENT) + b"\x00",
        b"\x00" + struct.pack(">QQQqQqQ", *wire(0, 0, 1 << 63, 0, 0)),  # identity out of range
        b"\x01",  # FS_ERROR without a name
        b"\x01" + b"E" * 65,
        b"\x01Not\xc3\xa9",
        b"\x02\x00\x00\x0d",  # OS_ERROR: errno is four bytes
        b"\x02\x00\x00\x00\x0d\x00",
        b"\x03x",  # BAD_REQUEST and INTERNAL_ERROR carry nothing
        b"\x04\x00",
    ],
)
def test_malformed_replies_are_refused(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_reply(raw)


# -- the worker's handling -------------------------------------------------------------------


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

    def move_note(
        self, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        raise AssertionError("not used")


@pytest.mark.parametrize(
    ("exc", "reply"),
    [
        (None, b"\x00"),
        (NoteNotFound(), b"\x01NoteNotFound"),
        (OsRefused(), b"\x01OsRefused"),
        (_PrivateEscape(), b"\x01Escape"),
        (PermissionError(13, "denied"), b"\x02\x00\x00\x00\x0d"),
        (OSError("no errno"), b"\x02\x00\x00\x00\x00"),
        (ValueError("bad"), b"\x03"),
        (RuntimeError("bug"), b"\x04"),
    ],
)
def test_the_worker_maps_each_outcome_to_one_reply(exc: BaseException | None, reply: bytes) -> None:
    root = FakeRoot(exc)
    state = State("delete", root)
    assert unframe(handle(state, DEL)) == reply
    assert root.calls == [("a.md", IDENT)]


def test_the_worker_answers_bad_requests_without_acting() -> None:
    root = FakeRoot(None)
    state = State("delete", root)
    out_of_range = body(UNLINK_NOTE, HAS_IDENTITY, ident=wire(0, 0, 1 << 63, 0, 0))
    assert handle(state, out_of_range) == BAD_REQUEST_FRAME
    assert handle(state, body(UNLINK_RAW, path=b"/x")) == BAD_REQUEST_FRAME
    assert handle(state, b"\x01") == BAD_REQUEST_FRAME
    assert root.calls == []


class Served:
    """A worker loop (`serve`) on a thread with a fake root; `ours` is the supervisor's end."""

    def __init__(self) -> None:
        self.ours, self._theirs = socket.socketpair()
        self.root = FakeRoot(None)
        self.result: list[int] = []
        channel = Channel(self._theirs, MAX_REQUEST)
        state = State("delete", self.root)
        self._thread = threading.Thread(target=lambda: self.result.append(serve(channel, state)))
        self._thread.start()

    def read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.ours.recv(size - len(data))
            assert chunk, "end of stream"
            data += chunk
        return data

    def finish(self) -> list[int]:
        """Close our sending side; the loop's return value once it has stopped."""
        self.ours.shutdown(socket.SHUT_WR)
        self._thread.join(5)
        assert not self._thread.is_alive()
        return self.result

    def close(self) -> None:
        self.ours.close()
        self._thread.join(5)
        self._theirs.close()


@pytest.fixture
def served() -> Iterator[Served]:
    loop = Served()
    try:
        yield loop
    finally:
        loop.close()


def test_serve_answers_each_frame_and_stops_at_end_of_stream(served: Served) -> None:
    served.ours.sendall(encode_unlink_note("a.md", IDENT) + LEN.pack(1) + b"\x7f")
    assert served.read(len(OK_FRAME) + len(BAD_REQUEST_FRAME)) == OK_FRAME + BAD_REQUEST_FRAME
    assert served.finish() == [0]
    assert served.root.calls == [("a.md", IDENT)]


@pytest.mark.parametrize(
    "stream",
    [
        LEN.pack(MAX_REQUEST + 1),  # over the bound: refused unread
        LEN.pack(0),  # no body
        LEN.pack(100) + b"x",  # ends inside the frame
        b"\x00\x00",  # ends inside the header
    ],
)
def test_serve_stops_at_a_frame_it_cannot_delimit(served: Served, stream: bytes) -> None:
    served.ours.sendall(stream)
    assert served.finish() == [2]
    served.ours.setblocking(False)
    with pytest.raises(BlockingIOError):
        served.ours.recv(100)  # no reply was sent
    assert served.root.calls == []
