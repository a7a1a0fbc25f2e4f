"""WorkspaceRoot: every note operation as a plain verb on a relative path beneath one directory fd.

Guarantees (layer 2; they hold even with the lexical layer above switched off): the workspace is
opened once (O_DIRECTORY|O_NOFOLLOW) and every path is resolved from that fd by openat2
(RESOLVE_BENEATH|NO_SYMLINKS|NO_MAGICLINKS|NO_XDEV) or by the component walk
(``resolvers/walk.py``). An absolute path, any '..', another mount, or a magic link raises Escape;
a symlink anywhere raises SymlinkRefused (policy 'deny'; under 'within' it is followed only while
it stays beneath the workspace, and never as the last component of a create, update or delete);
NUL, '', '.' and over-long names raise InvalidPath. A note is a regular file with exactly one link:
anything else raises NotRegular / Hardlinked before a byte is read or written. Reads go through the
fd that was checked; files are opened O_NONBLOCK so a FIFO never blocks. Creates never replace
anything (O_CREAT|O_EXCL|O_NOFOLLOW); updates write a temp file beside the note, fsync, then
renameat over it; deletes resolve the parent fd, lstat the name, compare it with the expected
Identity and unlinkat it (without fsyncing the folder: a deletion is atomic and visible at once,
but a power loss right after it may undo it); moves check the source the same way on its parent
fd, resolve the target's parent beneath the root (creating missing folders) and call
renameat2(RENAME_NOREPLACE) between the two fds, never replacing anything (``rename.py``).
Error messages never include a path.

What this layer does NOT protect against (decided, not overlooked):
- Bind mounts of the same device inside the workspace, on old kernels only. Mounts are refused,
  not followed: openat2 sees any crossing (RESOLVE_NO_XDEV), the walk and every delete/update
  compare statx mount ids, and the listing takes a note to be on the workspace's mount when its
  lstat device is the workspace's and its inode is the one the folder itself lists for the name
  (readdir's d_ino is the covered entry's inode: a file mounted over it shows another inode,
  unless it is that very inode of that very filesystem) and asks statx otherwise. But where the
  kernel has no STATX_MNT_ID (before 5.8, so no openat2 either unless it is 5.6/5.7) only st_dev
  can be compared, which a same-device bind mount passes.
- Hard links that exist before we look. A hard link is the same file under two names and nothing
  says which name is "inside". We refuse writes and deletes of a file with st_nlink > 1 (as asked)
  and, by our choice, reads and listing too: a read is exactly where a hard link leaks (someone
  links ~/.ssh/id_rsa into the notes folder and the server would serve it), while legitimately
  hard-linked notes are rare (backup tools); the price is that such a note is invisible until it
  is copied. A link made after our fstat is not seen; we still read only the inode we opened.
- The workspace folder being moved, renamed or replaced after start-up. We keep the fd, so we keep
  serving the original directory wherever it now is (never whatever now sits at the old path),
  until restart. If it is deleted, creates fail.
- Races on content. Between the identity check and renameat/unlinkat another process can change
  the name (an update then replaces their version; a delete removes a file put at that name in
  the same folder); the outcome stays inside that folder. An update with an expected identity
  has no such window: it swaps its temp file in with RENAME_EXCHANGE and checks the file it
  replaced before removing it, swapping back if that is not the note (fileops.py).
  Reads retry, then raise IdentityChanged, if the file changes while being read.
- Device nodes inside the workspace: a read opens the node (O_NONBLOCK|O_NOCTTY) before fstat
  refuses it, so its driver's open() runs; stat_note only uses O_PATH. Mount workspaces nodev.
- Which names inside the workspace are allowed: hidden files, names not ending in '.md' are the
  lexical layer's policy; here only containment is decided (iter_notes does list *.md only).
- A compromised process: code running in this process can call open() itself. That is layer 3.
- Resource use by other local writers (disk full, huge files: reads are capped by max_bytes).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, get_args

from . import openat2 as _openat2
from .errors import (
    Escape,
    FsError,
    Hardlinked,
    IdentityChanged,
    NotRegular,
    SymlinkRefused,
    TooLarge,
)
from .fileops import TMP_PREFIX, create_in, read_upto, replace_in
from .identity import Identity
from .listing_cache import Entry, ListingCache
from .paths import MAX_COMPONENTS, split_folder, split_relpath
from .rename import move_between
from .resolvers import (
    DIR_FLAGS,
    Anchor,
    Resolver,
    SymlinkPolicy,
    close_quietly,
    open_child_dir,
    raise_from_os,
)
from .resolvers.openat2 import Openat2Resolver
from .resolvers.walk import WalkResolver
from .statx import NoteStat, lstat_at

__all__ = ["TMP_PREFIX", "ResolverChoice", "SkipReport", "WorkspaceRoot"]

ResolverChoice = Literal["auto", "openat2", "walk"]
SkipReport = Callable[[str, str], None]
"""Told (id, reason) of each *.md entry a listing leaves out: symlink, special, hard link, mount."""
FolderReport = Callable[[str, int], None]
"""Told (folder path, its fd) of each folder a listing opens, before it is listed."""
_READ_ATTEMPTS = 3
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY


class WorkspaceRoot:
    """A handle on one workspace folder. Create with ``open`` or ``from_fd``; close when done."""

    def __init__(self, anchor: Anchor, resolver: Resolver) -> None:
        self._anchor = anchor
        self._resolver = resolver
        self._closed = False
        self._listings = ListingCache()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        resolver: ResolverChoice = "auto",
        symlinks: SymlinkPolicy = "deny",
    ) -> WorkspaceRoot:
        """Open the workspace folder (its last component must not be a symlink)."""
        _check_options(resolver, symlinks)
        try:
            fd = os.open(path, DIR_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
                raise SymlinkRefused() from exc
            raise_from_os(exc)
        return cls.from_fd(fd, resolver=resolver, symlinks=symlinks)

    @classmethod
    def from_fd(
        cls, fd: int, *, resolver: ResolverChoice = "auto", symlinks: SymlinkPolicy = "deny"
    ) -> WorkspaceRoot:
        """Wrap a directory fd (owned from now on: closed by ``close`` or on failure here)."""
        try:
            _check_options(resolver, symlinks)
            st = os.fstat(fd)
            if not stat.S_ISDIR(st.st_mode):
                raise NotRegular()
            os.set_inheritable(fd, False)
            anchor = Anchor.of(fd, symlinks)
            use_openat2 = resolver == "openat2" or (resolver == "auto" and _openat2.available())
            if use_openat2 and not _openat2.available():
                raise FsError("openat2 is not available on this host")
            chosen: Resolver = Openat2Resolver(anchor) if use_openat2 else WalkResolver(anchor)
        except OSError as exc:
            close_quietly(fd)
            raise_from_os(exc)
        except BaseException:
            close_quietly(fd)
            raise
        return cls(anchor, chosen)

    @property
    def resolver_name(self) -> str:
        """ "openat2" or "walk": the resolver really in use."""
        return self._resolver.name

    @property
    def fd(self) -> int:
        """The workspace directory fd (still owned by this object: do not close it)."""
        return self._live().fd

    @property
    def symlinks(self) -> SymlinkPolicy:
        return self._anchor.symlinks

    def rebase(self, fd: int) -> None:
        """Hold `fd` instead: another directory fd of the same folder (same device and inode),
        e.g. the folder seen through the server's private view (sandbox/view.py), whose mount
        differs. The old fd is closed; `fd` is owned from now on (closed here on failure)."""
        try:
            old, new = os.fstat(self._live().fd), os.fstat(fd)
            if not stat.S_ISDIR(new.st_mode) or (old.st_dev, old.st_ino) != (
                new.st_dev,
                new.st_ino,
            ):
                raise FsError("not the same folder")
            os.set_inheritable(fd, False)
            anchor = Anchor.of(fd, self._anchor.symlinks)
        except BaseException:
            close_quietly(fd)
            raise
        resolver: Resolver = (
            Openat2Resolver(anchor) if self._resolver.name == "openat2" else WalkResolver(anchor)
        )
        old_fd = self._anchor.fd
        self._anchor, self._resolver, self._listings = anchor, resolver, ListingCache()
        os.close(old_fd)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._anchor.fd)

    def __enter__(self) -> WorkspaceRoot:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _live(self) -> Anchor:
        if self._closed:
            raise FsError("workspace closed")
        return self._anchor

    # -- reading ---------------------------------------------------------------------------

    def read_note(self, relpath: str, *, max_bytes: int = 4 << 20) -> tuple[bytes, Identity]:
        """The note's bytes and the identity they were read under (TooLarge past max_bytes)."""

        def whole(fd: int, st: os.stat_result) -> bytes:
            if st.st_size > max_bytes:
                raise TooLarge()
            data = read_upto(fd, max_bytes + 1)
            if len(data) > max_bytes:
                raise TooLarge()
            return data

        return self._read(relpath, whole, whole_file=True)

    def read_part(self, relpath: str, offset: int, length: int) -> tuple[bytes, Identity]:
        """At most ``length`` bytes of the note from byte ``offset`` (fewer at its end), and the
        identity they were read under; the same checks as ``read_note``, whatever the size."""
        if not (isinstance(offset, int) and isinstance(length, int)) or offset < 0 or length < 0:
            raise ValueError("offset and length must be non-negative integers")

        def part(fd: int, st: os.stat_result) -> bytes:
            return os.pread(fd, length, offset) if length and offset < st.st_size else b""

        return self._read(relpath, part, whole_file=False)

    def _read(
        self,
        relpath: str,
        read: Callable[[int, os.stat_result], bytes],
        *,
        whole_file: bool,
    ) -> tuple[bytes, Identity]:
        """Open the note through the resolver, check it on the fd, `read(fd, st)`, and accept the
        bytes only if the file's identity did not change meanwhile (and, for `whole_file`, all of
        it was read); a few attempts, then IdentityChanged."""
        comps = split_relpath(relpath)
        self._live()
        for _ in range(_READ_ATTEMPTS):
            fd = self._resolver.open_file(comps, _READ_FLAGS)
            try:
                before = self._require_note(os.fstat(fd))
                data = read(fd, before)
                after = os.fstat(fd)
            except OSError as exc:
                raise_from_os(exc)
            finally:
                os.close(fd)
            identity = Identity.of(before)
            if Identity.of(after) == identity and (not whole_file or len(data) == before.st_size):
                return data, identity
        raise IdentityChanged()

    def stat_note(self, relpath: str) -> Identity:
        """The note's identity, without opening its content (O_PATH)."""
        comps = split_relpath(relpath)
        if self._closed:
            self._live()
        fd = self._resolver.open_file(comps, os.O_PATH)
        try:
            st = os.fstat(fd)
        except OSError as exc:
            raise_from_os(exc)
        finally:
            os.close(fd)
        return Identity.of(self._require_note(st))

    def _require_note(self, st: os.stat_result) -> os.stat_result:
        if stat.S_ISREG(st.st_mode) and st.st_nlink <= 1 and st.st_dev == self._anchor.dev:
            return st
        if stat.S_ISLNK(st.st_mode):
            raise SymlinkRefused()
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular()
        if st.st_dev != self._anchor.dev:
            raise Escape()
        raise Hardlinked()

    # -- writing ---------------------------------------------------------------------------

    def create_note(self, relpath: str, data: bytes) -> Identity:
        """Create a new note (and missing folders); never replaces anything (NoteExists)."""
        comps = split_relpath(relpath)
        payload = _bytes(data)
        self._live()
        parent = self._resolver.open_dir(comps[:-1], create=True)
        try:
            return create_in(parent, comps[-1], payload)
        finally:
            os.close(parent)

    def update_note(
        self, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        """Atomically replace an existing note's content; the new identity. With ``expected``,
        only if the note still is that file (IdentityChanged otherwise), checked before the temp
        file is written and again right before the rename (the compare of tools/versions.py)."""
        comps = split_relpath(relpath)
        payload = _bytes(data)
        if expected is not None and not isinstance(expected, Identity):
            raise TypeError("expected must be an Identity")
        anchor = self._live()
        parent = self._parent_of(anchor, comps)
        try:
            st = self._require_target(parent, comps[-1], expected)
            still = None
            if expected is not None:

                def still(entry: str) -> NoteStat:
                    return self._require_target(parent, entry, expected)

            return replace_in(parent, comps[-1], payload, st, still)
        finally:
            if parent != anchor.fd:
                os.close(parent)

    def unlink_note(self, relpath: str, expected: Identity) -> None:
        """Delete the note, only if it still is the file ``expected`` describes."""
        comps = split_relpath(relpath)
        if not isinstance(expected, Identity):
            raise TypeError("expected must be an Identity")
        anchor = self._live()
        parent = self._parent_of(anchor, comps)
        try:
            self._require_target(parent, comps[-1], expected)
            try:
                os.unlink(comps[-1], dir_fd=parent)
            except OSError as exc:
                raise_from_os(exc)
            # No fsync of the folder here: that is durability, not containment, and it cost
            # milliseconds per deletion on a VM disk. Every process sees the unlink at once;
            # only a power loss can bring the note back, and then a new confirmation is needed
            # (the sealed state is bound to the boot id; see confirm/replay.py).
        finally:
            if parent != anchor.fd:
                os.close(parent)

    def move_note(
        self, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        """Rename a note to ``new_relpath`` (missing folders are made); never replaces anything
        (NoteExists). The source is checked like a delete's (a singly linked regular file on the
        workspace's mount, and ``expected`` if given) before the target folder is opened and
        again right before renameat2; what arrives is checked too (fs/rename.py)."""
        src, dst = split_relpath(relpath), split_relpath(new_relpath)
        if expected is not None and not isinstance(expected, Identity):
            raise TypeError("expected must be an Identity")
        anchor = self._live()
        src_parent = self._parent_of(anchor, src)
        dst_parent = anchor.fd
        try:
            self._require_target(src_parent, src[-1], expected)
            if len(dst) > 1:
                dst_parent = self._resolver.open_dir(dst[:-1], create=True)
            st = self._require_target(src_parent, src[-1], expected)
            return move_between(src_parent, src[-1], dst_parent, dst[-1], st, self._anchor.holds)
        finally:
            for fd in {src_parent, dst_parent} - {anchor.fd}:
                os.close(fd)

    def _parent_of(self, anchor: Anchor, comps: list[str]) -> int:
        """The folder holding the last of ``comps``: the workspace fd itself for a top-level
        note (not to be closed), else a new fd from the resolver (the caller closes it)."""
        if len(comps) == 1:
            return anchor.fd
        return self._resolver.open_dir(comps[:-1])

    def _require_target(self, parent: int, name: str, expected: Identity | None) -> NoteStat:
        """lstat of a note we are about to replace or remove, with every check before acting."""
        try:
            st = lstat_at(parent, name)
        except OSError as exc:
            raise_from_os(exc)
        if stat.S_ISLNK(st.st_mode):
            raise SymlinkRefused()
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular()
        if not self._anchor.holds(st):
            raise Escape()
        if expected is not None and st.key != expected:
            raise IdentityChanged()
        if st.st_nlink > 1:
            raise Hardlinked()
        return st

    # -- folders ---------------------------------------------------------------------------

    def open_dir(self, relpath: str) -> int:
        """A new O_RDONLY|O_DIRECTORY|O_CLOEXEC fd of a folder beneath the root ("" = the root
        itself); the caller closes it."""
        comps = split_folder(relpath)
        self._live()
        return self._resolver.open_dir(comps)

    def iter_notes(
        self,
        folder: str = "",
        *,
        after: str | None = None,
        on_skip: SkipReport | None = None,
        recursive: bool = True,
        on_folder: FolderReport | None = None,
    ) -> Iterator[tuple[str, os.stat_result]]:
        """(note id, lstat) of every regular, singly linked *.md file beneath ``folder``, in
        the code-point order of the ids (so a caller can stop early and page). With ``after``,
        only ids greater than it, and folders wholly before it are not even opened. Skips
        symlinks, hidden entries, other file types and other mounts (each *.md name skipped so
        is reported to ``on_skip(id, reason)``, if given); lists ids of at most MAX_COMPONENTS
        (32) components, the cap of every path operation, so every id listed can be read;
        never follows a symlink. Errors about ``folder`` itself surface on the first ``next()``.
        ``recursive=False``: only the notes directly in ``folder``. ``on_folder(path, fd)`` is
        called with each folder's fd before it is listed (fs/watch.py watches it; the fd is
        the walk's and is closed after the folder is listed)."""
        comps = split_folder(folder)
        self._live()
        fd = self._resolver.open_dir(comps)
        prefix = "".join(name + "/" for name in comps)
        walk = _Walk(after, on_skip, recursive, on_folder)
        yield from self._iter_tree(fd, prefix, len(comps), walk, top=True)

    def _iter_tree(
        self,
        fd: int,
        prefix: str,
        depth: int,
        walk: _Walk,
        *,
        top: bool = False,
    ) -> Iterator[tuple[str, os.stat_result]]:
        """Lists the folder ``fd``, ``depth`` components below the workspace. Owns ``fd`` and
        closes it, also when the consumer stops early. Only the top folder's errors surface;
        a subfolder that cannot be listed is skipped."""
        after, on_skip = walk.after, walk.on_skip
        try:
            if walk.on_folder is not None:
                walk.on_folder(prefix.removesuffix("/"), fd)
            try:
                folder_st = os.fstat(fd)
                entries = self._listings.get(folder_st)
                if entries is None:
                    entries = _list_folder(fd)
                    self._listings.put(folder_st, entries)
            except OSError as exc:
                if top:
                    raise_from_os(exc)
                return
            dev = self._anchor.dev
            for key, name, is_dir, ino in entries:
                if after is not None:
                    full = prefix + key
                    if full <= after and not (is_dir and after.startswith(full)):
                        continue  # a note at or before the cursor, or a folder wholly before it
                if is_dir and not walk.recursive:
                    continue
                if is_dir:
                    # A file in a subfolder has depth + 2 components: keep it within the cap.
                    if depth + 2 <= MAX_COMPONENTS:
                        child = self._open_listed_dir(fd, name)
                        if child is not None:
                            yield from self._iter_tree(child, prefix + key, depth + 1, walk)
                    elif on_skip is not None:
                        on_skip(prefix + key, "folder too deep")  # not opened: its notes uncounted
                    continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # gone since the listing
                # Still a regular, singly linked file (the listing may be from the cache) on the
                # workspace's device...
                if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_dev == dev):
                    if on_skip is not None:
                        on_skip(prefix + name, _not_a_note(st, dev))
                    continue
                # ...and on its mount: the inode the folder itself lists under this name (readdir
                # reports the covered entry's inode, lstat a mount's), else the mount id decides.
                if st.st_ino != ino and not self._listed_on_mount(fd, name, st):
                    if on_skip is not None:
                        on_skip(prefix + name, "on another mount")
                    continue
                yield prefix + name, st
        finally:
            os.close(fd)

    def note_entry(self, relpath: str) -> os.stat_result | None:
        """The lstat of ``relpath`` if a listing of its folder would yield it as a note (the
        rules of iter_notes for one entry: a *.md name, no hidden component, a regular, singly
        linked file on the workspace's mount), else None, also when it or its folder is gone.
        Never follows a symlink as the note itself. For the folder watch (fs/watch.py): an
        event names one entry, and only that entry is looked at again."""
        comps = split_relpath(relpath)
        if not comps[-1].endswith(".md") or any(c.startswith(".") for c in comps):
            return None
        self._live()
        try:
            parent = self._resolver.open_dir(comps[:-1])
        except FsError:
            return None
        try:
            try:
                st = os.stat(comps[-1], dir_fd=parent, follow_symlinks=False)
            except OSError:
                return None
            dev = self._anchor.dev
            if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_dev == dev):
                return None
            return st if self._listed_on_mount(parent, comps[-1], st) else None
        finally:
            os.close(parent)

    def _listed_on_mount(self, fd: int, name: str, st: os.stat_result) -> bool:
        """Whether entry ``name`` (lstat ``st``) is on the workspace's mount, by mount id (and
        still the file ``st`` describes)."""
        try:
            now = lstat_at(fd, name)
        except OSError:
            return False
        return self._anchor.holds(now) and Identity.of(now) == Identity.of(st)

    def _open_listed_dir(self, fd: int, name: str) -> int | None:
        try:
            child = open_child_dir(fd, name)
        except FsError:
            return None
        try:
            self._anchor.require_same_mount(child)
        except FsError:
            os.close(child)
            return None
        return child


