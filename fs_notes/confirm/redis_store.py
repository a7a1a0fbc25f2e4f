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
  trickles its bytes, and everything one call sends and reads (handshake, health check, script
  load, retry) at most `CALL_BUDGET` times that (`_DeadlineSocket`, `_CallDeadline`); each
  connection attempt adds at most `timeout` per address (a name lookup is not bounded here:
  name an IP address). A command is retried once, on a new connection, only after a connection
  error; a retried claim that had in fact run finds its nonce spent, so a retry can refuse,
  never accept. Every claim answer carries its nonce back: an answer out of step is refused.
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
"""

from __future__ import annotations

import secrets
import ssl
import threading
import time
from typing import Any

from .location import RedisLocation
from .spent import EpochChanged, PrincipalQuotaFull, ReplayStoreFull, StoreUnavailable, check_claim

__all__ = ["DEFAULT_TIMEOUT", "RedisReplayStore"]

DEFAULT_TIMEOUT = 2.0
#: A store call's commands together (handshake, health check, script load, one retry) may take
#: this many times the timeout; each connection attempt adds at most one timeout more.
CALL_BUDGET = 2

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
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._loc = location
        self._timeout = timeout
        self._max_rows = max_rows
        self._per_principal = per_principal if per_principal is not None else max_rows
        # ValueError and TypeError too: redis-py and the socket layer raise them for input
        # they refuse late (a name the IDNA codec cannot encode, say): still not claimed.
        self._errors: tuple[type[BaseException], ...] = (
            redis.RedisError, OSError, ValueError, TypeError,
        )  # fmt: skip
        self._tag = "{" + location.key_prefix + "}"
        kwargs: dict[str, Any] = {
            "host": location.host,
            "port": location.port,
            "db": location.db,
            "username": location.username,
            "password": location.password,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
            "health_check_interval": 30,
            "client_name": "fs-notes",
            # RESP2: AUTH, not HELLO (a server without HELLO echoed its arguments), and the pool
            # then checks a reused connection for stray data (redis-py skips that check with
            # RESP3's maintenance notifications on).
            "protocol": 2,
            "connection_class": _connection_class(),
            "command_timeout": timeout,
            "tls_context": _tls_context(location) if location.tls else None,
            "tls_server_name": location.server_name or location.host,
        }
        self._pool = redis.ConnectionPool(**kwargs)
        self._client = redis.Redis(connection_pool=self._pool)
        self._claim = self._client.register_script(_CLAIM)
        self._epoch = self._client.register_script(_EPOCH)
        self._lock = threading.Lock()

    def describe(self) -> str:
        return self._loc.describe()

    def _call(self) -> _CallDeadline:
        """One deadline for everything one store call sends and reads (handshake, health
        check, script load, retry): `CALL_BUDGET` times the timeout."""
        return _CallDeadline(self._timeout * CALL_BUDGET)

    @property
    def location(self) -> RedisLocation:
        return self._loc

    def _key(self, kind: str, name: str) -> str:
        return f"{self._tag}:{kind}:{name}"

    def _fail(self, what: str, exc: BaseException) -> StoreUnavailable:
        # redis-py's messages name the host and port, never the password.
        text = str(exc)
        # A server that does not know a command repeats its arguments (AUTH's password among
        # them, cut to 128 bytes, so possibly only a part of it): never pass them on.
        text = text.split(", with args beginning with:")[0]
        if self._loc.password:
            text = text.replace(self._loc.password, "<password>")
        text = text.replace("\n", " ")[:300]
        return StoreUnavailable(f"{self.describe()}: {what}: {type(exc).__name__}: {text}")

    def epoch(self) -> str:
        """This store's current epoch (run_id.marker); StoreUnavailable if Redis does not
        answer or evicts keys."""
        try:
            with self._call():
                answer = self._epoch(
                    keys=[self._key("epoch", "marker")], args=[secrets.token_hex(16)]
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
            with self._call():
                version = self._client.info("server").get("redis_version")
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
            with self._call():
                result = self._claim(
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
            raise StoreUnavailable(_eviction(self.describe(), _text(result[2])))
        if code == -6:
            raise StoreUnavailable(_replica(self.describe()))
        raise StoreUnavailable(f"{self.describe()}: unexpected claim result {code}")

    def is_spent(self, nonce: str) -> bool:
        try:
            with self._call():
                return bool(self._client.exists(self._key("n", nonce)))
        except self._errors as exc:
            raise self._fail("the nonce could not be looked up", exc) from None

    def close(self) -> None:
        self._pool.disconnect()

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


_CALL = threading.local()


class _CallDeadline:
    """While entered, every send and receive of this thread's store sockets ends by then."""

    def __init__(self, budget: float) -> None:
        self._budget = budget

    def __enter__(self) -> None:
        _CALL.deadline = time.monotonic() + self._budget

    def __exit__(self, *exc: object) -> None:
        _CALL.deadline = None


