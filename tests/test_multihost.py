"""Issue 18, part 2: a deployment that proves it. Real fs-notes processes (each its own state
folder) behind the real HAProxy of sandbox/deploy/haproxy.cfg, sharing one real Redis replay
store (tests/cluster.py): a delete confirmation asked for on one instance completes on another,
exactly once however many instances are handed the same confirmed state at once; an instance
killed between the rounds costs nothing but the load balancer's retry; a store that goes
away, or comes back empty, refuses confirmations (never deletes on a claim it could not record);
and a 2025-11-25 client's session stays on the instance that holds it.

Outcomes are asserted exactly: the answer (result or error), and the note on disk: gone, or its
bytes and inode unchanged.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster import TOKEN, Cluster
from wire import HttpServer, call_tool, check_legacy, check_message, sse_messages

FORM: dict[str, Any] = {"elicitation": {"form": {}}}
REFUSED = {"code": -32602, "message": "requestState is invalid or expired"}
UNREACHABLE = (
    "the confirmation store cannot be reached, so no deletion can be confirmed now; nothing "
    "was deleted. Try again later"
)
NOT_CHECKED = "the confirmation could not be checked; nothing was deleted"
RESTARTED = (
    "this confirmation was asked for before the confirmation store restarted, so it cannot be "
    "checked; nothing was deleted. Start over with a new notes_delete call"
)
#: Rounds of test_one_winner_among_simultaneous_retries (FS_NOTES_MULTIHOST_ROUNDS to change).
ROUNDS = int(os.environ.get("FS_NOTES_MULTIHOST_ROUNDS", "1000"))
#: Rounds in flight at once. Each sends one request to every instance and one to the load
#: balancer, so an instance holds at most about 3 x CONCURRENT of the principal's requests:
#: well within `requests_per_principal` (16), so no answer is a 429.
CONCURRENT = 4


class Note:
    """A note made on disk for one round, and what it was."""

    def __init__(self, cluster: Cluster, title: str) -> None:
        self.title = title
        self.id = title.lower().replace(" ", "-") + ".md"
        self.path = cluster.notes / self.id
        self.path.write_text(f"# {title}\n\nmade for {title}\n")
        self.args = {"workspaceUri": cluster.workspace_uri, "title": title}
        self.before = self.snapshot()

    def snapshot(self) -> tuple[bytes, int, int]:
        st = os.stat(self.path)
        return self.path.read_bytes(), st.st_ino, st.st_mtime_ns

    def unchanged(self) -> bool:
        return self.path.exists() and self.snapshot() == self.before

    def accept(self, state: str, id: int = 2) -> dict[str, Any]:
        choice = {"action": "accept", "content": {"note_id": self.id, "confirm": True}}
        return call_tool(id, "notes_delete", self.args, FORM,
                         inputResponses={"delete_choice": choice}, requestState=state)  # fmt: skip


def ask(
    server: HttpServer, message: dict[str, Any], http: httpx.Client | None = None
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, answer) of `message` sent to `server`, through `http` if given (a thread's
    own client) else the server's; the answer is checked against the MCP schema."""
    response = (http or server.client).post(
        server.url, content=json.dumps(message).encode(), headers=server.headers_for(message)
    )
    answer: dict[str, Any] = response.json()
    check_message(answer, message.get("method"))
    return response.status_code, answer


def first_round(server: HttpServer, note: Note, http: httpx.Client | None = None) -> str:
    """Round one on `server`: the form offers exactly this note; its sealed requestState."""
    status, answer = ask(server, call_tool(1, "notes_delete", note.args, FORM), http)
    assert status == 200, answer
    result = answer["result"]
    assert result["resultType"] == "input_required", result
    offered = result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]
    assert [c["const"] for c in offered["note_id"]["oneOf"]] == [note.id]
    state: str = result["requestState"]
    return state


def deleted(note: Note) -> dict[str, Any]:
    return {"deleted": note.id, "outcome": "deleted"}


def failure_text(answer: dict[str, Any]) -> str:
    result = answer["result"]
    assert result["isError"] is True, answer
    assert result["resultType"] == "complete", answer
    text: str = result["content"][0]["text"]
    return text


