"""Spent confirmation nonces in Redis: one replay store for fs-notes instances on several hosts.

Guarantees (besides the contract every store gives, confirm/spent.py):
- One winner per nonce across every instance that names the same Redis server and database: a
  claim is one Lua script, which Redis runs atomically. It checks the epoch and the eviction
  policy, prunes the expired entries of the counting sets, refuses at the principal's quota or
  the store's bound, then records the nonce with `SET key principal NX PX ttl`, so Redis itself
  drops it once its expiry plus the retention margin has passed (by Redis's clock, `TIME`, so
  that the instances' clocks need not agree to the millisecond; a state already past that
  point by Redis's clock is refused as a clock disagreement, never recorded for zero time).
- The epoch, which every sealed state carries (`epoch()`, checked inside the claim script), is
  Redis's `run_id`, its `master_replid` and a marker key this store creates once (`SET NX`).
  `run_id` changes at every start of the server; `master_replid` at every change of role (a
  replica promoted by a failover, and a primary demoted and later promoted again, which has
  re-synced from another and lost what it had not replicated); the marker is gone after
  FLUSHALL/FLUSHDB. Each time claims may have been lost (Redis acknowledges a write before it
  is on disk or on a replica), so every state sealed before is refused (`EpochChanged`): a
  lost claim can never accept a confirmation twice. Redis's persistence
  settings therefore do not matter for single use; they only decide whether a confirmation in
  flight survives a restart of Redis (it does not: the user starts over).
- Eviction: every claim refuses (`StoreUnavailable`) unless `maxmemory-policy` is `noeviction`,
  as an evicting policy could drop a live nonce. Out of memory, Redis refuses the write: the
  claim fails, nothing is recorded as claimed.
- Fail closed and bounded: a connection, timeout, authentication, TLS or script error is
  `StoreUnavailable` (its message names no password, nor any argument a server echoes back).
  Each command, sent and answered, takes at most `timeout` seconds however slowly the peer
  trickles its bytes, and everything one call does (connecting, TLS and RESP handshake, health
  check, script load, retry) at most `CALL_BUDGET` times that: every socket operation is given
  what is left of both (a name lookup is not bounded here: name an IP address). An answer is
  at most `MAX_ANSWER` bytes, nested at most `MAX_DEPTH` deep. A command is retried once, on a
  new connection, only after a connection error; a retried claim that had in fact run finds
  its nonce spent, so a retry can refuse, never accept. Every claim answer carries its nonce
  back: an answer out of step is refused, and a pooled connection with anything waiting on it
  (a stray answer, the server's close) is never used again.
- Only a primary: a replica (even a writable one) is refused, since its claims vanish at its
  next full resync without any change of epoch. The connection speaks RESP2 (AUTH, no HELLO).
- TLS (`rediss://`): the context is built once, when the store is made (before the server
  confines itself), from the CA, certificate and key files; nothing is read from disk later.
  The server's certificate and host name are verified.
- Keys: `{PREFIX}:n:NONCE`, `{PREFIX}:p:PRINCIPAL-HEX`, `{PREFIX}:all` and `{PREFIX}:epoch`;
  the braces are Redis Cluster's hash tag, so all of them live in one slot, as the script needs.

Not guaranteed: single use against anyone else who can write this keyspace (give fs-notes an
ACL user of its own, docs/deploy.md); Redis Sentinel or Cluster discovery (name the primary);
a unix-socket URL (not supported: the server's private view does not show the socket). Tested
on Redis 7.0; the scripts use only commands of Redis 5 and later (INFO one section at a time).

A client of our own (`_Client`), not redis-py: redis-py's public interface bounds each socket
operation (`socket_timeout`, `socket_connect_timeout`), never a command or a call, so a peer
sending one byte per timeout holds a call for ever; the deadline above once took overriding
its `Connection` internals (`_connect`, `connect_check_health`, `send_packed_command`,
`read_response`), which any release may change. The store needs few commands, so it speaks
them itself, in RESP2 (Redis's protocol since 2.0; no push messages, no HELLO): `AUTH [USER]
PASSWORD` (`AUTH PASSWORD` again for a server before 6.0), `CLIENT SETNAME fs-notes`, `SELECT`
for a database other than 0, `PING` before reusing a connection idle for
`HEALTH_CHECK_INTERVAL`, `EVALSHA` (and `SCRIPT LOAD` after `NOSCRIPT`), `EXISTS` and `INFO
server`. Connections are pooled, each serving one thread's command at a time; a forked child
opens its own. It relies only on Python's `socket` and `ssl` (documented: `getaddrinfo`, `connect`,
`settimeout`, `send`, `recv`, `SSLContext.wrap_socket`), and its error names and messages are
the ones redis-py gave (`ConnectionError: Error 111 connecting to HOST:PORT. Connection
refused.`), which operators and docs/deploy.md know. tests/test_dependency_contracts.py checks
that the store imports no redis-py and that the stdlib calls it makes exist as documented.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from .location import RedisLocation
from .spent import EpochChanged, PrincipalQuotaFull, ReplayStoreFull, StoreUnavailable, check_claim

__all__ = ["DEFAULT_TIMEOUT", "RedisError", "RedisReplayStore"]

DEFAULT_TIMEOUT = 2.0
#: A store call (connecting, handshake, health check, script load, one retry) may take this many
#: times the timeout in all; each command in it, sent and answered, one timeout.
CALL_BUDGET = 2
#: A pooled connection idle this long is PINGed before it is used again.
HEALTH_CHECK_INTERVAL = 30.0
#: The most bytes one answer may take (INFO server: 580 bytes on Redis 7.0), how deep its arrays may
#: nest (the scripts answer flat arrays), and how many items one array may hold.
MAX_ANSWER = 1 << 20
MAX_DEPTH = 2
MAX_ITEMS = 64
CLIENT_NAME = "fs-notes"

# KEYS: nonce key, principal set, global set, epoch marker.
# ARGV: nonce, principal, keep-until (ms), quota, bound, expected run_id, marker, replid.
# Every answer is {code, nonce, detail}: the nonce comes back so that an answer can only be
# taken for the claim it answers.
_CLAIM = """
local n = ARGV[1]
local policy = string.match(redis.call('INFO', 'memory'), '\\nmaxmemory_policy:([%w-]+)')
if policy ~= 'noeviction' then return {-5, n, policy or '?'} end
local repl = redis.call('INFO', 'replication')
if string.match(repl, '\\nrole:(%a+)') ~= 'master' then return {-6, n, ''} end
local run = string.match(redis.call('INFO', 'server'), '\\nrun_id:(%x+)')
local replid = string.match(repl, '\\nmaster_replid:(%x+)')
if run ~= ARGV[6] or replid ~= ARGV[8] or redis.call('GET', KEYS[4]) ~= ARGV[7] then
  return {-3, n, ''}
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, n, ''} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keep = tonumber(ARGV[3])
if keep <= now then return {-4, n, ''} end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return {-1, n, ''} end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[5]) then return {-2, n, ''} end
local ttl = keep - now
-- Counted first, recorded last: a script that fails half-way (out of memory, an ACL without
-- one of these commands) has then at worst counted a nonce it did not claim.
for _, set in ipairs({KEYS[2], KEYS[3]}) do
  redis.call('ZADD', set, keep, n)
  if redis.call('PTTL', set) < ttl then redis.call('PEXPIRE', set, ttl) end
