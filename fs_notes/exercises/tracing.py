"""Thin wrappers that report which layer refused a request (the knock-out target only).

Each wrapper calls the real component unchanged and records, on the request's `Trace`, the refusals
that pass through it: `TracingPolicy` (authorization, and the lexical URI parser it uses),
`traced_ids` (the lexical note-id and folder checks), `TracingRoot` (the filesystem layer; it also
reports entries a listing left out, and a workspace path that no longer names the folder the root
fd holds), `TracingChanges` (the one door for changes: the OS layer's workers, and the filesystem
layer behind them), and `TracingDispatcher`, which attaches the events of each request to its
response under `TRACE_KEY`.

Guarantees: a wrapper never changes a decision: every result and exception of the wrapped call
is passed on as it was. The extra checks only look (lstat, statx, fstat) and only through the
real root's own handles. With `naive_uris=True`, `TracingPolicy` parses URIs like a quick server
(`naive.naive_uri_parts`) and still authorizes by exact workspace components: that is the
no-lexical knock-out, where authorization stays on.
Does not: exist in `serve`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from typing import Any

from ..fs import FsError, Identity, NoteExists, WorkspaceRoot
from ..fs.changes import OPS, NoteChanges, Op
from ..fs.mounts import mount_id, mount_id_at
from ..lexical import LexicalError
from ..policy import AccessDenied, Operation, Policy, Principal, Workspace, WorkspaceGrant
from ..protocol.cancel import Token
from ..protocol.dispatch import Dispatcher
from ..protocol.dispatch import Principal as CallPrincipal
from ..protocol.envelope import Notification, Request, result_response
from ..protocol.progress import Notify
from ..tools.context import IdRules, strict_folder, strict_note_id
from .hostview import HostLookup
from .naive import naive_uri_parts
from .trace import TRACE_KEY, Trace, record_fs

MAX_SKIPPED_SHOWN = 5
CONFIG_METHOD = "x-fs-notes-exercise/config"
#: The first fd number the target keeps a `--leak-fd` folder open as (target.py; the runner
#: names it in the attack).
LEAK_FD = 100
#: The terminal a target started with --terminal holds (the one it was "started from").
TERMINAL_FD = 99
COMPROMISED_METHOD = "x-fs-notes-exercise/compromised"
MAX_SCANNED = 4000


class TracingPolicy(Policy):
    """The real policy object (same principals, workspaces, grants), recording its refusals."""

    _trace: Trace
    _naive: bool

    @classmethod
    def wrap(cls, policy: Policy, trace: Trace, *, naive_uris: bool) -> TracingPolicy:
        wrapped = cls.__new__(cls)
        wrapped.__dict__.update(policy.__dict__)
        wrapped._trace = trace
        wrapped._naive = naive_uris
        return wrapped

    def authorize(self, principal: Principal, workspace_uri: str, op: Operation) -> WorkspaceGrant:
        try:
            if self._naive:
                return self._grant(principal, self._by_root.get(naive_uri_parts(workspace_uri)), op)
            return super().authorize(principal, workspace_uri, op)
        except LexicalError as exc:
            self._trace.record("lexical", f"workspace URI refused ({exc.rule})")
            raise
        except AccessDenied as exc:
            self._trace.record("policy", f"not authorized: {exc}")
            raise

    def locate(self, principal: Principal, uri: str, op: Operation) -> tuple[WorkspaceGrant, str]:
        try:
            if self._naive:
                return self._naive_locate(principal, uri, op)
            return super().locate(principal, uri, op)
        except LexicalError as exc:
            self._trace.record("lexical", f"note URI refused ({exc.rule})")
            raise
        except AccessDenied as exc:
            self._trace.record("policy", f"not authorized: {exc}")
            raise

    def _naive_locate(
        self, principal: Principal, uri: str, op: Operation
    ) -> tuple[WorkspaceGrant, str]:
        parts = naive_uri_parts(uri)
        best: Workspace | None = None
        for ws in self.workspaces:
            n = len(ws.root.parts)
            if parts[:n] == ws.root.parts and (best is None or n > len(best.root.parts)):
                best = ws
        grant = self._grant(principal, best, op)
        return grant, "/".join(parts[len(grant.workspace.root.parts) :])


def traced_ids(trace: Trace) -> IdRules:
    """The lexical layer's id rules, recording each refusal."""

    def check(fn: Callable[[str], str], what: str) -> Callable[[str], str]:
        def run(raw: str) -> str:
            try:
                return fn(raw)
            except LexicalError as exc:
                trace.record("lexical", f"{what} refused ({exc.rule})")
                raise

        return run

    return IdRules(note_id=check(strict_note_id, "note id"), folder=check(strict_folder, "folder"))


