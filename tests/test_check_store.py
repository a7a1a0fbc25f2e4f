"""`fs-notes check` reports the replay store serve would use, and whether it answers (issue 18).

On a real Redis (tests/redis_server.py) with a password: answering, `check --json` exits 0 with
`replay.store` exactly the store's own report; through the policy's [replay_store] the text line
says so; a wrong password and a stopped server each exit 1 (the health probe's signal) with an
error that names the address and never the password. `check` runs as a child, as an operator
runs it (it probes Landlock in children of its own: under a second per run).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer
from wire import REPO, child_env

from fs_notes.check import store_location
from fs_notes.errors import ConfigError


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", "check", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=child_env(),
    )


def _secret(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def _policy(folder: Path, url: str, password_file: Path) -> Path:
    (folder / "notes").mkdir(exist_ok=True)
    policy = folder / "policy.toml"
    policy.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "w"\npath = "{folder / "notes"}"\n\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "w"\noperations = ["read", "delete"]\n\n'
        f'[replay_store]\nurl = "{url}"\npassword_file = "{password_file}"\n'
    )
    return policy


@pytest.fixture(scope="module")
def password() -> str:
    return "pw-" + secrets.token_hex(12)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, password: str) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path_factory.mktemp("redis"), extra=("--requirepass", password))
    yield srv
    srv.close()


def test_an_answering_store_is_reported_exactly_and_check_exits_0(
    server: RedisServer, password: str, tmp_path: Path
) -> None:
    pw = _secret(tmp_path / "redis.pw", password)
    result = _check("--json", "--replay-store", server.url, "--replay-store-password-file", str(pw))
    assert result.returncode == 0, result.stderr
    import redis

    with redis.Redis(host="127.0.0.1", port=server.port, password=password) as client:
        info = client.info("server")
    assert json.loads(result.stdout)["replay"]["store"] == {
        "kind": "redis",
        "store": f"Redis redis://127.0.0.1:{server.port}/0, password from file",
        "answers": True,
        "version": info["redis_version"],
        "epoch": info["run_id"],
    }
    assert password not in result.stdout + result.stderr

    # The policy's [replay_store] (url and password_file), as serve reads it; the text line.
    text = _check("--policy", str(_policy(tmp_path, server.url, pw)))
    assert text.returncode == 0, text.stderr
    line = f"Redis redis://127.0.0.1:{server.port}/0, password from file: answers (Redis "
    assert f"replay store:          {line}{info['redis_version']})\n" in text.stdout
    assert password not in text.stdout + text.stderr


def test_a_wrong_password_does_not_answer_an_auth_error_exit_1(
    server: RedisServer, password: str, tmp_path: Path
) -> None:
    wrong = _secret(tmp_path / "wrong.pw", "not-" + password)
    result = _check("--replay-store", server.url, "--replay-store-password-file", str(wrong))
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("replay store:")]
    assert line.startswith(
        f"replay store:          Redis redis://127.0.0.1:{server.port}/0, password from file: "
        "does not answer (the epoch could not be read: AuthenticationError: "
    ), line
    assert password not in result.stdout + result.stderr


def test_a_stopped_store_does_not_answer_naming_its_address_never_the_password(
    tmp_path: Path,
) -> None:
    password = "pw-" + secrets.token_hex(12)
    srv = RedisServer(tmp_path / "redis", extra=("--requirepass", password))
    srv.stop()
    try:
        pw = _secret(tmp_path / "redis.pw", password)
        options = ("--replay-store", srv.url, "--replay-store-password-file", str(pw))
        result = _check("--json", *options)
    finally:
        srv.close()
    assert result.returncode == 1, result.stdout + result.stderr
    store = json.loads(result.stdout)["replay"]["store"]
    assert store["kind"] == "redis" and store["answers"] is False
    assert set(store) == {"kind", "store", "answers", "error"}
    assert f"127.0.0.1:{srv.port}" in store["error"] and "ConnectionError" in store["error"]
    assert password not in result.stdout + result.stderr


def test_the_store_options_follow_serve_s_precedence(tmp_path: Path) -> None:
    """In process, no Redis: --replay-store wins over the policy's url and then the policy's
    password file is not read; a password file without any URL is serve's error."""
    pw = _secret(tmp_path / "redis.pw", "from-the-policy")
    policy = _policy(tmp_path, "redis://policy-host:6380/2", pw)
    from_policy = store_location(str(policy), None, None)
    assert from_policy is not None and (from_policy.host, from_policy.port) == ("policy-host", 6380)
    assert from_policy.password == "from-the-policy"
    given = store_location(str(policy), "redis://cli-host/0", None)
    assert given is not None and given.host == "cli-host" and given.password is None
    assert store_location(None, None, None) is None
    with pytest.raises(ConfigError, match="only applies with --replay-store URL"):
        store_location(None, None, str(pw))
