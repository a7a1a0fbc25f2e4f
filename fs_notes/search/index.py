"""The index of one workspace: SQLite FTS5 for the words, plain tables for tags and links.

Why SQLite FTS5: it ships with Python's sqlite3 (no new dependency, no native build), and brings
BM25 ranking over weighted columns, prefix queries, phrase queries, snippets and diacritics
folding; the same file holds the tags and links tables, so notes_tags and notes_links answer from
the index too, in one transaction with the text.

Guarantees:
- The index is a cache, never an authority. `refresh` is given a listing the filesystem layer
  just made of the whole workspace (tools/context.py `NotesEnv.notes`: servable notes only, no
  hidden folder, no symlink, nothing outside) with each note's identity key; only notes whose key
  changed are read again (through the same layer), indexed notes no longer listed are dropped.
  `update` is given the entries the folder watch named (fs/watch.py), each looked at again by the
  same layer's rules: read again if still a note, dropped if not. Edits made outside fs-notes are
  therefore picked up by the next query. Callers re-check every result with the filesystem layer
  before returning it, and `forget` one that changed. Nothing is stored that a listing did not
  produce: every id, tag and link in it comes from a servable note of this workspace.
- Ranking (`search`): a note whose title, file name or one of its aliases is the query comes
  first; then BM25 over title (weight 10), aliases, tags and the front matter's description
  (8; the body is the text after the front matter, so a snippet never shows it), file name
  and path (6),
  headings (4), body (1) and the code words of them all (6: `C#`, `--force`, query.py),
  raised for a note named by a run of the query's words by the
  share of the query that run is (`NAMED_BOOST`), with any of the words matching (more and
  rarer ones rank higher),
  "quoted phrases" as phrases and the last word of a short query as a prefix (query.py); in a
  large index, a word more than half of all notes hold is left out of a query that also has
  rarer ones (BM25 gives it no weight; scoring it would cost a look at most notes). Case and
  diacritics are folded (unicode61, remove_diacritics 2); scripts written without spaces (Han,
  kana, Hangul) are indexed one character a token and searched as phrases, so a word is found
  anywhere inside a run of them (query.py `segment`).
- Bounded: at most `MAX_BODY_CHARS` of a note's text is indexed, and at most `MAX_TOTAL_CHARS`
  of body text in all (then further notes are indexed without their body, with a warning);
  a note over its workspace's read limit is indexed by its title and name only. A cold build
  logs a progress line at INFO every `PROGRESS_SECONDS`, tells its caller after each note (the
  request's MCP progress notifications, tools/indexed.py), and commits every `BATCH` notes, so a
  build that is cancelled or times out keeps what it did. The caller's callback may raise to
  stop the build (tools/indexed.py does when its request is cancelled, also by a server that is
  stopping): the batch under way is rolled back, every committed note stays whole (a note's
  rows are written in one transaction), and the next refresh indexes only what is missing.
- Several servers on one folder share the file (the state folder's): one writes at a time
  (SQLite's write lock, which a crashed server's exit lets go), the others search what it has
  committed (WAL: readers are never blocked by the writer). A refresh waits `GLANCE_MS` for
  the lock and then raises `Building` (how many of the notes listed are indexed as they are
  now) instead of waiting for a whole build; a build that another server wrote between the
  batches of (SQLite's `data_version` changed) indexes only what that one did not.
- The file is created 0600 by us (never through a symlink), in the state folder (the replay
  database's), never in a workspace; temporary tables stay in memory (the confined server writes
  nowhere else). A file that is not an index of this version's shape is removed and built again.
- A note dropped for good (deleted, moved, no longer a note) leaves none of its text in the
  files once the transaction that dropped it returns: SQLite's `secure_delete` zeroes what a
  deleted row held, FTS5 removes its terms from the index (its `secure-delete` option from
  SQLite 3.44; before it, an `optimize` merges every segment, which a deletion's markers alone
  do not), and the log is checkpointed and truncated (`-wal` left empty). Text an edit replaced
  is scrubbed so within `SCRUB_SECONDS`, as is the old place of a note moved away (`remove`
  with ``gone=False``), and both at `close` (the server's exit), also after a build that was
  cut short and in a forked child (its own timer, its own lock). A scrub that another server's
  reader holds up is tried again on the same timer, and `close` says when it could not.

Does not: stem words ("plans" does not find "plan"), segment Thai or other scripts without
spaces but with combining marks, or resolve links (tools/link_resolution.py does, against the
index's ids).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .query import (
    MARK_END,
    MARK_START,
    MAX_CODE_WORDS,
    MAX_TERMS,
    code_term,
    code_words,
    match_expression,
    name_grams,
    plain,
    segment,
    unsegment,
    word_expression,
    words_of,
)

log = logging.getLogger("fs_notes.search")

MAX_BODY_CHARS = 256 << 10
MAX_TOTAL_CHARS = 1 << 30
PROGRESS_SECONDS = 2.0
BATCH = 2000
#: Bumped when the schema or what is extracted into it changes (10: the code words; 9: the body
#: without its front matter, a description with the aliases): an index of another version is
#: rebuilt from scratch.
VERSION = 10
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS doc (rid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL,"
    " key TEXT NOT NULL, title TEXT NOT NULL, stem TEXT NOT NULL, body_chars INTEGER NOT NULL)",
    # gram: the note's title, file name and each alias as `plain` words (exact and named hits)
    "CREATE TABLE IF NOT EXISTS name (gram TEXT NOT NULL, rid INTEGER NOT NULL,"
    " PRIMARY KEY (gram, rid)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS name_rid ON name (rid)",
    "CREATE INDEX IF NOT EXISTS doc_stem ON doc (stem)",
    "CREATE TABLE IF NOT EXISTS tag (rid INTEGER NOT NULL, folded TEXT NOT NULL,"
    " shown TEXT NOT NULL, PRIMARY KEY (rid, folded)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS tag_folded ON tag (folded)",
    # name: the link target's last component without .md, case-folded (backlink candidates)
    "CREATE TABLE IF NOT EXISTS link (rid INTEGER NOT NULL, n INTEGER NOT NULL,"
    " target TEXT NOT NULL, heading TEXT, embed INTEGER NOT NULL, name TEXT NOT NULL,"
    " PRIMARY KEY (rid, n)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS link_name ON link (name)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(title, name, keys, headings, body, code,"
    " tokenize = 'unicode61 remove_diacritics 2', prefix = '2 3')",
)
# BM25's weight of each column of `fts` (in each bm25() below): title 10, file name and path
# 6, aliases with tags and the description 8, headings 4, body 1, and the code words of them
# all 6 (query.code_words).
# A note has the tag :tag or one nested in it (both queries below).
_TAGGED = (
    "SELECT id, key, title FROM doc WHERE EXISTS (SELECT 1 FROM tag WHERE tag.rid = doc.rid"
    " AND (tag.folded = :tag OR substr(tag.folded, 1, length(:tag) + 1) = :tag || '/'))"
    " ORDER BY id LIMIT :limit"
)
# Ranking runs in three steps so that the costly parts touch only the rows shown (a common word
# matches a quarter of all notes): the best rows by BM25 alone, from the FTS table alone (or,
# with a folder or tag filter, joined to doc); the exact and named notes, looked up by name and
# scored; then doc's fields and the snippet for the page that is returned.
_BEST = "SELECT rowid, bm25(fts, 10.0, 6.0, 8.0, 4.0, 1.0, 6.0) FROM fts WHERE fts MATCH :match"
_BEST_FILTERED = (
    "SELECT fts.rowid, bm25(fts, 10.0, 6.0, 8.0, 4.0, 1.0, 6.0) FROM fts"
    " JOIN doc ON doc.rid = fts.rowid"
    " WHERE fts MATCH :match AND (:folder = '' OR substr(doc.id, 1, length(:folder)) = :folder)"
    " AND (:tag = '' OR EXISTS (SELECT 1 FROM tag WHERE tag.rid = doc.rid"
    " AND (tag.folded = :tag OR substr(tag.folded, 1, length(:tag) + 1) = :tag || '/')))"
)
_ORDER = " ORDER BY 2, 1 LIMIT :limit"
_SCORED = (
    "SELECT fts.rowid, bm25(fts, 10.0, 6.0, 8.0, 4.0, 1.0, 6.0) FROM fts"
    " WHERE fts MATCH :match AND fts.rowid IN (SELECT value FROM json_each(:rids))"
)
# Snippets: FTS5 re-reads a term's whole doclist for each `MATCH ... AND rowid = ?`, so the bodies
# of the page's notes are copied into a small temporary FTS5 table with the same tokenizer and
# the snippets made there (the markers are char(2) and char(3): query.MARK_START and MARK_END).
_SNIPPETS_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.page USING fts5(body,"
    " tokenize = 'unicode61 remove_diacritics 2')"
)
_SNIPPETS = (
    "SELECT rowid, snippet(page, 0, char(2), char(3), '\u2026', :tokens) FROM temp.page"
    " WHERE page MATCH :match"
)
#: From SQLite 3.44 FTS5 removes a deleted row's terms from its index at once ('secure-delete');
#: before, the terms stay in older segments until every segment is merged ('optimize').
FTS5_SECURE_DELETE = sqlite3.sqlite_version_info >= (3, 44, 0)
#: How long text an edit replaced may stay in the files (a deletion's is scrubbed at once).
SCRUB_SECONDS = 60.0
SNIPPET_CHARS = 160
PRUNE_FROM = 2000
BUSY_MS = 5000  # how long a query waits for another server's write to the shared file
#: How long a refresh waits for another server's write before it searches what is committed.
GLANCE_MS = 250
MAX_NAMED = 1000
_NO_MARKERS = str.maketrans({MARK_START: " ", MARK_END: " "})
#: How much more a note counts when its title, file name or an alias is a run of the query's
#: words (query.name_grams), times the share of the query's words that run is: "extract a tar
#: archive" finds tar.md before pages that only say "extract" and "archive" often, but one
#: word of a sentence-long question (a note named `backup.md`) does not outweigh the note that
#: matches all of it. Chosen by benchmarks/search_quality.py on two public collections (0.3,
#: 0.6 and 1.0 within 0.01 of each other; a boost not scaled by the share was below the plain
#: FTS5 index on sentence queries).
NAMED_BOOST = 0.6


class Building(Exception):
    """Another server holds the index's write lock (it is building or updating it): nothing was
    written, and what it has committed can be searched. `indexed` of the `total` notes listed
    are in the index as they are now."""

    def __init__(self, indexed: int, total: int) -> None:
        super().__init__(f"{indexed} of {total} notes indexed")
        self.indexed, self.total = indexed, total


@dataclass(frozen=True)
class LinkOut:
    target: str  # as written (the note part)
    heading: str | None
    embed: bool


@dataclass(frozen=True)
class Extract:
    """What the index keeps of one note (tools/indexed.py reads it from the note)."""

    title: str
    text: str = ""  # the body: the text after the front matter (snippets come from it)
    tags: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    described: str = ""  # what the front matter says the note is about (its description)
    headings: list[str] = field(default_factory=list)
    links: list[LinkOut] = field(default_factory=list)


@dataclass(frozen=True)
class Hit:
    id: str
    key: str  # the identity key the note was indexed with
    title: str
    snippet: str
    score: float


def _locked(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused for another connection's lock, not for what the file holds."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def stem_of(name: str) -> str:
    """The case-folded file name without .md of a note id or link target (link resolution)."""
    return name.rsplit("/", 1)[-1].removesuffix(".md").casefold()


def _names(note_id: str) -> tuple[str, str]:
    """(stem, searchable name and path) of a note id: "a/tps-report.md" -> ("tps-report",
    "tps report a tps-report")."""
    stem = note_id.rsplit("/", 1)[-1].removesuffix(".md")
    path = note_id.removesuffix(".md")
    spaced = "".join(" " if c in "/-_." else c for c in f"{stem} {path}")
    return stem, spaced


_ALL: weakref.WeakSet[NoteIndex] = weakref.WeakSet()


def _after_fork() -> None:
    """In a forked child, each index's lock afresh: a thread of the parent may have held it
    at the fork, and no thread here would ever release it."""
    for index in list(_ALL):
        index._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


class NoteIndex:
    """One workspace's index, in the SQLite file `path` (None: in memory). Thread-safe."""

    def __init__(self, path: str | None, label: str = "") -> None:
        self._path = path or ":memory:"
        self._label = f"search index of {label}" if label else "search index"
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._warned_full = False
        self._total = 0  # characters of body text indexed
        self._docs = 0  # notes indexed
        self._version = -1  # the file's data_version the two counts were made at
        self._gone = False  # a note dropped for good since the last scrub: scrub at once
        self._replaced = False  # text an edit replaced since the last scrub: scrub on a timer
        self._timer: threading.Timer | None = None
        # Drops another server's write kept out (note id -> gone): tried again on the timer,
        # by the next drop and at close.
        self._pending: dict[str, bool] = {}
        self._closed = False
        self._conn = self._open()
        _ALL.add(self)

    def _open(self) -> sqlite3.Connection:
        """A connection to the index file, created 0600 if missing; a file that is not an index
        of this version's shape (damaged, truncated, not SQLite, a symlink) is removed and
        started again: it is a cache."""
        try:
            self._create()
            conn = self._connect()
            total = conn.execute(
                "SELECT coalesce(sum(body_chars), 0), count(*) FROM doc"
            ).fetchone()
        except sqlite3.OperationalError as exc:
            if _locked(exc):  # another server is writing the shared file: it is not damaged
                raise
            log.warning("%s unusable (%s): starting it again", self._label, type(exc).__name__)
            self._discard()
            self._create()
            conn, total = self._connect(), (0, 0)
        except (sqlite3.DatabaseError, OSError) as exc:
            log.warning("%s unusable (%s): starting it again", self._label, type(exc).__name__)
            self._discard()
            self._create()
            conn, total = self._connect(), (0, 0)
        self._total, self._docs = int(total[0]), int(total[1])
        return conn

    def _create(self) -> None:
        if self._path != ":memory:":
            flags = os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
            os.close(os.open(self._path, flags, 0o600))

    def _discard(self) -> None:
        if self._path == ":memory:":
            return
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path + suffix)

    def reset(self) -> None:
        """Start again from an empty index (one that failed: tools/indexed.py rebuilds it)."""
        with self._lock:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._discard()
            self._create()
            self._conn, self._total, self._docs = self._connect(), 0, 0

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        if self._path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = OFF")  # a cache: a lost write is re-read next time
        # Temporary tables and sort spills in memory: the confined server may create files only
        # where its plan says (sandbox/selfconfine.py), never in /tmp or /var/tmp.
        conn.execute("PRAGMA temp_store = MEMORY")
        # Servers sharing a state folder share the file: wait for the other's write, briefly.
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_MS)}")
        conn.execute("PRAGMA cache_size = -65536")  # 64 MiB: a 100,000-note build 15% faster
        conn.execute("PRAGMA secure_delete = ON")  # what a deleted row held is zeroed
        if conn.execute("PRAGMA user_version").fetchone()[0] != VERSION:
            for table in ("doc", "fts", "tag", "link", "name"):  # another shape: start over
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"PRAGMA user_version = {VERSION}")
        for statement in _SCHEMA:
            conn.execute(statement)
        if FTS5_SECURE_DELETE:  # (written once: a write would wait for another server's)
            on = conn.execute("SELECT v FROM fts_config WHERE k = 'secure-delete'").fetchone()
            if on is None or on[0] != 1:
                conn.execute("INSERT INTO fts (fts, rank) VALUES ('secure-delete', 1)")
        return conn

    def _connection(self) -> sqlite3.Connection:
        if os.getpid() != self._pid:  # after fork (the server's private view): a new one
            self._pid = os.getpid()
            self._conn = self._connect()
            self._timer = None  # the parent's timer thread is not in this process
            if self._gone or self._replaced:  # what the parent had pending is this one's now
                self._after_write(self._conn)
        return self._conn

    # -- keeping it current ------------------------------------------------------------------

    def refresh(
        self,
        listed: Iterable[tuple[str, str]],
        load: Callable[[str], Extract | None],
        on_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Bring the index in line with `listed` ((id, identity key) of every servable note of
        the workspace); `load(id)` gives the note's Extract, or None for a note that cannot be
        read now; `on_progress(done, total)` is called after each note (re)indexed (the caller
        rate-limits what it does with it; an exception it raises stops the build, keeping the
        batches committed, and is raised again). Returns how many notes were (re)indexed.
        `Building` if another server holds the write lock for longer than `GLANCE_MS`: nothing
        is written, what it committed is there to search; when it writes between this one's
        batches, what it indexed is not indexed again (`data_version`). (Reading
        ahead in threads was tried: with the GIL shared by the parsing thread, a 100,000-note
        build took 31 s instead of 20 with the files in the page cache, and gained 3 s of 36
        without.)"""
        with self._lock:
            conn = self._connection()
            known, version = self._known(conn)
            listed = list(listed)
            pending = [(i, k) for i, k in listed if known.get(i) != k]
            seen = {i for i, _ in listed}
            if not pending and known.keys() <= seen:  # nothing to write: take no write lock
                return 0
            if not self._begin(conn, wait=False):  # another server is writing: what it has
                raise Building(len(listed) - len(pending), len(listed))  # committed is there
            changed = 0
            started = last = time.monotonic()
            try:
                if self._data_version(conn) != version:  # written meanwhile: not done again
                    pending, known = self._left(conn, pending)
                while changed < len(pending):
                    note_id, key = pending[changed]
                    self._put(conn, note_id, key, load)
                    changed += 1
                    if on_progress is not None:
                        on_progress(changed, len(pending))
                    if changed % BATCH == 0:  # a cancelled build keeps what it did
                        conn.execute("COMMIT")
                        version = self._data_version(conn)
                        conn.execute("BEGIN IMMEDIATE")
                        if self._data_version(conn) != version:  # another server's batch
                            rest, known = self._left(conn, pending[changed:])
                            pending[changed:] = rest
                    now = time.monotonic()
                    if now - last >= PROGRESS_SECONDS:
                        last = now
                        total = len(pending)
                        log.info("%s: %d of %d notes indexed", self._label, changed, total)
                for gone in known.keys() - seen:
                    self._drop(conn, gone)
                conn.execute("COMMIT")
            except BaseException:
                self._roll_back(conn)
                if changed >= BATCH:  # batches were committed: what they replaced, scrubbed
                    with contextlib.suppress(sqlite3.Error):
                        self._after_write(conn)
                raise
            self._after_write(conn)
        if last != started:
            took = time.monotonic() - started
            log.info("%s: %d notes indexed in %.1f s", self._label, changed, took)
        return changed

    def update(
        self, entries: Iterable[tuple[str, str | None]], load: Callable[[str], Extract | None]
    ) -> None:
        """Look again at the notes the folder watch named: (id, identity key, or None if it is
        no longer a servable note). Each is read again, whatever its key, or dropped.
        `Building` (nothing written) if another server holds the write lock, as `refresh`."""
        with self._lock:
            conn = self._connection()
            entries = list(entries)
            if not self._begin(conn, wait=False):
                raise self._building(conn, entries)
            try:
                for note_id, key in entries:
                    if key is None:
                        self._drop(conn, note_id)
                    else:
                        self._put(conn, note_id, key, load)
                conn.execute("COMMIT")
            except BaseException:
                self._roll_back(conn)
                raise
            self._after_write(conn)

    def _building(
        self, conn: sqlite3.Connection, entries: list[tuple[str, str | None]]
    ) -> Building:
        """`Building` for an update kept out: the notes indexed as they are now, of all."""
        total, indexed = self._docs, self._docs
        for note_id, key in entries:
            row = conn.execute("SELECT key FROM doc WHERE id = ?", (note_id,)).fetchone()
            if row is None:
                total += key is not None
            elif key is None:
                total, indexed = total - 1, indexed - 1
            elif row[0] != key:
                indexed -= 1
        return Building(indexed, total)

    def _known(self, conn: sqlite3.Connection) -> tuple[dict[str, str], int]:
        """Each indexed note's identity key, and the file's data version they were read at
        (one read transaction: what another server commits after it changes the version).
        The counts of notes and body text are made again when another server wrote since."""
        conn.execute("BEGIN")
        try:
            known = dict(conn.execute("SELECT id, key FROM doc"))
            version = self._data_version(conn)
            if version != self._version:
                self._count(conn)
                self._version = version
            return known, version
        finally:
            conn.execute("COMMIT")

    def _count(self, conn: sqlite3.Connection) -> None:
        total = conn.execute("SELECT coalesce(sum(body_chars), 0), count(*) FROM doc").fetchone()
        self._total, self._docs = int(total[0]), int(total[1])

    @staticmethod
    def _data_version(conn: sqlite3.Connection) -> int:
        """Changes when another connection commits to the file (SQLite's `data_version`)."""
        return int(conn.execute("PRAGMA data_version").fetchone()[0])

    def _left(
        self, conn: sqlite3.Connection, pending: list[tuple[str, str]]
    ) -> tuple[list[tuple[str, str]], dict[str, str]]:
        """Another server wrote to the file since `pending` was made (within the write lock
        now): what of it is still to do, what is indexed now, and the body-text count again."""
        known = dict(conn.execute("SELECT id, key FROM doc"))
        self._count(conn)
        return [(i, k) for i, k in pending if known.get(i) != k], known

    def _begin(self, conn: sqlite3.Connection, *, wait: bool) -> bool:
        """Take the write lock (BEGIN IMMEDIATE). Not waiting: only for `GLANCE_MS`, for a
        write of another server's that is done in a moment (one note), and False if it holds
        the file longer (a build: its reader then searches what that one committed)."""
        if wait:
            conn.execute("BEGIN IMMEDIATE")
            return True
        conn.execute(f"PRAGMA busy_timeout = {int(GLANCE_MS)}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not _locked(exc):
                raise
            return False
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_MS)}")
        return True

    def _after_write(self, conn: sqlite3.Connection) -> None:
        """Scrub now if a note was dropped for good; start the timer if an edit replaced text."""
        if self._gone:
            self._scrub(conn)
        elif self._replaced:
            self._start_timer()

    def _start_timer(self) -> None:
        if self._timer is None and self._path != ":memory:" and not self._closed:
            self._timer = threading.Timer(SCRUB_SECONDS, self._scrub_later)
            self._timer.daemon = True
            self._timer.start()

    def _scrub(self, conn: sqlite3.Connection) -> bool:
        """Leave nothing of dropped or replaced text in the files (the module says how); False
        if another connection's reader held the log up (then the timer tries again)."""
        if self._path == ":memory:":
            self._gone = self._replaced = False
            return True
        if not FTS5_SECURE_DELETE and (self._gone or self._replaced):
            conn.execute("INSERT INTO fts (fts) VALUES ('optimize')")
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            log.debug("%s: the log is in use by another server: scrubbed again later", self._label)
            self._replaced = True
            self._gone = False
            self._start_timer()
            return False
        self._gone = self._replaced = False
        return True

    def _scrub_later(self) -> None:
        with self._lock:
            self._timer = None
            if not (self._gone or self._replaced or self._pending) or self._closed:
                return
            try:
                if self._pending:
                    self._drop_pending()  # (it scrubs, as a drop does)
                else:
                    self._scrub(self._connection())
            except sqlite3.Error as exc:  # the next write or the exit tries again
                log.warning("%s: could not scrub replaced text (%s)", self._label, exc)

    def _roll_back(self, conn: sqlite3.Connection) -> None:
        """Undo the transaction under way, and count again what the index holds (the counts
        `_add` and `_drop` kept included the rows undone)."""
        if conn.in_transaction:  # (a failed COMMIT may have ended it: keep its error)
            conn.execute("ROLLBACK")
        with contextlib.suppress(sqlite3.Error):  # (the error being raised says more)
            total = conn.execute(
                "SELECT coalesce(sum(body_chars), 0), count(*) FROM doc"
            ).fetchone()
            self._total, self._docs = int(total[0]), int(total[1])

    def _put(
        self,
        conn: sqlite3.Connection,
        note_id: str,
        key: str,
        load: Callable[[str], Extract | None],
    ) -> None:
        self._drop(conn, note_id, replaced=True)
        loaded = load(note_id)
        if loaded is not None:
            self._add(conn, note_id, key, loaded)
        elif self._replaced:
            self._gone = True  # it cannot be read now: dropped, as a deleted one

    def _drop(self, conn: sqlite3.Connection, note_id: str, *, replaced: bool = False) -> None:
        row = conn.execute("SELECT rid, body_chars FROM doc WHERE id = ?", (note_id,)).fetchone()
        if row is not None:
            if replaced:
                self._replaced = True
            else:
                self._gone = True
            rid = row[0]
            conn.execute("DELETE FROM fts WHERE rowid = ?", (rid,))
            conn.execute("DELETE FROM tag WHERE rid = ?", (rid,))
            conn.execute("DELETE FROM name WHERE rid = ?", (rid,))
            conn.execute("DELETE FROM link WHERE rid = ?", (rid,))
            conn.execute("DELETE FROM doc WHERE rid = ?", (rid,))
            self._total -= row[1]
            self._docs -= 1

    def _add(self, conn: sqlite3.Connection, note_id: str, key: str, note: Extract) -> None:
        stem, name = _names(note_id)
        body = note.text[:MAX_BODY_CHARS].translate(_NO_MARKERS)  # a note cannot forge a match
        if self._total + len(body) > MAX_TOTAL_CHARS:
            if not self._warned_full:
                self._warned_full = True
                log.warning(
                    "%s: %d characters of text indexed, the most it holds; further "
                    "notes are found by title, name, aliases, tags and headings only",
                    self._label,
                    self._total,
                )
            body = ""
        self._total += len(body)
        self._docs += 1
        rid = conn.execute(
            "INSERT INTO doc (id, key, title, stem, body_chars) VALUES (?, ?, ?, ?, ?)",
            (note_id, key, note.title, stem.casefold(), len(body)),
        ).lastrowid
        conn.executemany(
            "INSERT OR IGNORE INTO name (gram, rid) VALUES (?, ?)",
            [(plain(n), rid) for n in {note.title, stem, *note.aliases} if plain(n)],
        )
        conn.executemany(
            "INSERT OR IGNORE INTO tag (rid, folded, shown) VALUES (?, ?, ?)",
            [(rid, t.casefold(), t) for t in note.tags],
        )
        conn.executemany(
            "INSERT INTO link (rid, n, target, heading, embed, name) VALUES (?, ?, ?, ?, ?, ?)",
            [(rid, n, link.target, link.heading, int(link.embed), stem_of(link.target))
             for n, link in enumerate(note.links)],
        )  # fmt: skip
        words = " ".join(t.replace("/", " ").replace("-", " ") for t in note.tags)
        named = "\n".join([note.title, *note.aliases, *note.headings])
        code = dict.fromkeys([*code_words(named, prose=False), *code_words(body)])
        conn.execute(
            "INSERT INTO fts (rowid, title, name, keys, headings, body, code)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                rid,
                segment(note.title),
                segment(name),
                segment(" ".join([*note.aliases, words, note.described])),
                segment("\n".join(note.headings)),
                segment(body),
                " ".join(code_term(w) for w in list(code)[:MAX_CODE_WORDS]),
            ),
        )

    def remove(self, note_id: str, *, gone: bool = True) -> None:
        """Drop a note. ``gone`` (deleted, or no longer a note): its text is scrubbed from the
        files before this returns. Otherwise (moved away, changed since it was indexed: its
        text lives on under a name or a version the next refresh reads) on the timer. When
        another server's write keeps the file longer than `BUSY_MS`, sqlite3.OperationalError
        is raised and the drop is kept: tried again on the timer, by the next drop, at close."""
        with self._lock:
            self._pending[note_id] = gone or self._pending.get(note_id, False)
            self._drop_pending()

    def _drop_pending(self) -> None:
        """Drop every pending note in one write transaction, then scrub (caller holds the
        lock). The write lock is taken at BEGIN (IMMEDIATE), where SQLite waits `BUSY_MS` for
        another server's write; a deferred BEGIN would fail at once on the upgrade."""
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            self._start_timer()
            raise
        try:
            for note_id, gone in self._pending.items():
                self._drop(conn, note_id, replaced=not gone)
                if gone and self._replaced:  # text replaced or moved away before may be this
                    self._gone = True  # note's (a note moved, then deleted): scrubbed now
            conn.execute("COMMIT")
        except BaseException:
            self._roll_back(conn)
            self._start_timer()
            raise
        self._pending.clear()
        self._after_write(conn)

    def forget(self, note_id: str) -> None:
        """Drop one note that changed since it was indexed (the next refresh reads it again)."""
        self.remove(note_id, gone=False)

    def search(
        self, query: str, *, limit: int, offset: int = 0, folder: str = "", tag: str = ""
    ) -> list[Hit]:
        """The best `limit` matches after `offset` (see the module docstring); [] when the query
        holds no word."""
        if match_expression(query) is None:
            return []
        prefix = folder.rstrip("/") + "/" if folder else ""
        exact_gram, grams = plain(query), name_grams(query)
        with self._lock:
            conn = self._connection()
            expression = match_expression(query, self._common(conn, words_of(query)))
            assert expression is not None
            best = self._best(conn, expression, prefix, tag.casefold(), offset + limit)
            # rid -> the share of the query's words its title, file name or an alias is (1.0:
            # the whole query, an exact hit; "tar" of "extract a tar archive": 0.25)
            named: dict[int, float] = {}
            words = max(1, exact_gram.count(" ") + 1)
            for gram in [exact_gram, *grams]:
                share = 1.0 if gram == exact_gram else (gram.count(" ") + 1) / words
                for (rid,) in conn.execute(
                    "SELECT rid FROM name WHERE gram = ? LIMIT ?", (gram, MAX_NAMED)
                ):
                    named[rid] = max(named.get(rid, 0.0), share)
            missing = json.dumps(sorted(named.keys() - best.keys()))
            for rid, score in conn.execute(_SCORED, {"match": expression, "rids": missing}):
                if not (prefix or tag) or self._kept(conn, rid, prefix, tag):
                    best[rid] = float(score)
            ranked = sorted(
                best.items(),
                key=lambda item: (
                    named.get(item[0], 0.0) < 1.0,
                    item[1] * (1.0 + NAMED_BOOST * named.get(item[0], 0.0)),
                    item[0],
                ),
            )[offset : offset + limit]
            snippets = self._snippets(conn, expression, [rid for rid, _ in ranked], query)
            hits = []
            for rid, score in ranked:
                row = conn.execute(
                    "SELECT id, key, title FROM doc WHERE rid = ?", (rid,)
                ).fetchone()
                if row is not None:
                    hits.append(Hit(row[0], row[1], row[2], snippets.get(rid, ""), score))
        return hits

    @staticmethod
    def _snippets(
        conn: sqlite3.Connection, expression: str, rids: list[int], query: str
    ) -> dict[int, str]:
        """Each note's snippet: its body around the matched words, or (matched elsewhere, in
        its title say) its body's first characters."""
        conn.execute(_SNIPPETS_TABLE)
        conn.execute("DELETE FROM temp.page")
        bodies = {}
        for rid in rids:
            row = conn.execute("SELECT body FROM fts WHERE rowid = ?", (rid,)).fetchone()
            if row is not None:
                bodies[rid] = str(row[0])
        conn.executemany(
            "INSERT INTO temp.page (rowid, body) VALUES (?, ?)",
            list(bodies.items()),
        )
        tokens = 40 if segment(query) != query else 16  # a character is a token there
        out = {
            int(rid): unsegment(text)
            for rid, text in conn.execute(_SNIPPETS, {"match": expression, "tokens": tokens})
        }
        conn.execute("DELETE FROM temp.page")
        for rid, body in bodies.items():
            if rid not in out:
                head = " ".join(unsegment(body)[: 2 * SNIPPET_CHARS].split())
                out[rid] = head[:SNIPPET_CHARS] + ("\u2026" if len(head) > SNIPPET_CHARS else "")
        return out

    def _common(self, conn: sqlite3.Connection, words: list[str]) -> frozenset[str]:
        """In an index of at least `PRUNE_FROM` notes, the words of a query of several that more
        than half of all notes hold, unless all of them are: BM25 gives such a word no weight
        (its IDF is floored), while matching it means scoring most notes (70 ms at 100,000
        notes instead of 2). A note holding only such words is then not found."""
        if len(words) < 2 or self._docs < PRUNE_FROM:
            return frozenset()
        half = self._docs // 2
        common = set()
        for word in words[:MAX_TERMS]:
            holding = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)",
                (word_expression(word), half + 1),
            ).fetchone()[0]
            if holding > half:
                common.add(word)
        return frozenset(common) if len(common) < len(words) else frozenset()

    @staticmethod
    def _best(
        conn: sqlite3.Connection, expression: str, prefix: str, tag: str, limit: int
    ) -> dict[int, float]:
        if prefix or tag:
            params = {"match": expression, "folder": prefix, "tag": tag, "limit": limit}
            rows = conn.execute(_BEST_FILTERED + _ORDER, params).fetchall()
        else:
            rows = conn.execute(_BEST + _ORDER, {"match": expression, "limit": limit}).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}

    @staticmethod
    def _kept(conn: sqlite3.Connection, rid: int, prefix: str, tag: str) -> bool:
        """Whether note `rid` passes the folder and tag filters."""
        row = conn.execute(
            "SELECT 1 FROM doc WHERE rid = :rid"
            " AND (:folder = '' OR substr(doc.id, 1, length(:folder)) = :folder)"
            " AND (:tag = '' OR EXISTS (SELECT 1 FROM tag WHERE tag.rid = doc.rid"
            " AND (tag.folded = :tag OR substr(tag.folded, 1, length(:tag) + 1) = :tag || '/')))",
            {"rid": rid, "folder": prefix, "tag": tag.casefold()},
        ).fetchone()
        return row is not None

    def key_of(self, note_id: str) -> str | None:
        """The identity key `note_id` was indexed with, or None if it is not indexed."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT key FROM doc WHERE id = ?", (note_id,))
                .fetchone()
            )
        return None if row is None else str(row[0])

    def tag_rows(self) -> list[tuple[str, str, str, str]]:
        """(id, key, tag case-folded, tag as written) of every tag of every note, by id (the
        caller re-checks each note before it counts)."""
        with self._lock:
            rows = self._connection().execute(
                "SELECT doc.id, doc.key, tag.folded, tag.shown FROM tag"
                " JOIN doc ON doc.rid = tag.rid ORDER BY doc.id, tag.folded"
            ).fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def tagged(self, tag: str, limit: int) -> list[tuple[str, str, str]]:
        """(id, key, title) of the notes with `tag` or a tag nested in it, by id."""
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    _TAGGED,
                    {"tag": tag.casefold(), "limit": limit},
                )
                .fetchall()
            )
        return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]

    def links_from(self, note_id: str) -> list[LinkOut]:
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    "SELECT target, heading, embed FROM link JOIN doc ON doc.rid = link.rid"
                    " WHERE doc.id = ? ORDER BY n",
                    (note_id,),
                )
                .fetchall()
            )
        return [LinkOut(str(r[0]), r[1], bool(r[2])) for r in rows]

    def links_named(self, stem: str, limit: int) -> list[tuple[str, str, str]]:
        """(source id, source key, target) of the links whose target's file name is `stem`
        (case-folded, without .md): the candidates for a note's backlinks."""
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    "SELECT DISTINCT doc.id, doc.key, link.target FROM link"
                    " JOIN doc ON doc.rid = link.rid WHERE link.name = ? ORDER BY doc.id LIMIT ?",
                    (stem, limit),
                )
                .fetchall()
            )
        return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]

    def has(self, note_id: str) -> bool:
        return self.key_of(note_id) is not None

    def named(self, stem: str) -> list[str]:
        """Ids of the notes whose file name (case-folded, without .md) is `stem`, shortest
        path first, then by id."""
        with self._lock:
            rows = (
                self._connection().execute("SELECT id FROM doc WHERE stem = ?", (stem,)).fetchall()
            )
        return sorted((str(r[0]) for r in rows), key=lambda i: (i.count("/"), i))

    def close(self) -> None:
        """Scrub what is pending (the log truncated in any case), then close. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            try:
                if self._pending and os.getpid() == self._pid:
                    try:
                        self._drop_pending()
                    except sqlite3.Error as exc:
                        log.warning(
                            "%s: %d notes could not be dropped at exit (%s): the next start's "
                            "search drops them", self._label, len(self._pending), exc,
                        )  # fmt: skip
                if os.getpid() == self._pid and not self._scrub(self._conn):
                    # (a forked copy leaves the parent's file alone)
                    log.warning(
                        "%s: another server is reading it: its log is truncated when that "
                        "server writes or stops, not now", self._label,
                    )  # fmt: skip
            except sqlite3.Error as exc:
                log.warning("%s: could not scrub it at exit (%s)", self._label, exc)
            finally:
                self._conn.close()
