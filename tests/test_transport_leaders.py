"""fs_notes/transport/leaders.py: the line source and the leader/follower pool behind stdio."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from fs_notes.transport.leaders import Leaders, LineSource


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_lines_come_whole_in_order_and_a_last_line_without_newline_counts(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    src = LineSource(r, max_line=100)
    os.write(w, b"one\ntw")
    assert src.next() == b"one\n"
    os.write(w, b"o\nthree")
    assert src.next() == b"two\n"
    os.close(w)
    assert src.next() == b"three"
    assert src.next() is None
    src.release()


def test_an_oversized_line_is_skipped_whole_and_reported_once(pipe: tuple[int, int]) -> None:
    r, w = pipe
    src = LineSource(r, max_line=10)
    os.write(w, b"x" * 25)
    os.write(w, b"y" * 25 + b"\nnext\n")
    assert src.next() == b""  # the oversized line, reported once
    assert src.next() == b"next\n"
    os.write(w, b"z" * 30)
    os.close(w)
    assert src.next() is None  # an oversized last line is dropped
    src.release()


def test_close_ends_a_next_that_waits_on_an_empty_pipe(pipe: tuple[int, int]) -> None:
    r, _w = pipe
    src = LineSource(r, max_line=10)
    got: list[bytes | None] = []
    reader = threading.Thread(target=lambda: got.append(src.next()))
    reader.start()
    time.sleep(0.1)
    assert reader.is_alive()  # blocked: nothing to read
    src.close()
    reader.join(5)
    assert not reader.is_alive() and got == [None]
    src.release()


def _pool(
    pipe: tuple[int, int], work: Callable[[bytes], None], max_threads: int = 4
) -> tuple[Leaders, list[bytes], threading.Event]:
    r, _w = pipe
    order: list[bytes] = []
    ended = threading.Event()

    def classify(line: bytes) -> Callable[[], None] | None:
        order.append(line)
        return lambda: work(line)

    pool = Leaders(LineSource(r, 1000), classify, max_threads=max_threads, on_end=ended.set)
    return pool, order, ended


def test_a_slow_answer_does_not_hold_up_the_next_line(pipe: tuple[int, int]) -> None:
    release = threading.Event()
    done: list[bytes] = []

    def work(line: bytes) -> None:
        if line == b"slow\n":
            release.wait(10)
        done.append(line)

    pool, order, ended = _pool(pipe, work)
    pool.start()
    os.write(pipe[1], b"slow\nquick\n")
    deadline = time.monotonic() + 5
    while done != [b"quick\n"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done == [b"quick\n"]  # answered while "slow" is still in progress
    assert order == [b"slow\n", b"quick\n"]  # classified strictly in order
    release.set()
    os.close(pipe[1])
    assert ended.wait(5)
    assert pool.wait_idle(5) and done == [b"quick\n", b"slow\n"]


def test_at_most_max_threads_answers_run_at_once_and_the_rest_wait(
    pipe: tuple[int, int],
) -> None:
    release = threading.Event()
    running: list[int] = []
    peak = [0]
    lock = threading.Lock()

    def work(line: bytes) -> None:
        with lock:
            running.append(1)
            peak[0] = max(peak[0], len(running))
        release.wait(10)
        with lock:
            running.pop()

    pool, order, ended = _pool(pipe, work, max_threads=3)
    pool.start()
    os.write(pipe[1], b"".join(b"%d\n" % i for i in range(6)))
    time.sleep(0.3)
    assert peak[0] == 3 and len(order) == 3  # nobody reads while all three are busy
    release.set()
    os.close(pipe[1])
    assert ended.wait(5) and pool.wait_idle(5)
    assert len(order) == 6 and peak[0] == 3


def test_a_failing_answer_or_classify_does_not_stop_the_reading(pipe: tuple[int, int]) -> None:
    done: list[bytes] = []
    r, _w = pipe
    ended = threading.Event()

    def classify(line: bytes) -> Callable[[], None] | None:
        if line == b"bad-classify\n":
            raise RuntimeError("boom")

        def work() -> None:
            if line == b"bad-work\n":
                raise RuntimeError("boom")
            done.append(line)

        return work

    pool = Leaders(LineSource(r, 1000), classify, max_threads=2, on_end=ended.set)
    pool.start()
    os.write(pipe[1], b"bad-classify\nbad-work\nfine\n")
    os.close(pipe[1])
    assert ended.wait(5) and pool.wait_idle(5)
    assert done == [b"fine\n"]


def test_stop_ends_the_reading_and_wait_idle_is_bounded(pipe: tuple[int, int]) -> None:
    release = threading.Event()

    def work(line: bytes) -> None:
        release.wait(10)

    pool, order, _ = _pool(pipe, work)
    pool.start()
    os.write(pipe[1], b"a\n")
    time.sleep(0.1)
    pool.stop()
    assert pool.wait_idle(0.2) is False  # "a" is still being answered
    os.write(pipe[1], b"b\n")  # nobody reads any more
    time.sleep(0.1)
    assert order == [b"a\n"]
    release.set()
    assert pool.wait_idle(5) is True
