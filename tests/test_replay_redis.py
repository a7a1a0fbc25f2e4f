"""The shared replay store on a real Redis (fs_notes/confirm/redis_store.py).

One winner per nonce across threads, processes and store objects; expiry by the engine; the
quota and the bound; the epoch refusing every state sealed before a restart, a FLUSHDB or on
another database; an evicting Redis refused; fail closed (and fast) when the server is gone;
passwords and TLS as their users expect, and never a password in a message. The store's own
client, against fake peers: a deadline per command and per call however slowly a peer trickles,
answers past its bounds refused, a stray answer never taken for the next command's.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_server import RedisServer, free_port

from fs_notes.confirm.location import RedisLocation, parse_location
from fs_notes.confirm.redis_store import MAX_ANSWER, MAX_ITEMS, RedisReplayStore
from fs_notes.confirm.spent import (
    RETENTION_MARGIN,
    EpochChanged,
    PrincipalQuotaFull,
    ReplayStoreFull,
    StoreUnavailable,
)


def nonce() -> str:
    return secrets.token_hex(16)


def soon() -> float:
    return time.time() + 300


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path_factory.mktemp("redis"))
    yield srv
    srv.close()


@pytest.fixture
def store(server: RedisServer) -> Iterator[RedisReplayStore]:
    server.client().flushall()
    with RedisReplayStore(parse_location(server.url), max_rows=1000) as s:
        yield s


def test_a_nonce_is_claimed_once_across_two_store_objects(server: RedisServer) -> None:
    server.client().flushall()
    loc = parse_location(server.url)
    with (
        RedisReplayStore(loc, max_rows=100) as a,
        RedisReplayStore(loc, max_rows=100) as b,
    ):
        epoch = a.epoch()
        assert b.epoch() == epoch  # one marker, made once (SET NX)
        n = nonce()
        assert not b.is_spent(n)
        assert a.claim(n, soon(), "alice", epoch) is True
        assert b.is_spent(n)
        assert b.claim(n, soon(), "alice", epoch) is False
        assert a.claim(n, soon(), "bob", epoch) is False


def test_the_nonce_key_expires_by_the_engine_after_the_retention_margin(
    store: RedisReplayStore, server: RedisServer
) -> None:
    n = nonce()
    expires = time.time() + 60
    assert store.claim(n, expires, "alice", store.epoch())
    r = server.client()
    ttl_ms = r.pttl(f"{{fs-notes}}:n:{n}")
    want = (expires + RETENTION_MARGIN - time.time()) * 1000
    assert want - 5_000 < ttl_ms <= want + 1_000
    assert r.get(f"{{fs-notes}}:n:{n}") == b"alice"
    # the counting sets expire too, once everything in them has
    assert 0 < r.pttl(f"{{fs-notes}}:{'p'}:{b'alice'.hex()}") <= ttl_ms + 1_000
    assert 0 < r.pttl("{fs-notes}:all") <= ttl_ms + 1_000
    assert r.pttl("{fs-notes}:epoch:marker") == -1  # the marker never expires


def _claim_many(url: str, nonces: list[str], epoch: str, out: str, go: float) -> None:
    with RedisReplayStore(parse_location(url), max_rows=10_000) as s:
        while time.time() < go:
            time.sleep(0.001)
        wins = "".join("1" if s.claim(n, soon(), "p", epoch) else "0" for n in nonces)
    Path(out).write_text(wins)


def test_processes_racing_on_the_same_nonces_each_have_exactly_one_winner(
    store: RedisReplayStore, server: RedisServer, tmp_path: Path
) -> None:
    epoch = store.epoch()
    nonces = [nonce() for _ in range(300)]
    ctx = multiprocessing.get_context("spawn")
    go = time.time() + 3
    outs = [str(tmp_path / f"out{i}") for i in range(4)]
    procs = [
        ctx.Process(target=_claim_many, args=(server.url, nonces, epoch, o, go)) for o in outs
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    results = [Path(o).read_text() for o in outs]
    assert all(len(r) == len(nonces) for r in results)
    assert [sum(r[i] == "1" for r in results) for i in range(len(nonces))] == [1] * len(nonces)


def test_threads_racing_on_one_nonce_have_one_winner(store: RedisReplayStore) -> None:
    epoch = store.epoch()
    for _ in range(50):
        n, wins = nonce(), list[bool]()
        barrier = threading.Barrier(8)

        def go(n: str = n, wins: list[bool] = wins, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            wins.append(store.claim(n, soon(), "p", epoch))

        threads = [threading.Thread(target=go) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(wins) == [False] * 7 + [True]


def test_a_principal_at_its_quota_is_refused_and_others_are_not(server: RedisServer) -> None:
    server.client().flushall()
    with RedisReplayStore(parse_location(server.url), max_rows=100, per_principal=2) as s:
        e = s.epoch()
        assert s.claim(nonce(), soon(), "alice", e)
        assert s.claim(nonce(), soon(), "alice", e)
        refused = nonce()
        with pytest.raises(PrincipalQuotaFull):
            s.claim(refused, soon(), "alice", e)
        assert not s.is_spent(refused)  # refused means not claimed
        assert s.claim(nonce(), soon(), "bob", e)


def test_a_full_store_refuses_rather_than_evict(server: RedisServer) -> None:
    server.client().flushall()
    with RedisReplayStore(parse_location(server.url), max_rows=3) as s:
        e = s.epoch()
        kept = [nonce() for _ in range(3)]
        for i, n in enumerate(kept):
            assert s.claim(n, soon(), f"p{i}", e)
        with pytest.raises(ReplayStoreFull):
            s.claim(nonce(), soon(), "p9", e)
        assert all(s.is_spent(n) for n in kept)


def test_expired_entries_are_pruned_from_the_counts(server: RedisServer) -> None:
    server.client().flushall()
    with RedisReplayStore(parse_location(server.url), max_rows=100, per_principal=1) as s:
        e = s.epoch()
        # expires in the past, but kept until the margin: counted until then
        first = nonce()
        assert s.claim(first, time.time() - RETENTION_MARGIN + 1.0, "alice", e)
        with pytest.raises(PrincipalQuotaFull):
            s.claim(nonce(), soon(), "alice", e)
        time.sleep(1.2)
        assert s.claim(nonce(), soon(), "alice", e)
        assert not s.is_spent(first)  # the engine dropped it


def test_a_state_past_its_keep_time_by_the_store_s_clock_is_refused(
    store: RedisReplayStore,
) -> None:
    n = nonce()
    with pytest.raises(StoreUnavailable, match="clock"):
        store.claim(n, time.time() - RETENTION_MARGIN - 5, "alice", store.epoch())
    assert not store.is_spent(n)


def test_malformed_claims_are_refused_before_redis(store: RedisReplayStore) -> None:
    e = store.epoch()
    for bad in ("", "A" * 32, "g" * 32, nonce() + "0"):
        with pytest.raises(ValueError):
            store.claim(bad, soon(), "p", e)
    for when in (float("nan"), float("inf"), True):
        with pytest.raises(ValueError):
            store.claim(nonce(), when, "p", e)


@pytest.mark.parametrize("epoch", [None, "", "nodot", "abc.def", "a.b.c", "a..c", "a.b.c.d"])
def test_a_state_without_this_store_s_epoch_is_refused(
    store: RedisReplayStore, epoch: str | None
) -> None:
    n = nonce()
    with pytest.raises(EpochChanged):
        store.claim(n, soon(), "p", epoch)
    assert not store.is_spent(n)
    assert store.claim(n, soon(), "p", store.epoch())  # positive control


def test_a_restart_of_redis_refuses_states_sealed_before_it(tmp_path: Path) -> None:
    srv = RedisServer(tmp_path / "r")
    try:
        with RedisReplayStore(parse_location(srv.url), max_rows=100) as s:
            before = s.epoch()
            spent = nonce()
            assert s.claim(spent, soon(), "p", before)
            srv.stop()
            srv.start()  # nothing persisted: the spent nonce is gone
            assert not s.is_spent(spent)
            with pytest.raises(EpochChanged):
                s.claim(spent, soon(), "p", before)  # lost, yet never accepted again
            assert not s.is_spent(spent)
            after = s.epoch()
            assert after != before
            assert s.claim(nonce(), soon(), "p", after)
    finally:
        srv.close()


def test_a_flush_without_a_restart_changes_the_epoch(
    store: RedisReplayStore, server: RedisServer
) -> None:
    before = store.epoch()
    n = nonce()
    assert store.claim(n, soon(), "p", before)
    server.client().flushdb()
    with pytest.raises(EpochChanged):
        store.claim(n, soon(), "p", before)
    assert store.epoch() != before


def test_another_database_has_another_epoch(server: RedisServer) -> None:
    server.client().flushall()
    base = parse_location(server.url)
    with (
        RedisReplayStore(base, max_rows=10) as zero,
        RedisReplayStore(parse_location(server.url[:-1] + "1"), max_rows=10) as one,
    ):
        e0 = zero.epoch()
        assert one.epoch() != e0
        with pytest.raises(EpochChanged):
            one.claim(nonce(), soon(), "p", e0)


def test_an_evicting_redis_is_refused_for_every_claim(
    store: RedisReplayStore, server: RedisServer
) -> None:
    epoch = store.epoch()
    r = server.client()
    r.config_set("maxmemory-policy", "volatile-lru")  # our keys have a TTL: it would drop them
    try:
        n = nonce()
        with pytest.raises(StoreUnavailable, match="noeviction"):
            store.claim(n, soon(), "p", epoch)
        with pytest.raises(StoreUnavailable, match="noeviction"):
            store.epoch()
        assert not store.is_spent(n)
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    assert store.claim(nonce(), soon(), "p", epoch)  # positive control


def test_an_unreachable_store_fails_closed_within_the_timeout(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    with RedisReplayStore(
        parse_location(f"redis://127.0.0.1:{port}/0"), max_rows=10, timeout=0.5
    ) as s:
        start = time.monotonic()
        with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{port}"):
            s.epoch()
        with pytest.raises(StoreUnavailable):
            s.claim(nonce(), soon(), "p", "a" * 40 + ".b.c")
        with pytest.raises(StoreUnavailable):
            s.is_spent(nonce())
        assert time.monotonic() - start < 10
        assert s.check()["answers"] is False


def test_a_store_that_stops_answering_mid_run_refuses_then_recovers(tmp_path: Path) -> None:
    srv = RedisServer(tmp_path / "r")
    try:
        with RedisReplayStore(parse_location(srv.url), max_rows=100, timeout=0.5) as s:
            e = s.epoch()
            assert s.claim(nonce(), soon(), "p", e)
            srv.kill()
            n = nonce()
            with pytest.raises(StoreUnavailable):
                s.claim(n, soon(), "p", e)
            srv.start()
            with pytest.raises(EpochChanged):
                s.claim(n, soon(), "p", e)
            assert s.claim(n, soon(), "p", s.epoch())
    finally:
        srv.close()


def test_a_password_authenticates_and_never_appears_in_errors(tmp_path: Path) -> None:
    password = "pw-" + secrets.token_hex(12)
    srv = RedisServer(tmp_path / "r", extra=("--requirepass", password))
    try:
        good = parse_location(srv.url, password=password)
        with RedisReplayStore(good, max_rows=10) as s:
            assert s.claim(nonce(), soon(), "p", s.epoch())
            assert password not in s.describe() and "password from file" in s.describe()
            assert password not in repr(s.location)
        for loc in (parse_location(srv.url), parse_location(srv.url, password=password + "x")):
            with RedisReplayStore(loc, max_rows=10) as s:
                with pytest.raises(StoreUnavailable) as info:
                    s.epoch()
                assert password not in str(info.value)
                assert ": AuthenticationError: " in str(info.value)
    finally:
        srv.close()


def _certificates(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (openssl)."""
    folder.mkdir(parents=True, exist_ok=True)
    f = {n: folder / n for n in ("ca.key", "ca.crt", "srv.key", "srv.csr", "srv.crt",
                                   "cli.key", "cli.csr", "cli.crt", "san.cnf", "other.crt",
                                   "other.key")}  # fmt: skip
    f["san.cnf"].write_text("subjectAltName=IP:127.0.0.1,DNS:redis.test\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(f["ca.key"]),
        "-out", str(f["ca.crt"]), "-days", "2", "-subj", "/CN=fs-notes test CA")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(f["other.key"]),
        "-out", str(f["other.crt"]), "-days", "2", "-subj", "/CN=someone else")
    for who in ("srv", "cli"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(f[f"{who}.key"]),
            "-out", str(f[f"{who}.csr"]), "-subj", f"/CN={who}")
        run("x509", "-req", "-in", str(f[f"{who}.csr"]), "-CA", str(f["ca.crt"]),
            "-CAkey", str(f["ca.key"]), "-CAcreateserial", "-out", str(f[f"{who}.crt"]),
            "-days", "2", "-extfile", str(f["san.cnf"]))  # fmt: skip
    return f


