"""Policy files and authorization (containment layer 1a).

Guarantees:
- A request reaches a workspace only when the *authenticated principal* holds a grant for that exact
  workspace and that operation. Nothing else from a request (MCP client roots, ``clientInfo``,
  ``_meta``, headers other than the bearer token) is an input to any function here, so nothing a
  client says can widen what it may reach.
- A workspace URI matches a configured workspace only by exact equality of its decoded path
  components (parsed by :mod:`fs_notes.lexical`); a note URI is placed in the workspace whose
  components are the longest leading run of its own. String prefixes are never compared, so
  ``/w/notes-evil`` is not inside ``/w/notes``.
- A workspace that does not exist and one the principal may not use raise the same
  :class:`NotAuthorized` with the same message.
- Bearer tokens are stored only as SHA-256 hashes; a presented token is hashed and compared with
  :func:`hmac.compare_digest` against every stored hash, without an early exit.
- A policy file is rejected as a whole on the first problem, with ``file:line: field: reason``.

Decisions (docs/policy.md has the reasons): the stdio principal is the one ``local = true`` entry;
two workspaces that are the same folder or nested in one another as written are refused at load,
and as opened (links resolved) at start-up (compose.open_roots), so at most one workspace ever
contains a note (``locate`` still takes the longest, should a Policy be built otherwise); a
missing operation on a workspace the principal holds a grant for is named, since it reveals
nothing the principal does not know.

Not guaranteed here:
- That workspace folders exist, are directories, or are distinct once symlinks in their paths are
  resolved: loading is pure (it reads only the policy file), and the filesystem layer checks the
  real folders when ``serve`` starts.
- Containment of the note path itself (symlinks, ``..`` on disk, hard links): layers 1b, 2 and 3.
- Timing: Python gives no hard constant-time guarantee; the comparisons are over SHA-256 digests,
  so timing can at most reveal something about a digest, never about a stored token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from fs_notes.fs.resolvers import SymlinkPolicy  # (one home: the filesystem layer's)
from fs_notes.lexical import (
    LexicalError,
    WorkspacePath,
    file_uri,
    parse_file_uri,
    parse_workspace_uri,
    relative_note_id,
)
from fs_notes.limits import Limits

if TYPE_CHECKING:
    from fs_notes.confirm.location import StoreSetting

__all__ = [
    "NOT_AUTHENTICATED",
    "NOT_PERMITTED",
    "OPERATIONS",
    "AccessDenied",
    "Force",
    "NotAuthenticated",
    "NotAuthorized",
    "Operation",
    "Policy",
    "PolicyError",
    "Principal",
    "SandboxLevel",
    "SymlinkPolicy",
    "Workspace",
    "WorkspaceGrant",
    "hash_token",
]

Operation = Literal["read", "write", "delete"]
SandboxLevel = Literal["landlock", "chroot", "none"]
#: What approves a deletion in a workspace (fs_notes/approval/): the client's form, the person
#: outside the client (the loopback page or `fs-notes approve`), or either of them.
Approval = Literal["form", "out-of-band", "either"]
#: Where a deleted note goes: the folder's own `.trash/` where it has one (as Obsidian keeps
#: it), else only the journal of changes (`auto`); or always only the journal.
Trash = Literal["auto", "journal"]
#: Who may force an update or edit past the damage guard (tools/versions.py): the caller, with
#: `force: true`, or only the person outside the client, for that very change (tools/forced.py).
Force = Literal["caller", "out-of-band"]
OPERATIONS: tuple[Operation, ...] = get_args(Operation)

NOT_PERMITTED = "workspace not found or not permitted"
NOT_AUTHENTICATED = "missing or invalid bearer token"
_EMPTY_TOKEN_SHA256 = hashlib.sha256(b"").hexdigest()
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
SECTIONS = ("principal", "workspace", "grant")
_STRENGTH: dict[SandboxLevel, int] = {"none": 0, "chroot": 1, "landlock": 2}


class PolicyError(ValueError):
    """An unusable policy; ``str()`` is the one-line reason (``file:line: field: why``)."""

    def __init__(self, reason: str, *, file: str | None = None, line: int | None = None) -> None:
        self.reason, self.file, self.line = reason, file, line
        where = f"{file}:{line}: " if file is not None and line is not None else ""
        super().__init__(
            f"{file}: {reason}" if file is not None and line is None else where + reason
        )


class AccessDenied(Exception):
    """Base of the two refusals below."""


class NotAuthenticated(AccessDenied):
    """No principal matches the presented credential."""


class NotAuthorized(AccessDenied):
    """The principal may not use this workspace (or it does not exist), or not for this op."""


DEFAULT_READ_LIMIT = 4 << 20
"""Bytes: a note larger than this is listed (flagged) but read in parts (``offset``/``length``)."""
READ_LIMIT_RANGE = (4 << 10, 256 << 20)


@dataclass(frozen=True, slots=True)
class Principal:
    name: str


@dataclass(frozen=True, slots=True)
class Workspace:
    name: str
    root: WorkspacePath  # the folder's absolute path components
    symlinks: SymlinkPolicy
    sandbox: SandboxLevel  # the minimum OS layer that deletion in this workspace requires
    read_limit: int = DEFAULT_READ_LIMIT  # bytes: the most one read returns, and whole notes above
    #: (name, uid, gid) whom this workspace's workers run as when serve runs as root (None: the
    #: folder's owner); resolved from the user database when the policy is loaded.
    worker_user: tuple[str, int, int] | None = None
    approval: Approval = "either"
    #: After a principal read a note here whose body hides text (notes/hidden.py), its next
    #: deletion here needs the person's approval outside the client, whatever `approval` says
    #: (and so does its next forced update or edit, whatever `force` says).
    out_of_band_after_hidden: bool = False
    trash: Trash = "auto"
    force: Force = "caller"

    def accepts(self, mode: SandboxLevel) -> bool:
        """Whether deleting here may run under ``mode`` (landlock > chroot > none)."""
        return _STRENGTH[mode] >= _STRENGTH[self.sandbox]

    @property
    def path(self) -> str:
        return self.root.as_posix()

    @property
    def uri(self) -> str:
        """The canonical ``file://`` URI of the folder (what clients send as ``workspaceUri``)."""
        return file_uri(self.root)