class TracingRoot:
    """A real `WorkspaceRoot` whose refusals (and silent omissions) are recorded."""

    def __init__(
        self, root: WorkspaceRoot, path: str, trace: Trace, host: HostLookup | None = None
    ) -> None:
        self._root = root
        self._path = path
        self._trace = trace
        self._host = host  # what the path names on the host, beyond the private view

    def _check_anchor(self) -> None:
        held = os.fstat(self._root.fd)
        try:
            now = self._host.stat(self._path) if self._host is not None else os.stat(self._path)
            same = now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
        except OSError:
            same = False
        if not same:
            self._trace.record(
                "filesystem",
                "the workspace path names another folder now; the root fd still holds the "
                "folder opened at start-up",
            )

    def _call(self, verb: str, fn: Callable[[], Any]) -> Any:
        self._check_anchor()
        try:
            return fn()
        except FsError as exc:
            record_fs(self._trace, exc, verb)
            raise

    def read_note(self, relpath: str, *, max_bytes: int = 4 << 20) -> tuple[bytes, Identity]:
        result: tuple[bytes, Identity] = self._call(
            "read", lambda: self._root.read_note(relpath, max_bytes=max_bytes)
        )
        return result

    def read_part(self, relpath: str, offset: int, length: int) -> tuple[bytes, Identity]:
        result: tuple[bytes, Identity] = self._call(
            "read", lambda: self._root.read_part(relpath, offset, length)
        )
        return result

    def stat_note(self, relpath: str) -> Identity:
        result: Identity = self._call("stat", lambda: self._root.stat_note(relpath))
        return result

    def note_entry(self, relpath: str) -> os.stat_result | None:
        result: os.stat_result | None = self._call("stat", lambda: self._root.note_entry(relpath))
        return result

    def create_note(self, relpath: str, data: bytes) -> Identity:
        result: Identity = self._call("create", lambda: self._root.create_note(relpath, data))
        return result

    def update_note(
        self, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        result: Identity = self._call(
            "update", lambda: self._root.update_note(relpath, data, expected=expected)
        )
        return result

    def unlink_note(self, relpath: str, expected: Identity) -> None:
        self._call("unlink", lambda: self._root.unlink_note(relpath, expected))

    def move_note(
        self, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        self._check_anchor()
        try:
            return self._root.move_note(relpath, new_relpath, expected=expected)
        except FsError as exc:
            record_move(self._trace, exc)
            raise

    def iter_notes(
        self,
        folder: str = "",
        *,
        after: str | None = None,
        on_skip: Callable[[str, str], None] | None = None,
        recursive: bool = True,
        on_folder: Callable[[str, int], None] | None = None,
    ) -> Iterator[tuple[str, os.stat_result]]:
        self._check_anchor()
        left_out = self._left_out(folder)
        if left_out:
            shown = ", ".join(left_out[:MAX_SKIPPED_SHOWN])
            self._trace.record("filesystem", f"the listing left out {shown}")
        try:
            yield from self._root.iter_notes(
                folder, after=after, on_skip=on_skip, recursive=recursive, on_folder=on_folder
            )
        except FsError as exc:
            record_fs(self._trace, exc, "list")
            raise

    def _left_out(self, folder: str) -> list[str]:
        """Entries beneath `folder` that are not notes for the filesystem layer but would be for
        a naive listing: symlinks, other mounts, hard-linked or special *.md files."""
        out: list[str] = []
        pending = [folder]
        scanned = 0
        while pending and scanned < MAX_SCANNED:
            rel = pending.pop()
            try:
                fd = self._root.open_dir(rel)
            except FsError:
                continue
            try:
                here = mount_id(fd)
                for name in sorted(os.listdir(fd)):
                    scanned += 1
                    if name.startswith("."):
                        continue
                    child = f"{rel}/{name}" if rel else name
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISLNK(st.st_mode):
                        out.append(f"symlink {child}")
                    elif stat.S_ISDIR(st.st_mode):
                        if mount_id_at(fd, name) != here:
                            out.append(f"mount point {child}")
                        elif child.count("/") < 31:
                            pending.append(child)
                    elif name.endswith(".md") and not stat.S_ISREG(st.st_mode):
                        out.append(f"special file {child}")
                    elif name.endswith(".md") and st.st_nlink > 1:
                        out.append(f"hard link {child}")
            except OSError:
                continue
            finally:
                os.close(fd)
        return out

    def close(self) -> None:
        self._root.close()


def _record_worker(trace: Trace, exc: FsError, verb: str) -> None:
    from ..sandbox.confined import OsLayerFailed

    if isinstance(exc, OsLayerFailed):
        trace.record("os", f"{verb}: {exc}")
    else:
        record_fs(trace, exc, verb)


#: What a refusal of the door is recorded as, by verb.
_REFUSED: dict[Op, str] = {
    "unlink_note": "deletion refused",
    "create_note": "writing refused",
    "update_note": "writing refused",
    "move_note": "moving refused",
}
#: How the trace names each verb's failure (what the exercises' reports show).
_VERB: dict[Op, str] = {
    "unlink_note": "delete", "create_note": "create", "update_note": "update", "move_note": "move"
}


class TracingChanges:
    """A `NoteChanges` (the confined workers, or the raw worker's) whose refusals by the verbs
    in `traced` are recorded (the others pass through unrecorded, as in-process changes do:
    the root handles record their own)."""

    def __init__(
        self, inner: NoteChanges, trace: Trace, traced: frozenset[Op] = frozenset(OPS)
    ) -> None:
        self._inner = inner
        self._trace = trace
        self._traced = traced

    def refusal(self, workspace: str, op: Op) -> str | None:
        reason = self._inner.refusal(workspace, op)
        if reason is not None and op in self._traced:
            self._trace.record("os", f"{_REFUSED[op]}: {reason}")
        return reason

    def _failed(self, op: Op, exc: FsError) -> None:
        if op not in self._traced:
            return
        if op == "move_note":
            record_move(self._trace, exc)
        else:
            _record_worker(self._trace, exc, _VERB[op])

    def unlink_note(self, workspace: str, relpath: str, expected: Identity) -> None:
        try:
            self._inner.unlink_note(workspace, relpath, expected)
        except FsError as exc:
            self._failed("unlink_note", exc)
            raise

    def create_note(self, workspace: str, relpath: str, data: bytes) -> Identity:
        try:
            return self._inner.create_note(workspace, relpath, data)
        except FsError as exc:
            self._failed("create_note", exc)
            raise

    def update_note(
        self, workspace: str, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        try:
            return self._inner.update_note(workspace, relpath, data, expected=expected)
        except FsError as exc:
            self._failed("update_note", exc)
            raise

    def move_note(
        self, workspace: str, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        try:
            return self._inner.move_note(workspace, relpath, new_relpath, expected=expected)
        except FsError as exc:
            self._failed("move_note", exc)
            raise


def record_move(trace: Trace, exc: FsError) -> None:
    """A move's refusal: as any other (`_record_worker`), except that an existing target is the
    filesystem layer's refusal here (renameat2 RENAME_NOREPLACE: a move never overwrites),
    where for a create it refuses nothing."""
    if isinstance(exc, NoteExists):
        trace.record("filesystem", "move: NoteExists (RENAME_NOREPLACE)")
    else:
        _record_worker(trace, exc, "move")


class TracingDispatcher(Dispatcher):
    """The real dispatcher; each response carries the refusal events of its request, and the
    private method `CONFIG_METHOD` answers what was knocked out (so a run can prove it)."""

    def __init__(
        self,
        inner: Dispatcher,
        trace: Trace,
        config: dict[str, Any],
        private: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
    ) -> None:
        super().__init__({})
        self._inner = inner
        self._trace = trace
        self._config = config
        self._private = private or {}

    def handle(
        self,
        msg: Request | Notification,
        principal: CallPrincipal,
        transport: str,
        cancel: Token | None = None,
        *,
        notify: Notify | None = None,
        logged: bool = True,
    ) -> dict[str, Any] | None:
        if isinstance(msg, Request) and msg.method == CONFIG_METHOD:
            return result_response(msg.id, dict(self._config))
        if isinstance(msg, Request) and msg.method in self._private:
            with self._trace.collect() as events:
                result = self._private[msg.method](dict(msg.params or {}))
            return {**result_response(msg.id, result), TRACE_KEY: [e.to_json() for e in events]}
        with self._trace.collect() as events:
            response = self._inner.handle(
                msg, principal, transport, cancel, notify=notify, logged=logged
            )
        if response is None:
            return None
        return {**response, TRACE_KEY: [e.to_json() for e in events]}

    def _blocking(self, msg: Request | Notification) -> bool:
        if not isinstance(msg, Request):
            return False
        method = self._inner.method(msg.method)
        return method is not None and method.blocking