def test_tls_verifies_the_server_and_presents_a_client_certificate(tmp_path: Path) -> None:
    certs = _certificates(tmp_path / "pki")
    tls_port = free_port()
    srv = RedisServer(
        tmp_path / "r",
        extra=("--tls-port", str(tls_port), "--tls-cert-file", str(certs["srv.crt"]),
               "--tls-key-file", str(certs["srv.key"]), "--tls-ca-cert-file",
               str(certs["ca.crt"]), "--tls-auth-clients", "yes"),
    )  # fmt: skip
    try:
        base = f"rediss://127.0.0.1:{tls_port}/0?ca_file={certs['ca.crt']}"
        client = f"&cert_file={certs['cli.crt']}&key_file={certs['cli.key']}"
        with RedisReplayStore(parse_location(base + client), max_rows=10) as s:
            assert s.claim(nonce(), soon(), "p", s.epoch())
            assert "TLS verified against" in s.describe()
        # the context is built once: the files may vanish afterwards (self-confinement)
        s2 = RedisReplayStore(parse_location(base + client), max_rows=10)  # not yet connected
        moved = tmp_path / "moved"
        os.rename(tmp_path / "pki", moved)
        try:
            assert s2.claim(nonce(), soon(), "p", s2.epoch())  # files gone, still connects
        finally:
            s2.close()
            os.rename(moved, tmp_path / "pki")
        refused: list[RedisLocation] = [
            parse_location(base),  # no client certificate: the server refuses
            parse_location(  # a CA that did not sign the server's certificate
                f"rediss://127.0.0.1:{tls_port}/0?ca_file={certs['other.crt']}" + client
            ),
            parse_location(  # a name the certificate does not carry
                base + client + "&server_name=elsewhere.test"
            ),
        ]
        for loc in refused:
            s = RedisReplayStore(loc, max_rows=10, timeout=2)
            try:
                with pytest.raises(StoreUnavailable):
                    s.epoch()
            finally:
                s.close()
        with pytest.raises(StoreUnavailable, match="TLS files"):
            RedisReplayStore(
                parse_location(f"rediss://127.0.0.1:{tls_port}/0?ca_file={tmp_path}/none.crt"),
                max_rows=10,
            )
    finally:
        srv.close()


