"""Deletion through the OS layer: one Landlock- (or chroot-) confined worker per workspace.

At start-up a background thread probes the host (`sandbox.probe`), chooses the strongest mode
that can be enforced, and starts a deletion worker for every workspace whose policy accepts that
mode. Fail closed: with no enforceable layer, or a workspace that requires a stronger one, deletion
there is refused (before the user is asked), unless the operator passed --allow-unconfined, which
is logged loudly. Creates and updates do not go through a worker yet.
"""

from __future__ import annotations

import logging
import threading

from sandbox.errors import NoEnforceableLayer, SandboxError
from sandbox.probe import probe, select_mode
from sandbox.supervisor import ConfinedWorker

from ..fs import FsError, Identity
from ..policy import Policy

log = logging.getLogger("fs_notes.sandbox")

SETUP_TIMEOUT = 60.0


class OsLayerFailed(FsError):
    message = "refused or failed in the confined deletion worker"


class ConfinedDeleters:
    def __init__(self, policy: Policy, *, allow_unconfined: bool) -> None:
        self._policy = policy
        self._allow = allow_unconfined
        self._workers: dict[str, ConfinedWorker] = {}
        self._refusals: dict[str, str] = {}
        self.mode: str = "unknown"
        self._ready = threading.Event()
        threading.Thread(target=self._setup, name="fs-notes-sandbox-setup", daemon=True).start()

    def _setup(self) -> None:
        try:
            try:
                mode = select_mode(probe(), self._allow)
            except NoEnforceableLayer:
                self.mode = "refused"
                log.error(
                    "no OS containment layer can be enforced here: deletion is refused "
                    "(pass --allow-unconfined to accept deleting without one)"
                )
                for ws in self._policy.workspaces:
                    self._refusals[ws.name] = "no OS containment layer can be enforced on this host"
                return
            self.mode = mode
            if mode == "none":
                log.warning(
                    "DELETION IS NOT OS-CONFINED (--allow-unconfined): only layers 1 and 2 "
                    "protect files outside the workspaces"
                )
            else:
                log.warning("deletion confinement: %s", mode)
            for ws in self._policy.workspaces:
                if not ws.accepts(mode):
                    self._refusals[ws.name] = (
                        f'the workspace policy requires sandbox "{ws.sandbox}", '
                        f'this host provides "{mode}"'
                    )
                    continue
                try:
                    self._workers[ws.name] = ConfinedWorker(
                        ws.path, "delete", mode, symlinks=ws.symlinks
                    )
                except (SandboxError, OSError) as exc:
                    log.error("workspace %s: deletion worker did not start: %s", ws.name, exc)
                    self._refusals[ws.name] = "the confined deletion worker could not be started"
        except Exception:
            log.exception("sandbox set-up failed; deletion is refused")
            for ws in self._policy.workspaces:
                self._refusals.setdefault(ws.name, "the OS containment layer could not be set up")
        finally:
            self._ready.set()

    def unavailable(self, workspace: str) -> str | None:
        if not self._ready.wait(SETUP_TIMEOUT):
            return "the OS containment layer is not ready"
        if workspace in self._workers:
            return None
        return self._refusals.get(workspace, "no confined deletion worker for this workspace")

    def delete(self, workspace: str, relpath: str, expected: Identity) -> None:
        reason = self.unavailable(workspace)
        if reason is not None:
            raise OsLayerFailed(reason)
        try:
            self._workers[workspace].delete(relpath, expected)
        except SandboxError as exc:
            log.error("deletion worker for %s refused or failed: %s", workspace, exc)
            raise OsLayerFailed() from None

    def close(self) -> None:
        self._ready.wait(SETUP_TIMEOUT)
        for worker in self._workers.values():
            worker.close()