end
if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ttl) then return {0, n, ''} end
return {1, n, ''}
"""

# KEYS: epoch marker. ARGV: a fresh marker, used only if there is none (and only on a primary).
_EPOCH = """
local repl = redis.call('INFO', 'replication')
local role = string.match(repl, '\\nrole:(%a+)') or '?'
if role == 'master' then redis.call('SET', KEYS[1], ARGV[1], 'NX') end
return {string.match(redis.call('INFO', 'server'), '\\nrun_id:(%x+)') or '',
        string.match(redis.call('INFO', 'memory'), '\\nmaxmemory_policy:([%w-]+)') or '?',
        redis.call('GET', KEYS[1]) or '',
        string.match(repl, '\\nmaster_replid:(%x+)') or '',
        role}
"""


def _tls_context(loc: RedisLocation) -> ssl.SSLContext:
    """The client context, built now: CA, certificate and key files are read here, once."""
    try:
        context = ssl.create_default_context(cafile=loc.ca_file)
        if loc.cert_file is not None:
            context.load_cert_chain(loc.cert_file, loc.key_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise StoreUnavailable(f"the replay store's TLS files: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class RedisReplayStore:
    """Spent nonces in the Redis database `location` names (see the module docstring)."""

    binds_boot = False  # the epoch stands for the boot id: the hosts' boots do not matter

    def __init__(
        self,
        location: RedisLocation,
        *,
        max_rows: int,
        per_principal: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if max_rows < 1 or (per_principal is not None and per_principal < 1) or timeout <= 0:
            raise ValueError("max_rows, per_principal and timeout must be positive")
        self._loc = location
        self._timeout = timeout
        self._max_rows = max_rows
        self._per_principal = per_principal if per_principal is not None else max_rows
        # ValueError and TypeError too: the socket layer raises them for input it refuses late
        # (a name the IDNA codec cannot encode, a principal that is not UTF-8): not claimed.
        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError, ValueError, TypeError)
        self._tag = "{" + location.key_prefix + "}"
        tls = _tls_context(location) if location.tls else None
        self._redis = _Client(location, timeout, tls)
        self._claim = _Script(self._redis, _CLAIM)
        self._epoch = _Script(self._redis, _EPOCH)

    def describe(self) -> str:
        return self._loc.describe()

    def _deadline(self) -> float:
        """When everything one store call does (connecting, handshake, health check, script
        load, retry) must be over: `CALL_BUDGET` times the timeout from now."""
        return time.monotonic() + self._timeout * CALL_BUDGET

    @property
    def location(self) -> RedisLocation:
        return self._loc

    def _key(self, kind: str, name: str) -> str:
        return f"{self._tag}:{kind}:{name}"

    def _fail(self, what: str, exc: BaseException) -> StoreUnavailable:
        # The client's messages name the host and port, never the password.
        text = str(exc)
        # A server that does not know a command repeats its arguments (AUTH's password among
        # them, cut to 128 bytes, so possibly only a part of it): never pass them on.
        text = text.split(", with args beginning with:")[0]
        password = self._loc.password
        if password:  # as it was sent, and as a repr of its bytes shows it (Protocol Error)
            for form in {password, repr(password.encode("utf-8", "replace"))[2:-1]}:
                text = text.replace(form, "<password>")
        text = text.replace("\n", " ")[:300]
        kind = exc.kind if isinstance(exc, RedisError) else type(exc).__name__
        return StoreUnavailable(f"{self.describe()}: {what}: {kind}: {text}")

    def epoch(self) -> str:
        """This store's current epoch (run_id.marker); StoreUnavailable if Redis does not
        answer or evicts keys."""
        try:
            answer = self._epoch(
                self._deadline(), keys=[self._key("epoch", "marker")], args=[secrets.token_hex(16)]
            )
            run, policy, marker, replid, role = (_text(v) for v in answer)
        except self._errors as exc:
            raise self._fail("the epoch could not be read", exc) from None
        if role != "master":
            raise StoreUnavailable(_replica(self.describe()))
        if policy != "noeviction":
            raise StoreUnavailable(_eviction(self.describe(), policy))
        if not (run and marker and replid):
            raise StoreUnavailable(f"{self.describe()}: INFO did not give run_id and replid")
        return f"{run}.{replid}.{marker}"

    def check(self) -> dict[str, Any]:
        """What `fs-notes check` reports: whether it answers and is usable, and its version."""
        out: dict[str, Any] = {"store": self.describe()}
        try:
            epoch = self.epoch()
            version = self._redis.info(self._deadline(), "server").get("redis_version")
        except StoreUnavailable as exc:
            return {**out, "answers": False, "error": str(exc)}
        except self._errors as exc:
            return {**out, "answers": False, "error": str(self._fail("INFO", exc))}
        return {**out, "answers": True, "version": str(version), "epoch": epoch.split(".")[0]}

    def claim(
        self, nonce: str, expires_at: float, principal: str = "", epoch: str | None = None
    ) -> bool:
        """Spend `nonce` for `principal` under `epoch` (what the state was sealed with):
        True for the first caller ever, False if it was spent. Raises ValueError,
        EpochChanged, PrincipalQuotaFull, ReplayStoreFull or StoreUnavailable (never claimed)."""
        keep_until = check_claim(nonce, expires_at)
        parts = (epoch or "").split(".")
        if len(parts) != 3 or not all(parts):
            raise EpochChanged("the state was sealed without this store's epoch")
        run, replid, marker = parts
        try:
            result = self._claim(
                self._deadline(),
                keys=[
                    self._key("n", nonce),
                    self._key("p", principal.encode("utf-8", "surrogatepass").hex() or "-"),
                    f"{self._tag}:all",
                    self._key("epoch", "marker"),
                ],
                args=[
                    nonce,
                    principal,
                    int(keep_until * 1000),
                    self._per_principal,
                    self._max_rows,
                    run,
                    marker,
                    replid,
                ],
            )
        except self._errors as exc:
            raise self._fail("the claim could not be recorded", exc) from None
        try:
            code, answered = int(result[0]), _text(result[1])
        except (TypeError, ValueError, IndexError):
            shape = f"{self.describe()}: a claim answer of the wrong shape"
            raise StoreUnavailable(shape) from None
        if answered != nonce:  # never take another request's answer for this claim's
            raise StoreUnavailable(f"{self.describe()}: the claim's answer names another nonce")
        if code == 1:
            return True
        if code == 0:
            return False
        if code == -1:
            raise PrincipalQuotaFull(
                f"this principal holds {self._per_principal} unexpired confirmations"
            )
        if code == -2:
            raise ReplayStoreFull(f"replay store holds {self._max_rows} unexpired nonces")
        if code == -3:
            raise EpochChanged(
                "the replay store restarted, failed over or was emptied since the state was sealed"
            )
        if code == -4:
            raise StoreUnavailable(
                f"{self.describe()}: the state's expiry has passed by the store's clock: this "
                "host's clock and the store's disagree by more than the retention margin"
            )
        if code == -5:
            policy = _text(result[2]) if len(result) > 2 else "?"
            raise StoreUnavailable(_eviction(self.describe(), policy))
        if code == -6:
            raise StoreUnavailable(_replica(self.describe()))
        raise StoreUnavailable(f"{self.describe()}: unexpected claim result {code}")

    def is_spent(self, nonce: str) -> bool:
        try:
            return bool(self._redis.command(self._deadline(), "EXISTS", self._key("n", nonce)))
        except self._errors as exc:
            raise self._fail("the nonce could not be looked up", exc) from None

    def close(self) -> None:
        self._redis.close()

    def __enter__(self) -> RedisReplayStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def _replica(where: str) -> str:
    return (
        f"{where}: is a replica; name the primary (a replica's claims are lost at its next "
        "resync, without any change of epoch)"
    )


def _eviction(where: str, policy: str) -> str:
    return (
        f"{where}: maxmemory-policy is {policy!r}; fs-notes needs 'noeviction' (an evicting "
        "Redis could drop a spent nonce and accept a confirmation twice)"
    )


class RedisError(Exception):
    """What the client raises. `kind` names it in messages: the names redis-py gave these
    errors, which operators (and docs/deploy.md) know."""

    kind = "RedisError"


class _Disconnected(RedisError):
    """The connection failed (refused, reset, closed, TLS): the only error retried."""

    kind = "ConnectionError"


class _Timeout(RedisError):
    kind = "TimeoutError"


class _BadAnswer(RedisError):
    """Not RESP2, or past the bounds (MAX_ANSWER, MAX_DEPTH, MAX_ITEMS)."""

    kind = "InvalidResponse"


class _Refused(RedisError):
    """An error answer of the server (`-CODE message`); the connection is fine."""

    def __init__(self, message: str, kind: str = "ResponseError") -> None:
        super().__init__(message)
        self.kind = kind


class _AuthRefused(_Refused):
    def __init__(self, message: str) -> None:
        super().__init__(message, "AuthenticationError")


class _NoScript(_Refused):
    def __init__(self, message: str) -> None:
        super().__init__(message, "NoScriptError")


# An error answer's code, and the name of what it is (as redis-py names them); the code is cut
# from the message for these, kept for any other.
_CODES = {
    "ERR": "ResponseError",
    "WRONGPASS": "AuthenticationError",
    "NOAUTH": "AuthenticationError",
    "NOSCRIPT": "NoScriptError",
    "NOPERM": "NoPermissionError",
    "OOM": "OutOfMemoryError",
    "READONLY": "ReadOnlyError",
    "LOADING": "BusyLoadingError",
    "MASTERDOWN": "MasterDownError",
    "EXECABORT": "ExecAbortError",
}


def _refused(text: str) -> _Refused:
    code, _, rest = text.partition(" ")
    if code not in _CODES:
        return _Refused(text)
    kind = _CODES[code]
    if code == "ERR" and (
        rest == "invalid password" or "called without any password configured" in rest
    ):
        kind = "AuthenticationError"
    if kind == "AuthenticationError":
        return _AuthRefused(rest)
    if kind == "NoScriptError":
        return _NoScript(rest)
    return _Refused(rest, kind)


def _pack(args: Sequence[object]) -> bytes:
    """A command as RESP2 sends it: an array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode("utf-8")  # strict: UnicodeEncodeError is a ValueError
        elif isinstance(arg, int) and not isinstance(arg, bool):
            data = str(arg).encode()
        else:
            raise TypeError(f"a command argument of type {type(arg).__name__}")
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _left(end: float) -> float:
    """The seconds until `end`; the built-in TimeoutError once it has passed."""
    left = end - time.monotonic()
    if left <= 0:
        raise TimeoutError("the replay store took longer than its deadline")
    return left


