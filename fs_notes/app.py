"""The MCP method table of fs-notes: discovery, tools and resources, wired to the dispatcher."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .discovery import discover_method
from .journal.door import authored
from .policy import Policy
from .protocol.argcheck import ArgumentError, validate
from .protocol.dispatch import Call, Dispatcher, Method
from .protocol.envelope import PreEncoded
from .protocol.errors import INVALID_PARAMS, ProtocolError
from .protocol.meta import RESULT_META
from .protocol.models import CallToolParams, parse_params, tool_error
from .render import shown
from .tools.registry import MultiRound, ToolSpec

TOOLS_TTL_MS = 3_600_000

ResourceHandler = Callable[[Call], dict[str, Any]]


def build_methods(
    tools: Sequence[ToolSpec],
    *,
    policy: Policy,
    list_resources: ResourceHandler | None = None,
    read_resource: ResourceHandler | None = None,
    listen: Method | None = None,
) -> dict[str, Method]:
    """`policy`: whose grants the per-principal instructions of server/discover name
    (discovery.py). `listen`: the `subscriptions/listen` entry (protocol/subscriptions.py),
    opened by the transports; declared in server/discover when given."""
    by_name = {t.name: t for t in tools}
    tools_result = PreEncoded(
        {
            "resultType": "complete",
            "tools": [t.definition() for t in tools],
            "ttlMs": TOOLS_TTL_MS,
            "cacheScope": "public",
            "_meta": RESULT_META,
        }
    )

    def list_tools(call: Call) -> dict[str, Any]:
        if call.params.get("cursor") is not None:
            raise ProtocolError(INVALID_PARAMS, "Invalid params: unknown cursor")
        return tools_result

    def call_tool(call: Call) -> dict[str, Any]:
        params = parse_params(CallToolParams, call.params)
        tool = by_name.get(params.name)
        if tool is None:
            raise ProtocolError(INVALID_PARAMS, f"Unknown tool: {shown(params.name, 200)}")
        try:
            arguments = validate(tool.input_schema, params.arguments)
        except ArgumentError as exc:
            # A tool execution error, not a protocol error (spec: tools, "Error Handling":
            # input validation errors such as a value out of range), so that the model can
            # read it and correct its call; an unknown tool above stays a protocol error.
            return tool_error(f"Invalid arguments for {tool.name}: {exc}")
        with authored(tool.name, call.principal.name):  # whom the journal says a change is by
            if isinstance(tool.handler, MultiRound):
                return tool.handler.run(call, arguments, params)
            return tool.handler(call, arguments)

    methods = {
        "server/discover": discover_method(
            policy=policy, resources=list_resources is not None, live=listen is not None
        ),
        "tools/list": Method(list_tools),
        "tools/call": Method(call_tool, blocking=True),
    }
    if list_resources is not None:
        methods["resources/list"] = Method(list_resources, blocking=True)
    if read_resource is not None:
        methods["resources/read"] = Method(read_resource, blocking=True)
    if listen is not None:
        methods["subscriptions/listen"] = listen
    return methods


def build_dispatcher(methods: dict[str, Method]) -> Dispatcher:
    from concurrent.futures import ThreadPoolExecutor

    from .limits import EXECUTOR_THREADS

    pool = ThreadPoolExecutor(max_workers=EXECUTOR_THREADS, thread_name_prefix="fs-notes")
    return Dispatcher(methods, pool)
