"""Naming the shared replay store: the URL forms (fs_notes/confirm/location.py), the serve flags
and the policy file's [replay_store] table (fs_notes/config.py, policy_file.py).

Each refusal is one clear line, and no message ever carries a password, even one written into
the URL by mistake.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fs_notes.cli import _parser
from fs_notes.config import ServeConfig
from fs_notes.confirm.location import RedisLocation, parse_location
from fs_notes.errors import ConfigError
from fs_notes.policy import PolicyError
from fs_notes.policy_file import load_policy

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("redis://127.0.0.1", RedisLocation("127.0.0.1")),
        ("redis://db.internal:6380/3", RedisLocation("db.internal", 6380, 3)),
        ("redis://fsnotes@[::1]:7000/0", RedisLocation("::1", 7000, 0, username="fsnotes")),
        ("redis://h/0?key_prefix=team.a", RedisLocation("h", key_prefix="team.a")),
        (
            "rediss://h:6380/1?ca_file=/etc/ca.pem&cert_file=/c.pem&key_file=/k.pem"
            "&server_name=redis.internal",
            RedisLocation(
                "h", 6380, 1, tls=True, ca_file="/etc/ca.pem", cert_file="/c.pem",
                key_file="/k.pem", server_name="redis.internal",
            ),
        ),
    ],
)
def test_the_url_forms_users_write(url: str, want: RedisLocation) -> None:
    assert parse_location(url) == want


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "takes redis://"),
        ("/var/lib/replay.sqlite3", "scheme is 'none'"),
        ("sqlite:///x.db", "--replay-db FILE"),
        ("http://h", "scheme is 'http'"),
        (f"redis://:{SECRET}@h", "holds a password"),
        (f"redis://user:{SECRET}@h:6379/0", "--replay-store-password-file"),
        ("redis://", "needs a host"),
        ("redis://h:0", "from 1 to 65535"),
        ("redis://h:99999", "malformed"),
        ("redis://h/db1", "database number"),
        ("redis://h/123456", "database number"),
        ("redis://h?ca_file=/x", "need rediss://"),
        ("rediss://h?cert_file=/c", "needs both cert_file and key_file"),
        ("redis://h?key_prefix=a%7Bb", "key_prefix"),
        ("redis://h?key_prefix=a&key_prefix=b", "exactly one"),
        ("redis://h?bogus=1", "unknown options ['bogus']"),
        ("redis://h#x", "fragment"),
        ("redis://h /0", "control characters"),
        ("redis://h\n/0", "control characters"),
        ("redis://a%0d%0aWARNING%20forged@h/0", "user name contains control characters"),
        ("redis://a%00b@h/0", "user name contains control characters"),
        ("rediss://h/0?ca_file=/x%00y", "ca_file contains control characters"),
        ("rediss://h/0?server_name=a%00b", "server_name takes a host name"),
        ("rediss://h/0?server_name=a%2Fb", "server_name takes a host name"),
        ("rediss://h/0?server_name=a..b", "empty or too long label"),
        ("redis://" + "a" * 64 + ".example/0", "empty or too long label"),
        ("redis://a..b/0", "empty or too long label"),
    ],
)
def test_a_bad_url_is_one_clear_refusal_without_the_password(url: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_location(url)
    assert says in str(info.value)
    assert SECRET not in str(info.value)


def test_describe_names_where_and_how_never_the_password() -> None:
    loc = parse_location("rediss://fsnotes@h:6380/2?ca_file=/ca.pem", password=SECRET)
    assert loc.describe() == (
        "Redis rediss://fsnotes@h:6380/2, password from file, TLS verified against /ca.pem"
    )
    assert SECRET not in repr(loc)
    assert parse_location("redis://10.0.0.5").host_is_name is False
    assert parse_location("redis://redis.internal").host_is_name is True
    with pytest.raises(ValueError, match="one line"):
        parse_location("redis://h", password="two\nlines")


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _serve(tmp: Path, *extra: str) -> argparse.Namespace:
    (tmp / "notes").mkdir(exist_ok=True)
    return _parser().parse_args(["serve", str(tmp / "notes"), *extra])


def test_serve_flags_name_the_store_and_its_password_file(tmp_path: Path) -> None:
    keys = _write(tmp_path / "keys", "a" * 44)
    pw = _write(tmp_path / "pw", SECRET + "\n")
    config = ServeConfig.from_args(_serve(
        tmp_path, "--replay-store", "redis://10.0.0.5:6380/1", "--replay-store-password-file",
        str(pw), "--state-key-file", str(keys), "--state-dir", str(tmp_path / "state"),
    ))  # fmt: skip
    assert config.state.replay_store == RedisLocation("10.0.0.5", 6380, 1, password=SECRET)
    assert config.state.replay_db is None or config.state.replay_db.startswith(str(tmp_path))
    assert config.state.state_dir == str(tmp_path / "state")


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--replay-store", "redis://h"], "must share one key ring: pass --state-key-file FILE"),
        (["--replay-store", "redis://h", "--state-key-file", "{keys}", "--replay-db", "/x.db"],
         "give either --replay-store or --replay-db FILE, not both"),
        (["--replay-store-password-file", "{pw}"], "only applies with --replay-store URL"),
        (["--replay-store", "redis://h", "--state-key-file", "{keys}",
          "--replay-store-password-file", "{open_pw}"],
         "the replay store password file {open_pw}: readable or writable by the group or others"),
        (["--replay-store", "redis://h", "--state-key-file", "{keys}",
          "--replay-store-password-file", "{tmp}/none"],
         "the replay store password file {tmp}/none: does not exist"),
        (["--replay-store", f"redis://:{SECRET}@h", "--state-key-file", "{keys}"],
         "--replay-store: the replay store URL holds a password"),
    ],
)  # fmt: skip
def test_serve_refuses_what_cannot_work_in_one_line(
    tmp_path: Path, flags: list[str], says: str
) -> None:
    names = {
        "keys": str(_write(tmp_path / "keys", "a" * 44)),
        "pw": str(_write(tmp_path / "pw", SECRET)),
        "open_pw": str(_write(tmp_path / "open-pw", SECRET, 0o644)),
        "tmp": str(tmp_path),
    }
    with pytest.raises(ConfigError) as info:
        ServeConfig.from_args(_serve(tmp_path, *(f.format(**names) for f in flags)))
    assert says.format(**names) in str(info.value)
    assert SECRET not in str(info.value) and "\n" not in str(info.value)


def _policy(tmp: Path, table: str) -> Path:
    (tmp / "notes").mkdir(exist_ok=True)
    return _write(
        tmp / "p.toml",
        '[[principal]]\nname = "me"\nlocal = true\n'
        f'[[workspace]]\nname = "w"\npath = "{tmp}/notes"\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "w"\noperations = ["read"]\n' + table,
        0o644,
    )


def test_the_policy_file_names_the_store_and_the_command_line_wins(tmp_path: Path) -> None:
    pw = _write(tmp_path / "pw", SECRET)
    keys = _write(tmp_path / "keys", "a" * 44)
    path = _policy(
        tmp_path, f'[replay_store]\nurl = "redis://10.0.0.7/2"\npassword_file = "{pw}"\n'
    )
    base = ["serve", "--policy", str(path), "--state-key-file", str(keys)]
    config = ServeConfig.from_args(_parser().parse_args(base))
    assert config.state.replay_store == RedisLocation("10.0.0.7", db=2, password=SECRET)
    # --replay-store replaces the whole table: its password file is not carried over
    other = ServeConfig.from_args(_parser().parse_args([*base, "--replay-store", "redis://o"]))
    assert other.state.replay_store == RedisLocation("o")


@pytest.mark.parametrize(
    ("table", "line", "says"),
    [
        ('[replay_store]\nurl = "http://x"\n', 12, "scheme is 'http'"),
        (f'[replay_store]\nurl = "redis://:{SECRET}@x"\n', 12, "holds a password"),
        ('[replay_store]\nurl = "redis://x"\npassword_file = "pw"\n', 13, "absolute path"),
        ('[replay_store]\nurl = "redis://x"\ntls = true\n', 13, "tls"),
        ("[replay_store]\n", 11, "url"),
    ],
)
def test_a_bad_replay_store_table_names_its_line(
    tmp_path: Path, table: str, line: int, says: str
) -> None:
    path = _policy(tmp_path, table)
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    text = str(info.value)
    assert text.startswith(f"{path}:{line}: replay_store"), text
    assert says in text and SECRET not in text
