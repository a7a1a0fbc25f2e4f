"""Stand-ins for a knocked-out layer: what a server without that layer would do (exercises only).

- `NaiveRoot` replaces layer 2: the `NoteRoot` verbs done the way most file servers do them, on
  path strings: join the workspace path and the id, then plain open/stat/unlink, following every
  symlink, mount and magic link; "create, never overwrite" is a check-then-act (`exists`, then
  open for writing). It is the pattern "validate the strings, use them later": the strings were
  validated by layer 1, if it is on.
- `naive_uri_parts` replaces the lexical URI parser for the no-lexical knock-out: urlsplit, one
  percent-decoding, split on "/" (what a quick server does); `PERMISSIVE_IDS` accepts any id.

Guarantees: none about containment, by design. What it does guarantee is that it is honest
about refusals: every OSError it meets is recorded on the trace, as "os" for EACCES/EPERM (only
Landlock refuses root) and for an ENOENT of a path that exists on the host but not in the
server's private view (`HostLookup`: sandbox/view.py hid it), and as "kernel" otherwise; and it
bounds its own work (a listing stops after `MAX_LISTED` entries or `MAX_DEPTH` folders deep, so
a link to "/" cannot run away).
Does not: exist in `serve`; only `fs_notes.exercises.target` builds one.
"""

from __future__ import annotations

import errno
import os
import urllib.parse
from collections.abc import Callable, Iterator
from typing import NoReturn

from ..fs import FsError, Identity, NoteExists, NoteNotFound, TooLarge
from ..fs.errors import error_for_errno
from ..tools.context import IdRules
from .hostview import HostLookup
from .trace import Trace

MAX_LISTED = 2000
MAX_DEPTH = 8


def _accept(raw: str) -> str:
    return raw


PERMISSIVE_IDS = IdRules(note_id=_accept, folder=_accept)


