"""The attacker worker's program: confined exactly like a real worker, then bare system calls.

`python -c ...` (the supervisor's bootstrap) runs `main` here: it confines itself through
`sandbox.worker.run` / `prepare`, the real worker's own entry point, with the same arguments
(Landlock rights of its kind, chroot, capabilities, no_new_privs, the system-call filter, every
fd closed but those it is told to keep), and only then serves the real worker's requests and,
as JSON,
`{"op": "unlink" | "create" | "read" | "sleep", "path": str, "dir_fd": int?, "seconds": float?}`
with the production reply frames. The supervisor side is `rawworker.RawWorker`. Imports nothing
the worker's isolated interpreter cannot (no psutil, no site-packages).

Guarantees: nothing in `fs-notes serve` starts it. Does not: check any path: that is the point.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from typing import Any

from fs_notes.sandbox import worker
from fs_notes.sandbox.protocol import BAD_REQUEST_FRAME, OK_FRAME, os_error_frame

from . import compromised

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
MAX_SLEEP = 60.0


def _act(request: dict[str, Any]) -> bytes:
    op, path, dir_fd = request.get("op"), request.get("path", ""), request.get("dir_fd")
    if op == "attack":  # the compromised-worker class: attacker code after confinement
        result = compromised.attack(
            str(request["attack"]),
            path,
            str(request["planted"]),
            int(request["victim"]),
            str(request.get("aim", "")),
        )
        return OK_FRAME if result == "ok" else os_error_frame(getattr(errno, result, 0))
    if op == "sleep":
        time.sleep(min(float(request.get("seconds", 0.0)), MAX_SLEEP))
        return OK_FRAME
    if not isinstance(path, str) or not (dir_fd is None or isinstance(dir_fd, int)):
        return BAD_REQUEST_FRAME
    if op == "unlink":
        os.unlink(path, dir_fd=dir_fd)
    elif op == "create":
        os.close(os.open(path, _CREATE, 0o600, dir_fd=dir_fd))
    elif op == "rename":  # renameat2(RENAME_NOREPLACE), both paths as given (added 2026-12-01)
        from fs_notes.fs.rename import RENAME_NOREPLACE, renameat2

        other = request.get("other", "")
        if not isinstance(other, str):
            return BAD_REQUEST_FRAME
        here = -100 if dir_fd is None else dir_fd  # AT_FDCWD: the worker's cwd, its workspace
        renameat2(here, path, here, other, RENAME_NOREPLACE)
    elif op == "read":  # the content never leaves the worker
        fd = os.open(path, _READ, dir_fd=dir_fd)
        try:
            os.read(fd, 1)
        finally:
            os.close(fd)
    else:
        return BAD_REQUEST_FRAME
    return OK_FRAME


def answer(state: worker.State, body: bytes) -> bytes:
    """One request -> one reply frame; never raises. Binary frames are the real worker's
    requests (delete, create, update), answered by the real worker's own `handle`."""
    if not body.startswith(b"{"):
        return worker.handle(state, body)
    try:
        request = json.loads(body)
        if not isinstance(request, dict):
            return BAD_REQUEST_FRAME
        return _act(request)
    except OSError as exc:
        return os_error_frame(exc.errno)
    except (ValueError, TypeError):
        return BAD_REQUEST_FRAME


def main(argv: list[str] | None = None) -> int:
    p = worker.parser("fs_notes.exercises.rawworker")
    p.add_argument("--keep-fd", type=int, action="append", default=[])
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    return worker.run(args, answer, tuple(args.keep_fd))



if __name__ == "__main__":
    sys.exit(main())
