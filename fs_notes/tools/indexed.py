"""A workspace's index, brought up to date before every query: the door from the tools to
fs_notes/search (notes_search, notes_tags and notes_links all come through here).

`current(env, ws)` returns the workspace's `NoteIndex` after one refresh from the filesystem
layer, the cheapest one that misses nothing:
- the first time, or whenever the folder watch (fs/watch.py) is stale, the whole workspace is
  listed (`NotesEnv.notes`, layer 2's walk with layer 1's id rules) and each folder the walk
  opens is watched through the walk's own fd;
- otherwise only the entries the watch names are looked at again (`NotesEnv.note_entry`: the
  listing's rules for one entry) and read again even if their stat looks unchanged (an edit
  within one clock tick), or dropped if they are no longer notes;
- with nothing reported, nothing is looked at: a warm query touches no file until its results
  are re-checked.
Notes are read (`extract`) through the same root handle as notes_read: title, tags, aliases,
headings and links come from the note's text (fs_notes/notes/: titles.py, tags.py, properties.py,
links.py); a note over its workspace's read limit is indexed by its title only.

Guarantees: what the index holds was listed by the filesystem layer as a servable note of this
workspace (the index never widens what can be seen: callers still re-check each result with
`recheck`, which stats the note through layer 2 and drops it from the index if it changed).
Refreshes of one workspace are serialized. While another server writes the index (a first
build of a folder both serve), a query is never refused: it searches what that server has
committed, and `Indexed.partial` says how much of the workspace that is; what was left undone
is looked at again by the next query. A request that waits on a build of the whole
workspace and carries `_meta.progressToken` is sent `notifications/progress` (done and total
notes) while it waits (protocol/progress.py). A build stops at the next note once its
request is cancelled (by the client, or by SIGINT/SIGTERM stopping the server): what it
committed stays, the rest is indexed by the next query. Does not: watch folders of roots that
do not hand over fds (the escape exercises' knocked-out layers): those are walked on every
query.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator

from ..fs import FsError, Identity, TooLarge
from ..fs.watch import Changes
from ..notes.links import links_of
from ..notes.properties import aliases_of, properties_of
from ..notes.tags import tags_of
from ..notes.titles import front_matter_block, headings_of, title_of
from ..protocol import cancel, progress
from ..search.index import Building, Extract, LinkOut
from .context import NotesEnv, Opened, ToolFailure, fs_message
from .loading import ident_key, key_text, load_note, stat_key

log = logging.getLogger("fs_notes.search")


Read = tuple[bytes, Identity] | FsError


def read(ws: Opened, note_id: str) -> Read:
    """One note's bytes and identity through the workspace's root handle, or why not."""
    try:
        return ws.root.read_note(note_id, max_bytes=ws.workspace.read_limit)
    except FsError as exc:
        return exc


def extract(env: NotesEnv, ws: Opened, note_id: str) -> Extract | None:
    """What the index keeps of one note; None if it cannot be read now (gone, replaced,
    refused). Only the title is cached (notecache.py): a build must not fill the text budget
    with every note."""
    got = read(ws, note_id)
    if isinstance(got, TooLarge):
        try:
            return Extract(load_note(env, ws, note_id, None).title)
        except FsError:
            return None
    if isinstance(got, FsError):
        return None
    data, ident = got
    text = data.decode("utf-8", errors="replace")
    title = title_of(text, note_id.rsplit("/", 1)[-1])
    env.cache.put(ws.workspace.name, note_id, ident_key(ident), title, text, keep_text=False)
    _, body = front_matter_block(text)
    links = [LinkOut(link.target, link.heading, link.embed) for link in links_of(text)]
    properties = properties_of(text)
    return Extract(
        title=title,
        text=body,
        tags=tags_of(text),
        aliases=aliases_of(properties),
        described=described(properties),
        headings=headings_of(body),
        links=links,
    )


#: The properties whose text says what a note is about (Obsidian's, Jekyll's, Hugo's...):
#: searched with the aliases and tags, since the front matter is not the body's text.
DESCRIBING = ("description", "summary", "abstract", "subtitle", "excerpt")


def described(properties: dict[str, object]) -> str:
    """The text of the note's describing properties (`DESCRIBING`), one line each."""
    return "\n".join(
        " ".join(value.split())[:1000]
        for key in DESCRIBING
        if isinstance(value := properties.get(key), str)
    )


#: SQLite result codes that mean the file is not a usable index (damaged, not SQLite, or of
#: another shape): it is removed and built again. Every other failure (locked by another
#: server, disk full, I/O error) is reported and retried by the next query, never rebuilt.
_DAMAGED = {"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_ERROR", "SQLITE_MISMATCH"}