def test_keys_live_under_one_hash_tag_and_the_prefix(server: RedisServer) -> None:
    server.client().flushall()
    loc = parse_location(server.url + "?key_prefix=team-a")
    with RedisReplayStore(loc, max_rows=10) as s:
        assert s.claim(nonce(), soon(), "al ice", s.epoch())
    keys = sorted(k.decode() for k in server.client().keys("*"))
    assert keys and all(k.startswith("{team-a}:") for k in keys)
    assert f"{{team-a}}:p:{b'al ice'.hex()}" in keys


def test_a_restart_with_persistence_still_refuses_states_sealed_before_it(tmp_path: Path) -> None:
    """The marker survives in the RDB file, so the marker cannot tell the restart: the run_id
    (and the replication id, new at a start too) do. Claims made after the last save are lost
    with it, and never accepted again."""
    srv = RedisServer(tmp_path / "r", extra=("--save", "3600 1", "--dbfilename", "dump.rdb"))
    try:
        with RedisReplayStore(parse_location(srv.url), max_rows=100) as s:
            before = s.epoch()
            saved = nonce()
            assert s.claim(saved, soon(), "p", before)
            srv.client().save()
            lost = nonce()
            assert s.claim(lost, soon(), "p", before)  # acknowledged, never on disk
            srv.kill()
            srv.start()
            assert s.is_spent(saved) and not s.is_spent(lost)  # the RDB was loaded
            with pytest.raises(EpochChanged):
                s.claim(lost, soon(), "p", before)  # the lost claim is not accepted again
            after = s.epoch()
            assert after.split(".")[2] == before.split(".")[2]  # the same marker
            assert after != before
    finally:
        srv.close()


