"""The tool catalogue: each tool's public definition next to the function that runs it.

`tools/list` is computed once from this table and is byte-identical on every call and in every
instance. A tool appears here only when it works: there are no stubs on the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..protocol.argcheck import check_schema
from ..protocol.dispatch import Call
from ..protocol.models import CallToolParams, Tool, ToolAnnotations

ToolHandler = Callable[[Call, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class MultiRound:
    """The handler of a multi-round tool: it also gets the parsed `tools/call` params, whose
    requestState and inputResponses choose the round (fs_notes.rounds.request.Echo.of)."""

    run: Callable[[Call, dict[str, Any], CallToolParams], dict[str, Any]]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]
    read_only: bool
    destructive: bool
    idempotent: bool
    handler: ToolHandler | MultiRound = field(compare=False)
    #: The JSON Schema of the tool's structuredContent, declared as its outputSchema (optional).
    output_schema: dict[str, Any] | None = field(default=None, compare=False)

    input_schema: dict[str, Any] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        schema = {
            "type": "object",
            "properties": self.properties,
            "required": list(self.required),
            "additionalProperties": False,
        }
        check_schema(schema)
        object.__setattr__(self, "input_schema", schema)

    def definition(self) -> dict[str, Any]:
        return Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            annotations=ToolAnnotations(
                title=self.title,
                read_only_hint=self.read_only,
                destructive_hint=self.destructive,
                idempotent_hint=self.idempotent,
            ),
        ).wire()


class ServerTool(Protocol):
    """A tool: one class per tool (tools/catalogue.py lists them), made from what it needs;
    `spec()` is its definition, whose handler is the tool's `run`."""

    def spec(self) -> ToolSpec: ...


# Shared argument schemas.
WORKSPACE_URI: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 4096,
    "description": (
        "file:// URI of the notes folder (workspace), e.g. file:///home/me/notes, as "
        "notes_workspaces lists it. May be left out when exactly one workspace is granted to "
        "you: it then defaults to that one"
    ),
}
NOTE_ID: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 4096,
    "description": "Note id: its path relative to the workspace, '/'-separated, ending in .md",
}
CONTENT: dict[str, Any] = {
    "type": "string",
    "maxLength": 1 << 20,
    "description": "The whole markdown content of the note (UTF-8, at most 1 MiB)",
}
