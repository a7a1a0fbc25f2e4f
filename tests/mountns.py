"""Tests that mount, as root and as a regular user: one way for both.

Guarantees: a test marked `@pytest.mark.mounts` runs as it is written when this process may
mount (root, or already inside a namespace made here). Run by a regular user, tests/conftest.py
runs it again, alone, in a user and mount namespace of its own (`PREFIX`: `unshare --user
--map-current-user --mount --keep-caps`): the same uid and gid, with the capabilities of that
namespace only, so it can mount a tmpfs, bind mounts and, where /dev/fuse is open to users (it
is on a desktop; .ci/user opens it as a desktop's udev rule does), FUSE, and nothing outside the
namespace changes. `drop_capabilities()` (called by the conftest before the test's body)
leaves that process with no capability at all, so whatever it starts - fs-notes included - runs
as the regular user it is, with none. The outer test passes only if the inner run passed, and
reports the inner run's output if not.

`command_prefix()` is the same for a test that runs its own child in a mount namespace
(`unshare -m` as root): as a regular user the child gets the user namespace too, and
`DROP` (setpriv) takes its capabilities away before fs-notes starts.

Does not: make a test that needs real root (another user's files, a worker that changes uid)
pass as a regular user: those prove the regular user's outcome instead (tests/layers.py).
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Set in the re-run's environment: this process is the one inside the namespace.
INSIDE = "FS_NOTES_TEST_MOUNT_NS"
PREFIX = ["unshare", "--user", "--map-current-user", "--mount", "--propagation", "private",
          "--keep-caps"]  # fmt: skip
#: Put before a command that must run with no capability (after the mounts are made).
DROP = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--"]

_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4


def can_mount() -> bool:
    return os.geteuid() == 0 or os.environ.get(INSIDE) == "1"


def command_prefix() -> tuple[list[str], list[str]]:
    """(prefix, drop): `prefix + ["sh", "-c", mounts + ' && exec "$@"', "sh", *drop, *cmd]`
    runs cmd in a mount namespace of its own, with no capability left as a regular user."""
    if os.geteuid() == 0:
        return ["unshare", "-m", "--propagation", "private"], []
    return list(PREFIX), list(DROP)


def rerun(
    nodeid: str, timeout: float, cwd: Path = REPO, plugins: tuple[str, ...] = ()
) -> tuple[bool, str]:
    """Run one test again inside a user and mount namespace: (passed, what pytest printed).
    `cwd` is the session's root folder (node ids are relative to it); `plugins` the `-p`
    names the session was started with."""
    loaded = [arg for name in plugins for arg in ("-p", name)]
    cmd = [*PREFIX, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *loaded,
           "-rA", "--rootdir", str(cwd), "--timeout", str(int(timeout)), nodeid]  # fmt: skip
    env = {**os.environ, INSIDE: "1", "FS_NOTES_TEST_OUTER_UID": str(os.getuid())}
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout + 30, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        return False, f"the re-run in a mount namespace timed out: {exc}"
    out = proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    passed = proc.returncode == 0 and re.search(r"(^|\W)1 passed\b", last) is not None
    passed = passed and re.search(r"skipped|failed|error", last) is None
    return passed, f"{' '.join(cmd)}\nexit {proc.returncode}\n{out}"


def drop_capabilities() -> None:
    """Leave this process (and what it starts) with no capability: clear the ambient set,
    then the permitted, effective and inheritable ones (capset with zero sets)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_CAP_AMBIENT_CLEAR_ALL")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]  # fmt: skip

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def capabilities() -> dict[str, int]:
    """CapEff, CapPrm, CapInh and CapAmb of this process, from /proc/self/status."""
    out: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
            out[key] = int(value.strip(), 16)
    return out