def _os_error(exc: OSError) -> tuple[object, object]:
    if len(exc.args) == 1:
        return "UNKNOWN", exc.args[0]
    return (exc.args[0], exc.args[1]) if exc.args else ("UNKNOWN", type(exc).__name__)


class _Connection:
    """One socket to Redis. `execute` sends one command and reads its whole answer, every
    send and receive given what is left of `timeout` from its start and of the call's
    deadline (a socket timeout alone bounds each read: a peer trickling one byte at a time
    would never trip it)."""

    def __init__(self, sock: socket.socket, where: str, timeout: float, generation: int) -> None:
        self.sock = sock
        self.where = where
        self.timeout = timeout
        self.generation = generation
        self.next_health_check = time.monotonic() + HEALTH_CHECK_INTERVAL
        self._buf = bytearray()
        self._read = 0  # bytes received for the answer being read

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __del__(self) -> None:  # a connection dropped without close (a forked child's)
        with contextlib.suppress(Exception):
            self.sock.close()

    def execute(self, command: bytes, deadline: float) -> Any:
        """The answer to `command` (packed); an error answer is returned, not raised (the
        connection is fine). Any exception leaves the connection unusable: close it."""
        end = min(deadline, time.monotonic() + self.timeout)
        self._send(command, end)
        self._read = len(self._buf)
        answer = self._answer(end, 0)
        self.next_health_check = time.monotonic() + HEALTH_CHECK_INTERVAL
        return answer

    def stray(self) -> bool:
        """Whether anything waits on this idle connection (a stray answer, or the server's
        close): then it must not be used again."""
        if self._buf:
            return True
        try:
            self.sock.settimeout(0.0)
            self.sock.recv(1)  # data, or b"" at the server's close
        except (BlockingIOError, ssl.SSLWantReadError):
            return False
        except OSError:
            return True
        return True

    def _send(self, data: bytes, end: float) -> None:
        view = memoryview(data)
        try:
            while view:
                self.sock.settimeout(_left(end))
                view = view[self.sock.send(view) :]
        except TimeoutError:
            raise _Timeout("Timeout writing to socket") from None
        except OSError as exc:
            errno, message = _os_error(exc)
            raise _Disconnected(f"Error {errno} while writing to socket. {message}.") from None

    def _fill(self, end: float) -> None:
        try:
            self.sock.settimeout(_left(end))
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise _Timeout(f"Timeout reading from {self.where}") from None
        except OSError as exc:
            raise _Disconnected(f"Error while reading from {self.where} : {exc.args}") from None
        if not chunk:
            raise _Disconnected("Connection closed by server.")
        self._read += len(chunk)
        if self._read > MAX_ANSWER:
            raise _BadAnswer(f"an answer longer than {MAX_ANSWER} bytes")
        self._buf += chunk

    def _line(self, end: float) -> bytes:
        while (at := self._buf.find(b"\r\n")) < 0:
            self._fill(end)
        line = bytes(self._buf[:at])
        del self._buf[: at + 2]
        return line

    def _exact(self, size: int, end: float) -> bytes:
        while len(self._buf) < size:
            self._fill(end)
        data = bytes(self._buf[:size])
        del self._buf[:size]
        return data

    def _answer(self, end: float, depth: int) -> Any:
        line = self._line(end)
        mark, rest = line[:1], line[1:]
        if mark == b"+":
            return rest
        if mark == b"-":
            return _refused(rest.decode("utf-8", "replace"))
        try:
            if mark not in (b":", b"$", b"*"):
                raise ValueError(mark)
            number = int(rest)
        except ValueError:
            raise _BadAnswer(f"Protocol Error: {line[:64]!r}") from None
        if mark == b":":
            return number
        if number == -1:
            return None
        if mark == b"$":
            if not 0 <= number <= MAX_ANSWER:
                raise _BadAnswer(f"a bulk string of {number} bytes")
            data = self._exact(number + 2, end)
            if not data.endswith(b"\r\n"):
                raise _BadAnswer("a bulk string not ended by CRLF")
            return data[:-2]
        if not 0 <= number <= MAX_ITEMS or depth >= MAX_DEPTH:
            raise _BadAnswer(f"an array of {number} items at depth {depth}")
        return [self._answer(end, depth + 1) for _ in range(number)]


