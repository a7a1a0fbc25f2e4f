"""Starting and stopping worker processes: one long-lived spawner thread, and kill + reap.

Guarantees: every worker is forked by the same daemon thread, which lives as long as the
process, so a worker's PR_SET_PDEATHSIG (delivered when the *thread* that forked it exits, not
the process) fires only when the server process dies, never when a short-lived request thread
(a thread pool's) that happened to start it ends. `kill_and_reap` SIGKILLs a worker and every
descendant psutil can see, then waits for it: no zombie is left.

`watch` gives each worker a thread of its own that logs what the worker writes to stderr (one
log record per line, escaped, through this process's logging) and reaps the worker the moment
it exits: a worker that dies while idle is never a zombie, and is started again by the next
request that needs it.

Does not: reap descendants (they are re-parented, not ours), or start anything itself (the
caller passes the Popen call, with its fds and environment).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import queue
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import IO, Any, Protocol

import psutil

from fs_notes.render import shown

log = logging.getLogger("fs_notes.sandbox.worker")
MAX_LOG_LINE = 2000


class Process(Protocol):
    """A started worker, as the supervisor sees it: a subprocess.Popen, or a worker the monitor
    started for it (sandbox/monitor.py MonitoredProcess)."""

    @property
    def pid(self) -> int: ...

    @property
    def stderr(self) -> IO[bytes] | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


class _Spawner:
    """Runs every Popen on one daemon thread that lives as long as the process."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[
            tuple[concurrent.futures.Future[subprocess.Popen[bytes]], Callable[[], Any]]
        ] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while True:
            future, start = self._queue.get()
            try:
                future.set_result(start())
            except BaseException as exc:
                future.set_exception(exc)

    def popen(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sandbox-spawner", daemon=True
                )
                self._thread.start()
        future: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        self._queue.put((future, start))
        return future.result()


_spawner = _Spawner()


def spawn(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Run `start` (which calls subprocess.Popen) on the spawner thread; its result."""
    return _spawner.popen(start)


def kill_and_reap(proc: Process) -> None:
    """SIGKILL the worker and anything it started, then reap it."""
    if proc.poll() is None:
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        for d in descendants:
            with contextlib.suppress(psutil.Error):
                d.kill()
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
    proc.wait()


def watch(proc: Process, what: str) -> threading.Thread:
    """Log `proc`'s stderr line by line (escaped) until it closes, then reap `proc` at once."""

    def run() -> None:
        stream = proc.stderr
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                for raw in stream:
                    text = raw.decode("utf-8", errors="backslashreplace").rstrip("\n")
                    log.warning("%s %d: %s", what, proc.pid, shown(text, MAX_LOG_LINE))
            with contextlib.suppress(OSError):
                stream.close()
        with contextlib.suppress(ChildProcessError):
            proc.wait()

    thread = threading.Thread(target=run, name=f"watch-{what}-{proc.pid}", daemon=True)
    thread.start()
    return thread
