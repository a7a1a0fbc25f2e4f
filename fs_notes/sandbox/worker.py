"""The confined worker process: one per workspace and kind, started by `sandbox.supervisor`.

Guarantees: before it reads its first request the worker has (1) asked for SIGKILL when its
parent dies, (2) imported every module it will use (after confinement nothing outside the
workspace can be read, not even Python's own library), (3) closed every fd except 0-2, the
workspace directory fd and its end of the socketpair (checked again via /proc/self/fd and reported
to the supervisor), (4) checked it is single-threaded, and (5) applied its mode: "landlock" (only
the rights its kind needs, beneath the workspace; every other fs right, TCP, signals and abstract
unix sockets to outside its domain denied; capabilities cut to those the chroot worker keeps),
"chroot" (`sandbox.chroot`), or "none" (no_new_privs
only; upstream allows it only with the operator's explicit --allow-unconfined), then (6) loaded
its system-call filter (`sandbox.seccomp`, profile "delete" or "write": no mode, owner, time or
attribute change, link, node, mount, namespace, ptrace, exec, memfd, socket, IPC, terminal
ioctl or other-process prlimit; required in a confined mode). If any step fails
it reports `ConfinementError` and exits: it never serves unconfined in a confined mode. Then it
serves one request at a time (the binary frames of `sandbox.protocol`), each resolved by
`fs_notes.fs.WorkspaceRoot`, and exits on EOF, when the supervisor's end is gone, or on a frame
it cannot delimit; a delimited request that is malformed or not for its kind is answered
BAD_REQUEST without acting.

`prepare` is the confinement entry point (steps 1-6, and the start-up report); `run` is the
whole worker around it. The escape exercises' attacker worker (fs_notes/exercises/rawworker.py)
is confined through the same `prepare` and only then serves its unchecked requests, so what it
proves is what this worker's confinement holds: there is no unchecked operation in here.

Does not: trust the supervisor's requests beyond their shape (the filesystem layer still resolves
and verifies every path).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import fs_notes.fs
import fs_notes.fs.errors as fs_errors
from fs_notes.fs import WorkspaceRoot
from fs_notes.fs.errors import FsError
from fs_notes.fs.identity import Identity
from fs_notes.sandbox import process, seccomp
from fs_notes.sandbox.chroot import KEPT_CAPABILITIES, WRITE_EXTRA_CAPABILITIES, enter_chroot
from fs_notes.sandbox.confine import DELETE_RIGHTS, WRITE_RIGHTS, confine
from fs_notes.sandbox.errors import ConfinementError
from fs_notes.sandbox.process import CAP_SETGID, CAP_SETUID
from fs_notes.sandbox.protocol import (
    BAD_REQUEST_FRAME,
    INTERNAL_ERROR_FRAME,
    MAX_REQUEST,
    OK_FRAME,
    Channel,
    ProtocolError,
    Request,
    fs_error_frame,
    json_frame,
    ok_frame,
    os_error_frame,
    parse_request,
)

RIGHTS_BY_KIND = {"delete": DELETE_RIGHTS, "write": WRITE_RIGHTS}


class NoteOps(Protocol):
    """What the worker uses of fs_notes.fs.WorkspaceRoot."""

    def unlink_note(self, relpath: str, expected: Identity) -> None: ...

    def create_note(self, relpath: str, data: bytes) -> Identity: ...

    def update_note(
        self, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity: ...

    def move_note(
        self, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity: ...


@dataclass
class State:
    kind: str
    root: NoteOps  # a WorkspaceRoot, opened before confinement


def parser(prog: str = "fs_notes.sandbox.worker") -> argparse.ArgumentParser:
    """The worker's command line (the supervisor builds it: `ConfinedWorker._command`)."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--kind", choices=["delete", "write"], required=True)
    p.add_argument("--mode", choices=["landlock", "chroot", "none"], required=True)
    p.add_argument("--workspace-fd", type=int, required=True)
    p.add_argument("--channel-fd", type=int, required=True)
    p.add_argument("--parent-pid", type=int, required=True)
    p.add_argument("--symlinks", choices=["deny", "within"], default="deny")
    p.add_argument("--user", type=_user, default=None, help="UID:GID to become (as root)")
    return p


def _user(text: str) -> tuple[int, int]:
    uid, sep, gid = text.partition(":")
    if not sep or not uid.isdigit() or not gid.isdigit():
        raise argparse.ArgumentTypeError("expected UID:GID")
    return int(uid), int(gid)


def _import_everything() -> None:
    """Import the filesystem layer and all its submodules now, while imports still work (and
    libseccomp, which is loaded when its binding is imported)."""
    for info in pkgutil.walk_packages(fs_notes.fs.__path__, "fs_notes.fs."):
        importlib.import_module(info.name)
    seccomp.available()


def _filter(mode: str, kind: str) -> dict[str, Any] | None:
    """This worker's system-call filter, after its mode: required in a confined mode."""
    try:
        installed = seccomp.install("delete" if kind == "delete" else "write")
    except (seccomp.SeccompUnavailable, OSError) as exc:
        if mode == "none":
            return None  # unconfined by the operator's choice: a filter where one can be had
        raise ConfinementError(f"the system-call filter cannot be loaded: {exc}") from None
    if seccomp.status() != 2:
        raise ConfinementError("the system-call filter was loaded but is not in force")
    return installed.to_json()


