"""The server side of the confined worker: start, talk to, restart and reap it.

Guarantees: `ConfinedWorker` runs one worker process per instance (per workspace and kind), one
request at a time (a lock), and hands back either the worker's answer, the `fs_notes.fs` error
class it named, `OsRefused` (the OS said no), `ValueError` (a malformed request, refused by the
encoder or by the worker, which stays in step; `TooLarge` past `MAX_REQUEST`), or
`WorkerFailed`. A worker that times out, dies or breaks the protocol is SIGKILLed (with any
children, found via psutil) and reaped before `WorkerFailed` is raised; the next call starts a
fresh one. Each request's timeout bounds the whole exchange (`sandbox.protocol.Channel`). A death
is seen on the socketpair, whose other end only the worker holds: during a request as end of
stream (`WorkerFailed`); while idle as EPIPE on the next request before any byte of it went out,
so that request, which the dead worker cannot have seen, goes to a fresh worker instead. A
worker is accepted only after its hello frame confirms the requested kind and mode, its pid, and
that exactly the expected fds are open in it. The workspace directory is opened once
(O_DIRECTORY|O_NOFOLLOW) and that same directory is handed to every restart. In a process that
forked a monitor (a root server, sandbox/monitor.py) the monitor starts each worker, with only
the workspace and channel fds, and the hello is checked against the fd numbers it used;
otherwise workers are started from one long-lived spawner thread, so their PR_SET_PDEATHSIG
(which fires when the *thread* that forked them exits) fires only when the server process
itself goes away; `close()`, garbage
collection and interpreter exit (a weakref.finalize hook, which runs at exit) close the channel,
wait briefly and then kill + reap.

Does not: retry a request the worker may have received (a deletion that timed out may or may
not have happened; the caller re-checks), reap a worker that died while idle before the next
call, make policy decisions (who may delete what: upstream), or choose the mode
(`sandbox.probe.select_mode` does; mode "none" must come from an explicit operator opt-in).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
import subprocess
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, Self

import fs_notes.fs.errors as fs_errors
from fs_notes.fs.identity import Identity
from fs_notes.sandbox import landlock_abi as ll
from fs_notes.sandbox import launch, monitor
from fs_notes.sandbox.chroot import KEPT_CAPABILITIES, WRITE_EXTRA_CAPABILITIES
from fs_notes.sandbox.confine import DELETE_RIGHTS, WRITE_RIGHTS
from fs_notes.sandbox.errors import ConfinementError, OsRefused, WorkerFailed
from fs_notes.sandbox.kinds import Kind, Mode
from fs_notes.sandbox.process import worker_user
from fs_notes.sandbox.protocol import (
    BAD_REQUEST,
    FS_ERROR,
    MAX_REPLY,
    OK,
    OS_ERROR,
    Channel,
    OversizedRequest,
    PeerClosed,
    ProtocolError,
    Reply,
    check_timeout,
    decode_json_object,
    decode_reply,
    encode_move_note,
    encode_unlink_note,
    encode_write,
)
from fs_notes.sandbox.spawn import Process, kill_and_reap, spawn, watch

_REQUIRED_RIGHTS = {"delete": DELETE_RIGHTS, "write": WRITE_RIGHTS}


@dataclass
class _Child:
    proc: Process
    channel: Channel
    hello: dict[str, Any]


def _stop(child: _Child, grace: float) -> None:
    """Close the channel (the worker exits on EOF), wait `grace` seconds, then kill; reap."""
    child.channel.sock.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.proc.wait(timeout=grace)
    kill_and_reap(child.proc)


class _Holder:
    """The mutable state a finalizer may need without keeping the ConfinedWorker alive."""

    def __init__(self, workspace_fd: int) -> None:
        self.workspace_fd = workspace_fd
        self.child: _Child | None = None

    def shutdown(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            _stop(child, grace=1.0)
        if self.workspace_fd >= 0:
            os.close(self.workspace_fd)
            self.workspace_fd = -1


def _workspace_fd(workspace: str | int) -> int:
    """Our own close-on-exec fd of the workspace folder: a duplicate of the caller's fd (what the
    server does: the folder it opened at start-up, wherever it is now), or, given a path, the
    folder opened now (tests, tools)."""
    try:
        if isinstance(workspace, int):
            fd = fcntl.fcntl(workspace, fcntl.F_DUPFD_CLOEXEC, 3)
        else:
            fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise fs_errors.error_for_errno(exc.errno) from exc
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise fs_errors.NotRegular()
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_PATH:  # an O_PATH fd cannot be listed
            raise fs_errors.NotRegular()
    except BaseException:
        os.close(fd)
        raise
    return fd


class ConfinedWorker:
    """A persistent confined worker for one workspace and one kind of operation. `workspace` is
    the folder's fd (duplicated: the caller keeps its own) or its path. Its request methods
    carry the names of the `sandbox.protocol` ops they send, which are those of the
    `fs_notes.fs.WorkspaceRoot` methods the worker runs (unlink_note, create_note, update_note,
    move_note)."""

    #: The module whose main() the worker process runs. The escape exercises' attacker worker
    #: (fs_notes/exercises/rawworker.py) is a subclass that names its own, confined the same way.
    PROGRAM = launch.WORKER_PROGRAM

    def __init__(
        self,
        workspace: str | int,
        kind: Kind,
        mode: Mode,
        *,
        symlinks: Literal["deny", "within"] = "deny",
        start_timeout: float = 10.0,
        user: tuple[int, int] | None = None,
    ) -> None:
        """`user` (uid, gid): whom the worker becomes, as root (the policy's worker_user);
        None: the folder's owner, if not root."""
        if kind not in ("delete", "write"):
            raise ValueError(f"unknown worker kind {kind!r}")
        if mode not in ("landlock", "chroot", "none"):
            raise ValueError(f"unknown sandbox mode {mode!r}")
        if symlinks not in ("deny", "within"):
            raise ValueError(f"unknown symlink policy {symlinks!r}")
        self.kind: Kind = kind
        self.mode: Mode = mode
        self._symlinks = symlinks
        self._start_timeout = start_timeout
        self._lock = threading.Lock()
        self._closed = False
        fd = _workspace_fd(workspace)
        # Whom the worker becomes: as root, the named user, else a folder's owner other than root.
        self._owner = worker_user(fd, user)
        self._holder = _Holder(fd)
        self._finalizer = weakref.finalize(self, self._holder.shutdown)
        try:
            with self._lock:
                self._ensure_started()
        except BaseException:
            self._finalizer()
            raise

    # -- process management ------------------------------------------------------------

    def _command(self, channel_fd: int) -> list[str]:
        return launch.worker_command(
            self.PROGRAM,
            self.kind,
            self.mode,
            workspace_fd=self._holder.workspace_fd,
            channel_fd=channel_fd,
            parent_pid=os.getpid(),
            symlinks=self._symlinks,
            user=self._owner,
        )

    def _passed_fds(self) -> tuple[int, ...]:
        """Fds the worker is started with besides the workspace's and its channel's: none."""
        return ()

    def _expected_fds(self, channel_fd: int) -> set[int]:
        return {0, 1, 2, self._holder.workspace_fd, channel_fd}

    def _check_hello(self, reply: dict[str, Any] | None, pid: int, fds: set[int]) -> None:
        if reply is None:
            raise WorkerFailed("worker exited before it was ready")
        if reply.get("ok") is not True:
            if reply.get("error") == "ConfinementError":
                raise ConfinementError(f"worker refused to start: {reply.get('detail')}")
            raise WorkerFailed("worker sent an unexpected first frame")
        hello = reply.get("hello")
        if not isinstance(hello, dict):
            raise WorkerFailed("worker sent no hello")
        checks = [
            hello.get("pid") == pid,
            hello.get("kind") == self.kind,
            hello.get("mode") == self.mode,
            hello.get("no_new_privs") is True,
            isinstance(hello.get("fds"), list) and set(hello["fds"]) == fds,
        ]
        caps = KEPT_CAPABILITIES | (WRITE_EXTRA_CAPABILITIES if self.kind == "write" else set())
        caps_mask = sum(1 << c for c in caps)
        owner = self._owner
        if owner is not None and self.mode != "none":
            caps_mask = 0  # it became the folder's owner: no capability at all
        expected_uid = owner[0] if owner is not None and self.mode != "none" else os.geteuid()
        conf = hello.get("confinement")
        if self.mode == "chroot" and os.geteuid() != 0:
            # not root: the worker chroots in a user namespace of its own, our uid mapped to 0
            # there (sandbox/chroot.py); it must say so
            expected_uid = 0
            checks.append(isinstance(conf, dict) and conf.get("user_namespace") is True
                          and conf.get("uid") == 0)  # fmt: skip
        checks.append(hello.get("uid") == expected_uid)
        if self.mode != "none":  # the system-call filter of this kind, loaded and counted
            filt = conf.get("seccomp") if isinstance(conf, dict) else None
            checks.append(
                isinstance(filt, dict)
                and filt.get("profile") == self.kind
                and isinstance(filt.get("denied"), int)
                and filt["denied"] > 0
            )
        if self.mode == "landlock":
            checks.append(
                isinstance(conf, dict)
                and isinstance(conf.get("abi"), int)
                and conf["abi"] >= 1
                and isinstance(conf.get("allowed"), list)
                and conf["allowed"] != []
                and all(isinstance(a, int) for a in conf["allowed"])
                and all(a & ~_REQUIRED_RIGHTS[self.kind] == 0 for a in conf["allowed"])
                # everything else this ABI knows is handled, i.e. denied
                and conf.get("handled_fs") == ll.fs_rights(conf["abi"])
                and conf.get("handled_net") == ll.net_rights(conf["abi"])
                and conf.get("scoped") == ll.scopes(conf["abi"])
                # no capability beyond the chroot worker's (none at all when not root)
                and type(conf.get("effective_caps")) is int
                and conf["effective_caps"] & ~caps_mask == 0
            )
        if self.mode == "chroot":
            conf = hello.get("confinement")
            checks.append(isinstance(conf, dict) and conf.get("effective_caps") == caps_mask)
        if not all(checks):
            raise ConfinementError("worker's hello does not match what was asked for")

    def _start(self) -> _Child:
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        channel_fd = child_sock.fileno()
        try:
            proc, fds = self._launch(channel_fd)
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
        watch(proc, f"{self.kind} worker")
        child = _Child(proc, Channel(parent_sock, MAX_REPLY), {})
        try:
            child.channel.arm(self._start_timeout)
            body = child.channel.recv()
            reply = None if body is None else decode_json_object(body)
            if child.channel.pending:
                raise ProtocolError("worker sent more than its start-up report")
            self._check_hello(reply, proc.pid, fds)
        except (OSError, ProtocolError) as exc:
            _stop(child, grace=0.0)
            raise WorkerFailed("worker did not start") from exc
        except BaseException:
            _stop(child, grace=0.0)
            raise
        assert reply is not None
        child.hello = reply["hello"]
        return child

    def _launch(self, channel_fd: int) -> tuple[Process, set[int]]:
        """Start the worker: through this process's monitor (sandbox/monitor.py) if it has one,
        else itself. The worker's process and the fds it must hold, as it numbers them."""
        extra = self._passed_fds()
        started_by = monitor.current()
        if started_by is not None:
            if extra:
                raise ConfinementError("the monitor starts workers with their own fds only")
            try:
                got = started_by.start(
                    self.PROGRAM, self.kind, self.mode, self._holder.workspace_fd, channel_fd
                )
            except monitor.MonitorRefused as exc:
                raise WorkerFailed(str(exc)) from None
            return got.process, {0, 1, 2, got.workspace_fd, got.channel_fd}
        cmd = self._command(channel_fd)
        proc = spawn(
            lambda: subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,  # logged by the watcher, not the server's stderr
                close_fds=True,
                pass_fds=(self._holder.workspace_fd, channel_fd, *extra),
                env={},  # nothing of the server's environment (tokens, keys) reaches it
                start_new_session=True,
            )
        )
        return proc, self._expected_fds(channel_fd)

    def _ensure_started(self) -> _Child:
        # A worker that died since the last call is noticed when the request is sent (PeerClosed),
        # not here: a waitpid per call would cost as much as the rest of the exchange.
        child = self._holder.child
        if child is None:
            child = self._start()
            self._holder.child = child
        return child

    def _discard(self, child: _Child) -> None:
        if self._holder.child is child:
            self._holder.child = None
        child.channel.sock.close()
        kill_and_reap(child.proc)

    # -- requests ------------------------------------------------------------------------

    def _exchange(self, child: _Child, frame: bytes, timeout: float) -> bytes:
        """Send `frame`, return the reply body. PeerClosed (nothing was sent) passes through;
        any other failure discards the worker and raises WorkerFailed."""
        channel = child.channel
        try:
            channel.arm(timeout)
            channel.send(frame)
            body = channel.recv()
        except PeerClosed:
            raise
        except (OSError, ProtocolError) as exc:
            self._discard(child)
            raise WorkerFailed("worker failed during the request") from exc
        if body is None:
            self._discard(child)
            raise WorkerFailed("worker exited during the request")
        if channel.pending:  # a second frame for one request: out of step
            self._discard(child)
            raise WorkerFailed("worker sent more than one reply")
        return body

    def _send_and_receive(self, frame: bytes, timeout: float) -> tuple[bytes, _Child]:
        child = self._ensure_started()
        try:
            return self._exchange(child, frame, timeout), child
        except PeerClosed:  # it died while idle; it never saw this request: start afresh
            self._discard(child)
        child = self._ensure_started()
        try:
            return self._exchange(child, frame, timeout), child
        except PeerClosed as exc:
            self._discard(child)
            raise WorkerFailed("worker closed the channel") from exc

    def _call(self, frame: bytes, timeout: float, identity: bool = False) -> Reply:
        """Run one framed request; the OK reply (carrying an identity iff `identity`)."""
        check_timeout(timeout)
        with self._lock:
            if self._closed:
                raise WorkerFailed("worker is closed")
            body, child = self._send_and_receive(frame, timeout)
            try:
                reply = decode_reply(body)
            except ProtocolError as exc:
                self._discard(child)
                raise WorkerFailed("worker sent a malformed reply") from exc
            if reply.status == OK and (reply.identity is not None) == identity:
                return reply
            self._raise_for(reply, child)

    def _raise_for(self, reply: Reply, child: _Child) -> NoReturn:
        if reply.status == OS_ERROR:
            raise OsRefused(reply.errno)
        if reply.status == BAD_REQUEST:
            raise ValueError("the worker rejected a malformed request")
        if reply.status == FS_ERROR and reply.error in fs_errors.__all__:
            cls = getattr(fs_errors, reply.error)
            if isinstance(cls, type) and issubclass(cls, fs_errors.FsError):
                raise cls()
        self._discard(child)  # InternalError or nonsense: do not trust this process again
        raise WorkerFailed("worker sent an unexpected reply")

    @staticmethod
    def _encoded(encode: Callable[[], bytes]) -> bytes:
        """`encode()`; TooLarge past MAX_REQUEST, ValueError for what the format cannot carry
        (which the worker would refuse too)."""
        try:
            return encode()
        except OversizedRequest:
            raise fs_errors.TooLarge() from None  # refused here: the worker would drop the channel
        except ProtocolError as exc:
            raise ValueError(f"malformed request: {exc}") from None

    def unlink_note(self, relpath: str, expected: Identity, timeout: float = 5.0) -> None:
        """Unlink the note `relpath` if it is still the file `expected` describes."""
        try:
            frame = encode_unlink_note(relpath, expected)
        except ProtocolError as exc:
            raise ValueError(f"malformed request: {exc}") from None
        self._call(frame, timeout)

    def _write(
        self,
        op: Literal["create_note", "update_note"],
        relpath: str,
        data: bytes,
        expected: Identity | None,
        timeout: float,
    ) -> Identity:
        frame = self._encoded(lambda: encode_write(op, relpath, data, expected))
        identity = self._call(frame, timeout, identity=True).identity
        assert identity is not None  # _call checked it
        return identity

    def create_note(self, relpath: str, data: bytes, timeout: float = 5.0) -> Identity:
        """Create a new note (never overwrites); returns its identity."""
        return self._write("create_note", relpath, data, None, timeout)

    def update_note(
        self,
        relpath: str,
        data: bytes,
        expected: Identity | None = None,
        timeout: float = 5.0,
    ) -> Identity:
        """Replace an existing note atomically (optionally only if it is still `expected`)."""
        return self._write("update_note", relpath, data, expected, timeout)

    def move_note(
        self,
        relpath: str,
        new_relpath: str,
        expected: Identity | None = None,
        timeout: float = 5.0,
    ) -> Identity:
        """Rename a note to `new_relpath` (never over anything; optionally only if it is still
        `expected`); returns the moved note's identity."""
        frame = self._encoded(lambda: encode_move_note(relpath, new_relpath, expected))
        identity = self._call(frame, timeout, identity=True).identity
        assert identity is not None  # _call checked it
        return identity

    # -- introspection and shutdown --------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The current worker's pid (None when none is running)."""
        child = self._holder.child
        return child.proc.pid if child is not None else None

    @property
    def hello(self) -> Mapping[str, Any]:
        """What the current worker reported about itself when it started."""
        child = self._holder.child
        return dict(child.hello) if child is not None else {}

    def close(self) -> None:
        """Stop the worker (EOF, then SIGKILL after 1 s) and reap it. Idempotent."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