def test_a_change_of_role_refuses_states_sealed_before_it(tmp_path: Path) -> None:
    """A primary demoted and promoted again keeps its run_id but has re-synced from another
    server (losing what it had not replicated): its replication id tells."""
    primary = RedisServer(tmp_path / "p")
    other = RedisServer(tmp_path / "o")
    try:
        with RedisReplayStore(parse_location(primary.url), max_rows=100) as s:
            before = s.epoch()
            run_before = primary.client().info("server")["run_id"]
            lost = nonce()
            assert s.claim(lost, soon(), "p", before)
            c = primary.client()
            c.replicaof("127.0.0.1", other.port)
            deadline = time.monotonic() + 15
            while c.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "replication did not start"
                time.sleep(0.05)
            c.replicaof("NO", "ONE")
            assert c.info("server")["run_id"] == run_before
            assert not s.is_spent(lost)  # re-synced from the other: the claim is gone
            # the marker as it was (as if the other had it too): only the replid can tell
            c.set("{fs-notes}:epoch:marker", before.split(".")[2])
            with pytest.raises(EpochChanged):
                s.claim(lost, soon(), "p", before)
            assert not s.is_spent(lost)
            assert s.claim(lost, soon(), "p", s.epoch())  # positive control
    finally:
        primary.close()
        other.close()


