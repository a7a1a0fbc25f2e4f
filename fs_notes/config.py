"""The server's configuration, typed: parsed once from the command line and the policy.

`ServeConfig.from_args` turns `fs-notes serve`'s arguments into values that nothing downstream
re-parses: the policy (zero-config WORKSPACE or --policy FILE), the HTTP options, the paths of
the confirmation state, and the two operator switches. Every path a person types is expanded
(`~`, `$HOME`) first, and every message names the expanded path. Every problem is a
`ConfigError` with one line that says what to do.

The composition root (`compose.py`) builds the server from a `ServeConfig`; `serve.py` runs it.
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import os
import re
from dataclasses import dataclass

from .confirm.location import RedisLocation
from .errors import ConfigError
from .paths import expand_path
from .policy import Policy, PolicyError, hash_token
from .secretfile import SecretFileError, read_secret_file

__all__ = ["expand_path"]  # its home is paths.py (the policy file expands with it too)

MAX_TOKEN_FILE_BYTES = 4096
_PORT = re.compile(r"[0-9]{1,5}")


def folder_problem(path: str) -> str | None:
    """Why `path` cannot be served as a notes folder, or None: "does not exist", "not a folder",
    "not readable (...)"."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return "does not exist"
    except NotADirectoryError:
        return "not a folder"
    except PermissionError:
        return "not readable (permission denied)"
    except OSError as exc:
        return f"cannot be opened ({exc.strerror})"
    try:
        os.listdir(fd)
    except PermissionError:
        return "not readable (permission denied)"
    except OSError as exc:
        return f"cannot be listed ({exc.strerror})"
    finally:
        os.close(fd)
    return None


@dataclass(frozen=True)
class HttpBind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False


def parse_bind(text: str) -> HttpBind:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not _PORT.fullmatch(port) or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--http takes HOST:PORT (e.g. 127.0.0.1:8765), got {text!r}")
    return HttpBind(host, int(port))


def read_token(path: str) -> str:
    try:
        data = read_secret_file(path, limit=MAX_TOKEN_FILE_BYTES)
    except SecretFileError as exc:
        raise ConfigError(f"--token-file {path}: {exc}") from None
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"--token-file {path}: not UTF-8 text") from None
    if len(token) < 16:
        raise ConfigError(f"--token-file {path}: the token must be at least 16 characters")
    return token


@dataclass(frozen=True)
class StatePaths:
    """Where confirmations are kept: None means the default (docs/interface.md): the replay
    database in the state folder, the key ring beside it, no audit log. `state_dir` is this
    host's own folder (default: the replay database's folder, else $XDG_STATE_HOME/fs-notes);
    `replay_store` a shared store (Redis) instead of the SQLite database (docs/deploy.md)."""

    replay_db: str | None = None
    state_key_file: str | None = None
    audit_log: str | None = None
    state_dir: str | None = None
    replay_store: RedisLocation | None = None


@dataclass(frozen=True)
class HttpOptions:
    bind: HttpBind
    allow_origins: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    port_file: str | None = None


@dataclass(frozen=True)
class ServeConfig:
    policy: Policy
    http: HttpOptions | None
    state: StatePaths
    allow_unconfined: bool = False
    self_confine: bool = True
    policy_file: str | None = None  # the file the policy came from (None: WORKSPACE mode)
    #: Search indexes not served for this many days are pruned at start-up (0: never).
    unused_days: float = 30.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeConfig:
        http = None
        if args.http:
            http = HttpOptions(
                parse_bind(args.http),
                tuple(args.allow_origin),
                tuple(_checked_hosts(args.allow_host)),
                _path(args.port_file),
            )
        elif args.allow_host or args.allow_origin or args.port_file:
            used = "--allow-host" if args.allow_host else "--allow-origin"
            used = "--port-file" if args.port_file else used
            raise ConfigError(f"{used} only applies with --http HOST:PORT")
        policy_file = _path(args.policy)
        policy = _policy(args, policy_file)
        unused_days = getattr(args, "unused_days", None)
        if unused_days is not None and not 0 <= unused_days <= 36500:
            raise ConfigError("--unused-days takes a number of days from 0 (never) to 36500")
        return cls(
            policy=policy,
            http=http,
            state=_state(args, policy),
            allow_unconfined=bool(args.allow_unconfined),
            self_confine=not args.no_self_confine,
            policy_file=policy_file,
            unused_days=(
                float(policy.limits.unused_index_days) if unused_days is None else unused_days
            ),
        )


def _path(text: str | None) -> str | None:
    return None if text is None else expand_path(text)


MAX_PASSWORD_FILE_BYTES = 4096


def _state(args: argparse.Namespace, policy: Policy) -> StatePaths:
    state_dir = _path(args.state_dir)
    replay_db = _path(args.replay_db)
    if replay_db is None and state_dir is not None:
        replay_db = os.path.join(state_dir, "replay.sqlite3")
    return StatePaths(
        replay_db=replay_db,
        state_key_file=_path(args.state_key_file),
        audit_log=_path(args.audit_log),
        state_dir=state_dir,
        replay_store=_replay_store(args, policy),
    )


