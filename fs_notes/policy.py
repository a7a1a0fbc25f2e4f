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
two workspaces that are the same folder or nested in one another are refused at load, so at most
one workspace ever contains a note (``locate`` still takes the longest, should a Policy be built
otherwise); a missing operation on a workspace the principal holds a grant for is named, since it
reveals nothing the principal does not know.

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
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from fs_notes.lexical import (
    LexicalError,
    WorkspacePath,
    file_uri,
    parse_file_uri,
    parse_workspace_uri,
    relative_note_id,
)

__all__ = [
    "NOT_AUTHENTICATED",
    "NOT_PERMITTED",
    "OPERATIONS",
    "AccessDenied",
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
    "load_policy",
]

Operation = Literal["read", "write", "delete"]
SymlinkPolicy = Literal["deny", "within"]
SandboxLevel = Literal["landlock", "chroot", "none"]
OPERATIONS: tuple[Operation, ...] = get_args(Operation)

NOT_PERMITTED = "workspace not found or not permitted"
NOT_AUTHENTICATED = "missing or invalid bearer token"
_EMPTY_TOKEN_SHA256 = hashlib.sha256(b"").hexdigest()
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_SECTIONS = ("principal", "workspace", "grant")
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


@dataclass(frozen=True, slots=True)
class Principal:
    name: str


@dataclass(frozen=True, slots=True)
class Workspace:
    name: str
    root: WorkspacePath  # the folder's absolute path components
    symlinks: SymlinkPolicy
    sandbox: SandboxLevel  # the minimum OS layer that deletion in this workspace requires

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


# --- the file format (pydantic models of one parsed TOML document) ---------------------------