def test_a_server_that_echoes_the_handshake_never_shows_the_password(tmp_path: Path) -> None:
    """A server (or proxy) that does not know a command answers with an error that repeats its
    arguments, AUTH's password among them, cut to 128 bytes: no part of it is passed on."""
    password = secrets.token_hex(64)  # 128 characters: the echo would hold only a part
    srv = RedisServer(tmp_path / "r", extra=("--requirepass", password,
                                             "--rename-command", "AUTH", ""))  # fmt: skip
    try:
        loc = parse_location("redis://fsnotes@" + srv.url.removeprefix("redis://"),
                             password=password)  # fmt: skip
        with RedisReplayStore(loc, max_rows=10) as s:
            with pytest.raises(StoreUnavailable) as info:
                s.epoch()
            report = str(s.check())
        text = str(info.value)
        assert "unknown command 'AUTH'" in text  # the echo was there, and cut off
        pieces = {password[k : k + 8] for k in range(len(password) - 7)}
        assert not any(p in text or p in report for p in pieces)
    finally:
        srv.close()


class FakeRedis:
    """A loopback peer speaking just enough RESP: PING and CLIENT answered at once, everything
    else answered by `reply(command)`, sent `delay` seconds per byte."""

    def __init__(self, reply: Callable[[bytes], bytes], delay: float = 0.0) -> None:
        import socket as socketlib

        self.listener = socketlib.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.reply, self.delay = reply, delay
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self.accepted += 1
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: Any) -> None:
        pending = b""
        with conn:
            while not self.stop.is_set():
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                # one answer per command, however the client's writes came together in one
                # read (found in CI: a CLIENT and a claim in one segment got one +OK)
                commands, pending = _commands(pending + data)
                for command in commands:
                    if not self._answer(conn, command):
                        return

    def _answer(self, conn: Any, data: bytes) -> bool:
        upper = data.upper()
        fast = True
        if b"PING" in upper:
            answer = b"+PONG\r\n"
        elif b"CLIENT" in upper or b"SELECT" in upper:
            answer = b"+OK\r\n"
        else:
            answer, fast = self.reply(data), False
        try:
            if fast or not self.delay:
                conn.sendall(answer)
                return True
            for byte in answer:
                if self.stop.is_set():
                    return False
                conn.sendall(bytes([byte]))
                time.sleep(self.delay)
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.listener.close()


