"""Live notes (issue 17 item 4; spec basic/patterns/subscriptions): `subscriptions/listen` over
the real stdio and HTTP servers. The acknowledgment comes first; every message carries the
listen id in `_meta` (spec); only the requested types are sent (spec: "MUST NOT send
notification types the client has not explicitly requested"); edits by the user's editor (this
test writing the files) and by fs-notes itself are both reported; nothing outside a workspace is
ever named (ours); the per-principal bounds give exact errors and are freed by cancelling (ours).
Every message the servers send is validated against the official schema (`check_message`).
Timing is never asserted beyond "within 5 s"."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from wire import HttpServer, StdioServer, call_tool, check_message, request

from fs_notes.policy import hash_token

TOKEN = "live-token-0123456789abcdef"
OTHER = "other-token-0123456789abcde"
WAIT = 5.0
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
Message = dict[str, Any]


def _policy(tmp: Path, limits: str = "") -> tuple[Path, Path, Path]:
    notes, secret = tmp / "notes", tmp / "secret"
    for ws in (notes, secret):
        ws.mkdir()
    (notes / "a.md").write_text("# A\n")
    (notes / "sub").mkdir()
    (notes / "sub" / "n.md").write_text("# N\n")
    (secret / "s.md").write_text("# S\n")
    policy = tmp / "policy.toml"
    policy.write_text(
        f'[[principal]]\nname = "me"\nlocal = true\ntoken_sha256 = "{hash_token(TOKEN)}"\n\n'
        f'[[principal]]\nname = "other"\ntoken_sha256 = "{hash_token(OTHER)}"\n\n'
        f'[[workspace]]\nname = "notes"\npath = "{notes}"\n\n'
        f'[[workspace]]\nname = "secret"\npath = "{secret}"\n\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "notes"\noperations = ["read", "write"]\n\n'
        '[[grant]]\nprincipal = "other"\nworkspace = "secret"\noperations = ["read"]\n\n'
        f"[limits]\n{limits}\n"
    )
    return policy, notes, secret


def listen(rid: int | str, **notifications: Any) -> Message:
    return request(rid, "subscriptions/listen", {"notifications": notifications})


def cancel(rid: int | str) -> Message:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}


def _method(message: Message) -> str | None:
    """The listen's completion result is checked as a SubscriptionsListenResult."""
    result = message.get("result", {})
    return "subscriptions/listen" if SUBSCRIPTION_ID in result.get("_meta", {}) else None


def sub_id(message: Message) -> Any:
    return message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]


class Live:
    """A stdio server and every message it sent, each validated against the schema."""

    def __init__(self, server: StdioServer) -> None:
        self.server = server
        self.seen: list[Message] = []

    def take(self, timeout: float) -> Message | None:
        try:
            message = self.server.recv(timeout=timeout)
        except AssertionError:
            return None
        check_message(message, _method(message))
        self.seen.append(message)
        return message

    def until(self, want: Callable[[Message], bool], what: str) -> Message:
        deadline = time.monotonic() + WAIT
        while (left := deadline - time.monotonic()) > 0:
            message = self.take(left)
            if message is not None and want(message):
                return message
        raise AssertionError(f"no {what} within {WAIT} s; got {self.seen}")

    def quiet(self, seconds: float = 0.6) -> list[Message]:
        """What arrives within `seconds` (expected: nothing)."""
        got = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            message = self.take(left)
            if message is not None:
                got.append(message)
        return got

    def ask(self, message: Message) -> Message:
        self.server.send(message)
        return self.until(lambda m: m.get("id") == message["id"], f"answer to {message['id']}")


def updated(rid: Any, uri: str) -> Callable[[Message], bool]:
    return lambda m: (
        m.get("method") == "notifications/resources/updated"
        and sub_id(m) == rid
        and m["params"]["uri"] == uri
    )


def list_changed(rid: Any) -> Callable[[Message], bool]:
    return lambda m: m.get("method") == "notifications/resources/list_changed" and sub_id(m) == rid


