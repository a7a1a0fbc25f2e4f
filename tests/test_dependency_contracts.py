"""What fs-notes relies on in its dependencies beyond what they document, checked on the installed
versions (issue 28 item 5): a release that changes any of it fails here, naming the dependency,
its version and what changed, before a server runs on it.

- uvicorn: transport/guard.py subclasses its undocumented h11 protocol (the guard's docstring
  says what it relies on, and why no documented option can do it). Checked: the methods it
  overrides, with the parameters it overrides them with; that it overrides no other; the
  attributes it reads, as uvicorn sets them; and the order of calls, by driving one request
  through the class as uvicorn.Server makes it. `Config(http=CLASS)` keeps the class.
- h11: the documented names the guard reads.
- redis-py: nothing at run time (confirm/redis_store.py is a client of its own, and says why):
  the store imports none of it. The tests' own client of a real Redis (tests/redis_server.py)
  uses only redis-py's public interface: the calls they make exist.
- The installed versions are within the ranges pyproject.toml gives, so what passes here is
  what those ranges promise.

Every check is a function returning what it found wrong; a positive control runs each on a fake
that lacks what it checks and shows the message.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import inspect
import platform
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h11
import pytest
import uvicorn
from packaging.requirements import Requirement
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from fs_notes.limits import Limits
from fs_notes.transport import guard

ROOT = Path(__file__).resolve().parent.parent

#: H11Protocol's methods guard.py overrides (calling the original), with their parameters
#: after self, as uvicorn calls them.
GUARD_OVERRIDES: dict[str, tuple[str, ...]] = {
    "connection_made": ("transport",),
    "data_received": ("data",),
    "on_response_complete": (),
    "pause_writing": (),
    "resume_writing": (),
    "connection_lost": ("exc",),
}
#: H11Protocol's attributes guard.py reads (set by uvicorn: __init__ or connection_made).
GUARD_ATTRIBUTES = ("connections", "transport", "loop", "conn", "cycle")
#: uvicorn.Server makes a protocol with these keyword arguments; the guard keeps __init__.
PROTOCOL_INIT = ("config", "server_state", "app_state", "_loop")
#: uvicorn.Config options guard.config_options passes.
CONFIG_OPTIONS = ("http", "timeout_keep_alive", "backlog")
#: The tests' redis-py client: constructor arguments and methods they call.
REDIS_ARGUMENTS = ("host", "port", "password", "socket_timeout")
REDIS_METHODS = (
    "execute_command", "flushall", "flushdb", "config_set", "info", "get", "set", "keys",
    "pttl", "save", "replicaof", "close", "__enter__", "__exit__",
)  # fmt: skip


def version(dist: str) -> str:
    if dist == "python":
        return platform.python_version()
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def methods_changed(dist: str, cls: type, wanted: dict[str, tuple[str, ...]]) -> list[str]:
    """Each of `wanted` must be a method of `cls` taking exactly those parameters after self."""
    problems = []
    where = f"{dist} {version(dist)}: {cls.__module__}.{cls.__qualname__}"
    for name, params in wanted.items():
        found = inspect.getattr_static(cls, name, None)
        if not inspect.isfunction(found):
            problems.append(f"{where}.{name} is no longer a method (it is {found!r})")
            continue
        got = tuple(p for p in inspect.signature(found).parameters if p != "self")
        if got != params:
            problems.append(f"{where}.{name} takes {got}, no longer {params}")
    return problems


def parameters_missing(dist: str, func: Callable[..., Any], names: tuple[str, ...]) -> list[str]:
    params = inspect.signature(func).parameters
    where = f"{dist} {version(dist)}: {func.__qualname__}"
    return [f"{where} no longer takes {name}=" for name in names if name not in params]


def names_missing(dist: str, owner: Any, names: tuple[str, ...]) -> list[str]:
    where = f"{dist} {version(dist)}: {getattr(owner, '__qualname__', owner.__name__)}"
    return [f"{where} has no {name} any more" for name in names if not hasattr(owner, name)]


def extra_overrides(base: type, sub: type, allowed: dict[str, tuple[str, ...]]) -> list[str]:
    """Methods of `base` that `sub` overrides without being listed in `allowed`."""
    return [
        f"{sub.__qualname__} overrides {base.__qualname__}.{name}, which no contract test checks"
        for name, value in vars(sub).items()
        if callable(value) and hasattr(base, name) and not name.startswith("__")
        and name not in allowed
    ]  # fmt: skip


def attributes_unlisted(source: str, own: set[str], listed: set[str]) -> list[str]:
    """Attributes the protocol class in `source` (its one class deriving from another) reads on
    a protocol (`self.X`, `c.X`, `victim.X`) that it does not define itself and that are not
    in `listed`."""
    (cls,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.bases]
    read = {
        node.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("self", "c", "victim")
    }
    return [f"the guard reads {name}, which no contract test checks" for name in
            sorted(read - own - listed)]  # fmt: skip


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )

    def write(self, data: Any) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _ok_app(scope: Any, receive: Any, send: Any) -> None:
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


def protocol_behaviour(dist: str, cls: type) -> list[str]:
    """One keep-alive request through `cls` as uvicorn.Server makes it, over a fake transport:
    what the guard relies on that did not hold."""
    where = f"{dist} {version(dist)}: {cls.__qualname__}"
    calls: list[str] = []

    class Recording(cls):  # type: ignore[misc]
        def connection_made(self, transport: Any) -> None:
            calls.append("connection_made")
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            calls.append("data_received")
            super().data_received(data)

        def on_response_complete(self) -> None:
            calls.append("on_response_complete")
            super().on_response_complete()

    loop = asyncio.new_event_loop()
    problems: list[str] = []
    try:
        config = uvicorn.Config(_ok_app, http=Recording, lifespan="off", log_config=None)
        config.load()
        if config.http_protocol_class is not Recording:
            problems.append(f"{dist} {version(dist)}: Config(http=CLASS) no longer keeps CLASS")
        state = ServerState()
        make: Any = config.http_protocol_class
        proto = make(config=config, server_state=state, app_state={}, _loop=loop)  # as Server
        if proto.connections is not state.connections:
            problems.append(f"{where}.connections is not the server's set of connections")
        if proto.loop is not loop:
            problems.append(f"{where}.loop is not the loop it was given")
        if not isinstance(proto.conn, h11.Connection):
            problems.append(f"{where}.conn is not an h11.Connection")
        elif proto.conn.their_state is not h11.IDLE:
            problems.append(f"{where}.conn does not start IDLE")
        if getattr(proto, "cycle", "missing") is not None:
            problems.append(f"{where}.cycle is not None before the first request")
        transport = FakeTransport()
        proto.connection_made(transport)
        if proto not in state.connections:
            problems.append(f"{where}.connection_made no longer adds it to connections")
        if proto.transport is not transport:
            problems.append(f"{where}.transport is not the connection's transport")
        proto.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        if proto.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            problems.append(f"{where}: a whole request leaves their_state {proto.conn.their_state}")
        if state.tasks:
            loop.run_until_complete(asyncio.wait(list(state.tasks), timeout=5))
        cycle = getattr(proto, "cycle", None)
        if cycle is None or cycle.response_complete is not True:
            problems.append(f"{where}.cycle.response_complete is not True after the answer")
        if not transport.written.startswith(b"HTTP/1.1 200"):
            problems.append(f"{where} did not answer (wrote {bytes(transport.written[:40])!r})")
        if calls != ["connection_made", "data_received", "on_response_complete"]:
            problems.append(f"{where}: the calls were {calls}")
        if proto.conn.their_state is not h11.IDLE:
            problems.append(f"{where}: after the answer their_state is {proto.conn.their_state}")
        proto.pause_writing()
        proto.resume_writing()
        proto.connection_lost(None)
        if proto in state.connections:
            problems.append(f"{where}.connection_lost no longer removes it from connections")
        if proto.timeout_keep_alive_task is not None:
            proto.timeout_keep_alive_task.cancel()
    except Exception as exc:  # what changed, named, rather than a bare traceback
        problems.append(f"{where}: driving one request raised {type(exc).__name__}: {exc}")
    finally:
        loop.close()
    return problems


# --- uvicorn and h11 (transport/guard.py) ---------------------------------------------------


def test_h11protocol_has_the_methods_the_guard_overrides() -> None:
    assert not (problems := methods_changed("uvicorn", H11Protocol, GUARD_OVERRIDES)), problems


def test_the_guard_overrides_no_method_unchecked_and_reads_no_attribute_unchecked() -> None:
    protocol = guard.protocol_class(Limits(), 10)
    assert issubclass(protocol, H11Protocol)
    assert not (problems := extra_overrides(H11Protocol, protocol, GUARD_OVERRIDES)), problems
    own = set(vars(protocol))
    listed = set(GUARD_ATTRIBUTES) | set(GUARD_OVERRIDES)
    # `response_complete` (of cycle), `their_state` (of conn) and `abort`, `cancel`, `time`,
    # `call_later` (of transport, a timer, loop: asyncio's) are read on other objects.
    source = Path(guard.__file__).read_text()
    assert not (problems := attributes_unlisted(source, own, listed)), problems


def test_uvicorn_makes_the_protocol_as_the_guard_expects() -> None:
    assert not (problems := parameters_missing("uvicorn", H11Protocol.__init__, PROTOCOL_INIT))
    assert not (problems := parameters_missing("uvicorn", uvicorn.Config.__init__,
                                               CONFIG_OPTIONS)), problems  # fmt: skip
    assert set(guard.config_options(Limits(), 10)) <= set(CONFIG_OPTIONS)


def test_one_request_through_h11protocol_goes_as_the_guard_relies_on() -> None:
    assert not (problems := protocol_behaviour("uvicorn", H11Protocol)), problems
    assert not (problems := protocol_behaviour("uvicorn", guard.protocol_class(Limits(), 10)))


def test_h11_has_the_documented_names_the_guard_reads() -> None:
    assert not (problems := names_missing("h11", h11, ("IDLE", "SEND_BODY", "Connection")))
    assert not (problems := names_missing("h11", h11.Connection, ("their_state",))), problems


# --- redis-py (confirm/redis_store.py, and the tests' own client) ----------------------------


def test_the_store_imports_no_redis_py() -> None:
    source = (ROOT / "fs_notes" / "confirm" / "redis_store.py").read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    assert "redis" not in imported, f"confirm/redis_store.py imports redis-py: {imported}"
    # and at run time: a store made and used (against nothing) loads none of it
    probe = (
        "import sys\n"
        "from fs_notes.confirm.location import parse_location\n"
        "from fs_notes.confirm.redis_store import RedisReplayStore\n"
        "s = RedisReplayStore(parse_location('redis://127.0.0.1:9/0'), max_rows=1, timeout=0.2)\n"
        "assert s.check()['answers'] is False\n"
        "s.close()\n"
        "print(sorted(m for m in sys.modules if m == 'redis' or m.startswith('redis.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"the store loaded redis-py: {out.stdout}"


def test_the_stdlib_calls_the_store_makes_are_there() -> None:
    """The store's client is Python's socket and ssl: documented, but checked all the same."""
    import hashlib
    import socket
    import ssl

    assert not names_missing("python", socket, ("getaddrinfo", "TCP_NODELAY", "IPPROTO_TCP"))
    assert not names_missing("python", ssl, ("SSLWantReadError", "TLSVersion"))
    assert not parameters_missing("python", ssl.SSLContext.wrap_socket, ("server_hostname",))
    hashlib.sha1(b"", usedforsecurity=False)  # the scripts' SHA-1, as Redis names them


def test_the_tests_redis_py_client_has_what_they_call() -> None:
    redis = pytest.importorskip("redis")
    assert not (problems := parameters_missing("redis", redis.Redis.__init__, REDIS_ARGUMENTS))
    assert not (problems := names_missing("redis", redis.Redis, REDIS_METHODS)), problems


# --- the pins ---------------------------------------------------------------------------------


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    return {req.name.lower(): req for req in map(Requirement, lines)}


@pytest.mark.parametrize("dist", ["uvicorn", "h11", "redis"])
def test_the_installed_version_is_within_the_pinned_range(dist: str) -> None:
    requirement = _requirements()[dist]
    installed = version(dist)
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"{dist} {installed} is installed but pyproject.toml asks {requirement}: the contract "
        "tests here ran on a version the pins do not promise"
    )


def test_the_store_no_longer_needs_redis_py_at_run_time() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(Requirement(r).name == "redis" for r in project["dependencies"])


# --- positive controls: each check fails on a fake lacking what it checks --------------------


class _Lacking:
    """H11Protocol as a release might change it: one method gone, one with a new parameter."""

    def connection_made(self, transport: Any) -> None: ...

    def data_received(self, data: bytes, more: bool = False) -> None: ...

    pause_writing = resume_writing = on_response_complete = None

    def connection_lost(self, exc: Exception | None) -> None: ...


def test_the_checks_fail_loudly_on_a_fake_lacking_what_they_check() -> None:
    problems = methods_changed("uvicorn", _Lacking, GUARD_OVERRIDES)
    assert len(problems) == 4, problems
    assert all(p.startswith(f"uvicorn {version('uvicorn')}: ") for p in problems)
    assert any("_Lacking.data_received takes ('data', 'more'), no longer ('data',)" in p
               for p in problems)  # fmt: skip
    assert any("_Lacking.on_response_complete is no longer a method" in p for p in problems)

    def init(self: Any, config: Any, server_state: Any) -> None: ...

    assert parameters_missing("uvicorn", init, PROTOCOL_INIT) == [
        f"uvicorn {version('uvicorn')}: {init.__qualname__} no longer takes app_state=",
        f"uvicorn {version('uvicorn')}: {init.__qualname__} no longer takes _loop=",
    ]

    class OldH11:
        IDLE = object()

    assert names_missing("h11", OldH11, ("IDLE", "SEND_BODY")) == [
        f"h11 {version('h11')}: {OldH11.__qualname__} has no SEND_BODY any more"
    ]

    class Sneaky(H11Protocol):
        def handle_events(self) -> None: ...

    assert extra_overrides(H11Protocol, Sneaky, GUARD_OVERRIDES) == [
        f"{Sneaky.__qualname__} overrides H11Protocol.handle_events, which no contract test checks"
    ]
    source = "class P(H11Protocol):\n    def f(self):\n        self.flow.pause_reading()\n"
    assert attributes_unlisted(source + "        c.conn\n", set(), {"conn"}) == [
        "the guard reads flow, which no contract test checks"
    ]


def test_the_behaviour_check_fails_on_a_protocol_that_answers_differently() -> None:
    class NeverCompletes(H11Protocol):
        def on_response_complete(self) -> None:  # the cycle's answer goes unreported
            pass

    class Forgets(H11Protocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.connections.discard(self)

    problems = protocol_behaviour("uvicorn", NeverCompletes)
    assert any("after the answer their_state is" in p for p in problems), problems
    assert all(p.startswith(f"uvicorn {version('uvicorn')}: ") for p in problems)
    problems = protocol_behaviour("uvicorn", Forgets)
    assert any("connection_made no longer adds it to connections" in p for p in problems)

    class NotAProtocol:
        def __init__(self, **kwargs: Any) -> None: ...

    problems = protocol_behaviour("uvicorn", NotAProtocol)
    assert any("connections" in p or "raised AttributeError" in p for p in problems), problems


def test_the_pin_check_fails_on_a_version_outside_the_range() -> None:
    requirement = _requirements()["uvicorn"]
    assert requirement.specifier.contains(version("uvicorn"))
    assert not requirement.specifier.contains("9.0")
