"""The handshake-era protocol versions fs-notes speaks, and the `initialize` version negotiation.

Spec (2025-11-25 basic/lifecycle, "Version Negotiation"): if the server supports the requested
version it answers with the same one; otherwise with the latest it supports, and a client that
cannot speak that one disconnects. Modern versions (2026-07-28) are never negotiated here: they
need no handshake.
"""

from __future__ import annotations

LEGACY_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26")
LATEST_LEGACY = LEGACY_VERSIONS[0]


def negotiate(requested: str) -> str:
    """The version to answer `initialize` with."""
    return requested if requested in LEGACY_VERSIONS else LATEST_LEGACY


def is_legacy(version: str | None) -> bool:
    return version in LEGACY_VERSIONS


def has_titled_enums(version: str) -> bool:
    """2025-11-25 added `oneOf: [{const, title}]` enums and the `mode` field of elicitation."""
    return version >= "2025-11-25"