def acked(rid: Any) -> Callable[[Message], bool]:
    return lambda m: (
        m.get("method") == "notifications/subscriptions/acknowledged" and sub_id(m) == rid
    )


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Live, Path, Path]]:
    policy, notes, secret = _policy(tmp_path)
    server = StdioServer("serve", "--policy", str(policy))
    try:
        yield Live(server), notes, secret
    finally:
        server.close()


def test_discover_declares_list_changes_and_subscriptions(live: tuple[Live, Path, Path]) -> None:
    client, _, _ = live
    answer = client.ask(request(1, "server/discover"))
    check_message(answer, "server/discover")
    assert answer["result"]["capabilities"]["resources"] == {"listChanged": True, "subscribe": True}


def test_an_outside_edit_and_an_fs_notes_edit_of_a_subscribed_note_are_both_notified(
    live: tuple[Live, Path, Path],
) -> None:
    client, notes, _ = live
    uri = (notes / "a.md").as_uri()
    client.server.send(listen(7, resourceSubscriptions=[uri], toolsListChanged=True))
    ack = client.until(acked(7), "acknowledgment")
    assert client.seen[0] is ack  # the first message of the subscription (and of the stream)
    # toolsListChanged is not supported (the tool list never changes): left out, not refused.
    assert ack["params"]["notifications"] == {"resourceSubscriptions": [uri]}
    (notes / "a.md").write_text("# A\n\nedited by the user's editor\n")
    client.until(updated(7, uri), "updated after an outside edit")
    client.quiet(0.3)
    done = client.ask(
        call_tool(
            8, "notes_update", {"workspaceUri": notes.as_uri(), "id": "a.md", "content": "# A2\n"}
        )
    )
    assert done["result"].get("isError") is not True, done
    client.until(updated(7, uri), "updated after notes_update")
    # Not asked for: no list_changed, though nothing was created (nor would it be sent if it were).
    assert not any("list_changed" in m.get("method", "") for m in client.seen)


def test_only_the_requested_types_reach_each_subscription(live: tuple[Live, Path, Path]) -> None:
    client, notes, _ = live
    a_uri = (notes / "a.md").as_uri()
    client.server.send(listen("lists", resourcesListChanged=True))
    client.until(acked("lists"), "acknowledgment")
    client.server.send(listen("notes", resourceSubscriptions=[a_uri]))
    client.until(acked("notes"), "acknowledgment")
    (notes / "new.md").write_text("# New\n")
    client.until(list_changed("lists"), "list_changed for a new note")
    (notes / "a.md").write_text("# A\n\nagain\n")
    client.until(updated("notes", a_uri), "updated")
    rest = client.quiet()
    everything = client.seen
    assert not any(sub_id(m) == "notes" and "list_changed" in m["method"] for m in everything)
    assert not any(sub_id(m) == "lists" and m["method"].endswith("updated") for m in everything)
    assert not any(m["method"].endswith("list_changed") for m in rest)  # an edit moves nothing
    # A note moved (renamed) is a list change too, and a removed subscribed note is an update.
    os.rename(notes / "new.md", notes / "renamed.md")
    client.until(list_changed("lists"), "list_changed after a rename")
    (notes / "a.md").unlink()
    client.until(updated("notes", a_uri), "updated after the note was removed")


def test_a_note_of_a_workspace_not_granted_cannot_be_subscribed(
    live: tuple[Live, Path, Path], tmp_path: Path
) -> None:
    client, notes, secret = live
    for uri in (
        (secret / "s.md").as_uri(),  # a workspace of another principal
        (tmp_path / "elsewhere.md").as_uri(),  # beneath no workspace
        "file:///etc/passwd",
        (notes / "sub").as_uri() + "/../../secret/s.md",
    ):
        answer = client.ask(listen(3, resourceSubscriptions=[(notes / "a.md").as_uri(), uri]))
        assert answer == {
            "jsonrpc": "2.0",
            "id": 3,
            "error": {"code": -32602, "message": "Resource not found", "data": {"uri": uri}},
        }
    assert not any("method" in m for m in client.seen)  # nothing was acknowledged
    bad = client.ask(
        request(4, "subscriptions/listen", {"notifications": {"resourceSubscriptions": "x"}})
    )
    assert bad["error"] == {
        "code": -32602,
        "message": "Invalid params: notifications.resourceSubscriptions must be an array of "
        "strings",
    }


