"""Command line: `fs-notes serve | check | exercises | demo` (see docs/interface.md).

Exit status: 0 success, 2 usage or configuration error (one-line reason on stderr), 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .errors import ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fs-notes", description="An MCP server for a folder of markdown notes."
    )
    parser.add_argument("--log-level", default="warning", help="debug, info, warning (default)")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve notes over stdio (default) or Streamable HTTP")
    serve.add_argument("workspace", nargs="?", help="the notes folder (zero-config mode)")
    serve.add_argument("--policy", help="policy file (TOML): principals, workspaces, grants")
    serve.add_argument("--http", metavar="HOST:PORT", help="serve Streamable HTTP at /mcp")
    serve.add_argument("--token-file", help="bearer token for --http without --policy")
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
    serve.add_argument("--state-key-file", help="key ring for sealing requestState")
    serve.add_argument("--replay-db", help="SQLite file of spent confirmation nonces")
    serve.add_argument("--audit-log", help="append destructive decisions here as JSON lines")
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

    check = sub.add_parser("check", help="which containment layers this host can enforce")
    check.add_argument("--json", action="store_true")

    exercises = sub.add_parser(
        "exercises", help="escape exercises: every attack, with each layer knocked out in turn"
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

    sub.add_parser("demo", help="a scripted session on a bundled sample folder")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .logline import install

    install(getattr(logging, str(args.log_level).upper(), logging.WARNING), stream=sys.stderr)
    try:
        if args.command == "serve":
            from .serve import serve

            return serve(args)
        if args.command == "check":
            from .check import check

            return check(as_json=args.json)
        if args.command == "exercises":
            from .exercises.command import exercises

            return exercises(args)
        if args.command == "demo":
            from .demo import demo

            return demo()
    except ConfigError as exc:
        print(f"fs-notes: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 1
    return 2