def naive_uri_parts(uri: str) -> tuple[str, ...]:
    """The path components a quick server would take from a file URI: host, query and fragment
    dropped, percent-escapes decoded once (invalid UTF-8 replaced), empty components skipped."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(uri).path)
    return tuple(part for part in path.split("/") if part)


def _same_mount(src: str, dst: str) -> bool:
    """Whether the folders of ``src`` and ``dst`` (followed, as rename follows them) are on one
    mount, by mount id (st_dev without one)."""
    from ..fs.mounts import mount_id

    ids = []
    for path in (os.path.dirname(src), os.path.dirname(dst)):
        try:
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            ids.append((mount_id(fd), os.fstat(fd).st_dev))
        finally:
            os.close(fd)
    return ids[0] == ids[1]


class NaiveRoot:
    """The `NoteRoot` verbs on path strings, with no containment at all."""

    def __init__(self, path: str, trace: Trace, host: HostLookup | None = None) -> None:
        self.path = path
        self._trace = trace
        self._host = host

    def _join(self, relpath: str) -> str:
        return os.path.join(self.path, relpath)  # an absolute relpath replaces the base

    def _layer(self, code: int, path: str) -> str:
        if code in (errno.EACCES, errno.EPERM):
            return "os"
        if code == errno.ENOENT and self._host is not None and self._host.hidden(path):
            return "os"  # there on the host, not in the private view
        return "kernel"

    def _fail(self, exc: OSError, verb: str) -> NoReturn:
        code = exc.errno or 0
        layer = self._layer(code, exc.filename if isinstance(exc.filename, str) else "")
        self._trace.record(layer, f"naive {verb}: {errno.errorcode.get(code, str(code))}")
        raise error_for_errno(code) from exc

    def read_note(self, relpath: str, *, max_bytes: int = 4 << 20) -> tuple[bytes, Identity]:
        try:
            with open(self._join(relpath), "rb") as f:
                data = f.read(max_bytes + 1)
                st = os.fstat(f.fileno())
        except OSError as exc:
            self._fail(exc, "open/read")
        if len(data) > max_bytes:
            raise TooLarge()
        return data, Identity.of(st)

    def read_part(self, relpath: str, offset: int, length: int) -> tuple[bytes, Identity]:
        try:
            with open(self._join(relpath), "rb") as f:
                f.seek(offset)
                data = f.read(length)
                st = os.fstat(f.fileno())
        except OSError as exc:
            self._fail(exc, "open/read")
        return data, Identity.of(st)

    def stat_note(self, relpath: str) -> Identity:
        try:
            return Identity.of(os.stat(self._join(relpath)))
        except OSError as exc:
            self._fail(exc, "stat")

    def note_entry(self, relpath: str) -> os.stat_result | None:
        path = self._join(relpath)  # naive: follows symlinks, crosses mounts
        if not relpath.endswith(".md") or not os.path.isfile(path):
            return None
        return os.stat(path)

    def create_note(self, relpath: str, data: bytes) -> Identity:
        path = self._join(relpath)
        if os.path.exists(path):
            raise NoteExists()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            return Identity.of(os.stat(path))
        except OSError as exc:
            self._fail(exc, "create")

    def update_note(
        self, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        path = self._join(relpath)
        if not os.path.exists(path):
            raise NoteNotFound()
        try:
            with open(path, "wb") as f:
                f.write(data)
            return Identity.of(os.stat(path))
        except OSError as exc:
            self._fail(exc, "update")

    def move_note(
        self, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        """A naive move: rename(2) on the joined strings (follows folder symlinks, replaces
        whatever is at the target, moves a hard link)."""
        src, dst = self._join(relpath), self._join(new_relpath)
        try:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.rename(src, dst)
            return Identity.of(os.lstat(dst))
        except OSError as exc:
            if exc.errno == errno.EXDEV and _same_mount(src, dst):
                # One mount: the kernel itself would rename; Landlock's REFER refused it.
                self._trace.record("os", "naive rename: EXDEV (Landlock REFER)")
                raise error_for_errno(exc.errno) from exc
            self._fail(exc, "rename")

    def unlink_note(self, relpath: str, expected: Identity) -> None:
        path = self._join(relpath)
        try:
            if Identity.of(os.stat(path)) != expected:
                raise FsError("note changed")
            os.unlink(path)
        except OSError as exc:
            self._fail(exc, "unlink")

    def iter_notes(
        self,
        folder: str = "",
        *,
        after: str | None = None,
        on_skip: Callable[[str, str], None] | None = None,
        recursive: bool = True,
        on_folder: Callable[[str, int], None] | None = None,
    ) -> Iterator[tuple[str, os.stat_result]]:
        # on_folder is never called: nothing is watched, so every search walks (fs/watch.py)
        found: list[tuple[str, os.stat_result]] = []
        top = self._join(folder) if folder else self.path
        pending = [(top, folder + "/" if folder else "", 0)]
        seen = 0
        while pending and seen < MAX_LISTED:
            path, prefix, depth = pending.pop()
            try:
                names = sorted(os.listdir(path))
            except OSError as exc:
                if path == top:
                    self._fail(exc, "listdir")
                code = exc.errno or 0
                layer = self._layer(code, path)
                self._trace.record(layer, f"naive listdir: {errno.errorcode.get(code, str(code))}")
                continue
            for name in names:
                seen += 1
                if name.startswith(".") or seen > MAX_LISTED:
                    continue
                full = os.path.join(path, name)
                if not os.path.exists(full) and self._host is not None and self._host.hidden(full):
                    self._trace.record("os", "naive listdir: ENOENT (not in the private view)")
                    continue
                if os.path.isdir(full):  # follows symlinks, crosses mounts
                    if depth < MAX_DEPTH and recursive:
                        pending.append((full, f"{prefix}{name}/", depth + 1))
                elif name.endswith(".md") and os.path.isfile(full):
                    try:
                        found.append((prefix + name, os.stat(full)))
                    except OSError:
                        continue
        found.sort(key=lambda item: item[0])
        yield from (item for item in found if after is None or item[0] > after)

    def close(self) -> None:
        pass
