"""A real Redis server for the tests of the shared replay store (fs_notes/confirm/redis_store.py).

`RedisServer(folder)` starts Debian's `redis-server` on a free loopback port, in the foreground
as a child of the test, with nothing persisted (so that a restart is a store that lost its
claims: a new run_id), and waits until it answers PING. `stop()`/`start()` take it away and bring
it back on the same port; `kill()` is SIGKILL. `needed()` is the rule of tests/layers.py for an
engine: a missing `redis-server` fails the test under CI=true (.ci/bootstrap installs it) and
skips it only on a developer machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

__all__ = ["RedisServer", "free_port", "needed"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def needed(program: str = "redis-server") -> str:
    """The program's path; pytest.fail under CI=true when it is missing, else pytest.skip."""
    path = shutil.which(program) or (
        f"/usr/sbin/{program}" if os.path.exists(f"/usr/sbin/{program}") else None
    )
    if path is None:
        why = f"{program} is not installed (.ci/bootstrap installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    return path


class RedisServer:
    def __init__(self, folder: Path, *, port: int | None = None, extra: tuple[str, ...] = ()):
        self.binary = needed()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        log = open(self.folder / "redis.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.folder),
             "--maxmemory-policy", "noeviction", "--daemonize", "no", *self.extra],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 15
        while not self.ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(
                    "redis-server did not start: " + (self.folder / "redis.log").read_text()[-800:]
                )
            time.sleep(0.02)

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))  # up (with requirepass)
        except OSError:
            return False

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(15)

    def close(self) -> None:
        self.stop()
