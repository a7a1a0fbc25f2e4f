"""The spent-nonce store (fs_notes/confirm/replay.py): single use across threads and processes.

The spec (basic/patterns/mrtr, the Warning under "Server Requirements" 5) says HMAC and expiry do
not make state single-use; a server that needs single use enforces it server-side. That is this.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import sqlite3
import stat
import threading
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest
from clock import Clock

from fs_notes.confirm.replay import (
    RETENTION_MARGIN,
    ReplayStore,
    ReplayStoreFull,
    default_replay_path,
)

T0 = 1_800_000_000.0



def nonce() -> str:
    return secrets.token_hex(16)


def test_a_nonce_can_be_claimed_once_and_the_second_claim_is_refused(tmp_path: Path) -> None:
    with ReplayStore(tmp_path / "r.db", clock=Clock()) as store:
        n = nonce()
        assert not store.is_spent(n)
        assert store.claim(n, T0 + 300) is True
        assert store.claim(n, T0 + 300) is False
        assert store.claim(n, T0 + 9999) is False
        assert store.is_spent(n)


def test_two_stores_on_the_same_file_share_spent_nonces(tmp_path: Path) -> None:
    with (
        ReplayStore(tmp_path / "r.db", clock=Clock()) as a,
        ReplayStore(tmp_path / "r.db", clock=Clock()) as b,
    ):
        n = nonce()
        assert a.claim(n, T0 + 300)
        assert b.is_spent(n)
        assert b.claim(n, T0 + 300) is False


def test_spent_nonces_survive_reopening_the_store(tmp_path: Path) -> None:
    n = nonce()
    with ReplayStore(tmp_path / "r.db", clock=Clock()) as store:
        assert store.claim(n, T0 + 300)
    with ReplayStore(tmp_path / "r.db", clock=Clock()) as store:
        assert store.claim(n, T0 + 300) is False


def test_the_database_is_in_wal_mode_and_created_0600(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    with ReplayStore(path, clock=Clock()) as store:
        assert store.journal_mode() == "wal"
        store.claim(nonce(), T0 + 300)
        other = sqlite3.connect(path)
        try:
            assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            other.close()
    assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def test_expired_rows_are_pruned_only_after_the_retention_margin(tmp_path: Path) -> None:
    clock = Clock()
    with ReplayStore(tmp_path / "r.db", clock=clock) as store:
        old = nonce()
        assert store.claim(old, T0 + 10)
        clock.now = T0 + 11
        store.claim(nonce(), clock.now + 300)
        assert store.is_spent(old), "pruned at expiry: a clock stepped back would revive it"
        clock.now = T0 + 10 + RETENTION_MARGIN + 1
        store.claim(nonce(), clock.now + 300)
        assert not store.is_spent(old)
        assert len(store) == 2


def test_pruning_does_bounded_work_per_claim(tmp_path: Path) -> None:
    clock = Clock()
    with ReplayStore(tmp_path / "r.db", clock=clock, prune_batch=3) as store:
        for _ in range(10):
            store.claim(nonce(), T0)
        clock.now = T0 + RETENTION_MARGIN + 1
        store.claim(nonce(), clock.now + 300)
        assert len(store) == 10 - 3 + 1
        store.claim(nonce(), clock.now + 300)
        assert len(store) == 10 - 6 + 2


def test_a_full_store_of_unexpired_nonces_refuses_new_claims_and_evicts_nothing(
    tmp_path: Path,
) -> None:
    clock = Clock()
    with ReplayStore(tmp_path / "r.db", clock=clock, max_rows=5) as store:
        live = [nonce() for _ in range(5)]
        for n in live:
            assert store.claim(n, T0 + 300)
        refused = nonce()
        with pytest.raises(ReplayStoreFull):
            store.claim(refused, T0 + 300)
        assert not store.is_spent(refused)
        assert all(store.is_spent(n) for n in live)
        assert store.claim(live[0], T0 + 300) is False, "a replay stays a replay when full"


def test_a_full_store_accepts_claims_again_once_expired_rows_can_be_pruned(
    tmp_path: Path,
) -> None:
    clock = Clock()
    with ReplayStore(tmp_path / "r.db", clock=clock, max_rows=5) as store:
        for _ in range(5):
            store.claim(nonce(), T0 + 10)
        clock.now = T0 + 10 + RETENTION_MARGIN + 1
        assert store.claim(nonce(), clock.now + 300) is True
        assert len(store) == 1


def _counted(path: Path) -> tuple[int, int]:
    """(the kept count, the real count) of a replay database."""
    with sqlite3.connect(path) as conn:
        (kept,) = conn.execute("SELECT n FROM spent_count WHERE id = 1").fetchone()
        (real,) = conn.execute("SELECT count(*) FROM spent_nonce").fetchone()
    return int(kept), int(real)


def test_the_kept_row_count_follows_claims_replays_prunes_and_refusals(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "r.db"
    with ReplayStore(path, clock=clock, max_rows=6, prune_batch=2) as store:
        spent = [nonce() for _ in range(6)]
        for n in spent:
            assert store.claim(n, T0 + 10)
        assert store.claim(spent[0], T0 + 10) is False  # a replay adds nothing
        with pytest.raises(ReplayStoreFull):
            store.claim(nonce(), T0 + 10)  # a refusal adds nothing
        assert _counted(path) == (6, 6)
        clock.now = T0 + 10 + RETENTION_MARGIN + 1
        assert store.claim(nonce(), clock.now + 300)  # prunes 2, adds 1
        assert _counted(path) == (5, 5)


def test_a_database_from_before_the_kept_count_gets_it_with_the_rows_it_has(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.db"
    with sqlite3.connect(path) as conn:  # the schema of the first release
        conn.execute(
            "CREATE TABLE spent_nonce (nonce TEXT PRIMARY KEY NOT NULL, keep_until REAL NOT NULL)"
            " WITHOUT ROWID"
        )
        conn.executemany(
            "INSERT INTO spent_nonce VALUES (?, ?)", [(nonce(), T0 + 300) for _ in range(4)]
        )
    with ReplayStore(path, clock=Clock(), max_rows=5) as store:
        assert _counted(path) == (4, 4)
        assert store.claim(nonce(), T0 + 300)
        with pytest.raises(ReplayStoreFull):  # the four old rows count towards the bound
            store.claim(nonce(), T0 + 300)
    assert _counted(path) == (5, 5)


@pytest.mark.parametrize("bad", ["", "0" * 31, "A" * 32, "g" * 32, "0" * 33, None, 7])
def test_a_malformed_nonce_is_a_value_error_not_a_claim(tmp_path: Path, bad: object) -> None:
    with ReplayStore(tmp_path / "r.db", clock=Clock()) as store:
        with pytest.raises(ValueError, match="nonce"):
            store.claim(bad, T0 + 300)  # type: ignore[arg-type]
        assert len(store) == 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "soon"])
def test_a_non_finite_expiry_is_a_value_error(tmp_path: Path, bad: object) -> None:
    with ReplayStore(tmp_path / "r.db", clock=Clock()) as store:
        with pytest.raises(ValueError, match="expires_at"):
            store.claim(nonce(), bad)  # type: ignore[arg-type]
        assert len(store) == 0


def _race(stores: list[ReplayStore], n: str, racers: int) -> list[bool]:
    barrier = threading.Barrier(racers)
    wins: list[bool] = []
    lock = threading.Lock()

    def run(store: ReplayStore) -> None:
        barrier.wait()
        won = store.claim(n, T0 + 300)
        with lock:
            wins.append(won)

    threads = [threading.Thread(target=run, args=(stores[i % len(stores)],)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return wins


def test_threads_racing_on_one_nonce_produce_exactly_one_winner(tmp_path: Path) -> None:
    stores = [ReplayStore(tmp_path / "r.db", clock=Clock()) for _ in range(2)]
    try:
        for _ in range(20):
            assert sorted(_race(stores, nonce(), 8)) == [False] * 7 + [True]
    finally:
        for s in stores:
            s.close()


def _claim_all(path: str, nonces: list[str], barrier: Barrier, out: str) -> None:
    """Child process: claim every nonce in lockstep with the other child, write the wins."""
    with ReplayStore(path) as store:
        won = []
        for n in nonces:
            barrier.wait()
            won.append("1" if store.claim(n, 4_000_000_000.0) else "0")
    Path(out).write_text("".join(won))


def test_two_processes_claiming_the_same_200_nonces_concurrently_each_win_exactly_once(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "r.db")
    ReplayStore(path).close()
    nonces = [nonce() for _ in range(200)]
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    outs = [str(tmp_path / f"out{i}") for i in range(2)]
    procs = [ctx.Process(target=_claim_all, args=(path, nonces, barrier, o)) for o in outs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    a, b = (Path(o).read_text() for o in outs)
    assert len(a) == len(b) == 200
    assert all(x != y for x, y in zip(a, b, strict=True)), "a nonce won twice or never"
    with ReplayStore(path) as store:
        assert all(store.is_spent(n) for n in nonces)


def test_a_forked_child_uses_its_own_connection_and_still_sees_spent_nonces(
    tmp_path: Path,
) -> None:
    with ReplayStore(tmp_path / "r.db", clock=Clock()) as store:
        n = nonce()
        assert store.claim(n, T0 + 300)
        fresh = nonce()
        pid = os.fork()
        if pid == 0:  # child: exit code 0 only if the replay is refused and the fresh one wins
            code = 0 if (store.claim(n, T0 + 300) is False and store.claim(fresh, T0 + 300)) else 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.claim(fresh, T0 + 300) is False


def test_default_path_is_per_user_under_xdg_state_home_in_a_0700_directory(
    tmp_path: Path,
) -> None:
    path = default_replay_path({"XDG_STATE_HOME": str(tmp_path / "state")})
    assert path == str(tmp_path / "state" / "fs-notes" / "replay.sqlite3")
    assert stat.S_IMODE(os.stat(tmp_path / "state" / "fs-notes").st_mode) == 0o700


def test_default_path_ignores_a_relative_xdg_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    path = default_replay_path({"XDG_STATE_HOME": "relative/state"})
    assert path == str(tmp_path / ".local" / "state" / "fs-notes" / "replay.sqlite3")


def test_default_path_tightens_an_existing_open_directory(tmp_path: Path) -> None:
    (tmp_path / "fs-notes").mkdir(mode=0o755)
    os.chmod(tmp_path / "fs-notes", 0o755)
    default_replay_path({"XDG_STATE_HOME": str(tmp_path)})
    assert stat.S_IMODE(os.stat(tmp_path / "fs-notes").st_mode) == 0o700


def test_default_path_refuses_a_symlinked_directory(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "fs-notes").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="not a directory"):
        default_replay_path({"XDG_STATE_HOME": str(tmp_path)})


def test_without_a_key_file_a_confirmation_survives_a_restart(tmp_path: Path) -> None:
    # Issue 13: the key used to die with the process, so a client whose server restarted
    # between the two rounds got -32602. It is now kept beside the replay database (0600).
    from wire import StdioServer, call_tool

    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "plan.md").write_text("# Plan\n")
    state = tmp_path / "state"
    args = ("serve", str(ws), "--replay-db", str(state / "replay.db"))
    form: dict[str, object] = {"elicitation": {"form": {}}}
    call = {"workspaceUri": ws.as_uri(), "title": "Plan"}
    first = StdioServer(*args)
    try:
        round1 = first.ask(call_tool(1, "notes_delete", call, form))["result"]
    finally:
        assert first.close() == 0
    kept = state / "state.keys"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    key_before = kept.read_bytes()
    second = StdioServer(*args)  # a new process: only the kept key can open the state
    try:
        choice = {"action": "accept", "content": {"note_id": "plan.md", "confirm": True}}
        answer = {"delete_choice": choice}
        done = second.ask(call_tool(2, "notes_delete", call, form,
                                    requestState=round1["requestState"],
                                    inputResponses=answer))  # fmt: skip
    finally:
        assert second.close() == 0
    assert done["result"].get("isError") is not True, done
    assert not (ws / "plan.md").exists()
    assert kept.read_bytes() == key_before  # the same ring, not a new one
    assert sorted(p.name for p in state.iterdir() if p.name.startswith(".")) == []  # no temp


def test_a_kept_key_file_that_others_can_read_stops_the_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    from wire import REPO, child_env

    ws = tmp_path / "notes"
    ws.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    kept = state / "state.keys"
    kept.write_text("k1:" + "A" * 44 + "\n")
    kept.chmod(0o644)
    proc = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", str(ws), "--replay-db", str(state / "r.db")],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == (
        f"fs-notes: the state key file kept at {kept}: readable or writable by the group or others "
        f"(mode 0644); fix it with: chmod 600 {kept}\n"
    )


def test_one_principal_at_its_quota_is_refused_and_nobody_else_is(tmp_path: Path) -> None:
    # Issue 13: the 100,000-row bound was shared; one principal filling it refused deletions
    # for all. Each principal now has its own quota, inside a bound that holds all of them.
    from fs_notes.confirm.replay import PrincipalQuotaFull

    store = ReplayStore(tmp_path / "r.db", max_rows=100, per_principal=5, clock=lambda: 1000.0)
    try:
        for _ in range(5):
            assert store.claim(secrets.token_hex(16), 5000.0, "bob") is True
        with pytest.raises(PrincipalQuotaFull):
            store.claim(secrets.token_hex(16), 5000.0, "bob")
        assert store.claim(secrets.token_hex(16), 5000.0, "alice") is True  # not affected
        assert len(store) == 6
    finally:
        store.close()
    # The counts survive a reopen, and a file made before quotas gets its principal column.
    again = ReplayStore(tmp_path / "r.db", max_rows=100, per_principal=5, clock=lambda: 1000.0)
    try:
        with pytest.raises(PrincipalQuotaFull):
            again.claim(secrets.token_hex(16), 5000.0, "bob")
    finally:
        again.close()


def test_a_replay_file_made_before_quotas_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE spent_nonce (nonce TEXT PRIMARY KEY NOT NULL, keep_until REAL NOT NULL)"
        " WITHOUT ROWID;"
        f"INSERT INTO spent_nonce VALUES ('{'a' * 32}', 9999999999.0);"
    )
    old.close()
    store = ReplayStore(path, per_principal=1)
    try:
        assert store.is_spent("a" * 32)
        assert store.claim("a" * 32, 5000.0, "bob") is False  # still spent
        assert store.claim("b" * 32, 5000.0, "bob") is True
        assert len(store) == 2
    finally:
        store.close()


def test_a_state_sealed_under_a_shared_store_s_epoch_is_refused_here(tmp_path: Path) -> None:
    """An operator who moves from Redis back to SQLite with the same key ring: the states the
    shared store sealed carry its epoch, and this store has none (issue 18)."""
    from fs_notes.confirm.spent import EpochChanged

    with ReplayStore(tmp_path / "r.db", clock=Clock()) as store:
        n = nonce()
        with pytest.raises(EpochChanged):
            store.claim(n, T0 + 300, "p", "run.replid.marker")
        assert not store.is_spent(n)
        assert store.claim(n, T0 + 300, "p", None)  # the control
