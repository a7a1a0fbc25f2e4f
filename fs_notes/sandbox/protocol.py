"""The supervisor <-> worker wire format: length-prefixed binary frames over a socketpair.

Frames: a 4-byte big-endian length N, then N bytes of body, 0 < N <= the receiver's bound
(`MAX_REQUEST` in the worker, `MAX_REPLY` in the supervisor). All integers are big-endian.
Binary rather than JSON because the round trip is on every deletion: building, encoding, parsing
and validating a JSON delete and its reply took ~12 us of it, this layout ~2 us.

Request body (supervisor -> worker), one fixed 60-byte head, then the path, then a tail:

    op u8 | flags u8 | path_len u16 | dev u64 | ino u64 | size u64 |
    mtime_hi i64 | mtime_lo u64 | ctime_hi i64 | ctime_lo u64 | path | tail

- op: 1 unlink_note, 2 create_note, 3 update_note, 4 move_note (added 2026-12-01), named after
  the `fs_notes.fs.WorkspaceRoot` method the worker runs for each; nothing else (the production
  protocol has no unchecked operation: the attacker worker of the escape exercises speaks its
  own requests, fs_notes/exercises/rawworker.py).
- flags: bit 0 `HAS_IDENTITY` (the identity fields are meaningful; without it they must all be
  zero); no other bit. unlink_note takes exactly HAS_IDENTITY, update_note and move_note may
  take it, create_note none.
- identity: a time is the signed 128-bit integer hi * 2**64 + lo (nanoseconds); the accepted
  ranges are those of `Identity.from_json`: dev and ino < 2**64, size < 2**63, times in
  [-2**96, 2**96).
- path: the relpath, 1..`MAX_RELPATH` characters without NUL, encoded as UTF-8 with
  surrogatepass so that every Python str crosses unchanged.
- tail: unlink_note nothing; create_note and update_note the note's bytes, as they are;
  move_note the target relpath, encoded as the path is (move_note may take HAS_IDENTITY: the
  source's expected identity).

Reply body (worker -> supervisor): a status byte, then its payload: 0 OK (nothing; for
create_note, update_note and move_note the new identity, 56 bytes laid out as in requests),
1 FS_ERROR (the name of an `fs_notes.fs.errors` class, 1..64 ASCII bytes), 2 OS_ERROR
(errno u32), 3 BAD_REQUEST and 4 INTERNAL_ERROR (nothing). The worker's first frame is the one
exception: its start-up report, a UTF-8 JSON object (the hello, or the ConfinementError that
stopped it), read once.

Guarantees: a frame length out of bounds is refused before the body is read, as is a stream that
ends inside a frame (`ProtocolError`; such a stream cannot be resynchronised, so the worker exits
and the supervisor kills its worker). A clean end of stream between frames is reported as `None`,
never as a frame. `parse_request` accepts only the ops a worker of the given kind may run, each in
exactly the layout above:
every byte of the body is accounted for, fields out of range or flags an op does not take are
refused (`ProtocolError`; the frame was delimited, so the worker answers BAD_REQUEST and stays in
step). `decode_reply` likewise accepts only the reply layouts above. `Channel` keeps its socket
blocking and bounds every send and recv by the deadline `arm` set, with the kernel's
SO_RCVTIMEO/SO_SNDTIMEO, which it changes only when the timeout does: an exchange costs one
send and one recv, no poll and no fcntl. A call overruns the deadline by at most `SLACK` (unless
a signal interrupts it: CPython then restarts it, with the whole kernel timeout again), and a
peer that trickles bytes cannot stretch it. Sending to a closed peer raises `PeerClosed` when no
byte of the frame went out, so the caller knows the peer never saw it.

Does not: authenticate the peer (the socketpair is private to the two processes) or make any
policy decision about paths (relpaths are checked by `fs_notes.fs` inside the worker).
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from typing import Any, Final, Literal, NamedTuple

from fs_notes.fs.identity import Identity

#: Largest request body a worker reads (a note's bytes travel as they are).
MAX_REQUEST: Final = 8 * 1024 * 1024
#: Largest reply body the supervisor reads (the start-up report is the largest).
MAX_REPLY: Final = 64 * 1024
#: Longest relpath, in characters (UTF-8 needs at most four bytes for each).
MAX_RELPATH: Final = 4096
MAX_ERROR_NAME: Final = 64
#: How far a blocking call may overrun the deadline before the kernel timeout is shortened.
SLACK: Final = 0.005

#: The operations a worker of each kind (its `--kind`) accepts.
OPS_BY_KIND: Final[dict[str, frozenset[str]]] = {
    "delete": frozenset({"unlink_note"}),
    "write": frozenset({"create_note", "update_note", "move_note"}),
}
#: Each operation is named after the `fs_notes.fs.WorkspaceRoot` method the worker runs for it.
OP_CODES: Final[dict[str, int]] = {
    "unlink_note": 0x01,
    "create_note": 0x02,
    "update_note": 0x03,
    "move_note": 0x04,
}
_OP_NAMES: Final = {code: op for op, code in OP_CODES.items()}
_UNLINK_NOTE: Final = OP_CODES["unlink_note"]

HAS_IDENTITY: Final = 0x01
_FLAGS_BY_OP: Final[dict[str, frozenset[int]]] = {
    "unlink_note": frozenset({HAS_IDENTITY}),
    "create_note": frozenset({0}),
    "update_note": frozenset({0, HAS_IDENTITY}),
    "move_note": frozenset({0, HAS_IDENTITY}),
}

OK: Final = 0
FS_ERROR: Final = 1
OS_ERROR: Final = 2
BAD_REQUEST: Final = 3
INTERNAL_ERROR: Final = 4

_LENGTH = struct.Struct(">I")
HEADER_SIZE: Final = _LENGTH.size
_IDENTITY = struct.Struct(">QQQqQqQ")
IDENTITY_SIZE: Final = _IDENTITY.size
_REQUEST = struct.Struct(">BBH" + _IDENTITY.format[1:])
_FRAMED_REQUEST = struct.Struct(">IBBH" + _IDENTITY.format[1:])
REQUEST_HEAD_SIZE: Final = _REQUEST.size
_NO_IDENTITY: Final = (0, 0, 0, 0, 0, 0, 0)
_U32 = struct.Struct(">I")
_TIMEVAL = struct.Struct("@ll")  # struct timeval on LP64 Linux (x86-64, arm64)

_LOW64: Final = (1 << 64) - 1
_U32_MAX: Final = (1 << 32) - 1
_MAX_TIMEVAL: Final = float(1 << 31)  # longer timeouts are clamped (68 years)
_CHUNK: Final = 65536
_NOSIGNAL: Final = getattr(socket, "MSG_NOSIGNAL", 0)


class ProtocolError(Exception):
    """A malformed, oversized or truncated frame, or a request this worker does not accept."""


class OversizedRequest(ProtocolError):
    """The request would exceed MAX_REQUEST (refused before it is built)."""


class PeerClosed(ConnectionError):
    """The other end was closed before any byte of this frame was sent."""


# -- framing ---------------------------------------------------------------------------------


def frame(body: bytes) -> bytes:
    return _LENGTH.pack(len(body)) + body


def json_frame(message: dict[str, Any]) -> bytes:
    """The worker's start-up report: a UTF-8 JSON object."""
    return frame(json.dumps(message, separators=(",", ":")).encode("utf-8"))


