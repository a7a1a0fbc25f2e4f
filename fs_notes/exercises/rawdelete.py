"""The door for changes of the no-filesystem knock-out: the confined worker unlinks the path
string as given; the other changes happen in this process, over the naive roots.

The real door (`sandbox.confined.ConfinedChanges`) sends `unlink_note` to a confined worker that
resolves the id again with the filesystem layer. With layer 2 knocked out, the worker must not do
that either, so `RawChanges.unlink_note` uses the attacker worker (`rawworker.RawWorker`: confined
through the real worker's own entry point, then a bare unlinkat from the workspace folder, no
resolution checks at all) while keeping everything that makes up the OS layer: the same mode choice
(Landlock if the server confined itself or the host enforces it, else chroot, else refuse: fail
closed), the workspace's minimum sandbox level, a fresh confined worker per workspace, and every
other fd closed in the worker (a leaked fd handed to it with `leak_fds` must be closed by it).

Guarantees: a refusal of the OS layer reaches the caller as `OsLayerFailed` (as in `serve`).
Does not: exist in `serve` (which never starts the attacker worker).
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Mapping

from fs_notes.sandbox.errors import NoEnforceableLayer, OsRefused, SandboxError
from fs_notes.sandbox.kinds import Mode
from fs_notes.sandbox.probe import HostReport

from ..fs import FsError, Identity, InvalidPath
from ..fs.changes import ChangeableRoot, InProcessChanges, Op
from ..policy import Policy
from ..sandbox.confined import OsLayerFailed
from .rawworker import RawWorker

log = logging.getLogger("fs_notes.exercises")


class RawChanges(InProcessChanges):
    """Creates, updates and moves in process over `roots` (the knock-out's naive roots);
    deletions by the raw worker, confined as the OS layer confines its workers."""

    def __init__(
        self,
        policy: Policy,
        roots: Mapping[str, ChangeableRoot],
        *,
        self_confined: bool,
        leak_fds: tuple[int, ...] = (),
        host: HostReport | None = None,
    ) -> None:
        super().__init__(roots)
        self._workspaces = {ws.name: ws for ws in policy.workspaces}
        self._self_confined = self_confined
        self._host = host  # probed before the private view
        self._leak_fds = leak_fds
        self._lock = threading.Lock()
        self._mode: Mode | None = None
        self._refused: str | None = None
        self._workers: dict[str, RawWorker] = {}

    def _choose(self) -> None:
        if self._mode is not None or self._refused is not None:
            return
        if self._self_confined:
            self._mode = "landlock"
            return
        from fs_notes.sandbox.probe import probe, select_mode

        try:
            self._mode = select_mode(self._host or probe(), False)
        except NoEnforceableLayer:
            self._refused = "no OS containment layer can be enforced on this host"

    def _worker(self, workspace: str) -> RawWorker:
        with self._lock:
            self._choose()
            if self._mode is None:
                raise OsLayerFailed(self._refused)
            ws = self._workspaces[workspace]
            if not ws.accepts(self._mode):
                raise OsLayerFailed(f'the workspace requires sandbox "{ws.sandbox}"')
            worker = self._workers.get(workspace)
            if worker is None:
                try:
                    worker = RawWorker(ws.path, "delete", self._mode, passed_fds=self._leak_fds)
                except (SandboxError, FsError, OSError) as exc:
                    log.error("raw delete worker for %s did not start: %s", workspace, exc)
                    raise OsLayerFailed("the confined delete worker could not be started") from None
                self._workers[workspace] = worker
            return worker

    def refusal(self, workspace: str, op: Op) -> str | None:
        if op != "unlink_note":
            return None
        try:
            self._worker(workspace)
        except OsLayerFailed as exc:
            return str(exc)
        return None

    def unlink_note(self, workspace: str, relpath: str, expected: Identity) -> None:
        worker = self._worker(workspace)
        try:
            worker.unlink_raw(relpath)
        except OsRefused as exc:
            name = errno.errorcode.get(exc.errno, str(exc.errno))
            raise OsLayerFailed(f"the confined worker's unlink failed with {name}") from None
        except SandboxError as exc:
            raise OsLayerFailed(f"the confined worker failed: {exc}") from None
        except ValueError:  # e.g. a NUL byte: the request is not even sent
            raise InvalidPath() from None

    def close(self) -> None:
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            worker.close()
