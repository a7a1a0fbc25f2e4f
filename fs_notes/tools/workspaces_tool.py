"""notes_workspaces: the workspaces this principal may use, so a model can find its folder.

No arguments. The listing is tools/granted.py's (the principal's own grants only, never another
principal's workspaces); the text content escapes names and URIs, the structured content keeps
them exact.
"""

from __future__ import annotations

from typing import Any

from ..protocol.dispatch import Call
from ..protocol.models import CallToolResult, TextContent
from .context import NotesEnv, guarded
from .granted import described, sole_workspace, workspace_listing
from .registry import ToolSpec

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "workspaces": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "uri": {"type": "string", "description": "pass it as workspaceUri"},
                    "operations": {
                        "type": "array",
                        "items": {"type": "string", "enum": ["read", "write", "delete"]},
                    },
                },
                "required": ["name", "uri", "operations"],
            },
        },
    },
    "required": ["workspaces"],
}


class NotesWorkspaces:
    """notes_workspaces: the workspaces granted to the caller."""

    def __init__(self, env: NotesEnv) -> None:
        self.env = env

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="notes_workspaces",
            title="List workspaces",
            description="The notes folders (workspaces) you may use: name, uri (pass it as "
            "workspaceUri to the other tools) and the operations granted (read, write, delete). "
            "With exactly one, workspaceUri may be left out.",
            properties={},
            required=(),
            read_only=True,
            destructive=False,
            idempotent=True,
            handler=guarded(self.run),
            output_schema=OUTPUT_SCHEMA,
        )

    def run(self, call: Call, args: dict[str, Any]) -> dict[str, Any]:
        policy = self.env.policy
        listing = workspace_listing(policy, call.principal)
        if not listing:
            text = "No workspace is granted to you."
        else:
            shown = described(policy, call.principal)
            text = f"Your workspaces (name, workspaceUri, operations): {shown}."
            if sole_workspace(policy, call.principal) is not None:
                text += " It is the only one, so workspaceUri may be left out of every tool."
        return CallToolResult(
            content=[TextContent(text=text)], structured_content={"workspaces": listing}
        ).wire()
