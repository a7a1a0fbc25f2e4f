"""Host probe: which OS containment this machine can *enforce*, and the mode deletion will use.

Guarantees: `landlock_enforced` is True only if a child process really confined itself and was
then refused (EACCES) a read outside its allowed directory that succeeded just before confining,
while a read inside still worked; `chroot` is True only if a child really entered a chroot (with
the same code the worker uses) and then could see the inside marker and not the outside one;
`user_namespaces.works` only if a child really made a user and mount namespace and mounted in it
(sandbox/userns.py; when refused, it names the settings of this kernel that refuse it).
The tests run in subprocesses (confinement cannot be undone), never in this process.
`select_mode` fails closed: Landlock if enforced, else chroot if it works, else "none" only when
the operator explicitly allowed unconfined deletion, else `NoEnforceableLayer`.
Nothing here can be told to pretend: the CI pass that proves the chroot fallback hides Landlock
from outside (tests/hide_landlock.py), and the probe then finds a kernel without it.

Does not: probe on every call cheaply (it starts three short-lived Python children; call it once
at start-up), or prove anything about the worker's own confinement (the worker reports that in
its hello, and the supervisor checks it).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fs_notes.sandbox import landlock_abi as ll
from fs_notes.sandbox.bootstrap import loader
from fs_notes.sandbox.errors import NoEnforceableLayer
from fs_notes.sandbox.kinds import Mode
from fs_notes.sandbox.userns import UserNamespaces

_BOOTSTRAP = (
    f"{loader()}from fs_notes.sandbox.probe import child_main; sys.exit(child_main(sys.argv[1:]))"
)


@dataclass(frozen=True)
class HostReport:
    landlock_abi: int | None
    landlock_enforced: bool
    landlock_errata: int
    landlock_reason: str | None  # why Landlock is not enforced (None when it is)
    openat2: bool
    chroot: bool
    chroot_reason: str | None
    #: Whether a user namespace with a mount namespace can be made here, or which settings
    #: refuse it (sandbox/userns.py); None: not probed.
    user_namespaces: UserNamespaces | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "landlock": {
                "abi": self.landlock_abi,
                "enforced": self.landlock_enforced,
                "errata": self.landlock_errata,
                "reason": self.landlock_reason,
            },
            "openat2": self.openat2,
            "chroot": self.chroot,
            "chroot_reason": self.chroot_reason,
            "user_namespaces": (
                self.user_namespaces.to_json() if self.user_namespaces is not None else None
            ),
        }


def select_mode(report: HostReport, allow_unconfined: bool) -> Mode:
    """The strongest enforceable mode; "none" only if allowed; else NoEnforceableLayer."""
    if report.landlock_enforced:
        return "landlock"
    if report.chroot:
        return "chroot"
    if allow_unconfined:
        return "none"
    raise NoEnforceableLayer(
        "no OS containment is enforceable here (Landlock: "
        f"{report.landlock_reason}; chroot: {report.chroot_reason}); "
        "deletion is refused unless unconfined deletion is explicitly allowed"
    )


# -- the children ---------------------------------------------------------------------------


def _landlock_child(inside: str, outside_file: str) -> dict[str, Any]:
    from fs_notes.sandbox.confine import confine

    with open(outside_file, "rb") as f:  # positive control: readable before confining
        f.read()
    fd = os.open(inside, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    report = confine([(fd, ll.ACCESS_FS_READ_FILE | ll.ACCESS_FS_READ_DIR)])
    os.close(fd)
    with open(os.path.join(inside, "marker"), "rb") as f:
        f.read()
    try:
        with open(outside_file, "rb") as f:
            f.read()
    except PermissionError:
        return {"enforced": True, "abi": report.abi}
    return {"enforced": False, "reason": "outside file still readable after confining"}


def _chroot_child(inside: str, outside_file: str) -> dict[str, Any]:
    from fs_notes.sandbox.chroot import enter_chroot

    fd = os.open(inside, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    report = enter_chroot(fd)
    os.close(fd)
    sees_inside = os.path.exists("/marker")
    sees_outside = os.path.exists(outside_file)
    if sees_inside and not sees_outside:
        return {"works": True, "user_namespace": report.user_namespace}
    return {"works": False, "reason": "chroot did not hide the outside"}


def child_main(argv: list[str]) -> int:
    """Entry point of the probe children: `landlock|chroot|userns INSIDE OUTSIDE_FILE`."""
    what, inside, outside_file = argv
    try:
        if what == "landlock":
            result = _landlock_child(inside, outside_file)
        elif what == "userns":
            from fs_notes.sandbox.userns import attempt

            result = attempt(inside)
        else:
            result = _chroot_child(inside, outside_file)
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result))
    return 0


def _spawn(what: str, inside: str, outside_file: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-X", "utf8", "-c", _BOOTSTRAP, what, inside, outside_file],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={},
    )


def _collect(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": "probe child timed out"}
    try:
        result = json.loads(out)
    except ValueError:
        return {"error": f"probe child failed: {err.strip()[-200:]}"}
    return result if isinstance(result, dict) else {"error": "probe child sent nonsense"}


def _openat2() -> bool:
    from fs_notes.fs import openat2_available

    return openat2_available()


def probe(timeout: float = 10.0) -> HostReport:
    """Test this host (in child processes). Takes a fraction of a second."""
    abi: int | None = None
    errata = 0
    reason: str | None = None
    try:
        abi = ll.abi_version()
        errata = ll.errata()
    except ll.LandlockError as exc:
        reason = exc.reason
    tmp = tempfile.mkdtemp(prefix="fs-notes-probe-")
    try:
        inside = os.path.join(tmp, "inside")
        os.mkdir(inside)
        Path(inside, "marker").write_bytes(b"inside\n")
        outside_file = os.path.join(tmp, "outside")
        Path(outside_file).write_bytes(b"outside\n")
        ll_proc = _spawn("landlock", inside, outside_file) if abi is not None else None
        chroot_proc = _spawn("chroot", inside, outside_file)
        userns_proc = _spawn("userns", inside, outside_file)
        ll_result = _collect(ll_proc, timeout) if ll_proc is not None else {}
        chroot_result = _collect(chroot_proc, timeout)
        userns = UserNamespaces.from_child(_collect(userns_proc, timeout))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    enforced = ll_result.get("enforced") is True
    if abi is not None and not enforced:
        reason = str(ll_result.get("reason") or ll_result.get("error") or "not enforced")
    chroot_ok = chroot_result.get("works") is True
    chroot_reason = None
    if not chroot_ok:
        chroot_reason = str(
            chroot_result.get("reason") or chroot_result.get("error") or os.strerror(errno.EPERM)
        )
    return HostReport(
        landlock_abi=abi,
        landlock_enforced=enforced,
        landlock_errata=errata,
        landlock_reason=reason,
        openat2=_openat2(),
        chroot=chroot_ok,
        chroot_reason=chroot_reason,
        user_namespaces=userns,
    )


if __name__ == "__main__":
    print(json.dumps(probe().to_json(), indent=2))