def _commands(data: bytes) -> tuple[list[bytes], bytes]:
    """The whole RESP commands (arrays of bulk strings) at the start of `data`, and the rest."""
    out: list[bytes] = []
    at = 0
    while data.startswith(b"*", at):
        end = data.find(b"\r\n", at)
        if end < 0:
            break
        pos, count = end + 2, int(data[at + 1 : end])
        for _ in range(count):
            head = data.find(b"\r\n", pos)
            if head < 0 or not data.startswith(b"$", pos):
                return out, data[at:]
            pos = head + 2 + int(data[pos + 1 : head]) + 2
        if pos > len(data):
            break
        out.append(data[at:pos])
        at = pos
    return out, data[at:]


def _bulk(*items: bytes) -> bytes:
    out = b"*%d\r\n" % len(items)
    for item in items:
        out += item if item.startswith(b":") else b"$%d\r\n%s\r\n" % (len(item), item)
    return out


def test_an_answer_that_names_another_nonce_is_never_taken_for_a_claim() -> None:
    """An answer out of step (a stray reply on a reused connection, a broken proxy) says
    "claimed" for some other nonce: refused, never a True for this one."""
    other = nonce()
    fake = FakeRedis(lambda _cmd: _bulk(b":1\r\n", other.encode(), b""))
    try:
        loc = parse_location(f"redis://127.0.0.1:{fake.port}/0")
        with (
            RedisReplayStore(loc, max_rows=10, timeout=2) as s,
            pytest.raises(StoreUnavailable, match="names another nonce"),
        ):
            s.claim(nonce(), soon(), "p", "run.replid.marker")
    finally:
        fake.close()


def test_a_replica_is_refused_even_a_writable_one(tmp_path: Path) -> None:
    """A replica's claims vanish at its next full resync with no change of epoch (its run_id,
    replid and marker are the primary's): the store must be the primary."""
    primary = RedisServer(tmp_path / "p")
    replica = RedisServer(tmp_path / "r", extra=("--replica-read-only", "no",
                                                 "--replicaof", "127.0.0.1",
                                                 str(primary.port)))  # fmt: skip
    try:
        with RedisReplayStore(parse_location(primary.url), max_rows=10) as p:
            epoch = p.epoch()
        deadline = time.monotonic() + 15
        while replica.client().info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "replication did not start"
            time.sleep(0.05)
        with RedisReplayStore(parse_location(replica.url), max_rows=10) as r:
            with pytest.raises(StoreUnavailable, match="is a replica"):
                r.epoch()
            n = nonce()
            with pytest.raises(StoreUnavailable, match="is a replica"):
                r.claim(n, soon(), "p", epoch)
            assert not r.is_spent(n)
    finally:
        replica.close()
        primary.close()


def test_a_health_check_does_not_lift_the_deadline_of_the_command_after_it() -> None:
    """A connection idle for a while is PINGed before its next command; PING is answered at
    once, then the command's answer is trickled: the command is cut off at its deadline all
    the same (a health check once ended the deadline of the command it preceded)."""
    slow = b"*7\r\n" + b"$5\r\nhello\r\n" * 100
    mode = {"slow": False}
    fake = FakeRedis(lambda _cmd: slow if mode["slow"] else b":0\r\n")
    try:
        with RedisReplayStore(
            parse_location(f"redis://127.0.0.1:{fake.port}/0"), max_rows=10, timeout=0.5
        ) as s:
            assert s.is_spent(nonce()) is False  # a pooled connection, now idle
            mode["slow"], fake.delay = True, 0.1
            for conn in s._redis._idle:  # as if idle past the interval
                conn.next_health_check = 0
            start = time.monotonic()
            with pytest.raises(StoreUnavailable):
                s.is_spent(nonce())
            assert time.monotonic() - start < 2.5  # the call's budget (2 x 0.5 s) and a margin
    finally:
        fake.close()


