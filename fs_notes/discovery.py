"""`server/discover`: built without pydantic so start-up stays fast.

The `instructions` name the workspaces the request's principal may use, with their URIs and
operations (tools/granted.py: its own grants only, never another principal's), so a model knows
what to pass as `workspaceUri`. The answer therefore depends on who asks: `cacheScope` is
"private" (spec: caching; a shared cache must not give one principal's answer to another), and
it is encoded once per principal (the policy is immutable).
"""

from __future__ import annotations

import threading
from typing import Any

from .policy import Policy
from .protocol.dispatch import Call, Method
from .protocol.envelope import PreEncoded
from .protocol.meta import RESULT_META, SUPPORTED_VERSIONS
from .tools.granted import instructions

DISCOVER_TTL_MS = 3_600_000


def discover_method(*, policy: Policy, resources: bool, live: bool = False) -> Method:
    """`live`: subscriptions/listen is served for resources (tools/live.py): resource list
    changes and per-note updates are declared (added 2026-12-01)."""
    capabilities: dict[str, Any] = {"tools": {}}
    if resources:
        capabilities["resources"] = {"listChanged": True, "subscribe": True} if live else {}
    answers: dict[str, PreEncoded] = {}
    lock = threading.Lock()

    def discover(call: Call) -> dict[str, Any]:
        name = call.principal.name
        with lock:
            result = answers.get(name)
            if result is None:
                result = answers[name] = PreEncoded(
                    {
                        "resultType": "complete",
                        "supportedVersions": list(SUPPORTED_VERSIONS),
                        "capabilities": capabilities,
                        "instructions": instructions(policy, call.principal),
                        "ttlMs": DISCOVER_TTL_MS,
                        "cacheScope": "private",
                        "_meta": RESULT_META,
                    }
                )
        return result

    return Method(discover)
