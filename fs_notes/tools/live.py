"""Live notes: the `Listener` of `subscriptions/listen` (protocol/subscriptions.py) for notes.

A subscription asks for `notifications/resources/updated` on note URIs
(`resourceSubscriptions`) and/or `notifications/resources/list_changed` (`resourcesListChanged`:
the notes `resources/list` gives this principal appeared, vanished or moved). `LiveNotes` keeps
one `FolderWatch` (fs/watch.py: inotify, its watches added through the listing walk's own
directory fds) per workspace that some open subscription needs, and one thread that waits on all
of them: whoever changed a note (fs-notes' workers, the user's editor, a sync tool), the kernel
queues an event on the folder, the thread looks at the named entries again through the filesystem
layer (`NotesEnv.note_entry`: the listing's rules for one entry) and tells the subscriptions that
asked. A stale watch (a folder created, moved, removed or replaced, the queue overflowing) is
dropped whole and the workspace walked again, its notes compared with what was listed before.

Guarantees:
- Authorization at subscribe time, per URI: the principal of the listen request must hold a
  `read` grant on the workspace the URI lies beneath (`Policy.locate`, the same door as
  `resources/read`) and the URI must name a valid note id (layer 1); otherwise the whole listen
  is refused with -32602 "Resource not found" and `data: {"uri": ...}`, the same answer whether
  the workspace is not granted, the path lies outside every workspace or the id is invalid.
  `resourcesListChanged` covers exactly the workspaces the principal may read.
- Nothing outside a workspace is watched or named: watches are added only through directory
  fds the walk opened beneath the workspace's root fd (symbolic links and other mounts are not
  followed, as for every listing), a folder replaced by anything (a symlink to elsewhere
  included) makes the watch stale and the next walk decides again through the root handle; a
  notification names only a URI the client itself subscribed to (as the client wrote it), or
  nothing (`list_changed`).
- The acknowledgment is delivered before any notification of its subscription: the first walk
  of a newly watched workspace is done, and the subscription registered, under the same lock
  the watching thread delivers under. From the acknowledgment on, no change is missed.
- Only the requested types: a subscription without `resourcesListChanged` is never sent
  `list_changed`; `updated` only ever names its own URIs.
- Bounded per principal (fs_notes/limits.py): `listens_per_principal` open subscriptions and
  `subscriptions_per_principal` URIs over all of them; one more is refused with -32600 / -32602
  naming the limit, and nobody else is affected. A subscription closed (cancelled, its stream
  gone) frees its share at once, and the last one using a workspace closes that workspace's
  inotify instance, every watch with it.
- A workspace that can no longer be listed (its folder removed) stops being watched cleanly:
  its watch is closed, its notes are reported gone, and it is tried again every
  `RETRY_SECONDS`.
Does not: report a change inotify does not see (a write through a shared mapping, a change on
another host of a network filesystem, docs/deploy.md), except through the full walk every
`FolderWatch.MAX_AGE_SECONDS`; without inotify (no /proc, the watch limit reached) every
watched workspace is walked every `RETRY_SECONDS`, so notifications come later, never not at all.
Two changes within `SETTLE_SECONDS` of each other may give one notification.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..fs import FsError
from ..fs.watch import FolderWatch
from ..lexical import LexicalError
from ..policy import AccessDenied, Principal
from ..protocol.dispatch import Call
from ..protocol.errors import INVALID_PARAMS, INVALID_REQUEST, RESOURCE_NOT_FOUND, ProtocolError
from ..protocol.subscriptions import (
    Deliver,
    RequestId,
    Wanted,
    acknowledged,
    completed,
    resource_updated,
    resources_list_changed,
)
from .context import NotesEnv, Opened

log = logging.getLogger("fs_notes.live")

#: After the first event of a burst, wait this long for the rest (an editor's save is several).
SETTLE_SECONDS = 0.02
#: A workspace that cannot be watched (or listed) is walked again this often.
RETRY_SECONDS = 2.0
#: At least this long between two full walks of one workspace (a watch stale at once again).
MIN_WALK_INTERVAL = 0.2

Key = tuple[int, int, int, int, int]


def _key(st: os.stat_result) -> Key:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class _Watched:
    """One workspace being watched: its folder watch and what its last walk listed."""

    ws: Opened
    watch: FolderWatch
    notes: dict[str, Key] = field(default_factory=dict)
    users: int = 0
    walked_at: float = 0.0
    lost: bool = False  # the last walk failed: retried every RETRY_SECONDS


@dataclass(eq=False)  # compared and hashed by identity (transports keep them in sets)
class _Sub:
    hub: LiveNotes
    serial: int
    sub_id: RequestId
    principal: str
    deliver: Deliver
    list_changed: bool
    list_workspaces: frozenset[str]
    # (workspace, note id) -> the URIs the client subscribed to for it, as written
    notes: dict[tuple[str, str], list[str]]
    workspaces: frozenset[str]
    closed: bool = False

    @property
    def uri_count(self) -> int:
        return sum(len(u) for u in self.notes.values())

    def close(self, *, graceful: bool = False) -> None:
        self.hub.close(self, graceful=graceful)


class LiveNotes:
    """The notes' `Listener` (see the module docstring)."""

    def __init__(self, env: NotesEnv) -> None:
        self.env = env
        self.limits = env.policy.limits
        self._lock = threading.RLock()
        self._subs: dict[int, _Sub] = {}
        self._watched: dict[str, _Watched] = {}
        self._serials = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._wake_r = self._wake_w = -1

    # -- opening and closing (any thread) ------------------------------------------------------

    def open(self, call: Call, wanted: Wanted, deliver: Deliver) -> _Sub:
        principal = call.principal
        assert isinstance(principal, Principal)
        readable = {w.workspace.name: w for w in self.env.readable_workspaces(principal)}
        notes: dict[tuple[str, str], list[str]] = {}
        for uri in wanted.resource_uris:
            name, note_id = self._locate(principal, uri, readable)
            notes.setdefault((name, note_id), []).append(uri)
        listed = frozenset(readable) if wanted.resources_list_changed else frozenset()
        needed = listed | {name for name, _ in notes}
        with self._lock:
            mine = [s for s in self._subs.values() if s.principal == principal.name]
            limit = self.limits.listens_per_principal
            if len(mine) >= limit:
                raise ProtocolError(
                    INVALID_REQUEST,
                    f"Too many subscriptions/listen streams open for this principal "
                    f"(limit {limit}); cancel one first",
                    {"limit": limit},
                )
            held = sum(s.uri_count for s in mine)
            limit = self.limits.subscriptions_per_principal
            if held + len(wanted.resource_uris) > limit:
                raise ProtocolError(
                    INVALID_PARAMS,
                    f"Too many resource subscriptions for this principal: {held} held, "
                    f"{len(wanted.resource_uris)} more asked for (limit {limit})",
                    {"limit": limit},
                )
            sub = _Sub(
                self,
                next(self._serials),
                call.request.id,
                principal.name,
                deliver,
                wanted.resources_list_changed,
                listed,
                notes,
                frozenset(needed),
            )
            for name in sorted(needed):
                self._use(readable[name])
            self._subs[sub.serial] = sub
            deliver(acknowledged(sub.sub_id, wanted))  # before the thread can deliver anything
            self._start()
            self._wake()  # an idle thread polls only what it knew: make it see the new watches
        log.info(
            "subscriptions/listen id=%r opened: %d notes in %d workspaces, list changes: %s",
            sub.sub_id,
            len(notes),
            len(needed),
            "yes" if sub.list_changed else "no",
        )
        return sub

    def _locate(
        self, principal: Principal, uri: str, readable: dict[str, Opened]
    ) -> tuple[str, str]:
        """(workspace name, note id) of a URI the principal may read; else "Resource not found",
        whatever the reason (the reason goes to the log)."""
        try:
            grant, raw = self.env.policy.locate(principal, uri, "read")
            note_id = self.env.ids.note_id(raw)
            name = grant.workspace.name
            if name not in readable:
                raise AccessDenied("no read grant")
        except (LexicalError, AccessDenied, ValueError) as exc:
            raise ProtocolError(
                INVALID_PARAMS, RESOURCE_NOT_FOUND, {"uri": uri}, log_detail=str(exc)
            ) from None
        return name, note_id

    def close(self, sub: _Sub, *, graceful: bool = False) -> None:
        with self._lock:
            if sub.closed:
                return
            sub.closed = True
            del self._subs[sub.serial]
            for name in sub.workspaces:
                self._release(name)
            if graceful:
                with contextlib.suppress(Exception):  # the client may be gone already
                    sub.deliver(completed(sub.sub_id))
        self._wake()
        log.info("subscriptions/listen id=%r closed", sub.sub_id)

    def shutdown(self) -> None:
        """End every subscription gracefully (the server is stopping)."""
        with self._lock:
            subs = list(self._subs.values())
        for sub in subs:
            sub.close(graceful=True)

    def open_count(self) -> int:
        with self._lock:
            return len(self._subs)

    # -- workspaces being watched (under the lock) ---------------------------------------------

    def _use(self, ws: Opened) -> None:
        name = ws.workspace.name
        watched = self._watched.get(name)
        if watched is None:
            watched = _Watched(ws, FolderWatch())
            self._watched[name] = watched
            self._walk(watched)
        watched.users += 1

    def _release(self, name: str) -> None:
        watched = self._watched.get(name)
        if watched is None:
            return
        watched.users -= 1
        if watched.users <= 0:
            watched.watch.close()  # the inotify instance, and every watch of it
            del self._watched[name]

    def _walk(self, watched: _Watched) -> tuple[set[str], set[str]]:
        """List the workspace again with a fresh watch; (ids whose entry changed, ids that
        appeared or vanished)."""
        watch, env = watched.watch, self.env
        watch.reset()
        before = watched.notes
        try:
            now = {
                note_id: _key(st)
                for note_id, st in env.notes(watched.ws, on_folder=watch.add, on_skip=watch.suspect)
            }
            watch.walked()
            if watched.lost:
                log.info("workspace %s can be listed again: watching it", watched.ws.workspace.name)
            watched.lost = False
        except (FsError, OSError) as exc:
            watch.close()  # stop cleanly: nothing half-watched stays behind
            if not watched.lost:
                log.warning(
                    "workspace %s cannot be listed (%s): not watched until it can be",
                    watched.ws.workspace.name,
                    type(exc).__name__,
                )
            watched.lost = True
            now = {}
        watched.walked_at = time.monotonic()
        watched.notes = now
        moved = set(before.keys() ^ now.keys())
        changed = moved | {i for i in before.keys() & now.keys() if before[i] != now[i]}
        return changed, moved

    def _look(self, watched: _Watched, names: frozenset[str]) -> tuple[set[str], set[str]]:
        """Look at the entries a watch named again; (changed ids, appeared or vanished ids)."""
        changed: set[str] = set()
        moved: set[str] = set()
        for note_id in names:
            st = self.env.note_entry(watched.ws, note_id)
            was = watched.notes.get(note_id)
            if st is None:
                if was is not None:
                    del watched.notes[note_id]
                    changed.add(note_id)
                    moved.add(note_id)
                continue
            watched.watch.cleared(note_id)
            watched.notes[note_id] = _key(st)
            changed.add(note_id)  # named by an event: read again even if the stat looks equal
            if was is None:
                moved.add(note_id)
        return changed, moved

    def _refresh(self, name: str, *, force: bool = False) -> None:
        watched = self._watched.get(name)
        if watched is None:
            return
        if watched.lost or watched.watch.fileno() < 0:
            if not force:
                return
            changed, moved = self._walk(watched)
        else:
            changes = watched.watch.take()
            if changes.stale:
                changed, moved = self._walk(watched)
            elif changes.names:
                changed, moved = self._look(watched, changes.names)
            else:
                return
        if changed or moved:
            self._tell(name, changed, moved)

    def _tell(self, name: str, changed: set[str], moved: set[str]) -> None:
        for sub in list(self._subs.values()):
            if name not in sub.workspaces:
                continue
            out: list[dict[str, Any]] = []
            if moved and sub.list_changed and name in sub.list_workspaces:
                out.append(resources_list_changed(sub.sub_id))
            for note_id in sorted(changed):
                for uri in sub.notes.get((name, note_id), ()):
                    out.append(resource_updated(sub.sub_id, uri))
            for message in out:
                try:
                    sub.deliver(message)
                except Exception:  # a transport that cannot deliver ends its own subscription
                    log.exception("subscriptions/listen id=%r: delivery failed", sub.sub_id)
                    break

    # -- the watching thread -------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is not None:
            return
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name="fs-notes-live", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        if self._wake_w >= 0:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake_w, b"x")

    def _run(self) -> None:
        while True:
            try:
                self._round()
            except Exception:  # never let one bad round end every subscription
                log.exception("live notes: watching failed; going on")
                time.sleep(RETRY_SECONDS)

    def _round(self) -> None:
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        by_fd: dict[int, str] = {}
        now = time.monotonic()
        timeout: float | None = None
        with self._lock:
            for name, watched in self._watched.items():
                fd = watched.watch.fileno()
                if fd < 0 or watched.lost:
                    due = watched.walked_at + RETRY_SECONDS - now
                    timeout = due if timeout is None else min(timeout, due)
                    continue
                cool = watched.walked_at + MIN_WALK_INTERVAL - now
                if cool > 0:  # walked just now: events wait a moment (no walk storm)
                    timeout = cool if timeout is None else min(timeout, cool)
                    continue
                by_fd[fd] = name
                poller.register(fd, select.POLLIN)
        ms = None if timeout is None else max(0, int(timeout * 1000) + 1)
        ready = poller.poll(ms)
        names: set[str] = set()
        for fd, _ in ready:
            if fd == self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
            elif fd in by_fd:
                names.add(by_fd[fd])
        if names:
            time.sleep(SETTLE_SECONDS)
        now = time.monotonic()
        with self._lock:
            for name in names:
                self._refresh(name)
            for name, watched in list(self._watched.items()):
                if (watched.lost or watched.watch.fileno() < 0) and (
                    now - watched.walked_at >= RETRY_SECONDS
                ):
                    self._refresh(name, force=True)
