"""`server/discover`: a constant answer, built without pydantic so start-up stays fast."""

from __future__ import annotations

from typing import Any

from .protocol.dispatch import Call, Method
from .protocol.envelope import PreEncoded
from .protocol.meta import RESULT_META, SUPPORTED_VERSIONS

DISCOVER_TTL_MS = 3_600_000

INSTRUCTIONS = (
    "fs-notes serves folders of markdown notes. Name the folder with workspaceUri (a file:// URI) "
    "and a note by its id, the path relative to that folder (e.g. projects/plan.md). "
    "notes_delete always asks the user to choose and confirm the note."
)


def discover_method(*, resources: bool, live: bool = False) -> Method:
    """`live`: subscriptions/listen is served for resources (tools/live.py): resource list
    changes and per-note updates are declared (added 2026-12-01)."""
    capabilities: dict[str, Any] = {"tools": {}}
    if resources:
        capabilities["resources"] = {"listChanged": True, "subscribe": True} if live else {}
    result = PreEncoded(
        {
            "resultType": "complete",
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": capabilities,
            "instructions": INSTRUCTIONS,
            "ttlMs": DISCOVER_TTL_MS,
            "cacheScope": "public",
            "_meta": RESULT_META,
        }
    )

    def discover(call: Call) -> dict[str, Any]:
        return result

    return Method(discover)