def decode_json_object(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError("frame is not UTF-8 JSON") from exc
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message


def _timeval(seconds: float) -> bytes:
    seconds = min(seconds, _MAX_TIMEVAL)
    whole = int(seconds)
    micros = int((seconds - whole) * 1_000_000)
    return _TIMEVAL.pack(whole, max(micros, 1) if whole == 0 else micros)  # 0 means "forever"


class Channel:
    """One end of the socketpair: send a frame, receive a frame, both within a deadline."""

    def __init__(self, sock: socket.socket, max_incoming: int) -> None:
        sock.setblocking(True)  # timeouts are the kernel's: see arm()
        self.sock = sock
        self.max_incoming = max_incoming
        self._pending = b""  # bytes received past the last frame
        self._armed = 0.0  # the kernel timeout the socket has now (0: none)
        self._deadline: float | None = None

    def arm(self, timeout: float) -> None:
        """Bound every send and recv from now on to end within `timeout` seconds (> 0)."""
        if timeout != self._armed:
            self._set_kernel_timeout(timeout)
        self._deadline = time.monotonic() + timeout

    def _set_kernel_timeout(self, seconds: float) -> None:
        timeval = _timeval(seconds)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
        self._armed = seconds

    def _bound(self) -> None:
        """Before a blocking call: refuse past the deadline, and keep the kernel timeout
        from overrunning it by more than SLACK."""
        if self._deadline is None:
            return
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline passed")
        if self._armed - remaining > SLACK:
            self._set_kernel_timeout(remaining)

    @property
    def pending(self) -> int:
        """Bytes received beyond the last frame (0 in a lock-step exchange)."""
        return len(self._pending)

    def send(self, data: bytes) -> None:
        """Send one frame entirely; PeerClosed if the other end was gone before the first byte."""
        self._bound()
        try:
            sent = self.sock.send(data, _NOSIGNAL)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise PeerClosed("the other end is closed") from exc
        except BlockingIOError as exc:  # SO_SNDTIMEO ran out
            raise TimeoutError("deadline passed while sending") from exc
        if sent < len(data):
            self._send_rest(memoryview(data)[sent:])

    def _send_rest(self, view: memoryview) -> None:
        while view:
            self._bound()
            try:
                view = view[self.sock.send(view, _NOSIGNAL) :]
            except BlockingIOError as exc:
                raise TimeoutError("deadline passed while sending") from exc

    def _read(self) -> bytes:
        self._bound()
        try:
            return self.sock.recv(_CHUNK)
        except BlockingIOError as exc:  # SO_RCVTIMEO ran out
            raise TimeoutError("no reply before the deadline") from exc

    def recv(self) -> bytes | None:
        """The next frame's body, or None on end of stream at a frame boundary."""
        buf = self._pending
        if not buf:
            buf = self._read()
            if not buf:
                return None
        while len(buf) < HEADER_SIZE:
            more = self._read()
            if not more:
                raise ProtocolError("stream ended inside a frame header")
            buf += more
        (length,) = _LENGTH.unpack_from(buf)
        if not 0 < length <= self.max_incoming:
            raise ProtocolError(f"frame of {length} bytes is outside (0, {self.max_incoming}]")
        end = HEADER_SIZE + length
        if len(buf) >= end:
            self._pending = buf[end:]
            return buf[HEADER_SIZE:end]
        self._pending = b""
        return self._read_rest(buf[HEADER_SIZE:], length)

    def _read_rest(self, head: bytes, length: int) -> bytes:
        """The rest of a frame longer than what has arrived, read into place."""
        body = bytearray(length)
        body[: len(head)] = head
        have = len(head)
        with memoryview(body) as view:
            while have < length:
                self._bound()
                try:
                    got = self.sock.recv_into(view[have:])
                except BlockingIOError as exc:
                    raise TimeoutError("no reply before the deadline") from exc
                if got == 0:
                    raise ProtocolError("stream ended inside a frame")
                have += got
        return bytes(body)


# -- identities ------------------------------------------------------------------------------


def _identity_fields(ident: Identity) -> tuple[int, ...]:
    m, c = ident.mtime_ns, ident.ctime_ns
    return (ident.dev, ident.ino, ident.size, m >> 64, m & _LOW64, c >> 64, c & _LOW64)


def encode_identity(ident: Identity) -> bytes:
    return _IDENTITY.pack(*_identity_fields(ident))


def _identity(dev: int, ino: int, size: int, mhi: int, mlo: int, chi: int, clo: int) -> Identity:
    try:  # the one parser of an identity's fields (fs/identity.py), with its ranges
        return Identity.from_json([dev, ino, size, (mhi << 64) | mlo, (chi << 64) | clo])
    except ValueError:
        raise ProtocolError("identity out of range") from None


def decode_identity(data: bytes) -> Identity:
    if len(data) != IDENTITY_SIZE:
        raise ProtocolError("an identity is 56 bytes")
    return _identity(*_IDENTITY.unpack(data))


# -- requests --------------------------------------------------------------------------------


class Request(NamedTuple):
    op: str
    relpath: str = ""
    expected: Identity | None = None
    data: bytes = b""
    target: str = ""  # move_note: the new relpath


def _encode_path(relpath: str) -> bytes:
    if type(relpath) is not str or not 0 < len(relpath) <= MAX_RELPATH or "\0" in relpath:
        raise ProtocolError("relpath must be a non-empty string without NUL")
    return relpath.encode("utf-8", "surrogatepass")


def _pack_head(op: str, flags: int, path: bytes, expected: Identity | None, tail: int) -> bytes:
    size = REQUEST_HEAD_SIZE + len(path) + tail
    if size > MAX_REQUEST:
        raise OversizedRequest(f"request of {size} bytes exceeds {MAX_REQUEST}")
    try:
        fields = _NO_IDENTITY if expected is None else _identity_fields(expected)
        return _FRAMED_REQUEST.pack(size, OP_CODES[op], flags, len(path), *fields)
    except (struct.error, AttributeError, TypeError) as exc:
        raise ProtocolError("identity cannot be encoded") from exc


def encode_unlink_note(relpath: str, expected: Identity) -> bytes:
    """The framed unlink_note request (the hot path: one pack, one concatenation)."""
    path = _encode_path(relpath)
    return _pack_head("unlink_note", HAS_IDENTITY, path, expected, 0) + path


def encode_write(
    op: Literal["create_note", "update_note"],
    relpath: str,
    data: bytes,
    expected: Identity | None = None,
) -> bytes:
    """A framed create_note or update_note request; OversizedRequest past MAX_REQUEST."""
    path = _encode_path(relpath)
    flags = 0 if expected is None else HAS_IDENTITY
    return b"".join((_pack_head(op, flags, path, expected, len(data)), path, data))


def encode_move_note(relpath: str, new_relpath: str, expected: Identity | None = None) -> bytes:
    """A framed move_note request: the source relpath, then the target relpath as the tail."""
    path, target = _encode_path(relpath), _encode_path(new_relpath)
    flags = 0 if expected is None else HAS_IDENTITY
    return b"".join((_pack_head("move_note", flags, path, expected, len(target)), path, target))


def _allowed(kind: str) -> frozenset[int]:
    return frozenset(OP_CODES[op] for op in OPS_BY_KIND[kind])


_ALLOWED: Final = {k: _allowed(k) for k in OPS_BY_KIND}


def _decode_path(raw: bytes) -> str:
    if not 0 < len(raw) <= 4 * MAX_RELPATH:
        raise ProtocolError("relpath must be non-empty")
    try:
        path = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise ProtocolError("relpath is not UTF-8") from exc
    if len(path) > MAX_RELPATH or "\0" in path:
        raise ProtocolError("relpath too long or contains NUL")
    return path


def parse_request(body: bytes, kind: str) -> Request:
    """Validate a request body for a worker of `kind`; raises ProtocolError."""
    if len(body) < REQUEST_HEAD_SIZE:
        raise ProtocolError("request shorter than its head")
    head = _REQUEST.unpack_from(body)
    code, flags, path_len = head[0], head[1], head[2]
    if code == _UNLINK_NOTE and flags == HAS_IDENTITY and kind == "delete":  # the hot path
        end = REQUEST_HEAD_SIZE + path_len
        if end != len(body):
            raise ProtocolError(
                "path runs past the end of the frame"
                if end > len(body)
                else "trailing bytes after an unlink_note"
            )
        path = _decode_path(body[REQUEST_HEAD_SIZE:end])
        return Request("unlink_note", path, _identity(*head[3:]))
    ident = list(head[3:])
    if code not in _ALLOWED.get(kind, frozenset()):
        raise ProtocolError("operation not accepted by this worker")
    op = _OP_NAMES[code]
    if flags not in _FLAGS_BY_OP[op]:
        raise ProtocolError("flags not taken by this operation")
    end = REQUEST_HEAD_SIZE + path_len
    if end > len(body):
        raise ProtocolError("path runs past the end of the frame")
    if flags & HAS_IDENTITY:
        expected: Identity | None = _identity(*ident)
    elif ident != [0, 0, 0, 0, 0, 0, 0]:
        raise ProtocolError("identity fields set without HAS_IDENTITY")
    else:
        expected = None
    path = _decode_path(body[REQUEST_HEAD_SIZE:end])
    if op == "unlink_note":
        if end != len(body):
            raise ProtocolError("trailing bytes after an unlink_note")
        return Request(op, path, expected)
    if op == "move_note":
        return Request(op, path, expected, target=_decode_path(body[end:]))
    return Request(op, path, expected, data=body[end:])


# -- replies ---------------------------------------------------------------------------------


class Reply(NamedTuple):
    status: int
    identity: Identity | None = None  # OK from create_note, update_note and move_note
    error: str = ""  # FS_ERROR: the class name
    errno: int = 0  # OS_ERROR


OK_FRAME: Final = frame(bytes((OK,)))
BAD_REQUEST_FRAME: Final = frame(bytes((BAD_REQUEST,)))
INTERNAL_ERROR_FRAME: Final = frame(bytes((INTERNAL_ERROR,)))
_OK_BODY: Final = bytes((OK,))
_OK_REPLY: Final = Reply(OK)


def ok_frame(identity: Identity) -> bytes:
    return frame(bytes((OK,)) + encode_identity(identity))


def fs_error_frame(name: str) -> bytes:
    raw = name.encode("ascii")
    if not 0 < len(raw) <= MAX_ERROR_NAME:
        raise ValueError("error name must be 1..64 ASCII bytes")
    return frame(bytes((FS_ERROR,)) + raw)


def os_error_frame(errno: int | None) -> bytes:
    value = errno if type(errno) is int and 0 <= errno <= _U32_MAX else 0
    return frame(bytes((OS_ERROR,)) + _U32.pack(value))


def decode_reply(body: bytes) -> Reply:
    """A reply body in one of the layouts above; ProtocolError for anything else."""
    if body == _OK_BODY:
        return _OK_REPLY
    if not body:
        raise ProtocolError("empty reply")
    status, payload = body[0], body[1:]
    if status == OK:
        return Reply(OK, identity=decode_identity(payload))
    if status == FS_ERROR and 0 < len(payload) <= MAX_ERROR_NAME and payload.isascii():
        return Reply(FS_ERROR, error=payload.decode("ascii"))
    if status == OS_ERROR and len(payload) == _U32.size:
        return Reply(OS_ERROR, errno=_U32.unpack(payload)[0])
    if status in (BAD_REQUEST, INTERNAL_ERROR) and not payload:
        return Reply(status)
    raise ProtocolError("malformed reply")


def check_timeout(timeout: float) -> float:
    """A positive, finite number of seconds; ValueError otherwise."""
    if not 0 < timeout < math.inf:
        raise ValueError("timeout must be a positive, finite number of seconds")
    return timeout
