"""docs/deploy.md, checked against the real thing: the Redis ACL user it gives, and the systemd
template unit's command line (sandbox/deploy/fs-notes@.service).

The `ACL SETUSER` line is read from the document and applied, as written, to a real Redis
(tests/redis_server.py); a store connecting as that user then does everything fs-notes does (the
epoch, a claim, the same claim again, the spent check, `fs-notes check`'s report), and a real
`fs-notes serve` given it through the policy's [replay_store] completes a confirmed deletion;
`ACL LOG` is empty afterwards. The line is exact, not generous: without one of its commands a
claim is refused, and a key outside its pattern cannot be touched. The password change the
document describes (a second password, then the old one removed) keeps the store answering.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_server import RedisServer
from wire import REPO, HttpServer, call_tool, write_secret

from fs_notes.cli import _parser
from fs_notes.confirm.location import parse_location
from fs_notes.confirm.redis_store import RedisReplayStore
from fs_notes.confirm.spent import StoreUnavailable
from fs_notes.policy import hash_token

DOC = REPO / "docs" / "deploy.md"
UNIT = REPO / "sandbox" / "deploy" / "fs-notes@.service"
ADMIN = "admin-" + secrets.token_hex(8)
TOKEN = "deploy-acl-token-0123456789"
FORM: dict[str, Any] = {"elicitation": {"form": {}}}


def documented_acl(password: str) -> list[str]:
    """The document's `ACL SETUSER fs-notes ...` line, its password hash filled in."""
    (line,) = [ln for ln in DOC.read_text().splitlines() if ln.startswith("ACL SETUSER fs-notes")]
    digest = hashlib.sha256(password.encode()).hexdigest()
    words = line.split()
    assert "#<sha256-of-the-password>" in words
    return [f"#{digest}" if w == "#<sha256-of-the-password>" else w for w in words]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path_factory.mktemp("redis"), extra=("--requirepass", ADMIN))
    yield srv
    srv.close()


def admin(server: RedisServer) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=server.port, password=ADMIN, socket_timeout=5)


@pytest.fixture
def user(server: RedisServer) -> Iterator[str]:
    """The documented user, made afresh with a new password; the ACL log emptied."""
    password = "pw-" + secrets.token_hex(12)
    with admin(server) as a:
        a.execute_command("ACL", "DELUSER", "fs-notes")
        assert a.execute_command(*documented_acl(password)) in (b"OK", "OK")
        a.execute_command("ACL", "LOG", "RESET")
    yield password


def acl_log(server: RedisServer) -> list[Any]:
    with admin(server) as a:
        return list(a.execute_command("ACL", "LOG"))


def as_user(server: RedisServer, password: str, query: str = "") -> RedisReplayStore:
    url = f"redis://fs-notes@127.0.0.1:{server.port}/0{query}"
    return RedisReplayStore(parse_location(url, password=password), max_rows=1000)


def test_the_documented_user_can_do_all_the_store_does_and_no_more(
    server: RedisServer, user: str
) -> None:
    with as_user(server, user) as store:
        report = store.check()
        assert report["answers"] is True, report
        epoch = store.epoch()
        nonce = secrets.token_hex(16)
        assert store.claim(nonce, time.time() + 300, "alice", epoch) is True
        assert store.claim(nonce, time.time() + 300, "alice", epoch) is False
        assert store.is_spent(nonce) is True
    assert acl_log(server) == []

    # Exact: without one command of the claim script, a claim is refused (Redis checks the
    # commands a script runs against the caller's ACL), and other keys are out of reach.
    with admin(server) as a:
        a.execute_command("ACL", "SETUSER", "fs-notes", "-zadd")
    with as_user(server, user) as store, pytest.raises(StoreUnavailable, match="can't run"):
        store.claim(secrets.token_hex(16), time.time() + 300, "alice", store.epoch())
    refused = "no permissions to access one of the keys"
    with as_user(server, user, "?key_prefix=other") as store, pytest.raises(
        StoreUnavailable, match=refused
    ):
        store.epoch()