def _replay_store(args: argparse.Namespace, policy: Policy) -> RedisLocation | None:
    """serve's shared store (`replay_store_location`), which excludes --replay-db and needs
    the shared key ring (--state-key-file)."""
    if args.replay_store or policy.replay_store is not None:
        flag = _store_flag(args.replay_store)
        if args.replay_db is not None:
            raise ConfigError(f"give either {flag} or --replay-db FILE, not both")
        if args.state_key_file is None:
            raise ConfigError(
                f"{flag} is for several instances, which must share one key ring: pass "
                "--state-key-file FILE, the same file on every host (docs/deploy.md)"
            )
    return replay_store_location(args.replay_store, args.replay_store_password_file, policy)


def _store_flag(url: str | None) -> str:
    return "--replay-store" if url else "the policy's [replay_store] url"


def replay_store_location(
    url: str | None, password_file: str | None, policy: Policy | None
) -> RedisLocation | None:
    """The shared replay store `url` (--replay-store) names, else the policy's [replay_store]
    url; None if neither does. Its password is read now (owner-only, secretfile.py) from
    `password_file` (--replay-store-password-file), else, when the URL is the policy's, from
    the policy's password_file. What `serve` (`ServeConfig`) and `fs-notes check` use; one-line
    ConfigError for a password file without a URL, an unreadable password file or a bad URL."""
    from .confirm.location import parse_location

    setting = policy.replay_store if policy is not None else None
    flag = _store_flag(url)
    if password_file is None and setting is not None and not url:
        password_file = setting.password_file
    url = url or (setting.url if setting is not None else None)
    if url is None:
        if password_file is not None:
            raise ConfigError("--replay-store-password-file only applies with --replay-store URL")
        return None
    password = None
    if password_file is not None:
        password_file = expand_path(password_file)
        try:
            data = read_secret_file(password_file, limit=MAX_PASSWORD_FILE_BYTES)
            password = data.decode("utf-8").strip("\n")
        except SecretFileError as exc:
            raise ConfigError(f"the replay store password file {password_file}: {exc}") from None
        except UnicodeDecodeError:
            raise ConfigError(
                f"the replay store password file {password_file}: not UTF-8 text"
            ) from None
    try:
        return parse_location(url, password=password)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


def _checked_hosts(entries: list[str]) -> list[str]:
    from .transport.http import split_host  # only with --allow-host: it loads starlette

    for entry in entries:
        try:
            split_host(entry)
        except ValueError:
            raise ConfigError(f"--allow-host takes HOST[:PORT], got {entry!r}") from None
    return entries


def _policy(args: argparse.Namespace, policy_file: str | None) -> Policy:
    if policy_file and args.workspace:
        raise ConfigError("give either WORKSPACE or --policy FILE, not both")
    sandbox = getattr(args, "sandbox", None)
    if policy_file and sandbox is not None:
        raise ConfigError(
            "--sandbox is for WORKSPACE mode; in a policy, set sandbox in each [[workspace]]"
        )
    if policy_file:
        if args.token_file:
            raise ConfigError(
                "--token-file is for WORKSPACE mode; a policy file holds token hashes"
            )
        try:
            from .policy_file import load_policy  # the file format: only when there is a file

            return load_policy(policy_file)
        except PolicyError as exc:
            raise ConfigError(str(exc)) from None
    if not args.workspace:
        raise ConfigError(
            "give the notes folder to serve (fs-notes serve WORKSPACE) or --policy FILE"
        )
    expanded = expand_path(args.workspace)
    problem = folder_problem(expanded)
    if problem is not None:
        raise ConfigError(f"{expanded}: {_uri_problem(expanded) or problem}")
    path = os.path.realpath(expanded)
    token_hash = None
    if args.http:
        if not args.token_file:
            raise ConfigError("--http needs --token-file FILE (the bearer token clients must send)")
        token_hash = hash_token(read_token(expand_path(args.token_file)))
    elif args.token_file:
        raise ConfigError("--token-file only applies with --http")
    try:
        return Policy.for_single_workspace(
            path, local_user(), token_sha256=token_hash, sandbox=sandbox or "landlock"
        )
    except PolicyError as exc:
        raise ConfigError(f"{expanded}: {exc}") from None


def _uri_problem(given: str) -> str | None:
    """Why a WORKSPACE that is a file: URI (what clients pass as workspaceUri, and what a notes
    app copies) cannot be served: a folder path is expected, and the path the URI names is
    suggested when it is a folder that can be served (None: `given` is not a file: URI)."""
    if given[:5].lower() != "file:":
        return None
    import shlex

    from .lexical import LexicalError, parse_workspace_uri

    expected = "a folder path is expected, not a file: URI"
    try:
        path = parse_workspace_uri(given).as_posix()
    except LexicalError:
        return expected
    problem = folder_problem(path)
    if problem is None:
        return f"{expected}; did you mean {shlex.quote(path)}?"
    return f"{expected} (and {path} {problem})"


def local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"
