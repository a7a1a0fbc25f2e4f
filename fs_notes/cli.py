"""Command line: `fs-notes serve | init | check | exercises | demo` (see docs/interface.md).

The global options (`--log-level`, `--log-format`) are accepted before or after the subcommand.
Exit status: 0 success, 2 usage or configuration error (one-line reason on stderr), 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import __version__
from .errors import ConfigError

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


def _state_home() -> str:
    """Where the state folder is by default (shown in --help; nothing is made here)."""
    from .statefolder import state_home

    return state_home()


def _config_home() -> str:
    from .statefolder import config_home

    return config_home()


def _global_options(defaults: bool) -> argparse.ArgumentParser:
    """The options every subcommand also takes; only the top level sets their defaults, so a
    value given after the subcommand is not reset by one given (or not) before it."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        type=str.lower,
        default="info" if defaults else argparse.SUPPRESS,
        help="what the log on stderr shows (default: info)",
    )
    options.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text" if defaults else argparse.SUPPRESS,
        help="text: one line per record (default); json: one JSON object per line",
    )
    return options


class _NoAbbrevParser(argparse.ArgumentParser):
    """A subcommand's parser: its options are never abbreviated (`--htt` is not `--http`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def _options_of(parser: argparse.ArgumentParser) -> list[str]:
    return [o for action in parser._actions for o in action.option_strings if o.startswith("--")]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; an unknown option is a usage error that suggests, on a line of its own,
    the closest one the command has ("fs-notes serve: unknown option --htp; did you mean
    --http?"), an unknown command the closest command."""
    import difflib

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    words = list(sys.argv[1:] if argv is None else argv)
    top = _options_of(parser)
    valued = {o for a in parser._actions if a.nargs is None for o in a.option_strings}
    i = 0
    while i < len(words) and words[i] != "--":  # before the command: the global options
        word = words[i]
        name = word.split("=", 1)[0]
        if word in ("-h", "--help"):
            break  # argparse prints the help and exits 0
        if word.startswith("-"):
            if name not in top:
                _refuse(parser, [_unknown(word, top)])
            i += 2 if name in valued and "=" not in word else 1
            continue
        if word not in sub.choices:
            close = difflib.get_close_matches(word, list(sub.choices), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            parser.error(
                f"unknown command {word!r}: {hint}(commands: {', '.join(sub.choices)})"
            )
        break
    args, extra = parser.parse_known_args(words)
    if extra:
        chosen = sub.choices[args.command]
        known = _options_of(chosen) + _options_of(parser)
        _refuse(chosen, [_unknown(word, known) for word in extra])
    return args


def _unknown(word: str, known: list[str]) -> str:
    """What is wrong with one word of the command line, for a line of its own: "unknown option
    --htp; did you mean --http?" (the closest option the command has, if one is close), or
    "unexpected argument x". An option's value (`--token-fil=x`) is not repeated."""
    import difflib

    if not word.startswith("-"):
        return f"unexpected argument {word}"
    name = word.split("=", 1)[0]
    close = difflib.get_close_matches(name, known, n=1)
    return f"unknown option {name}; did you mean {close[0]}?" if close else f"unknown option {name}"


def _refuse(parser: argparse.ArgumentParser, problems: list[str]) -> NoReturn:
    """A usage error: the command's usage, then each problem on a line of its own, prefixed by
    the command (`fs-notes serve: unknown option --htp; did you mean --http?`); exit 2."""
    from .render import shown

    parser.print_usage(sys.stderr)
    for problem in problems:
        print(f"{parser.prog}: {shown(problem)}", file=sys.stderr)
    sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fs-notes",
        allow_abbrev=False,  # a prefix of an option is a mistake to point out, not to guess
        description="An MCP server for a folder of markdown notes.",
        parents=[_global_options(True)],
    )
    parser.add_argument("--version", action="version", version=f"fs-notes {__version__}")
    sub: Any = parser.add_subparsers(  # (typeshed ties parents to parser_class)
        dest="command", required=True, metavar="COMMAND", parser_class=_NoAbbrevParser
    )
    common = [_global_options(False)]
    state = _state_home()

    serve = sub.add_parser(
        "serve",
        parents=common,
        help="serve notes over stdio (default) or Streamable HTTP",
        description="Serve a notes folder (or the workspaces of a policy file) over stdio, or "
        "over Streamable HTTP with --http. Paths may start with ~ or $HOME.",
    )
    serve.add_argument("workspace", nargs="?", help="the notes folder (zero-config mode)")
    serve.add_argument("--policy", help="policy file (TOML): principals, workspaces, grants")
    serve.add_argument("--http", metavar="HOST:PORT", help="serve Streamable HTTP at /mcp")
    serve.add_argument(
        "--token-file",
        help="bearer token for --http without --policy (a file only you can read: chmod 600)",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser Origin allowed to call the HTTP endpoint (repeatable)",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="a Host header to accept besides the loopback names on the listening port, for "
        "ssh forwarding, docker -p or a reverse proxy; without :PORT, any port (repeatable)",
    )
    serve.add_argument(
        "--state-key-file",
        metavar="FILE",
        help="key ring sealing the delete confirmations (kid:base64 lines, or one bare secret); "
        "default: state.keys beside the replay database, made (0600) on first start",
    )
    serve.add_argument(
        "--replay-db",
        metavar="FILE",
        help="SQLite file of spent confirmation nonces (and the search index beside it); "
        f"default: {os.path.join(state, 'replay.sqlite3')}",
    )
    serve.add_argument(
        "--state-dir",
        metavar="DIR",
        help="this host's own state folder: the search index, the kept key ring and the "
        f"replay database (default: {state})",
    )
    serve.add_argument(
        "--replay-store",
        metavar="URL",
        help="a replay store shared by several instances instead of the SQLite file: "
        "redis://[USER@]HOST[:PORT][/DB] or rediss://... (TLS); needs --state-key-file "
        "(docs/deploy.md)",
    )
    serve.add_argument(
        "--replay-store-password-file",
        metavar="FILE",
        help="the replay store's password, in a file only you can read (chmod 600)",
    )
    serve.add_argument(
        "--unused-days",
        type=float,
        metavar="DAYS",
        help="remove, at start-up, the search indexes in the state folder not served for DAYS "
        "days (default: the policy's [limits] unused_index_days, else 30; 0: never)",
    )
    serve.add_argument(
        "--audit-log",
        metavar="FILE",
        help="append destructive decisions here as JSON lines (default: none)",
    )
    serve.add_argument(
        "--log-file",
        metavar="FILE",
        help="also write the log to FILE (0600), rotated by size into FILE.1 ... (default: none)",
    )
    serve.add_argument(
        "--log-file-max-bytes",
        type=int,
        default=10 << 20,
        metavar="N",
        help="rotate the --log-file when it would exceed N bytes (default: 10485760)",
    )
    serve.add_argument(
        "--log-file-backups",
        type=int,
        default=3,
        metavar="N",
        help="how many rotated files FILE.1 ... FILE.N to keep (default: 3)",
    )
    serve.add_argument(
        "--sandbox",
        choices=("landlock", "chroot", "none"),
        help="WORKSPACE mode: the weakest OS layer creates, updates and deletions may run "
        "under, as a policy's per-workspace sandbox key (default: landlock; chroot accepts a "
        "kernel without Landlock; none also needs --allow-unconfined)",
    )
    serve.add_argument(
        "--allow-unconfined",
        action="store_true",
        help="allow creates, updates and deletions without an OS containment layer (logged)",
    )
    serve.add_argument(
        "--no-self-confine",
        action="store_true",
        help="do not confine the server process itself with Landlock (workers still are)",
    )
    serve.add_argument(
        "--port-file",
        metavar="FILE",
        help="with --http HOST:0 (any free port): write the port chosen to FILE once listening "
        "(for a supervisor or script that starts fs-notes; the server may write in FILE's folder)",
    )

    init = sub.add_parser(
        "init",
        parents=common,
        help="write a policy, a state key ring and a bearer token for the given folders",
        description="Set up fs-notes for HTTP or several folders: writes a policy naming the "
        "folders, a state key ring and a bearer token (printed once; the policy keeps only its "
        "SHA-256), all 0600, then prints the serve command and a client configuration.",
    )
    init.add_argument("folders", nargs="*", metavar="FOLDER", help="notes folders to serve")
    init.add_argument(
        "--example",
        choices=("example", "single-user"),
        help="print a bundled, commented policy example instead (example: several people and "
        "folders; single-user: one person, one folder) and write nothing",
    )
    init.add_argument(
        "--config-dir",
        default=_config_home(),
        help=f"where to write policy.toml and state.keys (default: {_config_home()})",
    )
    init.add_argument(
        "--http",
        metavar="HOST:PORT",
        default="127.0.0.1:8765",
        help="the address the printed serve command listens on (default: 127.0.0.1:8765)",
    )
    init.add_argument("--name", help="the principal's name (default: your user name)")
    init.add_argument(
        "--read-only", action="store_true", help="grant read only (no create, update, delete)"
    )

    check = sub.add_parser(
        "check",
        parents=common,
        help="which containment layers this host can enforce, and whether the replay store answers",
        description="Which containment layers this host can enforce (tested for real), and the "
        "replay store serve would use with the same options, asked whether it answers, and "
        "with --policy whether each workspace folder can be served. Exit status: 0; 1 when a "
        "shared replay store (--replay-store, or the policy's [replay_store]) is configured "
        "and does not answer (for a health probe); 2 for a configuration error, such as a "
        "workspace folder that does not exist (serve exits 2 for it too).",
    )
    check.add_argument("--json", action="store_true")
    check.add_argument(
        "--policy",
        metavar="FILE",
        help="policy file: its [replay_store] and workspace folders, as serve reads them",
    )
    check.add_argument(
        "--replay-store", metavar="URL", help="the shared replay store, as for serve"
    )
    check.add_argument(
        "--replay-store-password-file",
        metavar="FILE",
        help="the replay store's password file, as for serve",
    )

    exercises = sub.add_parser(
        "exercises",
        parents=common,
        help="escape exercises: every attack, with each layer knocked out in turn",
    )
    exercises.add_argument("--json", action="store_true", help="machine-readable output")
    exercises.add_argument(
        "--race", action="store_true", help="also run the race harness (20000 attempts)"
    )
    exercises.add_argument(
        "--short", action="store_true", help="fewer race attempts (what the tests and demo run)"
    )
    exercises.add_argument("--race-attempts", type=int, help="attempts of the race harness")
    exercises.add_argument(
        "--race-seconds", type=float, default=600.0, help="time bound of the race harness"
    )
    exercises.add_argument(
        "--startup-only",
        action="store_true",
        help="only the start-up class: the real serve on layouts it must refuse at start-up",
    )

    sub.add_parser("demo", parents=common, help="a scripted session on a bundled sample folder")
    _forget_parser(sub, common, state)
    _changes_parser(sub, common, state)
    _approve_parser(sub, common, state)
    return parser


