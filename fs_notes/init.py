"""`fs-notes init FOLDER...`: a policy, a state key ring and a bearer token for a new set-up.

Writes, in the configuration folder (default `~/.config/fs-notes`, made 0700):
- `policy.toml`: one principal (you: the local user over stdio, and the new token over HTTP), a
  workspace per folder, and a grant of every operation (read only with --read-only). The token
  is stored only as its SHA-256; the file is checked by loading it as `serve` will.
- `state.keys`: a key ring of one random 32-byte key (format: README, "The state key ring").

Both files are created 0600 and never overwrite anything: if either exists, nothing is written;
nor is anything written in a folder that another user owns or others can write in, or beneath
one (a folder above may be root's, and writable by all if sticky, like /tmp), as ssh's
StrictModes checks a key's folders. Missing folders are made 0700.
A file is written in full under a temporary name and linked into place, so a crash leaves either
no file or a whole one; if the second cannot be placed, the first is removed again. The token is
printed once, with the `serve` command line and a client configuration that use it.
`--example NAME` prints a bundled, commented policy example instead and writes nothing.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import shlex
import shutil
import stat
import sys

from .config import expand_path, folder_problem, local_user, parse_bind
from .errors import ConfigError
from .policy import PolicyError, check_name, hash_token
from .render import shown

POLICY_NAME = "policy.toml"
KEYS_NAME = "state.keys"


def _toml_string(value: str) -> str:
    # A JSON string without \u-escapes of non-ASCII is a TOML basic string, once DEL (which
    # JSON leaves as it is and TOML forbids) is escaped too.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _workspaces(folders: list[str]) -> list[tuple[str, str]]:
    named: list[tuple[str, str]] = []
    for given in folders:
        expanded = expand_path(given)
        problem = folder_problem(expanded)
        if problem is not None:
            raise ConfigError(f"{shown(expanded)}: {problem}")
        path = os.path.realpath(expanded)
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"{shown(expanded)}: the path is not valid UTF-8") from None
        if any(path == seen for _, seen in named):
            raise ConfigError(f"{shown(expanded)}: named twice")
        base = os.path.basename(path) or "notes"
        try:
            check_name(base)
        except ValueError:
            base = "notes"
        name, n = base, 2
        while any(name == seen for seen, _ in named):
            name, n = f"{base}-{n}", n + 1
        named.append((name, path))
    return named


def policy_text(principal: str, workspaces: list[tuple[str, str]], token: str, ops: str) -> str:
    lines = [
        "# fs-notes policy written by `fs-notes init` (reference: docs/policy.md).",
        "# The token's SHA-256 only: the token itself was printed once when this was written.",
        "",
        "[[principal]]",
        f"name = {_toml_string(principal)}",
        "local = true                 # you, starting fs-notes over stdio",
        f'token_sha256 = "{hash_token(token)}"   # ...or over HTTP with the bearer token',
    ]
    for name, path in workspaces:
        lines += ["", "[[workspace]]", f"name = {_toml_string(name)}",
                  f"path = {_toml_string(path)}"]  # fmt: skip
    for name, _ in workspaces:
        lines += ["", "[[grant]]", f"principal = {_toml_string(principal)}",
                  f"workspace = {_toml_string(name)}", f"operations = {ops}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _place(folder: str, name: str, data: bytes) -> str:
    """Write `data` to folder/name (0600), never over an existing file."""
    final = os.path.join(folder, name)
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, final, follow_symlinks=False)
        except FileExistsError:
            raise ConfigError(f"{final}: already exists (nothing was written)") from None
    finally:
        os.unlink(tmp)
    return final


def _unsafe(st: os.stat_result, *, leaf: bool) -> bool:
    """Whether others could replace what is in a folder: the config folder itself must be
    ours; a folder above it may also be root's, and may be writable by others if sticky."""
    if st.st_uid not in ((os.geteuid(),) if leaf else (os.geteuid(), 0)):
        return True
    open_to_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return bool(open_to_others) and (leaf or not st.st_mode & stat.S_ISVTX)


def _make_private_folder(folder: str) -> None:
    """Make `folder` (missing parts 0700) and check it and every folder above it, as ssh's
    StrictModes checks a key's folders: a secret must not be written where others can swap it."""
    parts = folder.strip("/").split("/")
    for depth in range(1, len(parts) + 1):
        path = "/" + "/".join(parts[:depth])
        leaf = depth == len(parts)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
            st = os.stat(path)
        except OSError as exc:
            where = f"--config-dir {shown(folder)}: {shown(path)}"
            raise ConfigError(f"{where}: {exc.strerror}") from None
        if _unsafe(st, leaf=leaf):
            raise ConfigError(
                f"--config-dir {shown(folder)}: {shown(path)} is owned by another user or "
                f"writable by others (mode {stat.S_IMODE(st.st_mode):04o}); use a folder only "
                "you can write"
            )