@dataclass(frozen=True)
class _Walk:
    """The options of one iter_notes walk."""

    after: str | None
    on_skip: SkipReport | None
    recursive: bool
    on_folder: FolderReport | None


def _not_a_note(st: os.stat_result, dev: int) -> str:
    """Why a listed *.md entry is not a note (the reasons a listing counts)."""
    if stat.S_ISLNK(st.st_mode):
        return "symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_dev != dev:
        return "on another mount"
    return "hard-linked"


def _list_folder(fd: int) -> list[Entry]:
    """The folder's sub-folders (no symlinks) and *.md entries of any other kind (symlinks and
    special files too, which the walk then reports as skipped; no hidden entries) with the inode
    numbers it lists for them, sorted by id suffix: a folder sorts as "name/", since every id
    beneath it starts so, which makes the depth-first walk yield ids in code-point order."""
    entries: list[Entry] = []
    with os.scandir(fd) as it:
        for e in it:
            name = e.name
            if name.startswith("."):
                continue
            if e.is_dir(follow_symlinks=False):
                entries.append((name + "/", name, True, e.inode()))
            elif name.endswith(".md"):
                entries.append((name, name, False, e.inode()))
    entries.sort()
    return entries


def _check_options(resolver: object, symlinks: object) -> None:
    if resolver not in get_args(ResolverChoice):
        raise ValueError("resolver must be 'auto', 'openat2' or 'walk'")
    if symlinks not in get_args(SymlinkPolicy):
        raise ValueError("symlinks must be 'deny' or 'within'")


def _bytes(data: object) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError("note content must be bytes")
    return bytes(data)