def test_the_documented_password_change_keeps_the_store_answering(
    server: RedisServer, user: str
) -> None:
    new = "pw-" + secrets.token_hex(12)
    sha = {p: hashlib.sha256(p.encode()).hexdigest() for p in (user, new)}
    with admin(server) as a:
        a.execute_command("ACL", "SETUSER", "fs-notes", f"#{sha[new]}")
    for password in (user, new):
        with as_user(server, password) as store:
            assert store.check()["answers"] is True
    with admin(server) as a:
        a.execute_command("ACL", "SETUSER", "fs-notes", f"!{sha[user]}")
    with as_user(server, new) as store:
        assert store.check()["answers"] is True
    with as_user(server, user) as store:
        report = store.check()
        assert report["answers"] is False and "AuthenticationError" in report["error"]
        assert user not in report["error"]


def test_serve_as_the_documented_user_completes_a_confirmed_deletion(
    server: RedisServer, user: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    note = notes / "old-plan.md"
    note.write_text("# Old plan\n\nto be deleted\n")
    password_file = write_secret(tmp_path / "redis.pw", user + "\n")
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'[[principal]]\nname = "alice"\ntoken_sha256 = "{hash_token(TOKEN)}"\n\n'
        f'[[workspace]]\nname = "notes"\npath = "{notes}"\n\n'
        '[[grant]]\nprincipal = "alice"\nworkspace = "notes"\noperations = ["read", "delete"]\n\n'
        f'[replay_store]\nurl = "redis://fs-notes@127.0.0.1:{server.port}/0"\n'
        f'password_file = "{password_file}"\n'
    )
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    keys = write_secret(tmp_path / "state.keys", f"k1:{key}\n")
    (tmp_path / "state").mkdir(mode=0o700)
    srv = HttpServer(
        "--policy", str(policy), "--state-key-file", str(keys),
        "--state-dir", str(tmp_path / "state"), tmp=tmp_path, token=TOKEN,
    )  # fmt: skip
    try:
        args = {"workspaceUri": notes.as_uri(), "title": "Old plan"}
        first = srv.ask(call_tool(1, "notes_delete", args, FORM))["result"]
        assert first["resultType"] == "input_required", first
        choice = {"action": "accept", "content": {"note_id": "old-plan.md", "confirm": True}}
        done = srv.ask(call_tool(2, "notes_delete", args, FORM,
                                 inputResponses={"delete_choice": choice},
                                 requestState=first["requestState"]))  # fmt: skip
        assert done["result"]["structuredContent"] == {
            "deleted": "old-plan.md",
            "outcome": "deleted",
        }, done
        assert not note.exists()
    finally:
        srv.close()
    log = srv.log_path.read_text()
    where = f"redis://fs-notes@127.0.0.1:{server.port}/0"
    assert f"replay store: Redis {where}, password from file, shared; state folder" in log
    assert user not in log
    assert acl_log(server) == []


def test_the_template_unit_runs_serve_with_options_serve_takes() -> None:
    text = UNIT.read_text().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(line.removeprefix("ExecStart="))
    assert argv[0].endswith("/fs-notes") and argv[1] == "serve"
    env = {"FS_NOTES_ADDRESS": "10.0.0.11", "FS_NOTES_PUBLIC_HOST": "notes.example"}
    argv = [re.sub(r"\$\{(\w+)\}", lambda m: env[m[1]], a).replace("%i", "8801") for a in argv]
    args = _parser().parse_args(argv[1:])
    assert args.http == "10.0.0.11:8801" and args.allow_host == ["notes.example"]
    assert args.state_dir == "/var/lib/fs-notes/8801" and args.policy == "/etc/fs-notes/policy.toml"
    assert args.state_key_file == "/etc/fs-notes/state.keys"
    assert "StateDirectory=fs-notes/%i" in text.splitlines()
