"""`fs-notes init` (docs/interface.md): a policy, a key ring and a token that `serve` then uses.

The files are checked by what they let a client do: the printed stdio and HTTP commands, run as
printed, serve the folders to the principal, and the printed token is what HTTP accepts.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from wire import REPO, HttpServer, StdioServer, call_tool, child_env, request

from fs_notes.init import desktop_lines
from fs_notes.policy_file import load_policy
from fs_notes.rounds.seal import KeyRing


def _init(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", "init", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env or child_env(),
    )  # fmt: skip


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "notes", tmp_path / "Work Notes"
    for folder, note in ((a, "a.md"), (b, "b.md")):
        folder.mkdir()
        (folder / note).write_text(f"# {note}\n")
    return a, b


def _printed(stdout: str) -> tuple[str, list[str], list[str]]:
    lines = stdout.splitlines()
    token = lines[lines.index("bearer token (shown only now; the policy keeps its SHA-256):") + 1]
    stdio = shlex.split(lines[lines.index("serve over stdio (a client starts this command):") + 1])
    http = shlex.split(lines[lines.index("serve over Streamable HTTP:") + 1])
    return token.strip(), stdio, http


def test_init_writes_private_files_and_the_printed_commands_serve_the_folders(
    tmp_path: Path,
) -> None:
    a, b = _folders(tmp_path)
    cfg = tmp_path / "cfg"
    result = _init(str(a), str(b), "--config-dir", str(cfg), "--name", "me")
    assert result.returncode == 0, result.stderr
    token, stdio, http = _printed(result.stdout)
    policy_file, keys_file = cfg / "policy.toml", cfg / "state.keys"
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o700
    for f in (policy_file, keys_file):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert token not in f.read_text()  # the token is printed, never stored
    assert result.stdout.count(token) == 2  # once on its own, once in the HTTP snippet
    assert hashlib.sha256(token.encode()).hexdigest() in policy_file.read_text()
    policy = load_policy(str(policy_file))
    assert [ws.path for ws in policy.workspaces] == [str(a), str(b)]
    assert [ws.name for ws in policy.workspaces] == ["notes", "Work Notes"]
    assert len(KeyRing.from_file(keys_file).kids) == 1

    # stdio, as printed (the command after `python -m fs_notes`)
    assert stdio[:4] == [sys.executable, "-m", "fs_notes", "serve"]
    state = ("--replay-db", str(tmp_path / "state" / "r.db"))
    server = StdioServer(*stdio[3:], *state)
    try:
        listed = server.ask(call_tool(1, "notes_list", {"workspaceUri": b.as_uri()}))
        ids = [n["id"] for n in listed["result"]["structuredContent"]["notes"]]
        assert ids == ["b.md"]
    finally:
        assert server.close() == 0
    # HTTP, as printed, with the printed token (HttpServer adds its own --http 127.0.0.1:0)
    assert http[-2] == "--http" and http[-1] == "127.0.0.1:8765"
    served = HttpServer(*http[4:-2], *state, tmp=tmp_path, token=token)
    try:
        listed = served.ask(call_tool(2, "notes_list", {"workspaceUri": a.as_uri()}))
        assert [n["id"] for n in listed["result"]["structuredContent"]["notes"]] == ["a.md"]
        served.token = "x" * len(token)  # positive control: another token is not accepted
        assert served.post(request(3, "server/discover")).status_code == 401
    finally:
        served.close()


def test_the_printed_client_configurations_are_json_naming_the_same_command(
    tmp_path: Path,
) -> None:
    a, _ = _folders(tmp_path)
    result = _init(str(a), "--config-dir", str(tmp_path / "cfg"), "--http", "127.0.0.1:9999")
    assert result.returncode == 0, result.stderr
    token, stdio, _ = _printed(result.stdout)
    text = result.stdout
    first = text.index("{\n")
    decoder = json.JSONDecoder()
    local, end = decoder.raw_decode(text, first)
    remote, _ = decoder.raw_decode(text, text.index("{\n", end))
    entry = local["mcpServers"]["fs-notes"]
    assert [entry["command"], *entry["args"]] == stdio
    assert remote["mcpServers"]["fs-notes"] == {
        "url": "http://127.0.0.1:9999/mcp",
        "headers": {"Authorization": f"Bearer {token}"},
    }


def test_init_never_overwrites_and_writes_nothing_when_it_refuses(tmp_path: Path) -> None:
    a, _ = _folders(tmp_path)
    cfg = tmp_path / "cfg"
    cfg.mkdir(mode=0o700)
    keys = cfg / "state.keys"
    keys.write_text("mine\n")
    before = keys.stat()
    result = _init(str(a), "--config-dir", str(cfg))
    assert result.returncode == 2
    assert result.stderr == (
        f"fs-notes: {keys}: already exists (nothing was written); move it aside or pass "
        "--config-dir\n"
    )
    assert sorted(os.listdir(cfg)) == ["state.keys"]
    after = keys.stat()
    assert keys.read_text() == "mine\n"
    assert (after.st_mode, after.st_mtime_ns, after.st_ino) == (
        before.st_mode, before.st_mtime_ns, before.st_ino,
    )  # fmt: skip


def test_init_of_a_missing_folder_says_so_and_creates_nothing(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg"
    result = _init("~/gone", "--config-dir", str(cfg), env=child_env(HOME=str(tmp_path)))
    assert result.returncode == 2
    assert result.stderr == f"fs-notes: {tmp_path}/gone: does not exist\n"
    assert not cfg.exists()


def test_init_expands_the_config_dir_and_refuses_a_folder_named_twice(tmp_path: Path) -> None:
    a, _ = _folders(tmp_path)
    env = child_env(HOME=str(tmp_path))
    twice = _init(str(a), f"{a}/", "--config-dir", "~/cfg", env=env)
    assert twice.returncode == 2 and twice.stderr.endswith(": named twice\n")
    assert not (tmp_path / "cfg").exists()
    done = _init(str(a), "--config-dir", "$HOME/cfg", env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "cfg" / "policy.toml").is_file()


def test_init_refuses_a_config_dir_others_can_write_in(tmp_path: Path) -> None:
    a, _ = _folders(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    result = _init(str(a), "--config-dir", str(shared))
    assert result.returncode == 2
    assert result.stderr == (
        f"fs-notes: --config-dir {shared}: {shared} is owned by another user or writable by "
        "others (mode 0777); use a folder only you can write\n"
    )
    assert os.listdir(shared) == []
    shared.chmod(0o700)  # positive control: the same folder, private, is used
    assert _init(str(a), "--config-dir", str(shared)).returncode == 0
    assert sorted(os.listdir(shared)) == ["policy.toml", "state.keys"]


@pytest.mark.parametrize("name", ["example", "single-user"])
def test_init_example_prints_the_bundled_policy_byte_for_byte(name: str) -> None:
    result = _init("--example", name)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (Path(REPO) / "policies" / f"{name}.toml").read_text()


def test_init_without_folders_or_with_both_says_what_to_give(tmp_path: Path) -> None:
    none = _init("--config-dir", str(tmp_path / "cfg"))
    assert none.returncode == 2
    assert none.stderr == "fs-notes: give the notes folders to serve (fs-notes init FOLDER...)\n"
    both = _init(str(tmp_path), "--example", "example")
    assert both.returncode == 2 and "give no FOLDER" in both.stderr
    assert not (tmp_path / "cfg").exists()


def test_init_refuses_a_config_dir_beneath_a_folder_others_can_write_in(tmp_path: Path) -> None:
    """A reviewer's chain: under a world-writable folder, another user could move the config
    folder aside and plant their own policy. A sticky folder (like /tmp) is fine."""
    a, _ = _folders(tmp_path)
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o777)
    result = _init(str(a), "--config-dir", str(public / "cfg"))
    assert result.returncode == 2
    assert f"{public} is owned by another user or writable by others (mode 0777)" in result.stderr
    assert os.listdir(public) == []  # refused before anything was made beneath it
    public.chmod(0o1777)  # positive control: sticky, as /tmp is
    made = _init(str(a), "--config-dir", str(public / "x" / "y" / "cfg"))
    assert made.returncode == 0, made.stderr
    for folder in (public / "x", public / "x" / "y", public / "x" / "y" / "cfg"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_init_prints_a_claude_code_line_that_runs_the_printed_stdio_command(
    tmp_path: Path,
) -> None:
    # Issue 25: no `claude mcp add` line was printed.
    a, _ = _folders(tmp_path)
    result = _init(str(a), "--config-dir", str(tmp_path / "cfg"))
    assert result.returncode == 0, result.stderr
    _, stdio, _ = _printed(result.stdout)
    lines = result.stdout.splitlines()
    claude = shlex.split(lines[lines.index("Claude Code (stdio):") + 1])
    split = claude.index("--")
    assert claude[:split] == [
        "claude", "mcp", "add", "--transport", "stdio", "--scope", "user", "fs-notes"
    ]  # fmt: skip
    assert claude[split + 1 :] == stdio


def test_on_linux_init_points_claude_desktop_to_ssh_and_offers_it_no_local_entry(
    tmp_path: Path,
) -> None:
    # Issue 25: docs/clients.md says Claude Desktop (macOS, Windows) reaches fs-notes through
    # ssh; init offered it a local entry on Linux, where there is no Claude Desktop.
    a, _ = _folders(tmp_path)
    result = _init(str(a), "--config-dir", str(tmp_path / "cfg"))
    assert result.returncode == 0, result.stderr
    assert sys.platform.startswith("linux")  # fs-notes runs on Linux only
    lines = result.stdout.splitlines()
    desktop = [line for line in lines if "Claude Desktop" in line]
    assert desktop == [
        'Claude Desktop (macOS, Windows) starts fs-notes on this host through ssh: see '
        'docs/clients.md, "Claude Desktop".'
    ]
    clients = (REPO / "docs" / "clients.md").read_text()
    section = clients[clients.index("## Claude Desktop") :]
    assert '"command": "ssh"' in section[: section.index("\n## ", 3)]
    assert desktop_lines("darwin") == [
        "client configuration, stdio (Claude Desktop, Cursor; more in docs/clients.md):"
    ]
