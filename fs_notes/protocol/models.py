"""Pydantic models of the MCP 2026-07-28 messages this server reads and writes.

Only the subset fs-notes uses. Results are built from these models and dumped with
`wire()` (aliases, no None fields); incoming params are validated with them so a malformed
request gets a -32602 naming the field. The official JSON schema is the reference: the tests
validate every message the server sends against `shared/mcp-schema/2026-07-28/schema.json`.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import INVALID_PARAMS, ProtocolError
from .meta import RESULT_META as RESULT_META
from .meta import SERVER_INFO as SERVER_INFO_DICT


class _Wire(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class _Params(BaseModel):
    """Incoming params: unknown keys are allowed (the spec lets clients add fields)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True)


class Implementation(_Wire):
    name: str
    version: str
    title: str | None = None


SERVER_INFO = Implementation.model_validate(SERVER_INFO_DICT)
assert SERVER_INFO.wire() == SERVER_INFO_DICT


# -- params ------------------------------------------------------------------------------------


class PaginatedParams(_Params):
    cursor: str | None = None


class CallToolParams(_Params):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    input_responses: dict[str, Any] | None = Field(default=None, alias="inputResponses")
    # Not typed as str: a malformed state gets the same fixed refusal as a forged one.
    request_state: Any = Field(default=None, alias="requestState")


class ReadResourceParams(_Params):
    uri: str


P = TypeVar("P", bound=_Params)


def parse_params(model: type[P], params: dict[str, Any]) -> P:
    """Validate params; the -32602 message names the first offending field."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "params"
        raise ProtocolError(INVALID_PARAMS, f"Invalid params: {where}: {first['msg']}") from None


# -- results -----------------------------------------------------------------------------------


class TextContent(_Wire):
    type: Literal["text"] = "text"
    text: str


class ToolAnnotations(_Wire):
    title: str | None = None
    read_only_hint: bool = Field(alias="readOnlyHint")
    destructive_hint: bool = Field(alias="destructiveHint")
    idempotent_hint: bool = Field(alias="idempotentHint")
    open_world_hint: bool = Field(default=False, alias="openWorldHint")


class Tool(_Wire):
    name: str
    title: str
    description: str
    input_schema: dict[str, Any] = Field(alias="inputSchema")
    output_schema: dict[str, Any] | None = Field(default=None, alias="outputSchema")
    annotations: ToolAnnotations


class CallToolResult(_Wire):
    result_type: Literal["complete"] = Field(default="complete", alias="resultType")
    content: list[TextContent]
    structured_content: dict[str, Any] | None = Field(default=None, alias="structuredContent")
    is_error: bool | None = Field(default=None, alias="isError")
    meta: dict[str, Any] = Field(default_factory=lambda: RESULT_META, alias="_meta")


class InputRequiredResult(_Wire):
    result_type: Literal["input_required"] = Field(default="input_required", alias="resultType")
    input_requests: dict[str, dict[str, Any]] = Field(alias="inputRequests")
    request_state: str = Field(alias="requestState")
    meta: dict[str, Any] = Field(default_factory=lambda: RESULT_META, alias="_meta")


class Resource(_Wire):
    uri: str
    name: str
    title: str | None = None
    mime_type: str = Field(default="text/markdown", alias="mimeType")
    size: int | None = None


class TextResourceContents(_Wire):
    uri: str
    mime_type: str = Field(default="text/markdown", alias="mimeType")
    text: str


def tool_error(message: str) -> dict[str, Any]:
    """A tool failure the model can read and act on (not a protocol error)."""
    return CallToolResult(content=[TextContent(text=message)], is_error=True).wire()
