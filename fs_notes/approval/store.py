"""The changes waiting for the person's approval outside the client, and the approvals given.

One SQLite file in the state folder, `approvals.sqlite3` (or in memory for a server without a
state folder: then only its own loopback page can approve), shared by the servers of this user
and `fs-notes approve`. Each row is one change waiting: a notes_delete (action "delete", keyed
by the nonce of its sealed request state: tools/delete.py) or a forced update or edit (action
"replace", keyed by the digest of exactly that change: tools/forced.py); who asked (principal)
and where (workspace), the candidates (id and title, as the form would show them), what the
change would do (`detail`: for a replacement, what it removes and its new first lines), when it
expires, the hashes of its terminal code and of its page's token, and, once the person
approved, which note and how (page or terminal).

Guarantees:
- An approval names one of the row's own candidates and is taken only before the row expires,
  once: a second approval of the same row, or one after it expired, changes nothing.
- `approved(nonce)` is the only way a tool learns of an approval, and the nonce is sealed in
  the state the client echoes (a deletion) or is the digest of the change itself (a
  replacement): an approval cannot be moved to another change, and what the person saw (the
  candidates) is what the state holds.
- The code (60 bits, typed by a person) and the page token (176 bits) are stored as their
  SHA-256, never as themselves, and derived from the nonce under a key kept in the file, so
  asking again (after a restart, or at another server on this state folder) shows the same.
- The file is opened as this user's own (privatefile.py): no link followed, 0600, one name.

Does not: tell a person from a program running as the same user (anything that runs as this
user can open this file, the page or the terminal: docs/design.md, "What an approval proves"),
or change anything (the tool does, through the door, when the client retries).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from ..privatefile import connect_private, open_durable

__all__ = ["Approvals", "Pending", "Via", "approvals_name"]

Via = Literal["page", "terminal"]
#: What a row asks the person to approve: deleting one of its candidates, or replacing its one
#: note with text that removes part of it (a forced update or edit).
Action = Literal["delete", "replace"]
#: A code's letters (base32: 5 bits each, 60 bits), typed in groups of four.
CODE_LETTERS = 12
VERSION = 2

_SCHEMA = """CREATE TABLE IF NOT EXISTS pending (
    nonce TEXT PRIMARY KEY,
    code TEXT NOT NULL UNIQUE,
    page TEXT NOT NULL UNIQUE,
    principal TEXT NOT NULL,
    workspace TEXT NOT NULL,
    candidates TEXT NOT NULL,
    action TEXT NOT NULL DEFAULT 'delete',
    detail TEXT NOT NULL DEFAULT '{}',
    expires REAL NOT NULL,
    chosen BLOB,
    via TEXT,
    at REAL
)"""


_COLUMNS = "nonce, principal, workspace, candidates, expires, chosen, via, action, detail"


def approvals_name() -> str:
    return "approvals.sqlite3"


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _key(note_id: str) -> bytes:
    return note_id.encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Pending:
    """One change waiting for the person (what the page and the terminal show)."""

    nonce: str
    principal: str
    workspace: str
    #: (id, title) of each note the person may choose, as the form offers them.
    candidates: tuple[tuple[str, str | None], ...]
    expires: float
    chosen: str | None = None
    via: Via | None = None
    action: Action = "delete"
    #: For "replace": "losses" (what the change removes, in words) and "after" (the new text's
    #: first lines, as the principal sent them).
    detail: dict[str, Any] = field(default_factory=dict)


class Approvals:
    """The pending approvals of one state folder (thread-safe; reconnects after a fork)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._conn, self._fd = connect_private(path, False, self._connect)
        self._key = self._secret()

    def _connect(self) -> sqlite3.Connection:
        return open_durable(self.path, _set_up)

    def _secret(self) -> bytes:
        """The key codes and page tokens are derived under: kept in the file, so a restarted
        server, or another on the same state folder, shows the same code for a waiting
        deletion as the one that asked (a per-process key would leave theirs dead)."""
        db = self._conn
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT k FROM secret").fetchone()
            if row is None:
                key = secrets.token_bytes(32)
                db.execute("INSERT INTO secret (k) VALUES (?)", (key,))
            else:
                key = bytes(row[0])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return key

    def _db(self) -> sqlite3.Connection:
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._conn = self._connect()
        return self._conn

    def ask(
        self,
        *,
        nonce: str,
        principal: str,
        workspace: str,
        candidates: list[tuple[str, str | None]],
        expires: float,
        action: Action = "delete",
        detail: dict[str, Any] | None = None,
    ) -> tuple[str, str]:
        """Record a change waiting for the person (asked again: the same row, as it is); its
        code for `fs-notes approve` and its page's token. Both are derived from the nonce with
        this server's own key, so asking again gives the same ones, and only their hashes are
        stored."""
        code, page = self._secrets(nonce)
        shown = json.dumps([[_key(i).decode("latin-1"), t] for i, t in candidates])
        with self._lock:
            db = self._db()
            db.execute("DELETE FROM pending WHERE expires < ?", (time.time() - 3600,))
            # Asked again after it expired (a forced change's key is the change itself): anew.
            db.execute("DELETE FROM pending WHERE nonce = ? AND expires < ?", (nonce, time.time()))
            db.execute(
                "INSERT OR IGNORE INTO pending (nonce, code, page, principal, workspace, "
                "candidates, action, detail, expires) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (nonce, _hash(_normal(code)), _hash(page), principal, workspace, shown, action,
                 json.dumps(detail or {}), expires),
            )  # fmt: skip
        return code, page

    def _secrets(self, nonce: str) -> tuple[str, str]:
        mac = hmac.new(self._key, nonce.encode(), hashlib.sha256).digest()
        letters = base64.b32encode(mac[:10]).decode()[:CODE_LETTERS]
        code = "-".join(letters[i : i + 4] for i in range(0, CODE_LETTERS, 4))
        page = base64.urlsafe_b64encode(mac[10:]).decode().rstrip("=")
        return code, page

    def by_code(self, code: str) -> Pending | None:
        """The row a person's code names, if it is one and has not expired."""
        return self._find("code", _hash(_normal(code)))

    def by_page(self, token: str) -> Pending | None:
        return self._find("page", _hash(token))

    def _find(self, column: str, digest: str) -> Pending | None:
        with self._lock:
            row = (
                self._db()
                .execute(
                    f"SELECT {_COLUMNS} FROM pending WHERE {column} = ? AND expires >= ?",  # noqa: S608
                    (digest, time.time()),
                )
                .fetchone()
            )
        return None if row is None else _pending(row)

    def waiting(self) -> list[Pending]:
        """Every change still waiting for the person, oldest first."""
        with self._lock:
            rows = (
                self._db()
                .execute(
                    f"SELECT {_COLUMNS} FROM pending WHERE chosen IS NULL AND expires >= ? "  # noqa: S608
                    "ORDER BY expires",
                    (time.time(),),
                )
                .fetchall()
            )
        return [_pending(r) for r in rows]

    def approve(self, nonce: str, note_id: str, via: Via) -> bool:
        """The person chose `note_id` of the row `nonce`; whether that was taken (False: not
        one of its candidates, expired, or already approved)."""
        with self._lock:
            db = self._db()
            row = db.execute(f"SELECT {_COLUMNS} FROM pending WHERE nonce = ?", (nonce,)).fetchone()  # noqa: S608
            if row is None:
                return False
            pending = _pending(row)
            if pending.chosen is not None or pending.expires < time.time():
                return False
            if note_id not in {i for i, _ in pending.candidates}:
                return False
            return (
                db.execute(
                    "UPDATE pending SET chosen = ?, via = ?, at = ? "
                    "WHERE nonce = ? AND chosen IS NULL",
                    (_key(note_id), via, time.time(), nonce),
                ).rowcount
                == 1
            )

    def approved(self, nonce: str) -> tuple[str, Via] | None:
        """The note the person approved for `nonce`, and how; None if not (yet), or if the
        request has expired since (an approval is used before its request expires)."""
        with self._lock:
            row = (
                self._db()
                .execute(
                    "SELECT chosen, via FROM pending WHERE nonce = ? AND chosen IS NOT NULL "
                    "AND expires >= ?",
                    (nonce, time.time()),
                )
                .fetchone()
            )
        if row is None:
            return None
        return bytes(row[0]).decode("utf-8", "surrogateescape"), row[1]

    def spend(self, nonce: str) -> None:
        """Forget the row `nonce` (its change was made: an approval serves once)."""
        with self._lock:
            self._db().execute("DELETE FROM pending WHERE nonce = ?", (nonce,))

    def close(self) -> None:
        with self._lock, contextlib.suppress(sqlite3.Error):
            if os.getpid() == self._pid:
                self._conn.close()
            if self._fd >= 0:  # after the connection: its locks go with this descriptor
                os.close(self._fd)
                self._fd = -1


def _set_up(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA user_version").fetchone()[0] != VERSION:
        conn.execute("DROP TABLE IF EXISTS pending")
        conn.execute(f"PRAGMA user_version = {VERSION}")
    conn.execute(_SCHEMA)
    conn.execute("CREATE TABLE IF NOT EXISTS secret (k BLOB NOT NULL)")


def _normal(code: str) -> str:
    """A code as a person may type it: case, spaces and dashes do not matter."""
    return "".join(c for c in code.upper() if c.isalnum())


def _pending(row: tuple[Any, ...]) -> Pending:
    nonce, principal, workspace, raw, expires, chosen, via, action, detail = row
    candidates = tuple(
        (str(i).encode("latin-1").decode("utf-8", "surrogateescape"), t)
        for i, t in json.loads(str(raw))
    )
    return Pending(
        str(nonce),
        str(principal),
        str(workspace),
        candidates,
        float(expires),
        None if chosen is None else bytes(chosen).decode("utf-8", "surrogateescape"),
        via,
        "replace" if action == "replace" else "delete",
        json.loads(str(detail)) if detail else {},
    )
