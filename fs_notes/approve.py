"""`fs-notes approve CODE`: a person approves a deletion, or a forced change that removes text,
from a terminal.

The code is the one the client showed (notes_delete's answer, a refused forced notes_update or
notes_edit, or the loopback page's message); the command finds its change in the state folder
(approval/store.py), shows who asks, where, and each candidate's title and id (for a change:
what it removes and the first lines it would leave), all made safe (render.py), and asks on the
terminal which note to delete, or whether to make the change; without CODE it lists the
changes waiting.

Guarantees: the question is asked, and the answer read, on the process's controlling terminal
(/dev/tty), never on its standard input: a program that runs the command with a pipe (an
agent's shell tool, a script) gets exit 2 and approves nothing; only an answer of the candidate's
number (or "yes" for a single one) approves, anything else refuses; an approval is taken once
and only before the deletion expires.
Does not: tell a person from a program that gives the command a terminal of its own (a
pseudo-terminal: `script`, `expect`); see docs/design.md, "What an approval proves".
Exit status: 0 approved (or nothing to list), 1 refused or not taken, 2 a usage error (no such
code, no terminal).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import TextIO

from .approval.store import Approvals, Pending, approvals_name
from .config import expand_path
from .errors import ConfigError
from .render import shown, shown_id
from .statefolder import state_home

__all__ = ["approve"]


def _store(args: argparse.Namespace) -> Approvals:
    folder = os.path.abspath(expand_path(args.state_dir)) if args.state_dir else state_home()
    path = os.path.join(folder, approvals_name())
    if not os.path.lexists(path):
        raise ConfigError(
            f"nothing waits for approval in {shown(folder)} (no {approvals_name()}); give "
            "--state-dir as the server has it"
        )
    try:
        return Approvals(path)
    except OSError as exc:
        raise ConfigError(f"{shown(path)}: {exc.strerror}") from None


class _Terminal:
    """The controlling terminal, to ask on and read the answer from."""

    def __init__(self, fd: int) -> None:
        self._in: TextIO = os.fdopen(fd, "r", encoding="utf-8", errors="replace")
        self._out: TextIO = os.fdopen(os.dup(fd), "w", encoding="utf-8", errors="replace")

    def write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def readline(self) -> str:
        return self._in.readline()

    def close(self) -> None:
        self._out.close()
        self._in.close()


def _terminal() -> _Terminal:
    try:
        return _Terminal(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
    except OSError:
        raise ConfigError(
            "fs-notes approve asks the person at a terminal, and this process has none (it is "
            "run by a program, not typed): nothing was approved"
        ) from None


def _describe(pending: Pending) -> list[str]:
    left = max(0, int(pending.expires - time.time()))
    if pending.action == "replace":
        note_id, title = pending.candidates[0]
        lines = [
            f'Replace the note "{shown(title or "(untitled)", 120)}" [{shown_id(note_id, 200)}] '
            f'in the workspace "{shown(pending.workspace, 128)}", asked by '
            f'"{shown(pending.principal, 128)}" (expires in {left // 60} min {left % 60} s), '
            "with text that removes part of it:"
        ]
        lines += [f"  - {shown(str(x), 300)}" for x in pending.detail.get("losses", [])]
        lines.append("  It would begin:")
        after = str(pending.detail.get("after", "")).splitlines() or ["(empty)"]
        lines += [f"  | {shown(x, 200)}" for x in after]
        return lines
    lines = [
        f'Delete a note from the workspace "{shown(pending.workspace, 128)}", asked by '
        f'"{shown(pending.principal, 128)}" (expires in {left // 60} min {left % 60} s):'
    ]
    for n, (note_id, title) in enumerate(pending.candidates, 1):
        lines.append(f"  {n}. {shown(title or '(untitled)', 120)}  [{shown_id(note_id, 200)}]")
    return lines


def approve(args: argparse.Namespace) -> int:
    approvals = _store(args)
    try:
        if not args.code:
            waiting = approvals.waiting()
            for pending in waiting:
                print("\n".join(_describe(pending)))
            print(f"{len(waiting)} waiting; approve one with fs-notes approve CODE (the code "
                  "the client showed)")  # fmt: skip
            return 0
        found = approvals.by_code(args.code)
        if found is None or found.chosen is not None:
            raise ConfigError(
                "nothing waits for approval with that code (it expired, was approved, or is "
                "mistyped)"
            )
        pending = found
        tty = _terminal()
        with contextlib.closing(tty):
            tty.write("\n".join(_describe(pending)) + "\n")
            count = len(pending.candidates)
            if pending.action == "replace":
                tty.write("Type yes to make this change (anything else refuses): ")
            elif count == 1:
                tty.write("Type yes to delete it (anything else refuses): ")
            else:
                tty.write(f"Type the number of the note to delete (1-{count}; anything else "
                          "refuses): ")  # fmt: skip
            answer = tty.readline().strip()
            picked = _picked(answer, count)
            if picked is None:
                tty.write("Refused: nothing will be changed.\n")
                return 1
            note_id = pending.candidates[picked][0]
            if not approvals.approve(pending.nonce, note_id, "terminal"):
                tty.write("Not taken: it expired or was approved meanwhile.\n")
                return 1
            done = "changed" if pending.action == "replace" else "deleted"
            tty.write(f"Approved: {shown_id(note_id, 200)} is {done} when the client asks "
                      "again.\n")  # fmt: skip
            return 0
    finally:
        approvals.close()


def _picked(answer: str, count: int) -> int | None:
    if count == 1:
        return 0 if answer.lower() == "yes" else None
    if answer.isdigit() and 1 <= int(answer) <= count:
        return int(answer) - 1
    return None
