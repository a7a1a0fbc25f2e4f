"""The command line (docs/interface.md): usage and configuration errors exit 2 with one line."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from wire import REPO, child_env

import fs_notes


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return _run_as(child_env(), *args)


def test_a_bad_policy_stops_serve_with_exit_2_naming_file_line_and_field(tmp_path: Path) -> None:
    policy = tmp_path / "team.toml"
    policy.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n[[workspace]]\nname = "w"\n'
        f'path = "{tmp_path}"\nsymlinks = "sometimes"\n'
    )
    result = _run("serve", "--policy", str(policy))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"{policy}:8:" in lines[0] and "symlinks" in lines[0]


@pytest.mark.parametrize(
    "args,needle",
    [
        (("serve",), "notes folder"),
        (("serve", "/nonexistent/folder"), "/nonexistent/folder: does not exist"),
        (("serve", "{tmp}/file.md"), "file.md: not a folder"),
        (("serve", "{tmp}", "--http", "nonsense"), "HOST:PORT"),
        (("serve", "{tmp}", "--state-key-file", "/nonexistent/key"), "--state-key-file"),
    ],
)
def test_configuration_errors_exit_2_with_one_line(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    (tmp_path / "file.md").write_text("# a file\n")
    result = _run(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_usage_errors_exit_2() -> None:
    assert _run("frobnicate").returncode == 2


def _run_as(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )


def test_version_prints_the_package_version() -> None:
    result = _run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"fs-notes {fs_notes.__version__}"


@pytest.mark.parametrize("where", ["before", "after"])
def test_global_options_are_accepted_before_or_after_the_subcommand(
    tmp_path: Path, where: str
) -> None:
    options = ("--log-level", "debug", "--log-format", "json")
    args = (*options, "check") if where == "before" else ("check", *options)
    result = _run(*args)
    assert result.returncode == 0, result.stderr
    control = _run("check")
    assert control.returncode == 0 and result.stdout == control.stdout


@pytest.mark.parametrize("args", [("--log-level", "verbose", "check"),
                                  ("check", "--log-level", "verbose"),
                                  ("check", "--log-format", "xml")])  # fmt: skip
def test_an_invalid_global_option_is_a_usage_error_naming_the_choices(
    args: tuple[str, ...],
) -> None:
    result = _run(*args)
    assert result.returncode == 2
    assert "invalid choice" in result.stderr and "choose from" in result.stderr


def test_a_file_uri_as_workspace_says_a_path_is_expected_and_suggests_it(tmp_path: Path) -> None:
    """`serve file:///home/me/notes` used to say only "does not exist"; now it says a folder
    path is expected and, when the URI names a folder that can be served, suggests that path
    (quoted for a shell when it needs it). Nothing is served: exit 2."""
    (tmp_path / "my notes").mkdir()
    (tmp_path / "notes").mkdir()
    expected = "a folder path is expected, not a file: URI"
    cases = {
        (tmp_path / "notes").as_uri(): f"{expected}; did you mean {tmp_path}/notes?",
        (tmp_path / "my notes").as_uri(): f"{expected}; did you mean '{tmp_path}/my notes'?",
        (tmp_path / "gone").as_uri(): f"{expected} (and {tmp_path}/gone does not exist)",
        "file://elsewhere/srv/notes": expected,  # not a URI of this host: nothing to suggest
    }
    for given, reason in cases.items():
        result = _run("serve", given)
        assert result.returncode == 2
        assert result.stdout == ""
        assert result.stderr == f"fs-notes: {given}: {reason}\n"
    # positive control: the suggested path is served
    served = _run("serve", str(tmp_path / "notes"), "--replay-db", str(tmp_path / "r.db"))
    assert served.returncode == 0, served.stderr


def test_tilde_and_home_are_expanded_and_the_message_names_the_expanded_path(
    tmp_path: Path,
) -> None:
    env = child_env(HOME=str(tmp_path))
    for given in ("~/missing", "$HOME/missing", "${HOME}/missing"):
        result = _run_as(env, "serve", given)
        assert result.returncode == 2
        assert result.stderr == f"fs-notes: {tmp_path}/missing: does not exist\n"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\n")
    served = _run_as(env, "serve", "~/notes", "--replay-db", str(tmp_path / "r.db"))
    assert served.returncode == 0, served.stderr  # stdin is empty: serve, then exit on EOF
    assert f"file://{tmp_path}/notes" in served.stderr


def test_a_folder_the_user_cannot_read_is_not_readable_not_missing(tmp_path: Path) -> None:
    """A 0000 folder. Root reads everything, so as root the server runs without the two
    capabilities that bypass file permissions (setpriv drops them from the bounding set)."""
    private = tmp_path / "private"
    private.mkdir(mode=0o000)
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    prefix = drop if os.geteuid() == 0 else []
    try:
        result = subprocess.run(
            [*prefix, sys.executable, "-m", "fs_notes", "serve", str(private)],
            capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
        )  # fmt: skip
    finally:
        private.chmod(0o700)
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"fs-notes: {private}: not readable (permission denied)\n"


def test_a_policy_naming_a_missing_folder_names_the_workspace_and_the_path(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "team.toml"
    policy.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n[[workspace]]\nname = "team"\n'
        f'path = "{tmp_path}/gone"\n'
    )
    result = _run("serve", "--policy", str(policy), "--replay-db", str(tmp_path / "r.db"))
    assert result.returncode == 2
    assert result.stderr == f'fs-notes: workspace "team" ({tmp_path}/gone): does not exist\n'


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620, 0o666, 0o640])
def test_a_token_file_others_can_read_is_refused_saying_how_to_fix_it(
    tmp_path: Path, mode: int
) -> None:
    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(mode)
    result = _run("serve", str(tmp_path), "--http", "127.0.0.1:0", "--token-file", str(token))
    assert result.returncode == 2
    assert result.stderr == (
        f"fs-notes: --token-file {token}: readable or writable by the group or others "
        f"(mode {mode:04o}); fix it with: chmod 600 {token}\n"
    )
    token.chmod(0o600)  # positive control: the same file, private, gets past the check
    control = _run("serve", str(tmp_path), "--http", "bad", "--token-file", str(token))
    assert control.returncode == 2 and "HOST:PORT" in control.stderr


def test_serve_help_names_every_default_path(tmp_path: Path) -> None:
    env = child_env(XDG_STATE_HOME=str(tmp_path / "st"), COLUMNS="1000")  # no wrapping
    result = _run_as(env, "serve", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert f"default: {tmp_path}/st/fs-notes/replay.sqlite3" in text
    assert "default: state.keys beside the replay database" in text
    assert "(default: none)" in text  # the audit log
    assert "(default: info)" in text


def test_json_log_format_writes_one_json_object_per_line(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    result = _run(
        "serve", str(tmp_path / "notes"), "--replay-db", str(tmp_path / "r.db"),
        "--log-format", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert records and all(set(r) >= {"time", "level", "logger", "message"} for r in records)
    assert any(r["message"].startswith("replay database: ") for r in records)


def test_a_bare_hex_secret_is_a_state_key_ring_and_an_open_one_is_refused(
    tmp_path: Path,
) -> None:
    secret = hashlib.sha256(b"fs-notes").hexdigest()  # 64 hex digits, as openssl rand -hex 32
    keys = tmp_path / "keys"
    keys.write_text(secret + "\n")
    keys.chmod(0o644)
    (tmp_path / "notes").mkdir()
    args = ("serve", str(tmp_path / "notes"), "--replay-db", str(tmp_path / "r.db"),
            "--state-key-file", str(keys))  # fmt: skip
    refused = _run(*args)
    assert refused.returncode == 2
    assert refused.stderr == (
        f"fs-notes: --state-key-file {keys}: readable or writable by the group or others "
        "(mode 0644); "
        f"fix it with: chmod 600 {keys}\n"
    )
    keys.chmod(0o600)
    served = _run(*args)
    assert served.returncode == 0, served.stderr
    kid = "s" + hashlib.sha256(bytes.fromhex(secret)).hexdigest()[:12]
    assert f"state key: {kid}, file {keys}" in served.stderr
    assert secret not in served.stderr


def test_a_configuration_error_escapes_control_characters_and_is_json_when_asked(
    tmp_path: Path,
) -> None:
    forged = str(tmp_path / "no\nfs-notes INFO fs_notes.serve: forged\x1b[31m\u202e")
    text = _run("serve", forged)
    assert text.returncode == 2
    assert text.stderr.count("\n") == 1 and "\x1b" not in text.stderr
    assert "\u202e" not in text.stderr and "\\n" in text.stderr and "\\u202e" in text.stderr
    as_json = _run("serve", forged, "--log-format", "json")
    assert as_json.returncode == 2 and as_json.stderr.count("\n") == 1
    record = json.loads(as_json.stderr)
    assert record["level"] == "ERROR" and record["message"].endswith(": does not exist")
    assert "\x1b" not in record["message"] and "\n" not in record["message"]


def test_a_relative_home_is_refused_where_it_would_be_used(tmp_path: Path) -> None:
    for home in ("", "relative/home"):
        result = _run_as(child_env(HOME=home), "serve", "~/notes")
        assert result.returncode == 2
        assert result.stderr == (
            f"fs-notes: ~/notes: HOME is {home!r}, not an absolute path: give the full path\n"
        )
    (tmp_path / "n").mkdir()  # positive control: an absolute path needs no HOME
    ok = _run_as(child_env(HOME=""), "serve", str(tmp_path / "n"),
                 "--replay-db", str(tmp_path / "r.db"))  # fmt: skip
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("serve", "--htp", "127.0.0.1:8765"),
         "fs-notes serve: unknown option --htp; did you mean --http?"),
        (("serve", "{tmp}", "--token-fil=x"),
         "fs-notes serve: unknown option --token-fil; did you mean --token-file?"),
        (("forget", "--stal"),
         "fs-notes forget: unknown option --stal; did you mean --stale?"),
        (("--log-levl", "debug", "check"),
         "fs-notes: unknown option --log-levl; did you mean --log-level?"),
        (("--log-level", "debug", "chekc"),
         "fs-notes: error: unknown command 'chekc': did you mean 'check'? "
         "(commands: serve, init, check, exercises, demo, forget, changes, approve)"),
        (("serve", "--zzzzzz", "{tmp}"),
         "fs-notes serve: unknown option --zzzzzz"),
    ],
)  # fmt: skip
def test_a_mistyped_option_or_command_is_refused_with_the_closest_one_suggested(
    tmp_path: Path, args: tuple[str, ...], line: str
) -> None:
    result = _run(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == line
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args", [("serve", "{tmp}", "--http", "127.0.0.1:0", "--token"), ("check", "--js"),
             ("serve", "{tmp}", "--no-self")],
)  # fmt: skip
def test_a_prefix_of_an_option_is_not_taken_for_the_option(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # argparse's allow_abbrev would read --js as --json and --no-self as --no-self-confine: a
    # typo would change what runs. It is off: a prefix is refused, naming the whole option.
    result = _run(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert result.returncode == 2
    assert "did you mean --" in result.stderr and "unknown option" in result.stderr


def test_each_unknown_word_is_a_line_of_its_own_after_the_usage(tmp_path: Path) -> None:
    """The suggestion used to land mid-line ("unrecognized arguments: --htp (did you mean
    --http?) extra --foo"): now the usage, then one line per word, each a whole sentence."""
    result = _run("serve", str(tmp_path), "--htp", "127.0.0.1:8765", "extra", "--foo")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith("usage: fs-notes serve ")
    assert lines[-4:] == [
        "fs-notes serve: unknown option --htp; did you mean --http?",
        "fs-notes serve: unexpected argument 127.0.0.1:8765",
        "fs-notes serve: unexpected argument extra",
        "fs-notes serve: unknown option --foo",
    ]


def test_help_before_the_command_prints_the_usage_and_exits_0() -> None:
    """`fs-notes --help` and `-h` (what .ci/wheel runs) print the help, not 'unknown command'."""
    import subprocess
    import sys

    for flag in ("--help", "-h"):
        done = subprocess.run(
            [sys.executable, "-m", "fs_notes", flag], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: fs-notes"), done.stdout
        assert "unknown command" not in done.stderr