def _confine(
    mode: str, kind: str, workspace_fd: int, user: tuple[int, int] | None
) -> dict[str, Any]:
    owner = user if user is not None else process.owner_of(workspace_fd)
    if mode == "landlock":
        rule_fd = os.open(
            ".", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=workspace_fd
        )
        try:
            if owner is not None:  # the folder's owner, with no capability (issue 12 item 2)
                process.drop_capabilities(frozenset({CAP_SETUID, CAP_SETGID}))
                process.become(*owner)
            report = confine([(rule_fd, RIGHTS_BY_KIND[kind])]).to_json()
        finally:
            os.close(rule_fd)
        if owner is not None:
            report["effective_caps"] = process.capabilities()[0]
            return report
        # Landlock binds root too, but not what capabilities reach besides files (loading a
        # kernel module, raw I/O, changing owners and modes, which Landlock does not mediate):
        # keep only what the chroot worker keeps.
        extra = WRITE_EXTRA_CAPABILITIES if kind == "write" else frozenset()
        report["effective_caps"] = process.limit_capabilities(KEPT_CAPABILITIES | extra)
        return report
    if mode == "chroot":
        extra = WRITE_EXTRA_CAPABILITIES if kind == "write" else frozenset()
        return enter_chroot(workspace_fd, extra_caps=extra, owner=owner).to_json()
    process.set_no_new_privs()
    return {}


def prepare(
    args: argparse.Namespace, keep_fds: tuple[int, ...] = ()
) -> tuple[State, dict[str, Any]]:
    """Steps 1-6 of the module docstring (`keep_fds`: more fds not to close, which only the
    attacker worker of the exercises passes, to prove what a leaked fd would do); the worker's
    state and its start-up report. Raises on any failure: the caller reports it and exits."""
    _import_everything()
    keep = {0, 1, 2, args.workspace_fd, args.channel_fd, *keep_fds}
    fds = process.close_fds_except(keep)
    os.fchdir(args.workspace_fd)  # relative paths start at the workspace
    if threading.active_count() != 1 or process.thread_count() != 1:
        raise ConfinementError("worker is not single-threaded")
    root = WorkspaceRoot.from_fd(os.dup(args.workspace_fd), resolver="auto", symlinks=args.symlinks)
    report = _confine(args.mode, args.kind, args.workspace_fd, getattr(args, "user", None))
    report["seccomp"] = _filter(args.mode, args.kind)
    hello = {
        "pid": os.getpid(),
        "kind": args.kind,
        "mode": args.mode,
        "fds": fds,
        "workspace_fd": args.workspace_fd,
        "confinement": report,
        "no_new_privs": process.no_new_privs(),
        "uid": os.geteuid(),
        "gid": os.getegid(),
    }
    return State(args.kind, root), hello


def _public_error_name(exc: FsError) -> str:
    """The most specific class of `exc` that `fs_notes.fs.errors` exports under its own name."""
    for cls in type(exc).__mro__:
        if getattr(fs_errors, cls.__name__, None) is cls:
            return str(cls.__name__)
    return "FsError"


def _act(state: State, req: Request) -> bytes:
    """Run a validated request (its op is the name of the `state.root` method it runs); the
    framed OK reply."""
    if req.op == "unlink_note":
        if req.expected is None:  # parse_request never lets this through
            raise ProtocolError("unlink_note without an identity")
        state.root.unlink_note(req.relpath, req.expected)
        return OK_FRAME
    if req.op == "create_note":
        return ok_frame(state.root.create_note(req.relpath, req.data))
    if req.op == "move_note":  # renameat2 between two folders beneath the workspace (fs/rename.py)
        return ok_frame(state.root.move_note(req.relpath, req.target, expected=req.expected))
    # update_note: its temp file is created with the note's own mode (the filter refuses
    # fchmod): umask 0 for exactly that call (this process has one thread); create_note keeps
    # the umask.
    old = os.umask(0)
    try:
        return ok_frame(state.root.update_note(req.relpath, req.data, expected=req.expected))
    finally:
        os.umask(old)


def handle(state: State, body: bytes) -> bytes:
    """One request body -> one framed reply; never raises."""
    try:
        return _act(state, parse_request(body, state.kind))
    except ProtocolError:
        return BAD_REQUEST_FRAME
    except FsError as exc:
        return fs_error_frame(_public_error_name(exc))
    except OSError as exc:
        return os_error_frame(exc.errno)
    except (ValueError, TypeError):
        return BAD_REQUEST_FRAME
    except Exception:
        return INTERNAL_ERROR_FRAME


def serve(channel: Channel, state: State, answer: Callable[[State, bytes], bytes] = handle) -> int:
    """Answer requests one at a time until EOF; `answer` never raises."""
    while True:
        try:
            body = channel.recv()
        except ProtocolError:
            return 2  # desynchronised stream: stop; the supervisor restarts us
        if body is None:
            return 0  # EOF: the supervisor closed the channel (or died)
        try:
            channel.send(answer(state, body))
        except ConnectionError:
            return 0  # the supervisor went away mid-request


def run(
    args: argparse.Namespace,
    answer: Callable[[State, bytes], bytes] = handle,
    keep_fds: tuple[int, ...] = (),
) -> int:
    """The whole worker: parent-death signal, `prepare`, the start-up report, then `serve`."""
    process.die_with_parent(args.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides when we stop
    channel = Channel(socket.socket(fileno=args.channel_fd), MAX_REQUEST)
    try:
        state, hello = prepare(args, keep_fds)
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}"
        channel.send(json_frame({"ok": False, "error": "ConfinementError", "detail": detail}))
        return 3
    channel.send(json_frame({"ok": True, "hello": hello}))
    return serve(channel, state, answer)


def main(argv: list[str] | None = None) -> int:
    return run(parser().parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