def damaged(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith(tuple(_DAMAGED)) or (not name and isinstance(exc, sqlite3.DatabaseError))


class Indexed:
    """A workspace's index after its refresh (`current`): queries go through `answering`, and
    every note a result names through `recheck`."""

    def __init__(self, env: NotesEnv, ws: Opened) -> None:
        self.env, self.ws = env, ws
        self.index, self._watch, self._lock = env.index(ws)
        #: Another server is writing the index: what it has committed is searched, and this
        #: is how much of the workspace that holds (None: all of it, as it is now).
        self.partial: Building | None = None

    def refresh(self) -> None:
        with self._lock:
            changes = self._watch.take()
            try:
                try:
                    self._refresh(changes)
                except Building as building:  # never refused for it: what is there, said so
                    self.partial = building
                    self._left_to_do(changes)
                except sqlite3.DatabaseError as exc:
                    if not damaged(exc):
                        raise
                    log.warning("search index failed (%s): rebuilding it", _code(exc))
                    self.index.reset()
                    self._refresh(Changes(stale=True))
            except FsError as exc:
                self._watch.invalidate()
                raise ToolFailure(fs_message(exc, "(workspace root)")) from None
            except sqlite3.DatabaseError as exc:  # locked, disk full, I/O: the next query retries
                self._watch.invalidate()
                log.warning("search index could not be brought up to date: %s", _code(exc))
                raise ToolFailure(_unavailable(exc)) from None
            except BaseException:  # cancelled, or anything else: what was taken is looked at again
                self._watch.invalidate()
                raise

    def _left_to_do(self, changes: Changes) -> None:
        """What another server's write kept this refresh from doing is done by a later one:
        the whole workspace again, or the notes the watch named, looked at each query."""
        if changes.stale:
            self._watch.invalidate()
        for note_id in changes.names:
            self._watch.suspect(note_id)

    def _refresh(self, changes: Changes) -> None:
        env, ws, watch = self.env, self.ws, self._watch

        def load(note_id: str) -> Extract | None:
            return extract(env, ws, note_id)

        if changes.stale:
            watch.reset()
            listing = env.notes(ws, on_folder=watch.add, on_skip=watch.suspect)
            listed = ((i, key_text(stat_key(st))) for i, st in listing)
            self.index.refresh(listed, load, _progress if progress.wanted() else _checkpoint)
            watch.walked()
        elif changes.names:
            entries = []
            for note_id in sorted(changes.names):
                st = env.note_entry(ws, note_id)
                entries.append((note_id, None if st is None else key_text(stat_key(st))))
                if st is None:
                    watch.suspect(note_id)  # not a note now: looked at again each query
                else:
                    watch.cleared(note_id)
            self.index.update(entries, load)

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Around a query of the index: an SQLite failure (another server holding the file, a
        full disk, a damaged file) becomes a clear tool error, never an internal error; a
        damaged index is removed, so the next query builds it again."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            log.warning("search index query failed: %s", _code(exc))
            if damaged(exc):
                with self._lock:
                    self.index.reset()
                    self._watch.invalidate()
            raise ToolFailure(_unavailable(exc)) from None

    def recheck(self, note_id: str, key: str) -> bool:
        """Whether `note_id` is still the note the index holds (same identity, through layer
        2); if not, it is dropped from the index and looked at again by each later query until
        it is a note again (a hard link removed, a mount gone: no event says so)."""
        try:
            now = key_text(ident_key(self.ws.root.stat_note(note_id)))
        except FsError:
            now = None
        if now != key:  # no longer a note: its text scrubbed now; changed: on the timer
            try:
                self.index.remove(note_id, gone=now is None)
            except sqlite3.OperationalError as exc:  # kept, and tried again (index.remove)
                log.info("search index: a drop waits for another server (%s)", _code(exc))
            self._watch.suspect(note_id)
            return False
        return True

    def resolved(self, note_id: str | None) -> str | None:
        """A link's target id if it is still a note (re-checked through layer 2), else None."""
        if note_id is None:
            return None
        key = self.index.key_of(note_id)
        return note_id if key is not None and self.recheck(note_id, key) else None


def _checkpoint(done: int, total: int) -> None:
    """After each note of a build: stop (Cancelled) if its request was cancelled, by the client
    or by a server that is stopping (protocol/cancel.py)."""
    cancel.checkpoint()


def _progress(done: int, total: int) -> None:
    """`_checkpoint`, then the build's progress to the request waiting on it if it asked with a
    progressToken (protocol/progress.py)."""
    cancel.checkpoint()
    progress.report(done, total, f"indexing the workspace's notes: {done} of {total}")


def _code(exc: sqlite3.Error) -> str:
    return str(getattr(exc, "sqlite_errorname", "") or type(exc).__name__)


def _unavailable(exc: sqlite3.Error) -> str:
    code = _code(exc)
    if code.startswith("SQLITE_BUSY") or code.startswith("SQLITE_LOCKED"):
        return "the search index is busy (another fs-notes server is updating it); try again"
    if code.startswith("SQLITE_FULL"):
        return "the search index could not be updated: the disk of the state folder is full"
    return f"the search index could not be used ({code}); try again"


def current(env: NotesEnv, ws: Opened) -> Indexed:
    """The index of `ws`, refreshed (see the module docstring); ToolFailure if the workspace
    itself cannot be listed or the index cannot be used."""
    indexed = Indexed(env, ws)
    indexed.refresh()
    return indexed
