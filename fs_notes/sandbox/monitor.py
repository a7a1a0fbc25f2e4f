"""The monitor: the process that starts a server's workers, and the few requests it answers.

Every self-confined server forks one, so that the server itself starts nothing after start-up
(its filter, "server", refuses execve): the monitor's filter allows starting the
interpreter, the server's does not. For a regular user's server that is all it is (it holds no
capability; the workers run as the user). For a root server it is also the privilege
separation: a server started as root needs capabilities for one thing after start-up, starting
its workers, which become a folder's owner (CAP_SETUID, CAP_SETGID) or, in a root-owned folder,
keep what deleting and replacing other users' files needs (CAP_DAC_OVERRIDE, CAP_FOWNER,
CAP_CHOWN; and CAP_SETPCAP to shed the rest). So at start-up, once its Landlock domain (or,
without Landlock, its capability limit) is in force and before its own system-call filter, the
server forks this monitor, which keeps those capabilities; the server itself then drops every
capability (effective, permitted, inheritable, ambient and bounding sets empty, securebits
locked so no exec brings root's back) and asks the monitor for each worker. OpenSSH's privilege
separation is the model: a fixed table of requests, each checked, nothing else.

Guarantees:
- The requests are `REQUESTS` and nothing else: "start" a worker, "poll" one it started, "kill"
  one it started. Anything else, a malformed request, one with the wrong fds, or one for a pid
  it did not start, is refused with a reason and changes nothing; fds that came with it are
  closed.
- "start" runs only a program named when the monitor was forked (the worker; the escape
  exercises name their attacker worker), of a kind the policy uses in that workspace, in the
  mode fixed at fork, for a workspace folder it was given at fork (the same directory: device
  and inode of the fd sent must be one of them), as the user fixed for that folder at fork (the
  policy's worker_user, else the folder's owner), with the symlink policy of that workspace.
  The request names none of these but the program and the kind; the command line is built here
  (sandbox/launch.py), never taken from the server.
- It holds no workspace fd between requests (the one sent with "start" is passed on and closed),
  and none of the server's others: its fds are stderr, /dev/null on 0 and 1, and its socket.
  It reads nothing a client sent: its input is the server's requests, a few JSON fields.
- It runs under its own default-deny filter (sandbox/allowed.py "monitor"): starting, reaping
  and killing workers, and what a worker does before its own filter; no socket(), no file
  watch, no listening. It is in the server's Landlock domain and private view, forked from it.
- It dies with the server (PR_SET_PDEATHSIG, and the end of its socket, which kills every worker
  it started first); its workers die with it (their own PR_SET_PDEATHSIG).

Does not:
- Protect a workspace from the server: the server may still ask for a worker of every kind the
  policy uses there, and tell it what to delete or write (the worker's own checks and the
  server's layers 1 and 2 decide what is allowed).
- Exist for a server started with --no-self-confine (which starts its workers itself and, as
  root, keeps every capability, warned).
- Keep the server from killing the monitor (same uid, same Landlock domain): that stops its
  workers, and with them every change, which fails closed.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any, Final, Literal

from fs_notes.sandbox import launch
from fs_notes.sandbox.kinds import KINDS, Kind, Mode, Profile

#: The requests the monitor answers (each with what it carries), and nothing else.
REQUESTS: Final[dict[str, str]] = {
    "start": "program, kind, mode; fds: the workspace folder, the worker's channel, its stderr",
    "poll": "pid (one it started): its exit status, or null while it runs",
    "kill": "pid (one it started): SIGKILL to its process group, reaped; its exit status",
    "status": "nothing: what it holds (uid, capabilities, filter, fds), for `fs-notes check`",
}
MAX_MESSAGE: Final = 4096
KILL_WAIT: Final = 5.0  # seconds a killed worker has to be reaped
START_FDS: Final = 3


class MonitorRefused(Exception):
    """The monitor refused a request (the reason says which check failed), or is gone."""


@dataclass(frozen=True)
class Folder:
    """What the monitor knows of one workspace folder, fixed when it is forked."""

    user: tuple[int, int] | None  # whom its workers become (None: stay root)
    symlinks: Literal["deny", "within"]
    kinds: frozenset[Kind]  # the kinds of worker the policy uses there


# -- the server's side --------------------------------------------------------------------------

_current: Monitor | None = None


def current() -> Monitor | None:
    """This process's monitor, once `start` has forked one (None: start workers yourself)."""
    return _current


