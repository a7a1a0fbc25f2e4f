"""Creates, updates, moves and deletions through the OS layer: confined worker processes per
workspace, behind the one door for changes (`ConfinedChanges`, fs_notes/fs/changes.py).

Guarantees:
- Every create, update and delete runs in a worker process confined by the strongest mode the
  host enforces (Landlock, else chroot), one worker per workspace and kind: the delete worker
  may only unlink beneath its workspace, the write worker only create and write files there
  (`sandbox.confine.DELETE_RIGHTS` / `WRITE_RIGHTS`).
- Fail closed: with no enforceable layer, or in a workspace whose policy requires a stronger one
  (`sandbox = "landlock"`, the default, on a chroot-only host), creates, updates and deletions
  are refused (a deletion before the user is asked) unless the operator passed
  --allow-unconfined, which is logged loudly. A worker that cannot be started refuses too.
- Writes follow exactly the rule deletion follows (a decision): an update replaces a note's whole
  content, which destroys it as surely as an unlink, and a create can plant files; a weaker bar
  for writes would make the deletion bar pointless. So the workspace's `sandbox` level and
  --allow-unconfined govern both, and both worker kinds run under the same mode.
- Workers get the workspace as the directory fd `serve` opened at start-up (duplicated), never
  its path: a folder moved or replaced after start-up is not reopened (the new one is never
  written to).
- Nothing here competes with the first request: the set-up (the host probe, which starts three
  short-lived Python children, and the workers) starts `START_DELAY` seconds after the server,
  or at once when a create, update or delete needs it, on a background thread; psutil,
  subprocess and the supervisor are imported there, not on the start-up path. Which layers are
  active is logged once known. When the server confined itself with Landlock
  (fs_notes.sandbox.selfconfine, proven at start-up), that proof stands in for the probe: the
  mode is "landlock".

Does not: retry an operation that failed in a worker (the tools report it; nothing is half done:
unlinkat and renameat are atomic), decide who may do what (layer 1), or resolve paths (the
workers use the filesystem layer, fs_notes.fs, which checks every path again inside them).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

from fs_notes.sandbox.errors import NoEnforceableLayer, OsRefused, SandboxError
from fs_notes.sandbox.kinds import KINDS, Kind, Mode

from ..fs import FsError, Identity
from ..fs.changes import Op
from ..fs.errors import RESOURCE_ERRNOS, error_for_errno
from ..policy import Policy, Workspace

if TYPE_CHECKING:
    from fs_notes.sandbox.probe import HostReport
    from fs_notes.sandbox.supervisor import ConfinedWorker

log = logging.getLogger("fs_notes.sandbox")

START_DELAY = 1.0
SETUP_TIMEOUT = 60.0

_T = TypeVar("_T")


class HasFd(Protocol):
    """A workspace root handle (fs.WorkspaceRoot): its directory fd, opened at start-up."""

    @property
    def fd(self) -> int: ...


class OsLayerFailed(FsError):
    message = "refused or failed in the confined worker"


def accept_hint(mode: str, policy_file: str | None) -> str:
    """How the operator accepts the weaker layer `mode` this host provides: never automatic
    (the policy's default is the strongest), always an explicit choice."""
    if mode == "none":
        return ""
    if policy_file is None:
        return f" (to accept {mode}, the operator starts serve with --sandbox {mode})"
    return f' (to accept {mode}, the operator sets sandbox = "{mode}" in its [[workspace]])'


class OsLayer:
    """The mode, chosen once (lazily), and the workers, started on demand and kept."""

    def __init__(
        self,
        policy: Policy,
        roots: Mapping[str, HasFd],
        *,
        allow_unconfined: bool,
        self_confined: bool = False,
        host: HostReport | None = None,
        start_delay: float = START_DELAY,
    ) -> None:
        self._policy = policy
        self._host = host  # probed before the private view, when the server is not self-confined
        self._roots = roots
        self._allow = allow_unconfined
        self._self_confined = self_confined
        self._delay = start_delay
        self._workspaces = {ws.name: ws for ws in policy.workspaces}
        self._workers: dict[tuple[str, Kind], ConfinedWorker] = {}
        self._refusals: dict[str, str] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._mode: Mode | None = None  # once chosen
        self._refused = False  # no layer can be enforced, or set-up failed
        self._go = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fs-notes-os-layer", daemon=True)
        self._thread.start()

    @property
    def mode(self) -> str:
        """The sandbox Mode chosen, "refused", or "unknown" while it is being chosen."""
        if self._refused:
            return "refused"
        return self._mode if self._mode is not None else "unknown"

    # -- set-up (background thread) ----------------------------------------------------------

    def _run(self) -> None:
        self._go.wait(self._delay)
        if self._closed:
            self._ready.set()
            return
        try:
            self._choose_mode()
        except Exception:
            log.exception("OS containment set-up failed; creates, updates and deletions refused")
            self._refused = True
            for name in self._workspaces:
                self._refusals.setdefault(name, "the OS containment layer could not be set up")
        finally:
            self._ready.set()
        self._prewarm()

    def _choose_mode(self) -> None:
        mode: Mode
        if self._self_confined:
            mode = "landlock"  # proven in this very process at start-up
        else:
            from fs_notes.sandbox.probe import probe, select_mode

            try:
                mode = select_mode(self._host or probe(), self._allow)
            except NoEnforceableLayer:
                self._refused = True
                log.error(
                    "no OS containment layer can be enforced here: creates, updates and "
                    "deletions are refused (pass --allow-unconfined to accept them without one)"
                )
                for name in self._workspaces:
                    self._refusals[name] = "no OS containment layer can be enforced on this host"
                return
        self._mode = mode
        for ws in self._workspaces.values():
            if not ws.accepts(mode):
                self._refusals[ws.name] = (
                    f'the workspace policy requires sandbox "{ws.sandbox}", '
                    f'this host provides "{mode}"{accept_hint(mode, self._policy.source)}'
                )
        if mode == "none":
            log.warning(
                "CREATES, UPDATES AND DELETIONS ARE NOT OS-CONFINED (--allow-unconfined): only "
                "layers 1 and 2 protect files outside the workspaces"
            )
        else:  # a warning when something is refused or the server is not confined itself
            weaker = bool(self._refusals) or not self._self_confined
            log.log(
                logging.WARNING if weaker else logging.INFO,
                "OS containment: server self-confined: %s; workers for creates, updates and "
                "deletions: %s%s",
                "landlock" if self._self_confined else "no",
                mode,
                "".join(f"; {name}: refused ({why})" for name, why in self._refusals.items()),
            )

    def _needed(self) -> list[tuple[str, Kind]]:
        return [
            (name, kind)
            for name in self._workspaces
            for kind in KINDS
            if kind in self._policy.operations_in(name) and name not in self._refusals
        ]

    def _prewarm(self) -> None:
        for name, kind in self._needed():
            if self._closed:
                return
            with contextlib.suppress(OsLayerFailed):  # logged; the next operation tries again
                self.worker(name, kind)

    # -- use -----------------------------------------------------------------------------------

    def _wait(self) -> str | None:
        self._go.set()
        if not self._ready.wait(SETUP_TIMEOUT):
            return "the OS containment layer is not ready"
        return None

    def refusal(self, workspace: str) -> str | None:
        """Why creates, updates and deletions are refused in `workspace` (None: allowed)."""
        reason = self._wait()
        if reason is not None:
            return reason
        if workspace not in self._workspaces:
            return "unknown workspace"
        return self._refusals.get(workspace)

    def unavailable(self, workspace: str, kind: Kind) -> str | None:
        """Why `kind` operations in `workspace` cannot run now (None: a worker is up)."""
        try:
            self.worker(workspace, kind)
        except OsLayerFailed as exc:
            return str(exc)
        return None

    def worker(self, workspace: str, kind: Kind) -> ConfinedWorker:
        """The running worker for `workspace` and `kind`, started if need be; else OsLayerFailed."""
        reason = self.refusal(workspace)
        if reason is not None:
            raise OsLayerFailed(reason)
        ws: Workspace = self._workspaces[workspace]
        with self._lock:
            if self._closed:
                raise OsLayerFailed("the server is shutting down")
            if self._mode is None:  # cannot happen without a refusal; fail closed regardless
                raise OsLayerFailed("the OS containment layer is not set up")
            worker = self._workers.get((workspace, kind))
            if worker is not None:
                return worker
            from fs_notes.sandbox.supervisor import ConfinedWorker

            try:  # the folder serve opened at start-up, never the path again
                fd = self._roots[workspace].fd
                user = ws.worker_user[1:] if ws.worker_user is not None else None
                worker = ConfinedWorker(fd, kind, self._mode, symlinks=ws.symlinks, user=user)
            except (SandboxError, FsError, OSError) as exc:
                log.error("workspace %s: the %s worker did not start: %s", workspace, kind, exc)
                raise OsLayerFailed(f"the confined {kind} worker could not be started") from None
            self._workers[(workspace, kind)] = worker
            return worker

    def run(self, workspace: str, kind: Kind, action: Callable[[ConfinedWorker], _T]) -> _T:
        """`action(worker)`; the worker's FsError passes through, any other failure is
        OsLayerFailed (logged with its cause, never shown)."""
        worker = self.worker(workspace, kind)
        try:
            return action(worker)
        except FsError:
            raise
        except OsRefused as exc:
            if exc.errno in RESOURCE_ERRNOS:  # the disk, not the request: say which
                raise error_for_errno(exc.errno) from None
            log.error("%s worker for %s refused: %s", kind, workspace, exc)
            raise OsLayerFailed() from None
        except (SandboxError, ValueError) as exc:
            log.error("%s worker for %s refused or failed: %s", kind, workspace, exc)
            raise OsLayerFailed() from None

    def close(self) -> None:
        """Stop every worker (and the set-up, if it has not run). Idempotent."""
        with self._lock:
            self._closed = True
        self._go.set()
        self._thread.join(SETUP_TIMEOUT)
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            worker.close()


class ConfinedChanges:
    """The one door for changes (fs_notes/fs/changes.py `NoteChanges`) through the OS layer:
    `unlink_note` in the workspace's delete worker; `create_note`, `update_note` and
    `move_note` in its write worker (moves: sandbox/movers.py says why that worker, and when
    a Landlock without REFER refuses them). Each verb is the worker's frame operation of the
    same name (sandbox/protocol.py), which the worker's filesystem layer runs."""

    def __init__(self, layer: OsLayer) -> None:
        self._layer = layer

    def refusal(self, workspace: str, op: Op) -> str | None:
        kind: Kind = "delete" if op == "unlink_note" else "write"
        reason = self._layer.unavailable(workspace, kind)
        if reason is not None or op != "move_note":
            return reason
        from fs_notes.sandbox.movers import refer_refusal

        worker = self._layer.worker(workspace, "write")
        return refer_refusal(worker.mode, dict(worker.hello))

    def create_note(self, workspace: str, relpath: str, data: bytes) -> Identity:
        return self._layer.run(workspace, "write", lambda w: w.create_note(relpath, data))

    def update_note(
        self, workspace: str, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        return self._layer.run(
            workspace, "write", lambda w: w.update_note(relpath, data, expected)
        )

    def unlink_note(self, workspace: str, relpath: str, expected: Identity) -> None:
        self._layer.run(workspace, "delete", lambda w: w.unlink_note(relpath, expected))

    def move_note(
        self, workspace: str, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        return self._layer.run(
            workspace, "write", lambda w: w.move_note(relpath, new_relpath, expected)
        )
