"""sandbox.protocol.Channel: framing, bounds, deadlines (kernel timeouts) and a closed peer."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fs_notes.sandbox.protocol import (
    SLACK,
    Channel,
    PeerClosed,
    ProtocolError,
    decode_json_object,
    frame,
    json_frame,
)

LEN = struct.Struct(">I")


class CountingSocket(socket.socket):
    """Counts setsockopt calls (the kernel timeouts) so the tests can see when they change."""

    def __init__(self, fileno: int) -> None:
        super().__init__(fileno=fileno)
        self.setsockopts: list[tuple[Any, ...]] = []

    def setsockopt(self, *args: Any) -> None:
        self.setsockopts.append(args)
        super().setsockopt(*args)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, Channel]]:
    a, b = socket.socketpair()
    counting = CountingSocket(b.detach())
    with a, counting:
        yield a, Channel(counting, max_incoming=1024)


def test_frames_round_trip_and_bytes_past_a_frame_are_kept(
    pair: tuple[socket.socket, Channel],
) -> None:
    raw, channel = pair
    raw.sendall(frame(b"\x01first") + frame(b"\x02second"))
    assert channel.recv() == b"\x01first"
    assert channel.pending == len(frame(b"\x02second"))
    assert channel.recv() == b"\x02second"
    assert channel.pending == 0


def test_the_start_up_report_is_a_json_object(pair: tuple[socket.socket, Channel]) -> None:
    raw, channel = pair
    raw.sendall(json_frame({"ok": True, "hello": {"pid": 1}}))
    body = channel.recv()
    assert body is not None
    assert decode_json_object(body) == {"ok": True, "hello": {"pid": 1}}
    for bad in (b"[1]", b"{x}", b"\xff\xfe", b"\x00"):
        with pytest.raises(ProtocolError):
            decode_json_object(bad)


@pytest.mark.parametrize(
    ("payload", "result"),
    [
        (b"", None),  # clean EOF between frames
        (b"\x00\x00", ProtocolError),  # EOF inside the header
        (LEN.pack(10) + b"\x01", ProtocolError),  # EOF inside the body
        (LEN.pack(1025), ProtocolError),  # over the bound: refused unread
        (LEN.pack(1 << 30), ProtocolError),
        (LEN.pack(0), ProtocolError),  # a body has at least its tag byte
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


def test_a_frame_at_the_bound_is_read_even_when_it_arrives_in_pieces(
    pair: tuple[socket.socket, Channel],
) -> None:
    raw, channel = pair
    data = frame(bytes(range(256)) * 4)
    assert len(data) == 4 + 1024

    def trickle() -> None:
        for i in range(0, len(data), 100):
            raw.sendall(data[i : i + 100])
            time.sleep(0.002)

    sender = threading.Thread(target=trickle)
    sender.start()
    channel.arm(5.0)
    assert channel.recv() == bytes(range(256)) * 4
    sender.join()


def test_a_large_frame_is_read_into_place() -> None:
    a, b = socket.socketpair()
    with a, b:
        channel = Channel(b, max_incoming=8 << 20)
        body = bytes(range(256)) * (4 << 12)  # 4 MiB: far more than a socket buffer
        sender = threading.Thread(target=a.sendall, args=(frame(body),))
        sender.start()
        channel.arm(10.0)
        assert channel.recv() == body
        sender.join()


def test_recv_gives_up_at_the_deadline(pair: tuple[socket.socket, Channel]) -> None:
    _raw, channel = pair
    channel.arm(0.1)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        channel.recv()
    assert 0.09 < time.monotonic() - started < 1.0


def test_a_trickle_of_bytes_cannot_stretch_the_deadline(
    pair: tuple[socket.socket, Channel],
) -> None:
    raw, channel = pair
    stop = threading.Event()

    def trickle() -> None:  # one byte of a frame that never completes, every 30 ms
        data = LEN.pack(1000) + b"x" * 1000
        for byte in data:
            if stop.wait(0.03):
                return
            raw.send(bytes((byte,)))

    sender = threading.Thread(target=trickle)
    sender.start()
    try:
        channel.arm(0.3)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            channel.recv()
        assert time.monotonic() - started < 0.3 + SLACK + 0.2
    finally:
        stop.set()
        sender.join()


def test_send_gives_up_at_the_deadline_when_the_peer_does_not_read(
    pair: tuple[socket.socket, Channel],
) -> None:
    _raw, channel = pair
    channel.arm(0.2)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        channel.send(frame(b"x" * (16 << 20)))  # never fits in the socket buffers
    assert time.monotonic() - started < 1.0


def test_sending_to_a_closed_peer_is_peer_closed(pair: tuple[socket.socket, Channel]) -> None:
    raw, channel = pair
    raw.close()
    channel.arm(1.0)
    with pytest.raises(PeerClosed):
        channel.send(frame(b"\x01"))
    assert channel.recv() is None


def test_the_kernel_timeouts_change_only_when_the_timeout_does(
    pair: tuple[socket.socket, Channel],
) -> None:
    raw, channel = pair
    sock = channel.sock
    assert isinstance(sock, CountingSocket)
    assert sock.gettimeout() is None  # blocking: CPython does not poll before each call
    options = {socket.SO_RCVTIMEO, socket.SO_SNDTIMEO}
    for _ in range(3):
        channel.arm(5.0)
        channel.send(frame(b"\x01"))
        assert raw.recv(100) == frame(b"\x01")
        raw.sendall(frame(b"\x00"))
        assert channel.recv() == b"\x00"
    assert {args[1] for args in sock.setsockopts} == options
    assert len(sock.setsockopts) == 2  # set once, for 5 s
    timeval = struct.pack("@ll", 5, 0)
    assert all(args[2] == timeval for args in sock.setsockopts)
    channel.arm(0.25)
    assert len(sock.setsockopts) == 4
    assert sock.setsockopts[-1][2] == struct.pack("@ll", 0, 250_000)
    assert sock.gettimeout() is None
