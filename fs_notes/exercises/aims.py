"""What the process-level attacks of the compromised class aim at outside, and what each saw.

The runner (outside every layer) sets up, for one attack: a named UNIX socket listening in a
folder of its own ("connect-unix": the session bus, ssh-agent or docker.sock of a real host), a
TCP port listening on 127.0.0.1 ("mptcp"), or a SysV shared-memory segment, mode 0600, holding
the secret marker ("sysv-shm"), the terminal the target was started from ("tiocsti": what is
typed there is echoed on the runner's end); "kill" and "prlimit" aim at the victim process the
runner starts anyway. `harm()` then judges from outside: a connection waiting on either
listener, the victim dead, its open-file limit changed, the typed command echoed. (A segment
read, and a memfd's program run, are told by the attack's own result: compromised.learned.)

Guarantees: everything set up is removed by `close()` (the socket's folder, the segment), also
after an attack that failed. Does not: exist in `serve`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import socket
import subprocess
import tempfile

from .compromised import TYPED
from .tracing import TERMINAL_FD

IPC_PRIVATE_MODE = 0o600
IPC_CREAT = 0o1000
IPC_EXCL = 0o2000
IPC_RMID = 0
_libc = ctypes.CDLL(None, use_errno=True)


def _drain(terminal: int) -> bytes:
    """What the terminal echoed (the other end, non-blocking): typed input shows there."""
    out = b""
    while terminal >= 0:
        try:
            chunk = os.read(terminal, 4096)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        out += chunk
    return out


def _open_files_limit(pid: int) -> str:
    with open(f"/proc/{pid}/limits", encoding="ascii") as f:
        for line in f:
            if line.startswith("Max open files"):
                return " ".join(line.split()[3:5])
    return "?"


class Aims:
    """What one attack aims at; `aim` is what the attacker code is told (a path, port or key)."""

    def __init__(
        self, op: str, secret: str, victim: subprocess.Popen[bytes], terminal: int = -1
    ) -> None:
        self.op, self.aim = op, ""
        self._terminal = terminal
        self._victim = victim
        self._folder: str | None = None
        self._listener: socket.socket | None = None
        self._shm_id = -1
        self._limit = _open_files_limit(victim.pid)
        if op == "connect-unix":
            self._folder = tempfile.mkdtemp(prefix="fsn-aim-")
            self.aim = os.path.join(self._folder, "agent.sock")
            self._listen(socket.AF_UNIX, self.aim)
        elif op == "mptcp":
            self._listen(socket.AF_INET, ("127.0.0.1", 0))
            assert self._listener is not None
            self.aim = str(self._listener.getsockname()[1])
        elif op == "sysv-shm":
            self._share(secret.encode())
        elif op == "tiocsti":
            self.aim = str(TERMINAL_FD)
            _drain(terminal)

    def _listen(self, family: int, address: str | tuple[str, int]) -> None:
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.bind(address)
        self._listener.listen(8)
        self._listener.setblocking(False)

    def _share(self, data: bytes) -> None:
        shmget, shmat, shmdt = _libc.shmget, _libc.shmat, _libc.shmdt
        shmat.restype = ctypes.c_void_p
        shmdt.argtypes = [ctypes.c_void_p]
        for key in range(0x46534E00 + os.getpid() % 251, 0x46534F00):  # "FSN..": one free key
            shm_id = shmget(key, 4096, IPC_CREAT | IPC_EXCL | IPC_PRIVATE_MODE)
            if shm_id != -1:
                break
        else:
            raise OSError(ctypes.get_errno(), "no SysV key free for the segment")
        self._shm_id, self.aim = shm_id, str(key)
        address = shmat(shm_id, None, 0)
        ctypes.memmove(address, data, len(data))
        shmdt(address)

    def harm(self) -> list[str]:
        """What the attack did that it must not have (seen from outside)."""
        harm = []
        if self._listener is not None:
            with contextlib.suppress(BlockingIOError):
                conn, _ = self._listener.accept()
                conn.close()
                harm.append(f"{self.op}: a connection reached the listener outside")
        if self.op == "tiocsti" and TYPED.rstrip() in _drain(self._terminal):
            harm.append("a command was typed into the terminal the server was started from")
        if self.op == "kill":
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._victim.wait(timeout=1)  # a SIGKILL sent is delivered at once
            if self._victim.returncode is not None:
                harm.append("the victim process was killed")
        if self.op == "prlimit" and self._victim.poll() is None:
            now = _open_files_limit(self._victim.pid)
            if now != self._limit:
                harm.append(f"the victim's open-file limit went from {self._limit} to {now}")
        return harm

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
        if self._shm_id != -1:
            _libc.shmctl(self._shm_id, IPC_RMID, None)
            self._shm_id = -1