def _approve_parser(sub: Any, common: list[argparse.ArgumentParser], state: str) -> None:
    approve = sub.add_parser(
        "approve",
        parents=common,
        help="approve, at a terminal, a deletion an AI client asked for",
        description="Approve a deletion waiting for you: CODE is the code the client showed "
        "(notes_delete's answer). The command shows what would be deleted and asks on this "
        "terminal which note; the client deletes it when it asks again. Without CODE, lists "
        "the deletions waiting. It must be typed at a terminal: run by a program with no "
        "terminal, it approves nothing. Exit status: 0 approved (or listed), 1 refused, 2 "
        "for a usage error.",
    )
    approve.add_argument("code", nargs="?", metavar="CODE", help="the code the client showed")
    approve.add_argument(
        "--state-dir", metavar="DIR", help=f"the state folder, as for serve (default: {state})"
    )


def _changes_parser(sub: Any, common: list[argparse.ArgumentParser], state: str) -> None:
    changes = sub.add_parser(
        "changes",
        parents=common,
        help="what was changed through fs-notes, and by other programs, for review",
        description="List what was changed in a notes folder through fs-notes (when, which "
        "tool, which principal, what was kept to undo it) and which notes other programs "
        "changed meanwhile, oldest first. notes_history and notes_restore put a kept version "
        "back. Exit status: 0, 2 for a usage error.",
    )
    changes.add_argument("folder", nargs="?", metavar="FOLDER", help="the notes folder")
    changes.add_argument("--policy", metavar="FILE", help="every workspace of a policy file")
    changes.add_argument(
        "--since",
        default="1d",
        metavar="WHEN",
        help="from when: 30m, 2h, 1d, 1w ago, or a UTC date or time (2026-12-07T10:00); "
        "default 1d",
    )
    changes.add_argument(
        "--state-dir", metavar="DIR", help=f"the state folder, as for serve (default: {state})"
    )
    changes.add_argument("--json", action="store_true", help="machine-readable output")