def _check_name(value: str) -> str:
    if not 1 <= len(value) <= 128:
        raise ValueError("must be 1 to 128 characters")
    if not value.isprintable() or '"' in value or value != value.strip():
        raise ValueError("must be printable, without quotes or surrounding spaces")
    return value


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _PrincipalTable(_Table):
    name: str
    token_sha256: str | None = None
    local: bool = False

    _name = field_validator("name")(_check_name)

    @field_validator("token_sha256")
    @classmethod
    def _hash(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _HEX64.fullmatch(value):
            raise ValueError(
                "must be 64 hexadecimal digits: the SHA-256 of the token, not the token"
            )
        if value.lower() == _EMPTY_TOKEN_SHA256:
            raise ValueError("is the SHA-256 of the empty string; use a real token")
        return value.lower()


class _WorkspaceTable(_Table):
    name: str
    path: str
    symlinks: SymlinkPolicy = "deny"
    sandbox: SandboxLevel = "landlock"

    _name = field_validator("name")(_check_name)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path")
        if value == "/":
            raise ValueError("must not be the filesystem root")
        if not value.isprintable():
            raise ValueError("must not contain control characters")
        parts = value[1:].split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise ValueError('must be normalized (no "//", ".", ".." or trailing "/")')
        return value


class _GrantTable(_Table):
    principal: str
    workspace: str
    operations: list[str]

    @field_validator("operations")
    @classmethod
    def _operations(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("must list at least one operation")
        for op in value:
            if op not in OPERATIONS:
                raise ValueError(f'unknown operation "{op}" (must be "read", "write" or "delete")')
        if len(set(value)) != len(value):
            raise ValueError("lists an operation twice")
        return value


class _PolicyFile(_Table):
    principal: list[_PrincipalTable] = []
    workspace: list[_WorkspaceTable] = []
    grant: list[_GrantTable] = []


# --- problems, located ------------------------------------------------------------------------

Loc = tuple[str | int, ...]


class _Problem(Exception):
    def __init__(self, loc: Loc, reason: str) -> None:
        super().__init__(reason)
        self.loc, self.reason = loc, reason


def _describe(loc: Loc, reason: str, raw: dict[str, Any]) -> str:
    """``workspace "notes": symlinks: reason`` for a pydantic-style location in the document."""
    head, rest = loc[:1], loc[1:]
    if not head:
        return reason
    section = str(head[0])
    if not rest or not isinstance(rest[0], int):
        return f"{section}: {reason}"
    index = rest[0]
    items = raw.get(section)
    item = items[index] if isinstance(items, list) and index < len(items) else None
    name = item.get("name") if isinstance(item, dict) else None
    try:  # a name is shown only if it is a valid one (so the message stays one clean line)
        label = f'{section} "{_check_name(name)}"' if isinstance(name, str) else ""
    except ValueError:
        label = ""
    label = label or f"{section} #{index + 1}"
    fields = ".".join(str(part) for part in rest[1:] if isinstance(part, str))
    return f"{label}: {fields}: {reason}" if fields else f"{label}: {reason}"


def _reason(error: Any) -> str:
    kind, loc = error["type"], error["loc"]
    if kind == "extra_forbidden":
        if loc and loc[-1] != "token_sha256" and "token" in str(loc[-1]).lower():
            return (
                "never store a token in clear; store its SHA-256 as token_sha256 "
                '(e.g. printf %s "$TOKEN" | sha256sum)'
            )
        return "unknown key"
    if kind == "missing":
        return "required"
    if kind == "literal_error":
        return "must be " + str(error["ctx"]["expected"]).replace("'", '"')
    if kind == "value_error":
        return str(error["ctx"]["error"])
    if kind == "list_type":
        section = str(loc[0]) if len(loc) == 1 and loc[0] in _SECTIONS else None
        return f"must be an array of tables ([[{section}]])" if section else "must be an array"
    messages = {
        "string_type": "must be a string",
        "bool_type": "must be true or false",
        "model_type": "must be a table",
    }
    return messages.get(kind, str(error["msg"]))


# --- building a Policy ------------------------------------------------------------------------


def _build(raw: dict[str, Any], lines: _KeyLines | None, source: str | None) -> Policy:
    def fail(loc: Loc, reason: str) -> PolicyError:
        line = lines.line_of(loc) if lines is not None else None
        return PolicyError(_describe(loc, reason, raw), file=source, line=line)

    try:
        doc = _PolicyFile.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        first = min(errors, key=lambda e: lines.line_of(e["loc"]) if lines else 0)
        raise fail(first["loc"], _reason(first)) from None
    try:
        return Policy._from_tables(doc, source, lines)
    except _Problem as problem:
        raise fail(problem.loc, problem.reason) from None


def _unique(
    values: Sequence[str | None], section: str, field: str, lines: _KeyLines | None
) -> None:
    seen: dict[str, int] = {}
    for i, name in enumerate(values):
        if name is None:
            continue
        if name in seen:
            at = f" (line {lines.line_of((section, seen[name], field))})" if lines else ""
            raise _Problem((section, i, field), f"same as {section} #{seen[name] + 1}{at}")
        seen[name] = i


class Policy:
    """Principals, workspaces and grants; immutable once built (use :func:`load_policy`)."""

    def __init__(
        self,
        principals: Sequence[Principal],
        workspaces: Sequence[Workspace],
        grants: Sequence[WorkspaceGrant],
        *,
        token_hashes: dict[str, str] | None = None,
        local: str | None = None,
        source: str | None = None,
    ) -> None:
        """Internal: use :func:`load_policy` or :meth:`for_single_workspace` (they validate)."""
        self.source = source
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
    def _from_tables(cls, doc: _PolicyFile, source: str | None, lines: _KeyLines | None) -> Policy:
        if not doc.workspace:
            raise _Problem(("workspace",), "at least one [[workspace]] table is required")
        _unique([p.name for p in doc.principal], "principal", "name", lines)
        _unique([w.name for w in doc.workspace], "workspace", "name", lines)
        _unique([p.token_sha256 for p in doc.principal], "principal", "token_sha256", lines)
        local: str | None = None
        for i, p in enumerate(doc.principal):
            if p.token_sha256 is None and not p.local:
                raise _Problem(("principal", i), "needs token_sha256 or local = true (or both)")
            if p.local and local is not None:
                raise _Problem(("principal", i, "local"), f'principal "{local}" is already local')
            local = p.name if p.local else local
        workspaces: list[Workspace] = []
        for i, w in enumerate(doc.workspace):
            try:  # the lexical layer's rules: a path no file:// URI could name is refused here
                root = WorkspacePath(tuple(w.path[1:].split("/")))
            except LexicalError as exc:
                raise _Problem(("workspace", i, "path"), f"not usable: {exc}") from None
            for j, other in enumerate(workspaces):
                shorter = min(len(root.parts), len(other.root.parts))
                if root.parts[:shorter] == other.root.parts[:shorter]:
                    how = (
                        "same folder as"
                        if len(root.parts) == len(other.root.parts)
                        else "nested with"
                    )
                    at = f" (line {lines.line_of(('workspace', j, 'path'))})" if lines else ""
                    raise _Problem(("workspace", i, "path"), f'{how} workspace "{other.name}"{at}')
            workspaces.append(Workspace(w.name, root, w.symlinks, w.sandbox))
        principals = [Principal(p.name) for p in doc.principal]
        by_principal = {p.name: p for p in principals}
        by_workspace = {w.name: w for w in workspaces}
        grants: list[WorkspaceGrant] = []
        seen: set[tuple[str, str]] = set()
        for i, g in enumerate(doc.grant):
            if g.principal not in by_principal:
                raise _Problem(("grant", i, "principal"), f'no principal named "{g.principal}"')
            if g.workspace not in by_workspace:
                raise _Problem(("grant", i, "workspace"), f'no workspace named "{g.workspace}"')
            if (g.principal, g.workspace) in seen:
                raise _Problem(
                    ("grant", i), f'a second grant for "{g.principal}" on "{g.workspace}"'
                )
            seen.add((g.principal, g.workspace))
            ops = frozenset(op for op in OPERATIONS if op in g.operations)
            grants.append(WorkspaceGrant(by_principal[g.principal], by_workspace[g.workspace], ops))
        token_hashes = {p.name: p.token_sha256 for p in doc.principal if p.token_sha256}
        return cls(
            principals, workspaces, grants, token_hashes=token_hashes, local=local, source=source
        )

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
            _check_name(name)
        except ValueError:
            name = "workspace"
        principal: dict[str, Any] = {"name": principal_name}
        principal.update({"token_sha256": token_sha256} if token_sha256 else {"local": True})
        raw: dict[str, Any] = {
            "principal": [principal],
            "workspace": [{"name": name, "path": path, "symlinks": symlinks, "sandbox": sandbox}],
            "grant": [
                {"principal": principal_name, "workspace": name, "operations": list(OPERATIONS)}
            ],
        }
        return _build(raw, None, None)

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


def load_policy(path: str) -> Policy:
    """Read and validate a policy file; PolicyError names the file, line and field of a problem."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise PolicyError(f"cannot read: {exc.strerror}", file=path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PolicyError("not valid UTF-8", file=path, line=line) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\(at line (\d+), column (\d+)\)$", str(exc))
        line = int(found.group(1)) if found else 1
        reason = str(exc)[: found.start()].strip() if found else str(exc)
        column = f" (column {found.group(2)})" if found else ""
        raise PolicyError(f"invalid TOML: {reason}{column}", file=path, line=line) from None
    return _build(raw, _KeyLines(text), path)


# --- where keys are: tomllib reports no positions, so scan the text for them -----------------

_BARE = re.compile(r"[A-Za-z0-9_-]+")


class _KeyLines:
    """Line numbers of table headers and keys in a TOML text that tomllib has already accepted."""

    def __init__(self, text: str) -> None:
        self._entries: list[tuple[Loc, int]] = []
        arrays: dict[tuple[str, ...], int] = {}
        table: Loc = ()
        string: str | None = None  # the delimiter while inside a multi-line string
        depth = 0  # open [ / { inside a multi-line value
        for lineno, line in enumerate(text.splitlines(), start=1):
            if string is not None or depth > 0:
                string, depth = _scan_value(line, 0, string, depth)
                continue
            stripped = line.lstrip()
            start = len(line) - len(stripped)
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("["):
                is_array = stripped.startswith("[[")
                parsed = _parse_key(line, start + (2 if is_array else 1))
                if parsed is not None:
                    table = _resolve(parsed[0], arrays, is_array)
                    self._entries.append((table, lineno))
                continue
            parsed = _parse_key(line, start)
            if parsed is None or not line[parsed[1] :].lstrip().startswith("="):
                continue
            self._entries.append(((*table, *parsed[0]), lineno))
            value_at = line.index("=", parsed[1]) + 1
            string, depth = _scan_value(line, value_at, None, 0)

    def line_of(self, loc: Sequence[str | int]) -> int:
        """The line of the deepest known key or header on the way to ``loc`` (1 if none)."""
        best, best_len = 1, 0
        for key, lineno in self._entries:
            if len(key) > best_len and tuple(loc[: len(key)]) == key:
                best, best_len = lineno, len(key)
        return best


def _resolve(parts: tuple[str, ...], arrays: dict[tuple[str, ...], int], is_array: bool) -> Loc:
    out: list[str | int] = []
    for i, part in enumerate(parts):
        out.append(part)
        prefix = parts[: i + 1]
        if is_array and i == len(parts) - 1:
            arrays[prefix] = arrays.get(prefix, -1) + 1
            out.append(arrays[prefix])
        elif prefix in arrays:
            out.append(arrays[prefix])
    return tuple(out)


def _parse_key(line: str, i: int) -> tuple[tuple[str, ...], int] | None:
    """A dotted key starting at ``line[i]``: its parts and the index just after it."""
    parts: list[str] = []
    while True:
        while i < len(line) and line[i] in " \t":
            i += 1
        if i < len(line) and line[i] in "\"'":
            end = line.find(line[i], i + 1)
            while line[i] == '"' and end > 0 and line[end - 1] == "\\":
                end = line.find('"', end + 1)
            if end < 0:
                return None
            parts.append(line[i + 1 : end])
            i = end + 1
        else:
            match = _BARE.match(line, i)
            if match is None:
                return None
            parts.append(match.group())
            i = match.end()
        while i < len(line) and line[i] in " \t":
            i += 1
        if i >= len(line) or line[i] != ".":
            return tuple(parts), i
        i += 1


def _scan_value(line: str, i: int, string: str | None, depth: int) -> tuple[str | None, int]:
    """Continue scanning a value: returns (open multi-line string delimiter, bracket depth)."""
    while i < len(line):
        if string is not None:
            if string == '"""' and line[i] == "\\":
                i += 2
            elif line.startswith(string, i):
                i += 3
                while i < len(line) and line[i] == string[0]:
                    i += 1
                string = None
            else:
                i += 1
            continue
        c = line[i]
        if c == "#":
            break
        if c in "\"'":
            if line.startswith(c * 3, i):
                string, i = c * 3, i + 3
                continue
            i += 1
            while i < len(line) and line[i] != c:
                i += 2 if c == '"' and line[i] == "\\" else 1
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        i += 1
    return string, depth
