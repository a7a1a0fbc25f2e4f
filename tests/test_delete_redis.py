"""notes_delete on the shared replay store (Redis), in process: what each failure of the store
does to a confirmation, and that nothing is deleted without a recorded claim.

The outside of each test is the note on disk: after every refusal its bytes, mode, owner and
times are what they were, and the audit log says why.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inprocess import InProcess
from redis_server import RedisServer

from fs_notes.confirm.location import parse_location
from fs_notes.confirm.redis_store import RedisReplayStore
from fs_notes.confirm.replay import ReplayStore
from fs_notes.policy import Policy
from fs_notes.rounds.seal import KeyRing

KEYS = KeyRing([("k1", b"k" * 32)])
UNAVAILABLE = (
    "the confirmation store cannot be reached, so no deletion can be confirmed now; nothing "
    "was deleted. Try again later"
)
RESTARTED = (
    "this confirmation was asked for before the confirmation store restarted, so it cannot be "
    "checked; nothing was deleted. Start over with a new notes_delete call"
)
REFUSED = {"code": -32602, "message": "requestState is invalid or expired"}


def _accept(note: str) -> dict[str, Any]:
    return {"delete_choice": {"action": "accept", "content": {"note_id": note, "confirm": True}}}


class Setup:
    def __init__(self, tmp: Path, store: Any) -> None:
        self.ws = tmp / "notes"
        self.ws.mkdir()
        self.note = self.ws / "tps.md"
        self.note.write_text("# TPS report\nbody\n")
        os.utime(self.note, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
        self.uri = "file://" + urllib.parse.quote(str(self.ws))
        self.args = {"workspaceUri": self.uri, "title": "TPS report"}
        self.audit = tmp / "audit.jsonl"
        policy = Policy.for_single_workspace(str(self.ws), "me", token_sha256=None)
        self.me = policy.local_principal()
        self.srv = InProcess(
            policy, tmp, keyring=KEYS, clock=time.time, audit=self.audit, replay=store
        )
        self.before = self.snapshot()

    def snapshot(self) -> tuple[bytes, int, int, int, int, int]:
        st = os.stat(self.note)
        data = self.note.read_bytes()
        return data, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ino

    def first(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.srv.call(self.me, "notes_delete", self.args)
        return answer

    def retry(self, state: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.srv.call(
            self.me, "notes_delete", self.args, inputResponses=_accept("tps.md"),
            requestState=state,
        )  # fmt: skip
        return answer

    def outcomes(self) -> list[tuple[str, str | None]]:
        lines = self.audit.read_text().splitlines() if self.audit.exists() else []
        return [(e["outcome"], e.get("reason")) for e in map(json.loads, lines)]

    def unchanged(self) -> bool:
        return self.snapshot() == self.before


def _failure(answer: dict[str, Any]) -> str:
    result = answer["result"]
    assert result["isError"] is True
    text: str = result["content"][0]["text"]
    return text


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path / "redis")
    yield srv
    srv.close()


@pytest.fixture
def store(redis: RedisServer) -> Iterator[RedisReplayStore]:
    with RedisReplayStore(parse_location(redis.url), max_rows=100, timeout=0.5) as s:
        yield s


def test_a_confirmed_delete_spends_its_nonce_in_redis_once(
    tmp_path: Path, store: RedisReplayStore, redis: RedisServer
) -> None:
    s = Setup(tmp_path, store)
    try:
        state = s.first()["result"]["requestState"]
        assert [k for k in redis.client().keys("{fs-notes}:n:*")] == []
        done = s.retry(state)
        assert done["result"]["structuredContent"] == {"deleted": "tps.md", "outcome": "deleted"}
        assert not s.note.exists()
        assert len(redis.client().keys("{fs-notes}:n:*")) == 1
        assert s.retry(state)["error"] == REFUSED
        assert s.outcomes() == [("confirmed", None), ("deleted", None), ("replay-refused", None)]
    finally:
        s.srv.close()


def test_redis_down_at_round_one_refuses_to_ask(
    tmp_path: Path, store: RedisReplayStore, redis: RedisServer
) -> None:
    s = Setup(tmp_path, store)
    try:
        redis.stop()
        assert _failure(s.first()) == UNAVAILABLE
        assert s.unchanged()
        assert s.outcomes() == [("delete-failed", "replay-store")]
    finally:
        s.srv.close()


def test_redis_down_at_the_retry_deletes_nothing_and_recovers_with_a_fresh_confirmation(
    tmp_path: Path, store: RedisReplayStore, redis: RedisServer
) -> None:
    s = Setup(tmp_path, store)
    try:
        state = s.first()["result"]["requestState"]
        redis.stop()
        assert _failure(s.retry(state)) == (
            "the confirmation could not be checked; nothing was deleted"
        )
        assert s.unchanged()
        redis.start()  # a new run_id: the confirmation in flight cannot be vouched for
        assert _failure(s.retry(state)) == RESTARTED
        assert s.unchanged()
        fresh = s.first()["result"]["requestState"]
        done = s.retry(fresh)
        assert done["result"]["structuredContent"]["deleted"] == "tps.md"
        assert s.outcomes() == [
            ("delete-failed", "replay-store"),
            ("confirmed", None),
            ("state-refused", "epoch"),
            ("confirmed", None),
            ("deleted", None),
        ]
    finally:
        s.srv.close()


def test_a_store_lost_between_the_check_and_the_claim_deletes_nothing(
    tmp_path: Path, store: RedisReplayStore, redis: RedisServer
) -> None:
    """The early look-up succeeds, the claim itself fails: still nothing deleted."""
    s = Setup(tmp_path, store)
    real = store.is_spent

    def then_stop(nonce: str) -> bool:
        answer = real(nonce)
        redis.kill()
        return answer

    try:
        state = s.first()["result"]["requestState"]
        store.is_spent = then_stop  # type: ignore[method-assign]
        assert _failure(s.retry(state)) == (
            "the confirmation could not be recorded; nothing was deleted"
        )
        assert s.unchanged()
        assert s.outcomes() == [("confirmed", None), ("delete-failed", "replay-store")]
    finally:
        store.is_spent = real  # type: ignore[method-assign]
        s.srv.close()


def test_a_state_sealed_for_sqlite_is_refused_by_a_redis_instance_and_back(
    tmp_path: Path, store: RedisReplayStore
) -> None:
    """An operator who switches stores with the same key ring: no state crosses over."""
    sqlite_dir = tmp_path / "sqlite"
    sqlite_dir.mkdir()
    local = ReplayStore(str(sqlite_dir / "replay.db"))
    (tmp_path / "a").mkdir()
    a = Setup(tmp_path / "a", local)
    try:
        sealed_for_sqlite = a.first()["result"]["requestState"]
        # the same folder served by an instance on Redis, same key ring
        policy = Policy.for_single_workspace(str(a.ws), "me", token_sha256=None)
        on_redis = InProcess(policy, tmp_path / "a", keyring=KEYS, clock=time.time,
                             replay=store)  # fmt: skip
        try:
            answer = on_redis.call(a.me, "notes_delete", a.args,
                                   inputResponses=_accept("tps.md"),
                                   requestState=sealed_for_sqlite)  # fmt: skip
            assert _failure(answer) == RESTARTED
            assert a.unchanged()
            sealed_for_redis = on_redis.call(a.me, "notes_delete", a.args)["result"][
                "requestState"
            ]
        finally:
            on_redis.close()
        assert a.retry(sealed_for_redis)["error"] == REFUSED  # no boot id: refused at open
        assert a.unchanged()
        assert not store.is_spent("0" * 32)
    finally:
        a.srv.close()
        local.close()


def _sealed_elsewhere(s: Setup, store: RedisReplayStore, dev_shift: int, ino_shift: int) -> str:
    """The state another instance (same key ring, same store) would seal for this note, had its
    mount numbered the storage `dev_shift` apart; `ino_shift` makes it name another file."""
    from fs_notes.confirm.flow import Candidate, candidate_claims, candidates_from_payload
    from fs_notes.fs import Identity
    from fs_notes.rounds.phases import DELETE, Phase, Progress
    from fs_notes.rounds.request import Binding, RequestState
    from fs_notes.rounds.seal import StateSealer

    st = os.stat(s.note)
    ident = Identity.of(st)._replace(dev=st.st_dev + dev_shift, ino=st.st_ino + ino_shift)
    state = RequestState(
        StateSealer(KEYS), DELETE, lambda _p, c: candidates_from_payload(c), epoch=store.epoch
    )
    ws = s.srv.env.policy.workspaces[0].name
    return state.seal(
        Binding(s.me.name, s.args, ws),
        Progress(DELETE, Phase.CONFIRM, 1),
        candidate_claims([Candidate("tps.md", ident)]),
    )


def test_a_state_sealed_on_a_host_whose_mount_has_another_device_number_deletes(
    tmp_path: Path, store: RedisReplayStore
) -> None:
    """Shared storage (NFS) has a device number per client mount: inode, size and times say
    it is the same file, and only they are compared; another inode is refused (the control)."""
    s = Setup(tmp_path, store)
    try:
        other_file = _sealed_elsewhere(s, store, dev_shift=7, ino_shift=1)
        answer = s.retry(other_file)
        assert _failure(answer) == "tps.md changed since the form was shown; nothing was deleted"
        assert s.unchanged()
        other_host = _sealed_elsewhere(s, store, dev_shift=7, ino_shift=0)
        done = s.retry(other_host)
        assert done["result"]["structuredContent"] == {"deleted": "tps.md", "outcome": "deleted"}
        assert not s.note.exists()
    finally:
        s.srv.close()