def test_nothing_outside_the_workspace_is_watched_or_named(
    live: tuple[Live, Path, Path], tmp_path: Path
) -> None:
    client, notes, _ = live
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "n.md").write_text("# outside\n")
    (outside / "x.md").write_text("# outside x\n")
    (notes / "link.md").symlink_to(outside / "x.md")
    link_uri, n_uri = (notes / "link.md").as_uri(), (notes / "sub" / "n.md").as_uri()
    client.server.send(
        listen(5, resourcesListChanged=True, resourceSubscriptions=[link_uri, n_uri])
    )
    client.until(acked(5), "acknowledgment")
    (outside / "x.md").write_text("# outside x, edited\n")  # the symlink's target: not a note
    (notes / "other-link.md").symlink_to(outside / "n.md")  # a new symlink is not a new note
    assert client.quiet() == []
    # The watched folder is replaced by a symlink to the outside folder: its note is gone (one
    # update, one list change), and from then on nothing there is watched.
    os.rename(notes / "sub", tmp_path / "old-sub")
    (notes / "sub").symlink_to(outside)
    client.until(updated(5, n_uri), "updated: the note's folder was replaced")
    client.quiet(0.5)
    (outside / "n.md").write_text("# outside, edited through the replaced folder\n")
    (tmp_path / "old-sub" / "n.md").write_text("# the old folder, moved out\n")
    assert client.quiet(1.0) == []
    assert any(list_changed(5)(m) for m in client.seen)
    for message in client.seen:
        text = json.dumps(message)
        assert str(outside) not in text and "old-sub" not in text, message


def _inotify_fds(pid: int) -> int | None:
    """inotify instances open in the server (and its children: with a private filesystem view
    the server runs in a child of the process started)."""
    import psutil

    count = 0
    try:
        for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
            for fd in os.listdir(f"/proc/{proc.pid}/fd"):
                with contextlib.suppress(FileNotFoundError):
                    count += os.readlink(f"/proc/{proc.pid}/fd/{fd}") == "anon_inode:inotify"
    except (OSError, psutil.Error):
        return None  # not ours to look at
    return count


def test_the_bounds_per_principal_and_cancelling_frees_them(tmp_path: Path) -> None:
    policy, notes, _ = _policy(
        tmp_path, "listens_per_principal = 2\nsubscriptions_per_principal = 3\n"
    )
    server = StdioServer("serve", "--policy", str(policy))
    client = Live(server)
    try:
        a, n = (notes / "a.md").as_uri(), (notes / "sub" / "n.md").as_uri()
        client.ask(request(1, "server/discover"))
        before = _inotify_fds(server.proc.pid)
        over = client.ask(listen(2, resourceSubscriptions=[a, n, a + "x.md", n + "x.md"]))
        assert over["error"] == {
            "code": -32602,
            "message": "Too many resource subscriptions for this principal: 0 held, 4 more asked "
            "for (limit 3)",
            "data": {"limit": 3},
        }
        for rid in (10, 11):
            client.server.send(listen(rid, resourceSubscriptions=[a]))
            client.until(acked(rid), "acknowledgment")
        if before is not None:
            assert _inotify_fds(server.proc.pid) == before + 1  # one instance per workspace
        again = client.ask(listen(10, resourcesListChanged=True))
        assert again["error"]["code"] == -32600  # the id of an open subscription
        third = client.ask(listen(12, resourcesListChanged=True))
        assert third["error"] == {
            "code": -32600,
            "message": "Too many subscriptions/listen streams open for this principal (limit 2); "
            "cancel one first",
            "data": {"limit": 2},
        }
        for rid in (10, 11):
            client.server.send(cancel(rid))
        (notes / "a.md").write_text("# A\n\nafter the cancellations\n")
        assert client.quiet() == []  # a cancelled subscription gets nothing, not even a response
        if before is not None:
            assert _inotify_fds(server.proc.pid) == before  # the watches are freed
        client.server.send(listen(13, resourceSubscriptions=[a, n, a + "x.md"]))
        client.until(acked(13), "acknowledgment once the bound is free")
        server.proc.stdin.close()  # type: ignore[union-attr]
        end = client.until(lambda m: m.get("id") == 13, "the completion result at the end")
        assert end["result"] == {
            "resultType": "complete",
            "_meta": {**end["result"]["_meta"], "io.modelcontextprotocol/subscriptionId": 13},
        }
    finally:
        server.close()


