"""The workspaces one principal may use: the one home of how they are listed and described.

Three places tell a model which folder to pass (issue 25): the server's `instructions` (the
`server/discover` result, and so the legacy `initialize` result built from it), the
`notes_workspaces` tool, and the refusal of an unknown or ungranted `workspaceUri` (and of one
that is not a URI at all, a bare name like "vault": `not_a_uri` suggests the granted workspace
of that name). All three are built here, from the policy's grants for the request's principal
only.

What it guarantees
  * Only the principal's own grants are listed, never another principal's workspaces: the
    listing is `Policy.grants_for(principal)`, in policy order, with the operations granted.
  * Names and URIs put into text are escaped (`fs_notes.render.shown`): a workspace name from a
    policy file cannot start a new line or hide characters in the instructions or an error.
  * `sole_workspace` gives the default `workspaceUri` only when exactly one workspace is
    granted; with none or several, the tool's `workspaceUri` stays required.

What it does NOT guarantee
  * Authorization: a default URI still goes through `NotesEnv.open` (tools/context.py), the
    single door, like any URI a client sends.
"""

from __future__ import annotations

from typing import Any

from ..policy import OPERATIONS, Policy, Principal, WorkspaceGrant
from ..render import shown

_SHOWN_NAME = 200
_SHOWN_URI = 1000


def _grants(policy: Policy, principal: object) -> tuple[WorkspaceGrant, ...]:
    if not isinstance(principal, Principal):
        return ()
    return policy.grants_for(principal)


def _operations(grant: WorkspaceGrant) -> list[str]:
    return [op for op in OPERATIONS if op in grant.operations]


def workspace_listing(policy: Policy, principal: object) -> list[dict[str, Any]]:
    """`[{name, uri, operations}]` of the workspaces ``principal`` may use (exact values)."""
    return [
        {"name": g.workspace.name, "uri": g.workspace.uri, "operations": _operations(g)}
        for g in _grants(policy, principal)
    ]


def sole_workspace(policy: Policy, principal: object) -> str | None:
    """The URI of the principal's only workspace, or None when it has none or several."""
    grants = _grants(policy, principal)
    return grants[0].workspace.uri if len(grants) == 1 else None


def described(policy: Policy, principal: object) -> str:
    """One line per workspace, for text a model reads: `"notes" file:///... (read, write)`."""
    return "; ".join(
        f'"{shown(g.workspace.name, _SHOWN_NAME)}" {shown(g.workspace.uri, _SHOWN_URI)} '
        f"({', '.join(_operations(g))})"
        for g in _grants(policy, principal)
    )


def valid_choices(policy: Policy, principal: object) -> str:
    """The end of a refusal of a workspaceUri: the valid ones for this principal, or none."""
    text = described(policy, principal)
    if not text:
        return "no workspace is granted to you"
    return f"the workspaces you may use: {text}"


def not_a_uri(policy: Policy, principal: object, value: str) -> str:
    """The refusal of a workspaceUri that is not a URI at all (no scheme: a bare workspace name
    such as "vault", or a folder path): what is expected, the principal's own workspace whose
    name (exactly, else case-folded) or folder is that value if there is one, then the valid
    ones. Never a workspace of another principal: the match is made among its grants only."""
    grants = _grants(policy, principal)
    wanted = value.rstrip("/") or value
    match = next((g for g in grants if g.workspace.name == value), None)
    match = match or next(
        (g for g in grants if g.workspace.name.casefold() == value.casefold()), None
    )
    match = match or next((g for g in grants if g.workspace.path == wanted), None)
    text = f'"{shown(value, _SHOWN_NAME)}" is not a URI: a workspace is named by its file:// URI'
    if match is not None:
        text += f'; did you mean "{shown(match.workspace.uri, _SHOWN_URI)}"?'
    return f"{text}; {valid_choices(policy, principal)}"


def instructions(policy: Policy, principal: object) -> str:
    """The server's `instructions` for this principal."""
    head = (
        "fs-notes serves folders of markdown notes. A note is named by its id, the path "
        "relative to its folder (e.g. projects/plan.md), as notes_list and notes_search return "
        "it. "
    )
    tail = (
        " notes_workspaces lists them again. notes_delete takes a title or an id and always "
        "asks the user, through a form, to choose and confirm the note."
    )
    grants = _grants(policy, principal)
    if not grants:
        return head + "No workspace is granted to you." + tail
    listed = f"Your workspaces (name, workspaceUri, operations): {described(policy, principal)}."
    if len(grants) == 1:
        return head + listed + " It is the only one, so workspaceUri may be left out." + tail
    return head + listed + " Pass the one you mean as workspaceUri to every tool." + tail