def test_round_one_on_one_instance_and_the_retry_on_another(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        direct, through = Note(cluster, "Direct plan"), Note(cluster, "Balanced plan")
        state = first_round(cluster.instances[0], direct)
        done = cluster.instances[1].ask(direct.accept(state))
        assert done["result"]["structuredContent"] == deleted(direct)
        assert not direct.path.exists()
        assert through.unchanged()

        logged = len(cluster.lb_requests())
        state = first_round(cluster.lb, through)
        done = cluster.lb.ask(through.accept(state))
        assert done["result"]["structuredContent"] == deleted(through)
        assert not through.path.exists()
        # Round robin: the two rounds were served by different instances.
        (s1, st1, r1), (s2, st2, r2) = cluster.wait_lb_requests(logged + 2)[logged:]
        assert (st1, r1, st2, r2) == (200, "0", 200, "0")
        assert {s1, s2} == {"fs1", "fs2"}


def _classify(answer: dict[str, Any], note: Note) -> str:
    """What one of the simultaneous retries got: each kind is counted, anything else fails."""
    if answer.get("error") == REFUSED:
        return "refused -32602"
    result = answer.get("result", {})
    if result.get("structuredContent") == deleted(note) and result.get("isError") is not True:
        return "deleted"
    if result.get("isError") is True:
        return "failure: " + failure_text(answer).replace(note.id, "NOTE")
    return f"unexpected: {json.dumps(answer)[:300]}"


@pytest.mark.timeout(900)
def test_one_winner_among_simultaneous_retries(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        targets: list[HttpServer] = [*cluster.instances, cluster.lb]
        keep = [Note(cluster, f"Keep {k}") for k in range(5)]
        notes = [Note(cluster, f"Round {r:04d}") for r in range(ROUNDS)]
        clients: list[httpx.Client] = []
        lock = threading.Lock()
        local = threading.local()

        def client() -> httpx.Client:  # one per thread: each keeps its own connections
            if not hasattr(local, "client"):
                local.client = httpx.Client(timeout=30)
                with lock:
                    clients.append(local.client)
            c: httpx.Client = local.client
            return c

        def fire(
            target: HttpServer, message: dict[str, Any], go: threading.Barrier
        ) -> tuple[int, dict[str, Any]]:
            http = client()
            go.wait()  # all of this round's retries leave together
            return ask(target, message, http)

        def one_round(r: int) -> tuple[list[tuple[int, dict[str, Any]]], bool]:
            note = notes[r]
            state = first_round(targets[r % len(targets)], note, client())
            go = threading.Barrier(len(targets), timeout=60)
            message = note.accept(state)
            futures = [firing.submit(fire, t, message, go) for t in targets]
            answers = [f.result() for f in futures]
            return answers, note.path.exists()

        started = time.monotonic()
        # Every round's retries get a thread each at once (so the barrier always fills).
        try:
            with (
                ThreadPoolExecutor(CONCURRENT * len(targets)) as firing,
                ThreadPoolExecutor(CONCURRENT) as rounds,
            ):
                outcomes = list(rounds.map(one_round, range(ROUNDS)))
        finally:
            for c in clients:
                c.close()
        took = time.monotonic() - started

        kinds: Counter[str] = Counter()
        wrong = []
        for r, (answers, still_there) in enumerate(outcomes):
            got = Counter(_classify(a, notes[r]) for _, a in answers)
            kinds.update(got)
            statuses = {(_classify(a, notes[r]), s) for s, a in answers}
            if got["deleted"] != 1 or still_there or any(k.startswith("unexpected") for k in got):
                wrong.append((r, got, still_there))
            assert all(s == (400 if k == "refused -32602" else 200) for k, s in statuses), statuses
        print(f"\n{ROUNDS} rounds x {len(targets)} simultaneous retries in {took:.1f} s: "
              f"{dict(kinds)}")  # fmt: skip
        assert wrong == []
        assert kinds["deleted"] == ROUNDS
        assert sum(kinds.values()) == ROUNDS * len(targets)
        # Every loser gets the replay refusal, whenever it ran: the winner claims before it
        # unlinks, so a loser that finds the note gone or changed finds the nonce spent too
        # (tools/delete.py, _spent_meanwhile).
        assert set(kinds) == {"deleted", "refused -32602"}
        assert [n for n in notes if n.path.exists()] == []
        assert [k.title for k in keep if not k.unchanged()] == []
        assert sorted(p.name for p in cluster.notes.iterdir()) == sorted(k.id for k in keep)


def test_a_killed_instance_costs_only_a_retry(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        a, b = Note(cluster, "Plan A"), Note(cluster, "Plan B")
        states = [first_round(cluster.instances[0], n) for n in (a, b)]
        logged = len(cluster.lb_requests())
        cluster.kill(0)
        took = []
        for note, state in zip((a, b), states, strict=True):
            started = time.monotonic()
            done = cluster.lb.ask(note.accept(state))
            took.append(time.monotonic() - started)
            assert done["result"]["structuredContent"] == deleted(note)
            assert not note.path.exists()
        print(f"\nretries through the load balancer after SIGKILL: {took}")
        served = cluster.wait_lb_requests(logged + 2)[logged:]
        # Both completed on the other instance; round robin sent (at least) one of them to the
        # dead one first, which failed to connect and was redispatched ("+1").
        assert [(s, status) for s, status, _ in served] == [("fs2", 200), ("fs2", 200)]
        assert sorted(r for _, _, r in served) in (["+1", "+1"], ["+1", "0"]), served
        # No waiting for the health checks (2 failed, 2 s apart) to mark the dead one down.
        assert max(took) < 3.0, took
        listing = call_tool(9, "notes_list", {"workspaceUri": cluster.workspace_uri})
        for _ in range(4):  # and the balancer goes on answering, whichever instance it tries
            assert cluster.lb.ask(listing)["result"]["structuredContent"]["notes"] == []


def _run_id(cluster: Cluster) -> str:
    with cluster.store.client() as redis:
        run_id: str = redis.info("server")["run_id"]
    return run_id


def test_the_store_going_away_and_coming_back_empty(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        note = Note(cluster, "Plan")
        in_flight = first_round(cluster.instances[0], note)
        run_id = _run_id(cluster)
        cluster.store.stop()
        for server in (cluster.instances[1], cluster.lb):
            assert failure_text(server.ask(note.accept(in_flight))) == NOT_CHECKED
            refused = server.ask(call_tool(1, "notes_delete", note.args, FORM))
            assert failure_text(refused) == UNREACHABLE
        assert note.unchanged()

        cluster.store.start()  # the same port, nothing kept: a new run_id
        assert _run_id(cluster) != run_id
        for server in (cluster.instances[0], cluster.instances[1], cluster.lb):
            assert failure_text(server.ask(note.accept(in_flight))) == RESTARTED
        assert note.unchanged()

        state = first_round(cluster.instances[1], note)
        done = cluster.instances[0].ask(note.accept(state))
        assert done["result"]["structuredContent"] == deleted(note)
        assert not note.path.exists()


def _legacy_headers(sid: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Authorization": f"Bearer {TOKEN}"}  # fmt: skip
    if sid is not None:
        headers |= {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
    return headers


def test_a_legacy_session_sticks_to_the_instance_that_opened_it(tmp_path: Path) -> None:
    """A 2025-11-25 client's session lives in one instance: the stick table sends every request
    naming it there, the answer to the confirmation form included (a second POST while the
    first one's SSE stream waits for it)."""
    with Cluster(tmp_path) as cluster:
        note = Note(cluster, "Legacy plan")
        lb = cluster.lb
        logged = len(cluster.lb_requests())
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "clientInfo": {"name": "old"},
                           "capabilities": {"elicitation": {"form": {}}}}}  # fmt: skip
        opened = lb.post_raw(json.dumps(init).encode(), _legacy_headers(None))
        assert opened.status_code == 200, opened.text
        check_legacy(opened.json(), "initialize")
        sid = opened.headers["mcp-session-id"]

        def post(message: dict[str, Any]) -> httpx.Response:
            return lb.post_raw(json.dumps(message).encode(), _legacy_headers(sid))

        assert post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        listed = [post({"jsonrpc": "2.0", "id": 2 + i, "method": "tools/list"}) for i in range(3)]
        assert [r.status_code for r in listed] == [200, 200, 200]
        call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "notes_delete", "arguments": note.args}}  # fmt: skip
        with lb.client.stream("POST", lb.url, content=json.dumps(call).encode(),
                              headers=_legacy_headers(sid)) as streamed:  # fmt: skip
            assert streamed.status_code == 200
            events = sse_messages(streamed)
            ask = next(events)
            check_legacy(ask)
            assert ask["method"] == "elicitation/create"
            assert note.unchanged()
            accept = {"action": "accept", "content": {"note_id": note.id, "confirm": True}}
            answered = post({"jsonrpc": "2.0", "id": ask["id"], "result": accept})
            assert answered.status_code == 202
            done = next(events)
            check_legacy(done, "tools/call")
            assert list(events) == []
        assert done["result"]["structuredContent"] == deleted(note)
        assert not note.path.exists()
        served = cluster.wait_lb_requests(logged + 7)[logged:]
        assert len(served) == 7 and len({s for s, _, _ in served}) == 1, served