def test_a_peer_that_trickles_its_answer_is_cut_off_at_the_deadline() -> None:
    """A socket timeout bounds each read, not the answer: one byte every 0.2 s would never
    trip a 0.5 s timeout. The deadline per command does."""
    import socket as socketlib

    listener = socketlib.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            try:
                listener.settimeout(0.2)
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.recv(4096)  # the handshake
                reply = b"%7\r\n" + b"$5\r\nhello\r\n" * 100
                for byte in reply:
                    if stop.is_set():
                        break
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        break
                    time.sleep(0.2)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        with RedisReplayStore(
            parse_location(f"redis://127.0.0.1:{port}/0"), max_rows=10, timeout=0.5
        ) as s:
            start = time.monotonic()
            with pytest.raises(StoreUnavailable):
                s.epoch()
            assert time.monotonic() - start < 3.0  # two connections at most, 0.5 s each
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_pooled_connection_with_a_stray_answer_is_never_used_again() -> None:
    """One answer too many (a proxy's, or a server's out of step) waits on a pooled connection:
    the next call opens a new connection rather than read the stray answer as its own."""
    fake = FakeRedis(lambda _cmd: b":1\r\n:0\r\n")  # "spent", then a stray "not spent"
    try:
        loc = parse_location(f"redis://127.0.0.1:{fake.port}/0")
        with RedisReplayStore(loc, max_rows=10, timeout=2) as s:
            assert [s.is_spent(nonce()) for _ in range(3)] == [True, True, True]
        assert fake.accepted == 3
    finally:
        fake.close()


@pytest.mark.parametrize(
    "reply",
    [
        b"$%d\r\n" % (MAX_ANSWER + 1),  # a bulk string past the bound
        b"*%d\r\n" % (MAX_ITEMS + 1),  # an array past the bound
        b"*1\r\n*1\r\n*1\r\n:1\r\n",  # nested deeper than the scripts answer
        b"+" + b"x" * (MAX_ANSWER + 10),  # a line that never ends
        b"%7\r\n",  # RESP3, which the store does not speak
        b"$x\r\n",
    ],
)
def test_an_answer_past_the_client_s_bounds_is_refused(reply: bytes) -> None:
    fake = FakeRedis(lambda _cmd: reply)
    try:
        loc = parse_location(f"redis://127.0.0.1:{fake.port}/0")
        with RedisReplayStore(loc, max_rows=10, timeout=2) as s:
            start = time.monotonic()
            with pytest.raises(StoreUnavailable, match=": InvalidResponse: "):
                s.is_spent(nonce())
            assert time.monotonic() - start < 2  # refused as it comes, not at the deadline
    finally:
        fake.close()


def test_a_server_before_redis_6_is_sent_auth_with_the_password_alone() -> None:
    """Redis before 6.0 has no user names: AUTH USER PASSWORD is "wrong number of arguments",
    and the client tries AUTH PASSWORD once (as redis-py did)."""
    seen: list[bytes] = []

    def reply(command: bytes) -> bytes:
        seen.append(command)
        if command.startswith(b"*3\r\n$4\r\nAUTH"):
            return b"-ERR wrong number of arguments for 'auth' command\r\n"
        return b"+OK\r\n" if b"AUTH" in command else b":0\r\n"

    fake = FakeRedis(reply)
    try:
        loc = parse_location(f"redis://someone@127.0.0.1:{fake.port}/0", password="pw")
        with RedisReplayStore(loc, max_rows=10, timeout=2) as s:
            assert s.is_spent(nonce()) is False
        assert [c for c in seen if b"AUTH" in c] == [
            b"*3\r\n$4\r\nAUTH\r\n$7\r\nsomeone\r\n$2\r\npw\r\n",
            b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n",
        ]
    finally:
        fake.close()


class _Chatty(FakeRedis):
    """A peer that sends one answer too many after the handshake's CLIENT or after a PING."""

    def __init__(self, reply: Callable[[bytes], bytes], after: bytes) -> None:
        self.after = after
        super().__init__(reply)

    def _answer(self, conn: Any, data: bytes) -> bool:
        if self.after in data.upper():
            extra = b"+OK\r\n" if self.after == b"CLIENT" else b"+PONG\r\n"
            conn.sendall(extra + b":1\r\n")  # and a stray "spent"
            return True
        return super()._answer(conn, data)


