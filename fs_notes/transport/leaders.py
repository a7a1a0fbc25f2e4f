"""Reading stdin with a leader/follower pool: the thread that reads a request answers it.

Why: on this kind of host waking a sleeping thread costs more than a whole small request (an idle
vCPU halts, and its caches are cold when it is woken). Handing each line from the thread that
read it to an executor thread paid that wake-up on every request (~0.2 ms here). With a
leader/follower pool only one thread at a time (the leader) reads; when it has a line it makes
another thread the leader, then answers the line itself, so a slow request never holds up the
reading of the next one, and the wake-up of the new leader happens beside the answer, not before
it.

Guarantees: lines are read by one thread at a time, in order; `on_line` runs for each line, in
the reading thread, after `classify` (called while the thread still leads, so lines are
classified strictly in order) returned a callable for it. At most `max_threads` lines are being
answered at once; with all of them busy nobody reads (back-pressure on the client's pipe) until
one finishes. `stop()` ends reading promptly even when the leader is blocked on an empty pipe (a
wake-up pipe in the same poll), and `wait_idle` waits, bounded, for the answers in progress.
A line longer than `max_line` is skipped and reported as b"" (the caller answers it).

Does not: order answers (a quick one may overtake a slow one, as JSON-RPC allows), parse or
decide anything about a line, or stop an answer in progress.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import threading
from collections.abc import Callable

log = logging.getLogger("fs_notes.stdio")

_CHUNK = 65536


class LineSource:
    """Newline-terminated lines from a blocking fd; b"" for a skipped oversized line, None at EOF
    or after `close`. Used by one thread at a time (the leader)."""

    def __init__(self, fd: int, max_line: int) -> None:
        self._fd = fd
        self._max = max_line
        self._buf = bytearray()
        self._skipping = False
        self._eof = False
        self._wake_r, self._wake_w = os.pipe()
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._poll.register(self._wake_r, select.POLLIN)

    def close(self) -> None:
        """Make `next` return None from now on (also while it is blocked on the fd)."""
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def release(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _fill(self) -> bool:
        """Read more; False at EOF or once closed."""
        if self._eof:
            return False
        while True:
            try:
                ready = dict(self._poll.poll())
            except InterruptedError:  # pragma: no cover - PEP 475 retries poll itself
                continue
            if self._wake_r in ready:
                self._eof = True
                return False
            try:
                chunk = os.read(self._fd, _CHUNK)
            except BlockingIOError:
                continue
            except OSError as exc:  # EIO: a terminal whose other end has gone (hung up)
                if exc.errno != errno.EIO:
                    raise
                chunk = b""
            if not chunk:
                self._eof = True
                return False
            self._buf += chunk
            return True

    def next(self) -> bytes | None:
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                if self._skipping or len(line) > self._max:
                    self._skipping = False
                    return b""
                return line
            if len(self._buf) > self._max:  # no newline within the bound: drop up to the next
                self._skipping = True
                self._buf.clear()
            if not self._fill():
                rest, self._buf = bytes(self._buf), bytearray()
                return rest if rest and not self._skipping else None


class Leaders:
    """The pool. `classify(line)` runs while the thread leads and returns the work for the line
    (or None: nothing more to do); the work runs after another thread took the lead."""

    def __init__(
        self,
        source: LineSource,
        classify: Callable[[bytes], Callable[[], None] | None],
        *,
        max_threads: int,
        on_end: Callable[[], None],
    ) -> None:
        self._source = source
        self._classify = classify
        self._max = max_threads
        self._on_end = on_end
        lock = threading.Lock()
        self._cv = threading.Condition(lock)  # waiting to lead
        self._idle = threading.Condition(lock)  # waiting for the answers in progress
        self._leading = False
        self._waiting = 0  # threads waiting to lead
        self._threads = 0
        self._busy = 0
        self._stopped = False

    def start(self) -> None:
        with self._cv:
            self._spawn()

    def _spawn(self) -> None:  # with self._cv held
        self._threads += 1
        name = f"fs-notes-stdio-{self._threads}"
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def stop(self) -> None:
        """No more lines are read or answered (answers in progress finish)."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
            self._idle.notify_all()
        self._source.close()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no answer is in progress; False if `timeout` seconds ran out first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def _lead(self) -> bool:
        """Wait for the lead; False when stopped."""
        with self._cv:
            self._waiting += 1
            while self._leading and not self._stopped:
                self._cv.wait()
            self._waiting -= 1
            if self._stopped:
                return False
            self._leading = True
            return True

    def _hand_over(self) -> None:
        """Give up the lead to a waiting thread, or a new one (within the bound)."""
        with self._cv:
            self._leading = False
            self._busy += 1
            if self._waiting:
                self._cv.notify()
            elif self._threads < self._max:
                self._spawn()

    def _next(self) -> bytes | None:
        try:
            return self._source.next()
        except OSError as exc:  # stdin itself failed (closed under us, EBADF...): the end
            log.warning("stdio: reading stdin failed: %s", exc)
            return None

    def _run(self) -> None:
        try:
            while self._lead():
                line = self._next()
                if line is None:
                    self.stop()
                    self._on_end()
                    return
                try:
                    work = self._classify(line)
                except Exception:  # a bug in classify must not stop the reading
                    log.exception("stdio: a line could not be handled")
                    work = None
                self._hand_over()
                try:
                    if work is not None:
                        work()
                except Exception:
                    log.exception("stdio: a request failed")
                finally:
                    with self._cv:
                        self._busy -= 1
                        if self._busy == 0:
                            self._idle.notify_all()
        finally:
            with self._cv:
                self._threads -= 1
