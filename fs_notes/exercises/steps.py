"""What an attack does, as data: requests, the two-round delete flow, races and file changes.

String values in a request may hold placeholders the runner fills in per attack root:
``{ws}`` the workspace URI, ``{root_uri}`` the URI of the attack root, ``{rootq}`` the root's
percent-encoded path (for hand-made URIs), ``{root}`` its plain path (for ids).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

PWNED = "PWNED by the escape exercises"


@dataclass(frozen=True)
class Request:
    """One JSON-RPC request. `harm_if_ok`: succeeding at all is the escape (a device read);
    `feed_fifo`: an outside process writes the secret into that FIFO meanwhile."""

    method: str
    params: Mapping[str, Any]
    harm_if_ok: bool = False
    feed_fifo: str | None = None
    capabilities: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Mutation:
    """A change the attacker makes to the files (paths relative to the attack root)."""

    op: Literal["rename", "symlink", "exchange"]
    path: str
    other: str  # rename/exchange: the second path; symlink: the link's target (verbatim)


@dataclass(frozen=True)
class Mutate:
    mutations: tuple[Mutation, ...]


@dataclass(frozen=True)
class Delete:
    """notes_delete by `title`; if `choose` is offered, apply `between`, then accept it."""

    title: str
    choose: str
    between: tuple[Mutation, ...] = ()


@dataclass(frozen=True)
class Race:
    """An attacker process exchanges `swap` (renameat2 RENAME_EXCHANGE) in a loop while the
    request is sent again and again; the first attempt is made with the pair swapped."""

    swap: tuple[str, str]
    request: Request


@dataclass(frozen=True)
class Compromised:
    """Attacker code after confinement (`compromised.attack`): `op` on outside/secret.md (or
    planting outside/planted, or tracing a victim process) from inside `where`: the server
    process itself, or an attacker worker confined like the delete or the write worker."""

    where: Literal["server", "delete", "write"]
    op: str


Step = Request | Mutate | Delete | Race | Compromised


def tool(name: str, **arguments: Any) -> Request:
    return Request("tools/call", {"name": name, "arguments": {"workspaceUri": "{ws}", **arguments}})


def read(note_id: str, **kw: Any) -> Request:
    return Request(
        "tools/call",
        {"name": "notes_read", "arguments": {"workspaceUri": "{ws}", "id": note_id}},
        **kw,
    )


def update(note_id: str) -> Request:
    return tool("notes_update", id=note_id, content=PWNED)


def create(note_id: str) -> Request:
    return tool("notes_create", id=note_id, content=PWNED)


def move(note_id: str, new_id: str) -> Request:
    """notes_move (added 2026-12-01)."""
    return tool("notes_move", id=note_id, newId=new_id)


def listing(folder: str) -> Request:
    return tool("notes_list", folder=folder)


def resource(uri: str) -> Request:
    return Request("resources/read", {"uri": uri})


def rename(path: str, to: str) -> Mutation:
    return Mutation("rename", path, to)


def symlink(path: str, target: str) -> Mutation:
    return Mutation("symlink", path, target)


def fill(value: Any, names: Mapping[str, str]) -> Any:
    """`value` with every placeholder in its strings replaced (recursively)."""
    if isinstance(value, str):
        for key, text in names.items():
            value = value.replace("{" + key + "}", text)
        return value
    if isinstance(value, Mapping):
        return {k: fill(v, names) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [fill(v, names) for v in value]
    return value