class MonitoredProcess:
    """A worker the monitor started, seen like a subprocess.Popen by sandbox/spawn.py."""

    def __init__(self, monitor: Monitor, pid: int, stderr: IO[bytes]) -> None:
        self._monitor = monitor
        self.pid = pid
        self.stderr: IO[bytes] | None = stderr
        self.returncode: int | None = None
        self._lock = threading.Lock()  # its watcher polls while the supervisor may kill it

    def _ask(self, op: str) -> int | None:
        with self._lock:  # the monitor forgets a worker once it has told its exit status
            if self.returncode is None:
                try:
                    self.returncode = self._monitor.ask({"op": op, "pid": self.pid})["returncode"]
                except MonitorRefused:  # gone, or forgot it: either way the worker is dead
                    self.returncode = -signal.SIGKILL  # (a worker dies with its monitor)
            return self.returncode

    def poll(self) -> int | None:
        return self._ask("poll")

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.001
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if sig != signal.SIGKILL:
            raise ValueError("the monitor sends its workers SIGKILL only")
        self._ask("kill")

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclass(frozen=True)
class Started:
    """A worker the monitor started, and its fd numbers and parent as the worker sees them."""

    process: MonitoredProcess
    workspace_fd: int
    channel_fd: int
    parent_pid: int


class Monitor:
    """The server's end of the monitor's socket: one request at a time."""

    #: How long a request may take (a start is a fork and an exec): past it, the monitor is
    #: taken for hung and never asked again (a late reply would answer the next request).
    TIMEOUT: Final = 30.0

    def __init__(self, sock: socket.socket, pid: int) -> None:
        sock.settimeout(self.TIMEOUT)
        self._sock = sock
        self._lock = threading.Lock()
        self._broken = False
        self.pid = pid

    def ask(self, request: Mapping[str, Any], fds: Iterable[int] = ()) -> dict[str, Any]:
        """Send one request (with `fds`), return its reply; MonitorRefused if refused or gone."""
        data = json.dumps(dict(request)).encode()
        passed = list(fds)
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", passed))]
        with self._lock:
            if self._broken:
                raise MonitorRefused("the monitor stopped answering")
            try:
                self._sock.sendmsg([data], ancillary if passed else [])
                raw = self._sock.recv(MAX_MESSAGE)
            except TimeoutError:
                self._give_up()
                raise MonitorRefused("the monitor did not answer") from None
            except OSError as exc:
                self._give_up()
                raise MonitorRefused(f"the monitor is gone: {exc.strerror}") from None
            except BaseException:  # interrupted between a request and its reply: out of step
                self._give_up()
                raise
            if not raw:
                self._give_up()
                raise MonitorRefused("the monitor is gone")
        reply = json.loads(raw)
        if not isinstance(reply, dict) or reply.get("ok") is not True:
            why = reply.get("error") if isinstance(reply, dict) else None
            raise MonitorRefused(f"the monitor refused: {why}")
        return reply

    def _give_up(self) -> None:
        """Never ask again (a late reply would answer the next request): close the socket, so
        the monitor ends and its workers with it (fail closed), and reap it if it has."""
        self._broken = True
        self._sock.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, os.WNOHANG)

    def start(
        self, program: str, kind: Kind, mode: Mode, workspace_fd: int, channel_fd: int
    ) -> Started:
        """A worker of `kind` for the workspace folder `workspace_fd`, talking on `channel_fd`."""
        read_end, write_end = os.pipe2(os.O_CLOEXEC)
        try:
            reply = self.ask(
                {"op": "start", "program": program, "kind": kind, "mode": mode},
                (workspace_fd, channel_fd, write_end),
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        stderr = os.fdopen(read_end, "rb")
        try:
            started = Started(
                MonitoredProcess(self, int(reply["pid"]), stderr),
                int(reply["workspace_fd"]),
                int(reply["channel_fd"]),
                int(reply["parent_pid"]),
            )
        except (KeyError, TypeError, ValueError):
            stderr.close()
            raise MonitorRefused("the monitor sent a malformed reply") from None
        return started


def start(
    folders: Mapping[tuple[int, int], Folder],
    *,
    mode: Mode,
    profile: Profile,
    programs: Iterable[str] = (launch.WORKER_PROGRAM,),
) -> Monitor:
    """Fork the monitor (this process must have one thread), which keeps this process's
    capabilities; `folders` by (st_dev, st_ino). The caller drops its own capabilities next."""
    allowed = tuple(programs)
    for program in allowed:
        launch.bootstrap(program)  # built here, before the fork: the monitor finds nothing
    server_end, monitor_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server_pid = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the monitor's side runs in the forked child
        code = 70
        try:
            server_end.close()
            _Serving(monitor_end, folders, mode, allowed).run(server_pid, profile)
            code = 0
        except BaseException as exc:
            with contextlib.suppress(OSError):
                why = f"fs-notes: the monitor stopped: {type(exc).__name__}: {exc}\n"
                os.write(2, why.encode())
        finally:
            os._exit(code)
    monitor_end.close()
    global _current
    _current = Monitor(server_end, pid)
    return _current


# -- the monitor's side --------------------------------------------------------------------------


class _Refused(Exception):
    pass


class _Serving:
    def __init__(
        self,
        sock: socket.socket,
        folders: Mapping[tuple[int, int], Folder],
        mode: Mode,
        programs: tuple[str, ...],
    ) -> None:
        self._sock = sock
        self._folders = dict(folders)
        self._mode = mode
        self._programs = programs
        self._workers: dict[int, subprocess.Popen[bytes]] = {}
        self._profile: Profile | None = None

    def run(self, server_pid: int, profile: Profile) -> None:
        from fs_notes.sandbox import process, seccomp

        process.die_with_parent(server_pid)
        process.close_fds_except({2, self._sock.fileno()})
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1):  # not the server's stdio: the protocol is no business of the monitor
            if fd != null:
                os.dup2(null, fd)
        if null > 1:
            os.close(null)
        seccomp.install(profile)
        self._profile = profile
        try:
            while True:
                try:
                    data, ancdata, flags, _ = self._sock.recvmsg(
                        MAX_MESSAGE, socket.CMSG_SPACE(START_FDS * 4)
                    )
                except InterruptedError:
                    continue
                except ConnectionResetError:
                    # the server closed its end with our last reply unread (it gave up on us
                    # between a request and its reply): it is done with us, as on a clean close
                    return
                fds = _fds_of(ancdata)
                if not data and not fds:
                    return  # the server closed its end (or died): its workers go with it
                try:
                    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                        raise _Refused("request or fds cut short")
                    reply = self._answer(data, fds)
                except _Refused as exc:
                    reply = {"ok": False, "error": str(exc)}
                except Exception as exc:  # nothing a request holds may end the monitor
                    reply = {"ok": False, "error": f"malformed request ({type(exc).__name__})"}
                finally:
                    for fd in fds:
                        os.close(fd)
                try:
                    self._sock.send(json.dumps(reply).encode())
                except OSError:
                    return  # the server closed its end before the reply: it is done with us
        finally:
            for pid in list(self._workers):
                with contextlib.suppress(_Refused):  # still dying: it dies with us
                    self._kill(pid)

    def _answer(self, data: bytes, fds: list[int]) -> dict[str, Any]:
        try:
            request = json.loads(data)
        except ValueError:
            raise _Refused("not JSON") from None
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            raise _Refused("no such request")
        if request["op"] not in REQUESTS:
            raise _Refused("no such request")
        op = request["op"]
        if op == "start":
            return self._start(request, fds)
        if fds:
            raise _Refused(f"{op} takes no fds")
        if op == "status":
            if set(request) != {"op"}:
                raise _Refused("status takes nothing")
            return self._status()
        if set(request) != {"op", "pid"} or type(request["pid"]) is not int:
            raise _Refused(f"{op} takes a pid")
        pid = request["pid"]
        if pid not in self._workers:
            raise _Refused("not a worker this monitor started")
        if op == "poll":
            code = self._workers[pid].poll()
            if code is not None:
                del self._workers[pid]
            return {"ok": True, "returncode": code}
        return {"ok": True, "returncode": self._kill(pid)}

    def _start(self, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        if set(request) != {"op", "program", "kind", "mode"}:
            raise _Refused("start takes program, kind and mode")
        if not all(isinstance(request[k], str) for k in ("program", "kind", "mode")):
            raise _Refused("start takes program, kind and mode")
        if request["program"] not in self._programs:
            raise _Refused("not a program this monitor starts")
        if request["mode"] != self._mode:
            raise _Refused(f"this monitor starts {self._mode} workers only")
        if len(fds) != START_FDS:
            raise _Refused("start takes three fds")
        workspace, channel, stderr = fds
        folder = self._folder(workspace)
        kind = request["kind"]
        if kind not in KINDS or kind not in folder.kinds:
            raise _Refused("not a kind of worker the policy uses in that workspace")
        if not stat.S_ISSOCK(os.fstat(channel).st_mode) or not _stream_pair(channel):
            raise _Refused("the channel is not a socket")
        out = os.fstat(stderr)
        writes = fcntl.fcntl(stderr, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
        if not stat.S_ISFIFO(out.st_mode) or not writes:
            raise _Refused("stderr is not the write end of a pipe")
        me = os.getpid()
        cmd = launch.worker_command(
            request["program"],
            kind,
            self._mode,
            workspace_fd=workspace,
            channel_fd=channel,
            parent_pid=me,
            symlinks=folder.symlinks,
            user=folder.user,
        )
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                close_fds=True,
                pass_fds=(workspace, channel),
                env={},
                start_new_session=True,
            )
        except OSError as exc:
            raise _Refused(f"the worker could not be started: {exc.strerror}") from None
        self._workers[proc.pid] = proc
        return {
            "ok": True,
            "pid": proc.pid,
            "workspace_fd": workspace,
            "channel_fd": channel,
            "parent_pid": me,
        }

    def _status(self) -> dict[str, Any]:
        from fs_notes.sandbox import process, seccomp

        effective, permitted = process.capabilities()
        return {
            "ok": True,
            "uid": os.geteuid(),
            "effective_caps": effective,
            "permitted_caps": permitted,
            "bounding_caps": process.bounding_set(),
            "seccomp": seccomp.status(),
            "profile": self._profile,
            "no_new_privs": process.no_new_privs(),
            "fds": process.open_fds(),
            "workers": sorted(self._workers),
        }

    def _folder(self, fd: int) -> Folder:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode) or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_PATH:
            raise _Refused("the workspace is not an open folder")
        folder = self._folders.get((st.st_dev, st.st_ino))
        if folder is None:
            raise _Refused("not a workspace folder this monitor was given")
        return folder

    def _kill(self, pid: int) -> int:
        proc = self._workers[pid]
        if proc.poll() is None:
            for kill in (os.killpg, os.kill):  # its group: anything it started, then itself
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(pid, signal.SIGKILL)
        try:
            code = proc.wait(timeout=KILL_WAIT)
        except subprocess.TimeoutExpired:  # stuck in the kernel: asked again, it is still here
            raise _Refused("the worker is still dying") from None
        del self._workers[pid]
        return code


def _stream_pair(fd: int) -> bool:
    """Whether `fd` is a connected AF_UNIX stream socket (one end of a socketpair)."""
    sock = socket.socket(fileno=fd)
    try:
        family = sock.getsockopt(socket.SOL_SOCKET, socket.SO_DOMAIN)
        kind = sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        try:
            sock.getpeername()
        except OSError:
            return False
        return family == socket.AF_UNIX and kind == socket.SOCK_STREAM and not listening
    finally:
        sock.detach()  # the caller closes the fd


def _fds_of(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            got = array.array("i")
            got.frombytes(data[: len(data) - len(data) % got.itemsize])
            fds.extend(got)
    return fds


__all__ = [
    "REQUESTS", "Folder", "Monitor", "MonitorRefused", "MonitoredProcess", "Started", "current",
    "start",
]  # fmt: skip
