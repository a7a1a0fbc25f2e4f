"""The typed configuration (fs_notes/config.py), the secret-file reader and init's policy text,
in this process: what the command-line tests (test_cli.py, test_init.py) see from outside."""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path

import pytest

from fs_notes.cli import _parser
from fs_notes.config import ServeConfig, expand_path, folder_problem, parse_bind
from fs_notes.errors import ConfigError
from fs_notes.init import policy_text
from fs_notes.policy_file import load_policy
from fs_notes.secretfile import SecretFileError, read_secret_file


def _args(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["serve", *argv])


def test_home_is_expanded_in_every_spelling_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OTHER", "/elsewhere")
    assert expand_path("~/n") == expand_path("$HOME/n") == expand_path("${HOME}/n")
    assert expand_path("~/n") == f"{tmp_path}/n"
    assert expand_path("$OTHER/n") == "$OTHER/n"  # only HOME: no shell semantics
    assert expand_path("$HOMEWORK/n") == "$HOMEWORK/n"
    assert expand_path("/abs/~/n") == "/abs/~/n"


def test_folder_problems_are_distinct(tmp_path: Path) -> None:
    (tmp_path / "f.md").write_text("x")
    assert folder_problem(str(tmp_path)) is None
    assert folder_problem(str(tmp_path / "gone")) == "does not exist"
    assert folder_problem(str(tmp_path / "f.md")) == "not a folder"
    assert folder_problem(str(tmp_path / "f.md" / "x")) == "not a folder"


def test_the_configuration_is_parsed_once_into_typed_values(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    token = tmp_path / "token"
    token.write_text("t" * 20)
    token.chmod(0o600)
    config = ServeConfig.from_args(_args(
        str(tmp_path / "notes"), "--http", "127.0.0.1:0", "--token-file", str(token),
        "--allow-host", "notes.example:8443", "--replay-db", str(tmp_path / "r.db"),
        "--no-self-confine",
    ))  # fmt: skip
    assert config.http is not None and config.http.bind == parse_bind("127.0.0.1:0")
    assert config.http.bind.loopback and config.http.allow_hosts == ("notes.example:8443",)
    assert config.state.replay_db == str(tmp_path / "r.db")
    assert config.state.audit_log is None and config.self_confine is False
    assert [ws.path for ws in config.policy.workspaces] == [str(tmp_path / "notes")]
    assert config.policy_file is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("{tmp}", "--allow-host", "x"), "--allow-host only applies with --http HOST:PORT"),
        (("{tmp}", "--port-file", "p"), "--port-file only applies with --http HOST:PORT"),
        (("{tmp}", "--http", "127.0.0.1:1", "--allow-host", "a b:c"),
         "--allow-host takes HOST[:PORT], got 'a b:c'"),
        (("{tmp}", "--http", "127.0.0.1:1"), "--http needs --token-file FILE"),
        (("{tmp}", "--token-file", "t"), "--token-file only applies with --http"),
        (("{tmp}", "--policy", "p.toml"), "give either WORKSPACE or --policy FILE, not both"),
        (("--policy", "p.toml", "--token-file", "t"), "--token-file is for WORKSPACE mode"),
        (("{tmp}", "--http", "nohost"), "--http takes HOST:PORT"),
    ],
)  # fmt: skip
def test_each_inconsistent_command_line_gets_its_own_message(
    tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        ServeConfig.from_args(_args(*(a.replace("{tmp}", str(tmp_path)) for a in argv)))
    assert message in str(info.value)


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_private_secret_file_is_read(tmp_path: Path, mode: int) -> None:
    f = tmp_path / "s"
    f.write_bytes(b"secret")
    f.chmod(mode)
    assert read_secret_file(str(f), limit=64) == b"secret"


def test_secret_file_refusals(tmp_path: Path) -> None:
    f = tmp_path / "s"
    f.write_bytes(b"x" * 65)
    f.chmod(0o600)
    with pytest.raises(SecretFileError, match=r"^too large \(more than 64 bytes\)$"):
        read_secret_file(str(f), limit=64)
    f.chmod(0o602)
    with pytest.raises(SecretFileError, match=r"\(mode 0602\); fix it with: chmod 600 "):
        read_secret_file(str(f), limit=64)
    for mode in (0o640, 0o610, 0o604):  # the group may not read it either (issue 27 item 4)
        f.chmod(mode)
        with pytest.raises(SecretFileError, match=(
            rf"^readable or writable by the group or others \(mode {mode:04o}\); "
            rf"fix it with: chmod 600 "
        )):  # fmt: skip
            read_secret_file(str(f), limit=64)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(SecretFileError, match=r"^not a regular file$"):  # and no hang
        read_secret_file(str(fifo), limit=64)
    with pytest.raises(SecretFileError, match=r"^does not exist$"):
        read_secret_file(str(tmp_path / "gone"), limit=64)
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_init_policy_text_reads_back_as_written_whatever_the_names(tmp_path: Path) -> None:
    odd = tmp_path / 'quo"te ]] \\ back'
    odd.mkdir()
    text = policy_text("me x", [("a ]] \\b", str(odd))], "t" * 43, '["read"]')
    f = tmp_path / "p.toml"
    f.write_text(text)
    policy = load_policy(str(f))
    assert [(ws.name, ws.path) for ws in policy.workspaces] == [("a ]] \\b", str(odd))]
    assert [p.name for p in policy.principals] == ["me x"]
    grants = policy.grants_for(policy.principals[0])
    assert [sorted(g.operations) for g in grants] == [["read"]]