@dataclass(frozen=True, slots=True)
class WorkspaceGrant:
    principal: Principal
    workspace: Workspace
    operations: frozenset[Operation]


def hash_token(token: str) -> str:
    """The value to store as ``token_sha256`` for ``token`` (hex SHA-256 of its UTF-8 bytes)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# --- plain checks, shared by the file format (policy_file.py) and zero-config mode -----------


def resolve_user(value: str) -> tuple[str, int, int]:
    """(name, uid, gid) of a user named by name or numeric uid, from the user database."""
    import pwd

    try:
        entry = pwd.getpwuid(int(value)) if value.isdigit() else pwd.getpwnam(value)
    except (KeyError, OverflowError):
        raise ValueError(f"no such user on this host: {value!r}") from None
    return entry.pw_name, entry.pw_uid, entry.pw_gid


def check_name(value: str) -> str:
    if not 1 <= len(value) <= 128:
        raise ValueError("must be 1 to 128 characters")
    if not value.isprintable() or '"' in value or value != value.strip():
        raise ValueError("must be printable, without quotes or surrounding spaces")
    return value


def check_hash(value: str) -> str:
    if not _HEX64.fullmatch(value):
        raise ValueError("must be 64 hexadecimal digits: the SHA-256 of the token, not the token")
    if value.lower() == _EMPTY_TOKEN_SHA256:
        raise ValueError("is the SHA-256 of the empty string; use a real token")
    return value.lower()


def check_read_limit(value: int) -> int:
    low, high = READ_LIMIT_RANGE
    if not low <= value <= high:
        raise ValueError(f"must be a number of bytes from {low} to {high}")
    return value


def check_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("must be an absolute path")
    if value == "/":
        raise ValueError("must not be the filesystem root")
    if "\x00" in value:
        raise ValueError("must not contain NUL")
    parts = value[1:].split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError('must be normalized (no "//", ".", ".." or trailing "/")')
    return value


class Policy:
    """Principals, workspaces and grants; immutable once built (use
    :func:`fs_notes.policy_file.load_policy`)."""

    def __init__(
        self,
        principals: Sequence[Principal],
        workspaces: Sequence[Workspace],
        grants: Sequence[WorkspaceGrant],
        *,
        token_hashes: dict[str, str] | None = None,
        local: str | None = None,
        source: str | None = None,
        limits: Limits | None = None,
        replay_store: StoreSetting | None = None,
    ) -> None:
        """Internal: use :func:`fs_notes.policy_file.load_policy` or
        :meth:`for_single_workspace` (they validate)."""
        self.source = source
        #: The shared replay store the file names ([replay_store]), if any (config.py opens it).
        self.replay_store = replay_store
        self.limits = limits if limits is not None else Limits()
        self.principals = tuple(principals)
        self.workspaces = tuple(workspaces)
        self._by_name = {p.name: p for p in self.principals}
        self._local = self._by_name[local] if local is not None else None
        # Stored as digests; every entry is compared on each authentication.
        self._token_index = tuple(
            (bytes.fromhex(h), self._by_name[name]) for name, h in (token_hashes or {}).items()
        )
        self._by_root = {ws.root.parts: ws for ws in self.workspaces}
        self._grants = {(g.principal.name, g.workspace.name): g for g in grants}

    @classmethod
    def for_single_workspace(
        cls,
        path: str,
        principal_name: str,
        *,
        token_sha256: str | None,
        symlinks: SymlinkPolicy = "deny",
        sandbox: SandboxLevel = "landlock",
    ) -> Policy:
        """Zero-config ``fs-notes serve WORKSPACE``: one principal with every operation on ``path``.

        Without ``token_sha256`` the principal is the local (stdio) user; with it, the principal
        that token authenticates (HTTP). ``path`` must already be absolute and normalized.
        """
        name = path.rstrip("/").rsplit("/", 1)[-1]
        try:  # the folder's name, when it makes a valid workspace name
            check_name(name)
        except ValueError:
            name = "workspace"

        def fail(field: str, why: str) -> PolicyError:
            return PolicyError(f'workspace "{name}": {field}: {why}')

        try:
            check_path(path)
        except ValueError as exc:
            raise fail("path", str(exc)) from None
        try:
            root = WorkspacePath(tuple(path[1:].split("/")))
        except LexicalError as exc:
            raise fail("path", f"not usable: {exc}") from None
        if symlinks not in get_args(SymlinkPolicy) or sandbox not in get_args(SandboxLevel):
            raise fail("symlinks/sandbox", "unknown value")
        try:
            check_name(principal_name)
            if token_sha256 is not None:
                token_sha256 = check_hash(token_sha256)
        except ValueError as exc:
            raise PolicyError(f'principal "{principal_name}": {exc}') from None
        principal = Principal(principal_name)
        workspace = Workspace(name, root, symlinks, sandbox)
        grant = WorkspaceGrant(principal, workspace, frozenset(OPERATIONS))
        return cls(
            [principal],
            [workspace],
            [grant],
            token_hashes={principal_name: token_sha256} if token_sha256 else None,
            local=None if token_sha256 else principal_name,
        )

    # --- authentication -----------------------------------------------------------------------

    def authenticate_token(self, token: str) -> Principal:
        """The principal whose ``token_sha256`` hashes ``token``; else NotAuthenticated."""
        try:
            raw = token.encode("utf-8")
        except UnicodeEncodeError:
            raw = b""
        digest = hashlib.sha256(raw).digest()
        found: Principal | None = None
        for stored, principal in self._token_index:  # no early exit: every hash is compared
            if hmac.compare_digest(digest, stored) and found is None:
                found = principal
        if found is None or not raw:
            raise NotAuthenticated(NOT_AUTHENTICATED)
        return found

    def sign_ins(self, principal: Principal) -> tuple[str, ...]:
        """How `principal` can be recognised: "stdio" (the local user), "token" (HTTP)."""
        ways: tuple[str, ...] = ("stdio",) if self._local == principal else ()
        if any(p == principal for _, p in self._token_index):
            ways += ("token",)
        return ways

    def local_principal(self) -> Principal:
        """The stdio principal (``local = true``); PolicyError if the policy has none."""
        if self._local is None:
            raise PolicyError(
                "no principal has local = true, which serving over stdio needs", file=self.source
            )
        return self._local

    # --- authorization ------------------------------------------------------------------------

    def grants_for(self, principal: Principal) -> tuple[WorkspaceGrant, ...]:
        """Every workspace ``principal`` may use, in policy order."""
        return tuple(g for (name, _), g in self._grants.items() if name == principal.name)

    def operations_in(self, workspace: str) -> frozenset[Operation]:
        """Every operation some principal may do in the workspace named `workspace`."""
        ops: set[Operation] = set()
        for (_, name), grant in self._grants.items():
            if name == workspace:
                ops |= grant.operations
        return frozenset(ops)

    def authorize(self, principal: Principal, workspace_uri: str, op: Operation) -> WorkspaceGrant:
        """The grant for exactly this workspace URI and operation. LexicalError for a bad URI."""
        workspace = self._by_root.get(parse_workspace_uri(workspace_uri).parts)
        return self._grant(principal, workspace, op)

    def locate(self, principal: Principal, uri: str, op: Operation) -> tuple[WorkspaceGrant, str]:
        """The grant and note id for a note URI beneath a workspace (longest workspace wins)."""
        target = parse_file_uri(uri)
        best: Workspace | None = None
        for ws in self.workspaces:
            n = len(ws.root.parts)
            if target.parts[:n] == ws.root.parts and (best is None or n > len(best.root.parts)):
                best = ws
        grant = self._grant(principal, best, op)
        return grant, relative_note_id(grant.workspace.root, target)

    def _grant(
        self, principal: Principal, workspace: Workspace | None, op: Operation
    ) -> WorkspaceGrant:
        if op not in OPERATIONS:
            raise ValueError(f"unknown operation {op!r}")
        grant = self._grants.get((principal.name, workspace.name)) if workspace else None
        if grant is None or self._by_name.get(principal.name) != principal:
            raise NotAuthorized(NOT_PERMITTED)
        if op not in grant.operations:
            # The principal holds a grant here, so it already knows the workspace exists.
            raise NotAuthorized(f'operation "{op}" is not permitted in this workspace')
        return grant