_CLIENTS: weakref.WeakSet[_Client] = weakref.WeakSet()


def _after_fork() -> None:
    """In a forked child, each client's lock afresh: a thread of the parent may have held it
    at the fork, and no thread here would ever release it (the pool is dropped on first use)."""
    for client in list(_CLIENTS):
        client._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


class _Client:
    """The replay store's commands over a pool of `_Connection`s (the module docstring says
    which, and why not redis-py). Thread-safe: a connection serves one command at a time."""

    def __init__(self, location: RedisLocation, timeout: float, tls: ssl.SSLContext | None):
        self._loc = location
        self._timeout = timeout
        self._tls = tls
        self._where = f"{location.host}:{location.port}"
        self._lock = threading.Lock()
        self._idle: list[_Connection] = []
        self._pid = os.getpid()
        _CLIENTS.add(self)
        self._generation = 0  # connections made before the last close() are not pooled again

    def command(self, deadline: float, *args: object) -> Any:
        """The answer to one command (an error answer raised as `_Refused`), by `deadline`.
        Retried once, on a new connection, after a connection error only."""
        packed = _pack(args)
        for attempt in range(2):
            conn: _Connection | None = None
            try:
                conn = self._connection(deadline)
                answer = conn.execute(packed, deadline)
            except _Disconnected:
                if conn is not None:
                    conn.close()
                if attempt or time.monotonic() >= deadline:
                    raise
                continue
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            self._give(conn)
            if isinstance(answer, RedisError):
                raise answer
            return answer
        raise AssertionError("not reached")

    def info(self, deadline: float, section: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in _text(self.command(deadline, "INFO", section)).splitlines():
            key, colon, value = line.partition(":")
            if colon and not key.startswith("#"):
                out[key] = value
        return out

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for conn in idle:
            conn.close()

    def _take(self) -> _Connection | None:
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's connections are its own
                self._idle, self._pid = [], os.getpid()
                self._generation += 1
            return self._idle.pop() if self._idle else None

    def _give(self, conn: _Connection) -> None:
        with self._lock:
            if conn.generation == self._generation and self._pid == os.getpid():
                self._idle.append(conn)
                return
        conn.close()

    def _connection(self, deadline: float) -> _Connection:
        """A pooled connection with nothing waiting on it (PINGed if idle for long), else a
        new one."""
        while (conn := self._take()) is not None:
            if conn.stray():
                conn.close()
                continue
            if time.monotonic() < conn.next_health_check:
                return conn
            try:
                answer = conn.execute(_pack(("PING",)), deadline)
            except _Disconnected:
                answer = None
            except BaseException:
                conn.close()
                raise
            if answer == b"PONG" and not conn.stray():  # (nothing after the PONG either)
                return conn
            conn.close()  # a failed health check: a new connection instead
            break
        return self._open(deadline)

    def _open(self, deadline: float) -> _Connection:
        generation = self._generation
        try:
            sock = self._tcp(deadline)
            if self._tls is not None:
                try:
                    sock.settimeout(_left(min(deadline, time.monotonic() + self._timeout)))
                    sock = self._tls.wrap_socket(
                        sock, server_hostname=self._loc.server_name or self._loc.host
                    )
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError:
            raise _Timeout("Timeout connecting to server") from None
        except OSError as exc:
            if not exc.args:
                raise _Disconnected(f"Error connecting to {self._where}.") from None
            if len(exc.args) == 1:
                message = f"Error {exc.args[0]} connecting to {self._where}."
            else:
                message = f"Error {exc.args[0]} connecting to {self._where}. {exc.args[1]}."
            raise _Disconnected(message) from None
        conn = _Connection(sock, self._where, self._timeout, generation)
        try:
            self._handshake(conn, deadline)
            if conn.stray():  # more than the handshake's answers: out of step, never used
                raise _Disconnected(f"Protocol Error: unasked data from {self._where}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _tcp(self, deadline: float) -> socket.socket:
        """A TCP connection to the first address of the host that takes one, each attempt
        bounded by the timeout and the call's deadline."""
        error: OSError | None = None
        addresses = socket.getaddrinfo(self._loc.host, self._loc.port, 0, socket.SOCK_STREAM)
        for family, kind, proto, _name, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(_left(min(deadline, time.monotonic() + self._timeout)))
                sock.connect(address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            return sock
        raise error or OSError("socket.getaddrinfo returned an empty list")

    def _handshake(self, conn: _Connection, deadline: float) -> None:
        loc = self._loc
        if loc.username or loc.password:
            password = loc.password or ""
            auth = ("AUTH", loc.username, password) if loc.username else ("AUTH", password)
            answer = conn.execute(_pack(auth), deadline)
            if loc.username and "wrong number of arguments for 'auth'" in str(answer).lower():
                answer = conn.execute(_pack(("AUTH", password)), deadline)  # before Redis 6
            if isinstance(answer, RedisError):
                raise _auth_refusal(answer)
            _ok(answer, _AuthRefused("Invalid Username or Password"))
        setname = conn.execute(_pack(("CLIENT", "SETNAME", CLIENT_NAME)), deadline)
        _ok(setname, _Disconnected("Error setting client name"))
        if loc.db:
            selected = conn.execute(_pack(("SELECT", loc.db)), deadline)
            _ok(selected, _Disconnected("Invalid Database"))


#: What Redis says when AUTH fails, as far as fs-notes passes it on: the rest of an answer to
#: AUTH is the server's own text, which may echo the password (in any wording, any escaping).
_AUTH_ANSWERS = (
    "unknown command",
    "wrong number of arguments",
    "invalid username-password pair or user is disabled",
    "invalid password",
    "called without any password configured",
)


def _auth_refusal(answer: RedisError) -> RedisError:
    """An error answer to AUTH, with only the words Redis is known to say (`_AUTH_ANSWERS`):
    "unknown command 'AUTH'" (renamed or disabled), else "Invalid Username or Password"."""
    text = str(answer).lower()
    if "unknown command" in text:
        return _Refused("unknown command 'AUTH'", answer.kind)
    for known in _AUTH_ANSWERS:
        if known in text:
            return _AuthRefused(known)
    return _AuthRefused("Invalid Username or Password")


def _ok(answer: object, otherwise: RedisError) -> None:
    if isinstance(answer, RedisError):
        raise answer
    if answer != b"OK":
        raise otherwise


class _Script:
    """A Lua script run by its SHA-1 (`EVALSHA`), loaded (`SCRIPT LOAD`) when Redis does not
    know it yet, after a restart or `SCRIPT FLUSH`; never `EVAL`."""

    def __init__(self, client: _Client, source: str) -> None:
        self._client = client
        self._source = source
        self._sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()

    def __call__(self, deadline: float, *, keys: list[str], args: list[object]) -> Any:
        command = ("EVALSHA", self._sha, len(keys), *keys, *args)
        try:
            return self._client.command(deadline, *command)
        except _NoScript:
            self._client.command(deadline, "SCRIPT", "LOAD", self._source)
            return self._client.command(deadline, *command)
