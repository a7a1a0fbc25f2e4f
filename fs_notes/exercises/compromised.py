"""Attacker code for the compromised-process class of the escape exercises.

Layer 3 exists for a compromised server: code of the attacker's running in the server process, or
in a worker, after their confinement. `attack` is that code: one bare system call on an outside
path (or process), with no check of ours in the way. The knock-out target runs it in its own
process (the server, confined exactly as `serve` confines itself) and in attacker workers
(`rawworker.RawWorker`, confined through the real worker's entry point); the runner then judges
from outside: the outside file's content, mode, owner, times, links and extended attributes, a
planted file's absence, and whether the victim process got a tracer.

Guarantees: each call is made exactly once, on exactly the paths given; the result is "ok" or
the errno's name. Two attacks learn rather than change, so what they learned is their result:
"stat" is "ok" when it could tell that outside/secret.md exists (its stat succeeded, or failed
differently from a missing name's), and "environ" returns what it read of the victim's
/proc/<pid>/environ (the runner looks for the secret marker the victim carries there). Does not:
exist in `serve`.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from typing import Final

OPS: Final = (
    "chmod", "chown", "utime", "setxattr", "link", "mknod", "unlink", "read", "stat", "ptrace",
    "environ", "rename-out", "rename-in", "connect-unix", "mptcp", "kill", "prlimit",
    "memfd-exec", "sysv-shm", "tiocsti",
)  # fmt: skip
#: What a process-level attack aims at (added 2026-12-03, issue 26), given as `aim`: "connect-unix"
#: a named UNIX socket the runner listens on outside (its path), "mptcp" a TCP port the runner
#: listens on at 127.0.0.1 (MPTCP falls back to TCP, past Landlock's TCP rules), "sysv-shm" the
#: key of a SysV segment an outside process keeps (mode 0600), holding the secret marker.
#: "kill" and "prlimit" aim at the victim process; "memfd-exec" runs this interpreter from a
#: memfd (its result "ok" says it ran). The runner judges connects, the kill and the limit from
#: outside (a pending connection, the victim alive, its /proc limits unchanged).
#: "tiocsti" (added 2026-12-04) pushes `TYPED` into the input of the terminal the target was
#: started on (the fd number is its `aim`, tracing.TERMINAL_FD): an operator's shell would read
#: it as typed. The runner reads the terminal's other end for it.
TYPED: Final = b"#fs-notes-typed\n"
PRLIMIT_NOFILE: Final = (7, 7)  # what "prlimit" sets the victim's RLIMIT_NOFILE to
IPPROTO_MPTCP: Final = 262
RLIMIT_NOFILE: Final = 7
#: The moves (added 2026-12-01): renameat2 of the workspace's note.md to outside/planted, and of
#: outside/secret.md into the workspace (as ws/stolen.md), the attack's root being the folder
#: holding both ws/ and outside/. Landlock refuses a rename between folders without REFER on
#: both (EXDEV), or without the rights to remove and make the entries (EACCES).
_ENVIRON_BYTES: Final = 4096
PTRACE_ATTACH: Final = 16
TIOCSTI: Final = 0x5412

_libc = ctypes.CDLL(None, use_errno=True)


def _ptrace(victim: int) -> None:
    if _libc.ptrace(PTRACE_ATTACH, victim, None, None) == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _type_into(fd: int) -> None:
    # libc's ioctl, not fcntl's: a worker imports nothing after its confinement
    for byte in TYPED:
        if _libc.ioctl(fd, TIOCSTI, ctypes.c_char_p(bytes([byte]))) == -1:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))


def _read(target: str) -> None:
    fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.read(fd, 1)  # the byte stays here: a read is judged by the file's access time
    finally:
        os.close(fd)


def _outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "ok"


def _stat(target: str, missing: str) -> str:
    """ "ok" if stat tells `target` (which exists) from `missing` (which does not)."""
    found, absent = _outcome(lambda: os.stat(target)), _outcome(lambda: os.stat(missing))
    return "ok" if found == "ok" or found != absent else found


def _environ(victim: int) -> str:
    fd = os.open(f"/proc/{victim}/environ", os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, _ENVIRON_BYTES)
    finally:
        os.close(fd)
    return "ok:" + data.replace(b"\0", b" ").decode("latin-1")


def _rename(source: str, target: str) -> None:
    from fs_notes.fs.rename import RENAME_NOREPLACE, renameat2

    renameat2(-100, source, -100, target, RENAME_NOREPLACE)  # AT_FDCWD: the paths as they are


def _connect(family: int, proto: int, address: str | tuple[str, int]) -> None:
    import socket

    with socket.socket(family, socket.SOCK_STREAM, proto) as s:
        s.settimeout(5)
        s.connect(address)
        s.sendall(b"x")


def _prlimit(victim: int) -> None:
    """prlimit64 through libc (a confined worker cannot load the `resource` extension)."""
    limit = (ctypes.c_uint64 * 2)(*PRLIMIT_NOFILE)
    if _libc.prlimit64(victim, RLIMIT_NOFILE, ctypes.byref(limit), None) == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _memfd_exec() -> None:
    """This interpreter's own binary copied into a memfd, run from /proc/self/fd (posix_spawn
    says whether the exec itself was refused; a refusal's errno is raised)."""
    import sys

    fd = os.memfd_create("payload", 0)  # inherited on purpose: the child runs it by its number
    try:
        with open(sys.executable, "rb") as f:
            os.write(fd, f.read())
        # run from a memfd, the interpreter cannot find its library without PYTHONHOME
        env = {"PYTHONHOME": sys.base_prefix}
        pid = os.posix_spawn(f"/proc/self/fd/{fd}", ["python", "-S", "-c", "pass"], env)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if status != 0:
            raise OSError(errno.ENOEXEC, f"the program from the memfd exited with {status}")
    finally:
        os.close(fd)


