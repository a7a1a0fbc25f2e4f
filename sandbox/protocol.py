"""The supervisor <-> worker wire format: length-prefixed JSON objects over a socketpair.

Guarantees: a frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON whose
top level is an object; frames longer than the receiver's bound are refused before they are read
(`ProtocolError`), as are truncated frames, bad JSON and non-objects. A clean end of stream
between frames is reported as `None`, never as a frame. `parse_request` accepts only the ops a
worker of the given kind may run, with fields of the right types and sizes; the debug op
`unlink_raw`, `create_raw`, `read_raw` (a bare os.unlink / exclusive create / read with no
resolution checks, for proving the OS layer alone) and `sleep` exist only when the worker was
started with its debug flag.

Does not: authenticate the peer (the socketpair is private to the two processes) or make any
policy decision about paths (relpaths are checked by `fs_notes.fs` inside the worker).
"""

from __future__ import annotations

import base64
import binascii
import json
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Final, Literal

#: Largest request frame a worker reads (note content travels base64-encoded).
MAX_REQUEST: Final = 8 * 1024 * 1024
#: Largest reply frame the supervisor reads.
MAX_REPLY: Final = 64 * 1024
MAX_RELPATH: Final = 4096

_HEADER = struct.Struct(">I")

Kind = Literal["delete", "write"]
Mode = Literal["landlock", "chroot", "none"]
OPS_BY_KIND: Final[dict[str, frozenset[str]]] = {
    "delete": frozenset({"delete"}),
    "write": frozenset({"create", "update"}),
}
RAW_OPS: Final = frozenset({"unlink_raw", "create_raw", "read_raw"})
DEBUG_OPS: Final = RAW_OPS | {"sleep"}


class ProtocolError(Exception):
    """A malformed, oversized or truncated frame, or a request this worker does not accept."""


HEADER_SIZE: Final = _HEADER.size


# One encoder for every frame: json.dumps with non-default options builds a new encoder per call,
# which is a measurable share of a ~100 us round trip.
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


def encode(message: dict[str, Any]) -> bytes:
    body = _ENCODE(message).encode("utf-8")
    return _HEADER.pack(len(body)) + body


class Channel:
    """One end of the socketpair: send a frame, receive a frame (with an optional deadline)."""

    def __init__(self, sock: socket.socket, max_incoming: int) -> None:
        self.sock = sock
        self.max_incoming = max_incoming
        self._buf = bytearray()

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode(message))

    def _fill(self, deadline: float | None) -> bool:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no reply before the deadline")
            self.sock.settimeout(remaining)
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self._buf += chunk
        return True

    def recv(self, deadline: float | None = None) -> dict[str, Any] | None:
        """The next frame, or None on end of stream at a frame boundary."""
        while len(self._buf) < _HEADER.size:
            if not self._fill(deadline):
                if self._buf:
                    raise ProtocolError("stream ended inside a frame header")
                return None
        (length,) = _HEADER.unpack_from(self._buf)
        if length > self.max_incoming:
            raise ProtocolError(f"frame of {length} bytes exceeds {self.max_incoming}")
        end = _HEADER.size + length
        while len(self._buf) < end:
            if not self._fill(deadline):
                raise ProtocolError("stream ended inside a frame")
        body = bytes(self._buf[_HEADER.size : end])
        del self._buf[:end]
        try:
            message = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError("frame is not UTF-8 JSON") from exc
        if not isinstance(message, dict):
            raise ProtocolError("frame is not a JSON object")
        return message


@dataclass(frozen=True)
class Request:
    op: str
    relpath: str = ""
    expected: list[int] | None = None
    data: bytes | None = None
    dir_fd: int | None = None  # raw ops only
    seconds: float = 0.0  # sleep only


def _relpath(message: dict[str, Any], key: str = "relpath") -> str:
    value = message.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= MAX_RELPATH or "\0" in value:
        raise ProtocolError(f"{key} must be a non-empty string without NUL")
    return value


def _identity(value: object) -> list[int]:
    # Shape only; fs_notes.fs.Identity.from_json checks the ranges.
    if not isinstance(value, list) or len(value) != 5 or not all(type(v) is int for v in value):
        raise ProtocolError("expected must be a list of five integers")
    return list(value)


def _data(value: object) -> bytes:
    if not isinstance(value, str):
        raise ProtocolError("data must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError("data is not valid base64") from exc


def parse_request(message: dict[str, Any], kind: str, debug: bool) -> Request:
    """Validate a request for a worker of `kind`; raises ProtocolError."""
    op = message.get("op")
    allowed = OPS_BY_KIND[kind] | (DEBUG_OPS if debug else frozenset())
    if not isinstance(op, str) or op not in allowed:
        raise ProtocolError("operation not accepted by this worker")
    if op == "delete":
        return Request(op, _relpath(message), expected=_identity(message.get("expected")))
    if op == "create":
        return Request(op, _relpath(message), data=_data(message.get("data")))
    if op == "update":
        raw = message.get("expected")
        expected = None if raw is None else _identity(raw)
        return Request(op, _relpath(message), expected=expected, data=_data(message.get("data")))
    if op in RAW_OPS:
        dir_fd = message.get("dir_fd")
        if dir_fd is not None and (type(dir_fd) is not int or dir_fd < 0):
            raise ProtocolError("dir_fd must be a non-negative integer")
        return Request(op, _relpath(message, "path"), dir_fd=dir_fd)
    seconds = message.get("seconds")
    if not isinstance(seconds, int | float) or not 0 <= seconds <= 60:
        raise ProtocolError("seconds must be a number in [0, 60]")
    return Request(op, seconds=float(seconds))


def encode_data(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
