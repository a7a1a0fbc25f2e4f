"""The policy file format: TOML validated with pydantic, each problem located by file and line.

Only `load_policy` is public (imported where a policy file is read: `serve`, the exercise
target; zero-config start-up never imports this module). Runtime
authorization, and what it guarantees, is in policy.py; this module only turns a file into a
Policy or a PolicyError that names the file, the line and the field.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from .confirm.location import StoreSetting, parse_location
from .errors import ConfigError
from .lexical import LexicalError, WorkspacePath
from .limits import RANGES, Limits
from .paths import expand_path
from .policy import (
    DEFAULT_READ_LIMIT,
    OPERATIONS,
    SECTIONS,
    Approval,
    Force,
    Policy,
    PolicyError,
    Principal,
    SandboxLevel,
    SymlinkPolicy,
    Trash,
    Workspace,
    WorkspaceGrant,
    check_hash,
    check_name,
    check_path,
    check_read_limit,
    resolve_user,
)
from .secretfile import SecretFileError, read_trusted_file

# --- the file format (pydantic models of one parsed TOML document) ---------------------------


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _PrincipalTable(_Table):
    name: str
    token_sha256: str | None = None
    local: bool = False

    _name = field_validator("name")(check_name)

    @field_validator("token_sha256")
    @classmethod
    def _hash(cls, value: str | None) -> str | None:
        return None if value is None else check_hash(value)


class _WorkspaceTable(_Table):
    name: str
    path: str
    symlinks: SymlinkPolicy = "deny"
    sandbox: SandboxLevel = "landlock"
    read_limit: int = DEFAULT_READ_LIMIT
    worker_user: str | None = None
    approval: Approval = "either"
    out_of_band_after_hidden: bool = False
    trash: Trash = "auto"
    force: Force = "caller"

    _name = field_validator("name")(check_name)
    _read_limit = field_validator("read_limit")(check_read_limit)

    @field_validator("worker_user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        if value is not None:
            resolve_user(value)
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        try:  # `~`, `~/...` and $HOME as on the command line (paths.py), then the usual rules
            expanded = expand_path(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return check_path(expanded)


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


class _LimitsTable(_Table):
    max_connections: int = Limits.max_connections
    request_timeout: float = Limits.request_timeout
    keep_alive_timeout: float = Limits.keep_alive_timeout
    requests_per_principal: int = Limits.requests_per_principal
    sessions_per_principal: int = Limits.sessions_per_principal
    nonces_per_principal: int = Limits.nonces_per_principal
    listens_per_principal: int = Limits.listens_per_principal
    subscriptions_per_principal: int = Limits.subscriptions_per_principal
    unused_index_days: int = Limits.unused_index_days
    max_shrink: float = Limits.max_shrink
    max_headings_lost: float = Limits.max_headings_lost
    undo_days: int = Limits.undo_days
    undo_mib: int = Limits.undo_mib

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _number(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("must be a number")
        low, high = RANGES[str(info.field_name)]
        if not low <= value <= high:
            raise ValueError(f"must be from {low:g} to {high:g}")
        if isinstance(value, float) and cls.model_fields[str(info.field_name)].annotation is int:
            if not value.is_integer():
                raise ValueError("must be a whole number")
            return int(value)
        return value


class _ReplayStoreTable(_Table):
    """[replay_store]: the shared spent-nonce store of several instances (docs/deploy.md)."""

    url: str
    password_file: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parse_location(value)  # the same rules and messages as --replay-store
        return value

    @field_validator("password_file")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("/", "~", "$HOME", "${HOME}")):
            raise ValueError("must be an absolute path (or start with ~ or $HOME)")
        return value


class _PolicyFile(_Table):
    principal: list[_PrincipalTable] = []
    workspace: list[_WorkspaceTable] = []
    grant: list[_GrantTable] = []
    limits: _LimitsTable = _LimitsTable()
    replay_store: _ReplayStoreTable | None = None


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
    if not rest:
        return f"{section}: {reason}"
    if not isinstance(rest[0], int):  # a plain table ([limits]): its key
        return f"{section}: {'.'.join(str(part) for part in rest)}: {reason}"
    index = rest[0]
    items = raw.get(section)
    item = items[index] if isinstance(items, list) and index < len(items) else None
    name = item.get("name") if isinstance(item, dict) else None
    try:  # a name is shown only if it is a valid one (so the message stays one clean line)
        label = f'{section} "{check_name(name)}"' if isinstance(name, str) else ""
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
        section = str(loc[0]) if len(loc) == 1 and loc[0] in SECTIONS else None
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
        return _from_tables(doc, source, lines)
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


def _from_tables(doc: _PolicyFile, source: str | None, lines: _KeyLines | None) -> Policy:
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
                    "same folder as" if len(root.parts) == len(other.root.parts) else "nested with"
                )
                at = f" (line {lines.line_of(('workspace', j, 'path'))})" if lines else ""
                raise _Problem(("workspace", i, "path"), f'{how} workspace "{other.name}"{at}')
        user = resolve_user(w.worker_user) if w.worker_user is not None else None
        fields = (
            w.sandbox, w.read_limit, user, w.approval, w.out_of_band_after_hidden, w.trash,
            w.force,
        )  # fmt: skip
        workspaces.append(Workspace(w.name, root, w.symlinks, *fields))
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
            raise _Problem(("grant", i), f'a second grant for "{g.principal}" on "{g.workspace}"')
        seen.add((g.principal, g.workspace))
        ops = frozenset(op for op in OPERATIONS if op in g.operations)
        grants.append(WorkspaceGrant(by_principal[g.principal], by_workspace[g.workspace], ops))
    token_hashes = {p.name: p.token_sha256 for p in doc.principal if p.token_sha256}
    limits = Limits(**doc.limits.model_dump())
    for i, ws in enumerate(workspaces):
        if limits.undo_days > 0 and ws.read_limit > limits.undo_mib << 20:
            raise _Problem(
                ("workspace", i, "read_limit"),
                f"{ws.read_limit} bytes is more than [limits] undo_mib ({limits.undo_mib} MiB): "
                "a note that large could be read but never changed, as its text could not be "
                "kept to undo the change; lower read_limit or raise undo_mib",
            )
    return Policy(
        principals,
        workspaces,
        grants,
        token_hashes=token_hashes,
        local=local,
        source=source,
        limits=limits,
        replay_store=(
            StoreSetting(doc.replay_store.url, doc.replay_store.password_file)
            if doc.replay_store is not None
            else None
        ),
    )


MAX_POLICY_BYTES = 1 << 20


def load_policy(path: str) -> Policy:
    """Read and validate a policy file; PolicyError names the file, line and field of a problem."""
    try:  # the policy decides who may do what where: only its owner (or root) may change it
        data = read_trusted_file(path, limit=MAX_POLICY_BYTES)
    except SecretFileError as exc:
        raise PolicyError(str(exc), file=path) from None
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
