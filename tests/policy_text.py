"""Test policies as policy.toml text (docs/policy.md), written one way: a table a call.

- `principal(name)` is the local principal (stdio); `principal(name, token_sha256=...)` one
  that HTTP authenticates by a bearer token's hash.
- `workspace(name, path, **settings)`: a workspace, with any of its settings (sandbox,
  symlinks, ...).
- `grant(principal, workspace, *operations)`.
- `policy_toml(*tables)`: the tables, in order, as the file's text; `write_policy(path, ...)`
  writes it there.
- `two_principals_share_notes(ws, alice_sha256, bob_sha256)`: the policy of the tests that
  prove one principal cannot use another's confirmation: "alice" and "bob", each with a token,
  both granted read, write and delete on one workspace "notes".

Does not: check what it writes (the server's policy loader does, as for any file); the tests
of the loader itself (tests/test_policy.py) keep their files literal, as people write them.
"""

from __future__ import annotations

import json
from pathlib import Path

Value = str | bool | list[str] | Path


def _table(kind: str, **keys: Value | None) -> str:
    lines = [f"[[{kind}]]"]
    for key, value in keys.items():
        if value is None:
            continue
        if isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        else:
            text = [str(v) for v in value] if isinstance(value, list) else str(value)
            lines.append(f"{key} = {json.dumps(text)}")
    return "\n".join(lines) + "\n"


def principal(name: str, *, token_sha256: str | None = None) -> str:
    """The local principal without a token; with one, a principal HTTP authenticates."""
    if token_sha256 is None:
        return _table("principal", name=name, local=True)
    return _table("principal", name=name, token_sha256=token_sha256)


def workspace(name: str, path: Path | str, **settings: str) -> str:
    return _table("workspace", name=name, path=path, **settings)


def grant(principal: str, workspace: str, *operations: str) -> str:
    return _table("grant", principal=principal, workspace=workspace, operations=list(operations))


def policy_toml(*tables: str) -> str:
    return "\n".join(tables)


def write_policy(path: Path, *tables: str) -> Path:
    path.write_text(policy_toml(*tables))
    return path


def two_principals_share_notes(ws: Path, alice_sha256: str, bob_sha256: str) -> str:
    """alice and bob (tokens with these hashes) may each read, write and delete in "notes"."""
    return policy_toml(
        principal("alice", token_sha256=alice_sha256),
        principal("bob", token_sha256=bob_sha256),
        workspace("notes", ws),
        grant("alice", "notes", "read", "write", "delete"),
        grant("bob", "notes", "read", "write", "delete"),
    )