def _forget_parser(sub: Any, common: list[argparse.ArgumentParser], state: str) -> None:
    forget = sub.add_parser(
        "forget",
        parents=common,
        help="remove the search indexes fs-notes keeps for a folder (or for stale ones)",
        description="Remove the search indexes (copies of the notes' text) fs-notes keeps for "
        "FOLDER, or with --stale those whose folder is gone or was not served for "
        "--unused-days days, and those made before fs-notes recorded their folder. An index "
        "a running server holds is not removed (exit 1). The replay database and the key "
        "ring are not per folder and stay. Exit status: 0, 1 when an index could not be "
        "removed, 2 for a usage error.",
    )
    forget.add_argument("folder", nargs="?", metavar="FOLDER", help="the notes folder")
    forget.add_argument("--stale", action="store_true", help="every stale index instead")
    forget.add_argument(
        "--unused-days",
        type=float,
        default=30.0,
        metavar="DAYS",
        help="with --stale: an index not served for this long is stale (default 30; 0: only "
        "by a missing folder)",
    )
    forget.add_argument(
        "--state-dir", metavar="DIR", help=f"the state folder, as for serve (default: {state})"
    )
    forget.add_argument("--json", action="store_true", help="machine-readable output")


def _report(message: str, *, as_json: bool) -> None:
    """The one line of a usage or configuration error, its invisible and control characters
    escaped (a path can hold any of them); a JSON object under --log-format json."""
    from .render import shown

    if as_json:
        import json

        print(json.dumps({"level": "ERROR", "message": shown(message)}), file=sys.stderr)
    else:
        print(f"fs-notes: {shown(message)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    from .logline import install

    install(
        getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        json_lines=args.log_format == "json",
    )
    try:
        if args.command == "serve":
            from .serve import serve

            return serve(args)
        if args.command == "init":
            from .init import init

            return init(args)
        if args.command == "check":
            from .check import check, store_location, workspace_report

            store = store_location(args.policy, args.replay_store, args.replay_store_password_file)
            workspaces = workspace_report(args.policy)
            return check(as_json=args.json, store=store, workspaces=workspaces)
        if args.command == "exercises":
            from .exercises.command import exercises

            return exercises(args)
        if args.command == "forget":
            from .forget import forget

            return forget(args)
        if args.command == "changes":
            from .review import review

            return review(args)
        if args.command == "approve":
            from .approve import approve

            return approve(args)
        if args.command == "demo":
            from .demo import demo

            return demo()
    except ConfigError as exc:
        _report(str(exc), as_json=args.log_format == "json")
        return 2
    except KeyboardInterrupt:
        return 1
    return 2
