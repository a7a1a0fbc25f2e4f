"""What the exercises measure about this host before judging (issue 25).

Some cells of the documented matrix (expected.py) depend on the host, not on fs-notes: a regular
user cannot make the bind mounts some attacks are built on, nor give the server a private view;
an interpreter bigger than the workspace's read limit is refused whole by the naive root before
anything is served; Yama's ptrace_scope makes the kernel refuse an attach on its own. The matrix
states, per such cell, what it expects under which condition (`expected.HOST_CONDITIONS`); the
condition is decided from the `HostFacts` measured here, never from an option or a variable.

Guarantees: every fact is measured in this run (the effective uid, a bind mount tried in a child,
the view's own reason, the size of the file the target will run, the read limit its workspaces
get, /proc/sys/kernel/yama/ptrace_scope); `DOCUMENTED` is the host the table itself is for
(CI's: root, a bind mount and a private view possible, a small interpreter, no Yama scope).
Does not: decide anything about fs-notes' own layers (a condition only names what the host
makes of a cell).
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

from fs_notes.policy import DEFAULT_READ_LIMIT

YAMA = "/proc/sys/kernel/yama/ptrace_scope"
LEGACY_TIOCSTI = "/proc/sys/dev/tty/legacy_tiocsti"


@dataclass(frozen=True)
class HostFacts:
    root: bool  # effective uid 0
    mount: str  # why the harness cannot make a private bind mount here ("": it can)
    view: str  # why the target gets no private view here ("": it does)
    atime: str  # why access times do not show reads here ("": they do)
    interpreter: str  # the file the target runs (what /proc/self/exe names in it)
    interpreter_bytes: int
    read_limit: int  # of every workspace the runner's policy writes (the default)
    ptrace_scope: int  # Yama's kernel.yama.ptrace_scope (-1: no Yama)
    #: dev.tty.legacy_tiocsti (kernels before 6.2 have no switch: TIOCSTI always works)
    legacy_tiocsti: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def interpreter() -> str:
    """The executable the runner starts targets with, resolved as the kernel sees it."""
    return os.path.realpath(sys.executable)


def ptrace_scope() -> int:
    try:
        with open(YAMA, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return -1


def legacy_tiocsti() -> bool:
    try:
        with open(LEGACY_TIOCSTI, encoding="ascii") as f:
            return f.read().strip() != "0"
    except OSError:
        return True


def measure(mount: str, view: str, atime: str) -> HostFacts:
    """This host's facts; `mount`, `view`, `atime` are the runner's own probes' answers."""
    exe = interpreter()
    try:
        size = os.stat(exe).st_size
    except OSError:
        size = 0
    return HostFacts(
        root=os.geteuid() == 0,
        mount=mount,
        view=view,
        atime=atime,
        interpreter=exe,
        interpreter_bytes=size,
        read_limit=DEFAULT_READ_LIMIT,
        ptrace_scope=ptrace_scope(),
        legacy_tiocsti=legacy_tiocsti(),
    )


#: The host docs/design.md's table is for.
DOCUMENTED = HostFacts(
    root=True,
    mount="",
    view="",
    atime="",
    interpreter="python3",
    interpreter_bytes=0,
    read_limit=DEFAULT_READ_LIMIT,
    ptrace_scope=-1,
)