def _shm_read(key: int) -> None:
    shmget, shmat, shmdt = _libc.shmget, _libc.shmat, _libc.shmdt
    shmat.restype = ctypes.c_void_p
    shmdt.argtypes = [ctypes.c_void_p]
    shm_id = shmget(key, 0, 0)
    if shm_id == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    address = shmat(shm_id, None, 0o10000)  # SHM_RDONLY
    if address in (None, ctypes.c_void_p(-1).value):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    try:
        ctypes.string_at(address, 16)  # read: what the attack wanted
    finally:
        shmdt(address)


def _chown_to() -> tuple[int, int]:
    """Who chown gives the file to: nobody, as root; else this process's own uid and gid, the
    one chown the kernel lets a regular user make (it still changes the file's ctime, which the
    runner sees), so that the system-call filter, not the kernel, is what must refuse it."""
    if os.geteuid() == 0:
        return 65534, 65534
    return os.geteuid(), os.getegid()


def _call(op: str, target: str, planted: str, victim: int, aim: str) -> Callable[[], object]:
    import signal
    import socket

    root = os.path.dirname(os.path.dirname(target))  # target is <root>/outside/secret.md
    return {
        "connect-unix": lambda: _connect(socket.AF_UNIX, 0, aim),
        "mptcp": lambda: _connect(socket.AF_INET, IPPROTO_MPTCP, ("127.0.0.1", int(aim or 0))),
        "kill": lambda: os.kill(victim, signal.SIGKILL),
        "prlimit": lambda: _prlimit(victim),
        "memfd-exec": _memfd_exec,
        "tiocsti": lambda: _type_into(int(aim or -1)),
        "sysv-shm": lambda: _shm_read(int(aim or 0)),
        "rename-out": lambda: _rename(os.path.join(root, "ws", "note.md"), planted),
        "rename-in": lambda: _rename(target, os.path.join(root, "ws", "stolen.md")),
        "chmod": lambda: os.chmod(target, 0o4777),  # noqa: S103 (the attack itself)
        "chown": lambda: os.chown(target, *_chown_to()),
        "utime": lambda: os.utime(target, (0, 0)),
        "setxattr": lambda: os.setxattr(target, "user.pwned", b"1"),
        "link": lambda: os.link(target, planted),
        "mknod": lambda: os.mknod(planted),
        "unlink": lambda: os.unlink(target),
        "read": lambda: _read(target),
        "ptrace": lambda: _ptrace(victim),
    }[op]


PR_SET_NAME: Final = 15
PR_GET_NAME: Final = 16
#: The name a thread takes while it attacks: CI's logging pass (.ci/seccomp-log) fails on any
#: call a filter refused by default unless the thread that made it was named so, on purpose.
ON_PURPOSE: Final = b"fs-notes-probe"


class _OnPurpose:
    """This thread is named `ON_PURPOSE` while the attack runs, then gets its name back."""

    def __enter__(self) -> None:
        self._name = ctypes.create_string_buffer(16)
        _libc.prctl(PR_GET_NAME, self._name)
        _libc.prctl(PR_SET_NAME, ctypes.create_string_buffer(ON_PURPOSE))

    def __exit__(self, *exc_info: object) -> None:
        _libc.prctl(PR_SET_NAME, self._name)


def attack(op: str, target: str, planted: str, victim: int, aim: str = "") -> str:
    """Run attack `op` here; "ok" or the name of the errno it failed with. `aim`: what a
    process-level attack aims at (see `PRLIMIT_NOFILE` above)."""
    if op not in OPS:
        raise ValueError(f"unknown attack {op!r}")
    with _OnPurpose():
        return _attack(op, target, planted, victim, aim)


def _attack(op: str, target: str, planted: str, victim: int, aim: str) -> str:
    if op == "stat":
        return _stat(target, planted)
    try:
        if op == "environ":
            return _environ(victim)
        _call(op, target, planted, victim, aim)()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "ok"


def learned(op: str, result: str) -> str | None:
    """What an attack that learns (rather than changes) learned, as harm; None if nothing.
    (The environ attack's secret marker is found in its response by the runner.)"""
    if op == "stat" and result == "ok":
        return "stat told that outside/secret.md exists"
    if op == "memfd-exec" and result == "ok":
        return "a program written to a memfd ran"
    if op == "sysv-shm" and result == "ok":
        return "the shared-memory segment of an outside process was attached and read"
    return None


def refused(result: str) -> bool:
    """Whether `result` is the OS layer saying no (Landlock EACCES, seccomp or capabilities
    EPERM, a chroot's "no such file", Landlock's EXDEV for a rename between folders without
    REFER: every attack's paths are on one filesystem, so EXDEV is never the kernel's own;
    EBADF for an fd the process does not hold: a worker closes all but its own)."""
    return result in ("EACCES", "EPERM", "ENOENT", "EXDEV", "ENOSYS", "ESRCH", "EBADF")


def traced_by(victim: int) -> int:
    """The pid tracing `victim` (0: none), from /proc (the runner's own check)."""
    try:
        with open(f"/proc/{victim}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0