class _DeadlineSocket:
    """A connected socket whose sends and receives for one command take at most `budget`
    seconds together (a socket timeout bounds each read; a peer trickling one byte at a time
    would never trip it). `start()` begins a command; everything else is the socket's."""

    def __init__(self, sock: Any, budget: float) -> None:
        self._sock = sock
        self._budget = budget
        self._deadline: float | None = None

    def start(self) -> None:
        self._deadline = time.monotonic() + self._budget

    def finish(self) -> None:
        self._deadline = None

    def _bounded(self, call: Any, *args: Any) -> Any:
        limits = [d for d in (self._deadline, getattr(_CALL, "deadline", None)) if d is not None]
        if not limits:
            return call(*args)
        left = min(limits) - time.monotonic()
        if left <= 0:
            raise TimeoutError("the replay store took longer than its deadline")
        before = self._sock.gettimeout()
        self._sock.settimeout(left if before is None else min(before, left))
        try:
            return call(*args)
        finally:
            self._sock.settimeout(before)

    def recv(self, *args: Any) -> Any:
        return self._bounded(self._sock.recv, *args)

    def recv_into(self, *args: Any) -> Any:
        return self._bounded(self._sock.recv_into, *args)

    def sendall(self, *args: Any) -> Any:
        return self._bounded(self._sock.sendall, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _connection_class() -> type:
    """redis-py's TCP connection with a deadline per command, in our TLS context when there is
    one (redis-py's own SSLConnection builds its context, and reads the CA files, at every
    connect: after self-confinement those reads are refused), and one connection attempt per
    command attempt (its retry object would otherwise retry the connect inside the command's
    retry). Overrides redis-py internals (`_connect`, `connect_check_health`): redis>=8.1,<9."""
    from redis.connection import Connection

    class StoreConnection(Connection):
        def __init__(
            self,
            *,
            command_timeout: float,
            tls_context: ssl.SSLContext | None,
            tls_server_name: str,
            **kwargs: Any,
        ) -> None:
            self._command_timeout = command_timeout
            self._tls_context = tls_context
            self._tls_server_name = tls_server_name
            super().__init__(**kwargs)  # type: ignore[no-untyped-call]

        def _connect(self) -> Any:
            sock = super()._connect()  # type: ignore[no-untyped-call]
            if self._tls_context is not None:
                try:
                    sock = self._tls_context.wrap_socket(
                        sock, server_hostname=self._tls_server_name
                    )
                except (OSError, ssl.SSLError, ValueError):
                    sock.close()
                    raise
            return _DeadlineSocket(sock, self._command_timeout)

        def connect_check_health(
            self, check_health: bool = True, retry_socket_connect: bool = True
        ) -> Any:
            return super().connect_check_health(
                check_health=check_health, retry_socket_connect=False
            )

        def send_packed_command(self, command: Any, check_health: bool = True) -> Any:
            # Connect and check health first (each with deadlines of their own: their
            # read_response ends its deadline), then start this command's.
            if not self._sock:
                self.connect_check_health(check_health=False)
            if check_health:
                self.check_health()  # type: ignore[no-untyped-call]
            if isinstance(self._sock, _DeadlineSocket):
                self._sock.start()
            return super().send_packed_command(  # type: ignore[no-untyped-call]
                command, check_health=False
            )

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().read_response(*args, **kwargs)
            finally:
                if isinstance(self._sock, _DeadlineSocket):
                    self._sock.finish()

    return StoreConnection