# -- Streamable HTTP ----------------------------------------------------------------------------


def _events(response: httpx.Response) -> Iterator[Message]:
    """The JSON-RPC messages of an SSE response, each validated against the schema."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            message: Message = json.loads(line[len("data: ") :])
            check_message(message, _method(message))
            yield message


def _open(server: HttpServer, message: Message) -> tuple[httpx.Client, httpx.Response]:
    client = httpx.Client(timeout=httpx.Timeout(WAIT, read=WAIT))
    sent = client.build_request(
        "POST", server.url, json=message, headers=server.headers_for(message)
    )
    return client, client.send(sent, stream=True)


def test_http_listen_is_an_sse_stream_closed_by_the_client(tmp_path: Path) -> None:
    policy, notes, secret = _policy(tmp_path, "listens_per_principal = 1\n")
    server = HttpServer("--policy", str(policy), tmp=tmp_path, token=TOKEN)
    try:
        uri = (notes / "a.md").as_uri()
        refused = server.post(listen(1, resourceSubscriptions=[(secret / "s.md").as_uri()]))
        assert refused.status_code == 400
        check_message(refused.json())
        assert refused.json()["error"]["message"] == "Resource not found"
        client, response = _open(
            server, listen(2, resourcesListChanged=True, resourceSubscriptions=[uri])
        )
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"
        events = _events(response)
        first = next(events)
        assert acked(2)(first)
        assert first["params"]["notifications"] == {
            "resourcesListChanged": True,
            "resourceSubscriptions": [uri],
        }
        (notes / "a.md").write_text("# A\n\nedited over HTTP's watch\n")
        assert updated(2, uri)(next(events))
        (notes / "b.md").write_text("# B\n")
        assert list_changed(2)(next(events))
        busy = server.post(listen(3, resourcesListChanged=True))
        assert busy.status_code == 400 and busy.json()["error"]["data"] == {"limit": 1}
        response.close()  # the cancellation (spec): the subscription ends, its bound is free
        client.close()
        deadline = time.monotonic() + WAIT
        while True:
            client, response = _open(server, listen(4, resourcesListChanged=True))
            if response.status_code == 200 or time.monotonic() > deadline:
                break
            response.close()
            client.close()
            time.sleep(0.05)
        assert response.status_code == 200
        events = _events(response)
        assert acked(4)(next(events))
        server.proc.terminate()  # the server stops: the listen gets its completion result
        end = next(events)
        assert end["id"] == 4 and end["result"]["resultType"] == "complete"
        assert end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 4
        assert list(events) == []  # and the stream ends
        response.close()
        client.close()
        server.proc.wait(WAIT * 2)  # it exits as without a listen (the stream held nothing up)
        assert "Traceback" not in server.log_path.read_text()
    finally:
        server.close()


def test_a_listen_reopened_after_all_closed_is_told_of_the_next_edit(
    live: tuple[Live, Path, Path],
) -> None:
    """A reviewer's finding: once every listen had closed, the watcher thread slept on its wake
    pipe alone, and a listen opened then heard nothing until some other open or close."""
    client, notes, _ = live
    uri = (notes / "a.md").as_uri()
    client.server.send(listen(1, resourceSubscriptions=[uri]))
    client.until(acked(1), "the first acknowledgment")
    (notes / "a.md").write_text("# A\n\nfirst edit\n")
    client.until(updated(1, uri), "updated (positive control: the first listen)")
    client.server.send(cancel(1))
    client.quiet(0.5)
    client.server.send(listen(2, resourceSubscriptions=[uri]))
    client.until(acked(2), "the second acknowledgment")
    (notes / "a.md").write_text("# A\n\nsecond edit\n")
    client.until(updated(2, uri), "updated on the reopened listen")
