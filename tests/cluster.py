"""Several fs-notes HTTP instances behind HAProxy, sharing one Redis replay store: the deployment
of docs/deploy.md, run for real on 127.0.0.1 (tests/test_multihost.py).

`Cluster(tmp, instances=2)` starts one `RedisServer` (tests/redis_server.py), then `instances`
separate `fs-notes serve --policy P --http 127.0.0.1:0 --port-file ... --state-dir tmp/stateI
--state-key-file K --replay-store URL --allow-host 127.0.0.1:LB` processes (each its own state
folder; the same policy, key ring and store), then HAProxy in the foreground on exactly
sandbox/deploy/haproxy.cfg, its addresses given in the environment as that file documents, and
waits until a request through it is answered. `lb` is the load balancer as a client sees it
(post/ask like tests/wire.HttpServer), `instances[i]` each instance, `kill(i)` SIGKILLs one,
`store` is the Redis server. A missing `haproxy` or `redis-server` fails under CI=true (.ci/
bootstrap installs both) and skips elsewhere (`needed`).

The policy has one principal (token `TOKEN`) with read, write and delete on one workspace,
`notes` (the folder `cluster.notes`).
"""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

import httpx
from redis_server import RedisServer, free_port, needed
from wire import REPO, HttpServer, call_tool, write_secret

from fs_notes.policy import hash_token

__all__ = ["CONFIG", "TOKEN", "Cluster", "Frontend"]

CONFIG = REPO / "sandbox" / "deploy" / "haproxy.cfg"
TOKEN = "cluster-token-0123456789abcdef"
MAX_INSTANCES = 3  # the server lines sandbox/deploy/haproxy.cfg has


class Frontend(HttpServer):
    """The load balancer's address, spoken to like an instance (HttpServer's post/ask)."""

    def __init__(self, port: int, token: str) -> None:  # no process of its own: HAProxy's
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.token = token
        self.client = httpx.Client(timeout=20)

    def close(self) -> int:
        self.client.close()
        return 0


def _policy(path: Path, notes: Path) -> Path:
    path.write_text(
        f'[[principal]]\nname = "alice"\ntoken_sha256 = "{hash_token(TOKEN)}"\n\n'
        f'[[workspace]]\nname = "notes"\npath = "{notes}"\n\n'
        '[[grant]]\nprincipal = "alice"\nworkspace = "notes"\n'
        'operations = ["read", "write", "delete"]\n'
    )
    return path


class Cluster:
    def __init__(self, tmp: Path, instances: int = 2) -> None:
        if not 1 <= instances <= MAX_INSTANCES:
            raise ValueError(f"1 to {MAX_INSTANCES} instances (the server lines of {CONFIG.name})")
        self.haproxy_binary = needed("haproxy")
        self.tmp = tmp
        self.notes = tmp / "notes"
        self.notes.mkdir()
        self.policy = _policy(tmp / "policy.toml", self.notes)
        self.key_file = write_secret(
            tmp / "state.keys", base64.b64encode(os.urandom(32)).decode() + "\n"
        )
        self.lb_port = free_port()
        self.lb_log = tmp / "haproxy.log"
        self.instances: list[HttpServer] = []
        self.haproxy: subprocess.Popen[bytes] | None = None
        self.store = RedisServer(tmp / "redis")
        try:
            for i in range(instances):
                self.instances.append(self._instance(i))
            self.lb = Frontend(self.lb_port, TOKEN)
            self._start_haproxy()
        except BaseException:
            self.close()
            raise

    @property
    def workspace_uri(self) -> str:
        return self.notes.as_uri()

    def _instance(self, i: int) -> HttpServer:
        state = self.tmp / f"state{i}"
        state.mkdir(mode=0o700)
        return HttpServer(
            "--policy", str(self.policy), "--state-dir", str(state),
            "--state-key-file", str(self.key_file), "--replay-store", self.store.url,
            "--allow-host", f"127.0.0.1:{self.lb_port}",
            tmp=self.tmp, token=TOKEN,
        )  # fmt: skip

    def haproxy_env(self) -> dict[str, str]:
        """The environment sandbox/deploy/haproxy.cfg reads its addresses from."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("FS_NOTES_")}
        env["FS_NOTES_LB_BIND"] = f"127.0.0.1:{self.lb_port}"
        for i, server in enumerate(self.instances):
            env[f"FS_NOTES_{i + 1}"] = f"127.0.0.1:{server.port}"
        return env

    def _start_haproxy(self) -> None:
        log = open(self.lb_log, "wb")  # noqa: SIM115 - the child holds it
        self.haproxy = subprocess.Popen(
            [self.haproxy_binary, "-db", "-f", str(CONFIG)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.haproxy_env(),
        )  # fmt: skip
        log.close()
        probe = call_tool(0, "notes_list", {"workspaceUri": self.workspace_uri})
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.lb.post(probe).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.haproxy.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"HAProxy did not start: {self.lb_log.read_text()[-2000:]}")
            time.sleep(0.05)

    def kill(self, i: int) -> None:
        """SIGKILL instance i (no graceful shutdown: its connections just die)."""
        proc = self.instances[i].proc
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(15)

    def lb_requests(self) -> list[tuple[str, int, str]]:
        """(server, HTTP status, retries field) of each request HAProxy logged so far; the
        retries field is `%rc` of its HTTP log format: "+N" when the request was redispatched."""
        out = []
        for line in self.lb_log.read_text(errors="replace").splitlines():
            m = re.search(
                r" fs_notes_lb fs_notes/(\S+) \S+ (\d{3}) .* \d+/\d+/\d+/\d+/(\+?\d+) \d+/\d+ "
                r'"POST ', line,
            )  # fmt: skip
            if m:
                out.append((m[1], int(m[2]), m[3]))
        return out

    def wait_lb_requests(self, count: int, timeout: float = 5.0) -> list[tuple[str, int, str]]:
        """`lb_requests()` once it holds `count` lines (HAProxy logs a request as it ends)."""
        deadline = time.monotonic() + timeout
        while len(got := self.lb_requests()) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return got

    def close(self) -> None:
        if getattr(self, "lb", None) is not None:
            self.lb.close()
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.terminate()
            try:
                self.haproxy.wait(15)
            except subprocess.TimeoutExpired:
                self.haproxy.kill()
                self.haproxy.wait()
        for server in self.instances:
            server.close()
        self.store.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