def test_a_stray_answer_after_the_handshake_or_a_ping_is_never_read_as_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reviewer's find: only a pooled connection was checked for bytes waiting on it, so what
    followed the handshake's answers, or a health check's PONG, was read as the next command's
    answer (is_spent said True where the server said 0)."""
    from fs_notes.confirm import redis_store

    fake = _Chatty(lambda _cmd: b":0\r\n", b"CLIENT")
    try:
        loc = parse_location(f"redis://127.0.0.1:{fake.port}/0")
        with (
            RedisReplayStore(loc, max_rows=10, timeout=2) as s,
            pytest.raises(StoreUnavailable, match="unasked data"),
        ):
            s.is_spent(nonce())
    finally:
        fake.close()
    monkeypatch.setattr(redis_store, "HEALTH_CHECK_INTERVAL", 0.0)  # a PING before each reuse
    fake = _Chatty(lambda _cmd: b":0\r\n", b"PING")
    try:
        loc = parse_location(f"redis://127.0.0.1:{fake.port}/0")
        with RedisReplayStore(loc, max_rows=10, timeout=2) as s:
            assert [s.is_spent(nonce()) for _ in range(3)] == [False, False, False]
        assert fake.accepted == 3  # each connection dropped after its chatty PING
    finally:
        fake.close()


def test_a_short_eviction_answer_is_the_store_unavailable_not_a_crash() -> None:
    n = nonce()
    fake = FakeRedis(lambda _cmd: _bulk(b":-5\r\n", n.encode()))
    try:
        loc = parse_location(f"redis://127.0.0.1:{fake.port}/0")
        with (
            RedisReplayStore(loc, max_rows=10, timeout=2) as s,
            pytest.raises(StoreUnavailable, match="evict"),
        ):
            s.claim(n, soon(), "p", "run.replid.marker")
    finally:
        fake.close()


def test_an_auth_refusal_in_the_servers_own_words_passes_none_of_them_on() -> None:
    """Reviewer's find: an AUTH error in other wording than Redis's echoed the password into
    the log and `fs-notes check`. Only the words Redis is known to say are passed on."""
    password = "s3cr\u00e9t\\pass-" + secrets.token_hex(8)

    def reply(command: bytes) -> bytes:
        if b"AUTH" in command:
            return b"-ERR bad auth args: " + password.encode() + b"\r\n"
        return b":0\r\n"

    fake = FakeRedis(reply)
    try:
        loc = parse_location(f"redis://127.0.0.1:{fake.port}/0", password=password)
        with RedisReplayStore(loc, max_rows=10, timeout=2) as s:
            with pytest.raises(StoreUnavailable) as info:
                s.is_spent(nonce())
            report = str(s.check())
        text = str(info.value)
        assert "AuthenticationError: Invalid Username or Password" in text
        for piece in (password[:6], "bad auth", "pass-"):
            assert piece not in text and piece not in report
    finally:
        fake.close()


def test_a_forked_child_is_never_held_by_a_lock_a_parent_thread_had() -> None:
    """Reviewer's find: the pool's lock was not made again after a fork, so a child forked while
    a parent thread held it waited for ever in its first claim."""
    code = (
        "import os, sys, threading, time\n"
        "from fs_notes.confirm.location import parse_location\n"
        "from fs_notes.confirm.redis_store import RedisReplayStore\n"
        "s = RedisReplayStore(parse_location('redis://127.0.0.1:9/0'), max_rows=10, timeout=1)\n"
        "held, done = threading.Event(), threading.Event()\n"
        "def hold():\n"
        "    with s._redis._lock:\n"
        "        held.set(); done.wait()\n"
        "threading.Thread(target=hold, daemon=True).start(); held.wait()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0 if s._redis._lock.acquire(timeout=2) else 3)\n"
        "done.set()\n"
        "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
    )
    import sys

    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    assert ran.stdout.strip() == "0", (ran.stdout, ran.stderr)
