"""How a worker process is started: its interpreter's command line, one home for both starters.

A worker is started either by the process that supervises it (sandbox/supervisor.py, a server
that is not root or not confined, tests, `fs-notes check`) or, for a root server, by its monitor
(sandbox/monitor.py), which holds the capabilities the server gave up. Both build the command
here, so the worker is started the same way whoever starts it.

The worker runs isolated (-I: no environment variables, no user site, no cwd on sys.path) and
without site (-S: it needs nothing else from site-packages, and starts faster); fs-notes is
loaded from its folder (sandbox/bootstrap.py), and the one module it needs from site-packages,
the libseccomp binding, from its file (site-packages stays off the path). The binding finds its
C libraries with ctypes.util.find_library, which runs ldconfig: a worker started by a confined
process may not run programs, so it is told the paths this process has mapped.

Guarantees: nothing here starts anything; the command names only the interpreter running now,
the program module given, and the fds and ids given.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

from fs_notes.clib import mapped_libraries
from fs_notes.sandbox import seccomp
from fs_notes.sandbox.bootstrap import loader
from fs_notes.sandbox.kinds import Kind, Mode

_SONAMES = {"c": "libc.so.6", "seccomp": "libseccomp.so.2"}

#: The worker program of the product; the escape exercises name their attacker worker instead.
WORKER_PROGRAM = "fs_notes.sandbox.worker"


def _mapped_libraries() -> dict[str, str]:
    """Where libc and libseccomp are (fs_notes/clib.py: the one home of library look-ups)."""
    seccomp.available()
    return mapped_libraries(_SONAMES)


@functools.cache
def bootstrap(program: str) -> str:
    """The `-c` code that loads fs-notes and runs `program`'s main()."""
    spec = importlib.util.find_spec("pyseccomp")
    load = ""
    if spec is not None and spec.origin is not None:
        load = (
            "import ctypes.util, importlib.util as u; "
            f"ctypes.util.find_library = {_mapped_libraries()!r}.get; "
            f"s = u.spec_from_file_location('pyseccomp', {spec.origin!r}); "
            "m = u.module_from_spec(s); sys.modules['pyseccomp'] = m; s.loader.exec_module(m); "
        )
    return f"{loader()}{load}from {program} import main; sys.exit(main())"


def worker_command(
    program: str,
    kind: Kind,
    mode: Mode,
    *,
    workspace_fd: int,
    channel_fd: int,
    parent_pid: int,
    symlinks: str,
    user: tuple[int, int] | None,
) -> list[str]:
    """The worker's command line (parsed by sandbox/worker.py `parser`)."""
    cmd = [
        sys.executable, "-I", "-S", "-X", "utf8", "-c", bootstrap(program),
        "--kind", kind,
        "--mode", mode,
        "--workspace-fd", str(workspace_fd),
        "--channel-fd", str(channel_fd),
        "--parent-pid", str(parent_pid),
        "--symlinks", symlinks,
    ]  # fmt: skip
    if user is not None:
        cmd += ["--user", f"{user[0]}:{user[1]}"]
    return cmd


__all__ = ["WORKER_PROGRAM", "bootstrap", "worker_command"]