def _command() -> list[str]:
    found = shutil.which("fs-notes")
    return [os.path.abspath(found)] if found else [sys.executable, "-m", "fs_notes"]


def example(name: str) -> str:
    """A bundled policy example (the repository's policies/, shipped as fs_notes/examples/)."""
    from importlib.resources import files

    return (files("fs_notes") / "examples" / f"{name}.toml").read_text(encoding="utf-8")


def init(args: argparse.Namespace) -> int:
    if args.example:
        if args.folders:
            raise ConfigError("--example prints an example and writes nothing: give no FOLDER")
        print(example(args.example), end="")
        return 0
    if not args.folders:
        raise ConfigError("give the notes folders to serve (fs-notes init FOLDER...)")
    folder = os.path.abspath(expand_path(args.config_dir))
    bind = parse_bind(args.http)
    workspaces = _workspaces(list(args.folders))
    principal = args.name or local_user()
    try:
        check_name(principal)
    except ValueError as exc:
        given = "--name" if args.name else "your user name (from the environment)"
        raise ConfigError(
            f"{given} {shown(principal)!r} is not a principal name: {exc} (pass --name NAME)"
        ) from None
    for name in (POLICY_NAME, KEYS_NAME):
        if os.path.lexists(os.path.join(folder, name)):
            raise ConfigError(
                f"{os.path.join(folder, name)}: already exists (nothing was written); "
                "move it aside or pass --config-dir"
            )
    _make_private_folder(folder)
    token = secrets.token_urlsafe(32)
    ops = '["read"]' if args.read_only else '["read", "write", "delete"]'
    policy = policy_text(principal, workspaces, token, ops)
    kid = f"k{secrets.token_hex(6)}"
    keys = f"{kid}:{base64.b64encode(secrets.token_bytes(32)).decode()}\n"
    policy_path = _place(folder, POLICY_NAME, policy.encode())
    try:
        from .policy_file import load_policy

        load_policy(policy_path)  # exactly as serve will read it
        keys_path = _place(folder, KEYS_NAME, keys.encode())
    except (ConfigError, PolicyError, OSError) as exc:
        _remove(policy_path)
        raise ConfigError(f"{shown(policy_path)}: {exc} (nothing was kept)") from None
    except BaseException:  # Ctrl-C: no policy naming a token nobody saw
        _remove(policy_path)
        raise
    _report(principal, workspaces, policy_path, keys_path, kid, token, bind.host, bind.port)
    return 0


def _report(
    principal: str,
    workspaces: list[tuple[str, str]],
    policy_path: str,
    keys_path: str,
    kid: str,
    token: str,
    host: str,
    port: int,
) -> None:
    command = _command()
    base = [*command, "serve", "--policy", policy_path, "--state-key-file", keys_path]
    http = [*base, "--http", f"{host}:{port}"]
    url = f"http://{host}:{port}/mcp"
    served = ", ".join(f"{shown(name)} ({shown(path)})" for name, path in workspaces)
    snippet = {"mcpServers": {"fs-notes": {"command": command[0], "args": [*base[1:]]}}}
    remote = {
        "mcpServers": {
            "fs-notes": {"url": url, "headers": {"Authorization": f"Bearer {token}"}}
        }
    }
    print(f"wrote {shown(policy_path)} (0600): principal {shown(principal)}; workspaces {served}")
    print(f"wrote {shown(keys_path)} (0600): one key, {kid}")
    print()
    print("bearer token (shown only now; the policy keeps its SHA-256):")
    print(f"  {token}")
    print()
    print("serve over stdio (a client starts this command):")
    print(f"  {shlex.join(base)}")
    print("serve over Streamable HTTP:")
    print(f"  {shlex.join(http)}")
    print()
    print("Claude Code (stdio):")
    print(f"  {claude_code_line(base)}")
    for line in desktop_lines(sys.platform):
        print(line)
    print(json.dumps(snippet, indent=2, ensure_ascii=False))
    print(f"client configuration, HTTP ({url}):")
    print(json.dumps(remote, indent=2, ensure_ascii=False))


def claude_code_line(command: list[str]) -> str:
    """`claude mcp add` for this stdio command (docs/clients.md, "Claude Code")."""
    return shlex.join(
        ["claude", "mcp", "add", "--transport", "stdio", "--scope", "user", "fs-notes", "--",
         *command]
    )  # fmt: skip


def desktop_lines(platform: str) -> list[str]:
    """The heading of the stdio configuration. Claude Desktop runs on macOS and Windows, not
    on Linux, where fs-notes runs: there it reaches fs-notes through ssh (docs/clients.md)."""
    if platform.startswith("linux"):
        return [
            "Claude Desktop (macOS, Windows) starts fs-notes on this host through ssh: see "
            'docs/clients.md, "Claude Desktop".',
            "client configuration, stdio (Cursor and other clients that start a command on "
            "this host; more in docs/clients.md):",
        ]
    return ["client configuration, stdio (Claude Desktop, Cursor; more in docs/clients.md):"]
