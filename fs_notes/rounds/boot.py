"""The kernel's id of this boot, which every sealed confirmation carries (tools/delete.py; the
request state seals and checks it, rounds/request.py).

Why it matters: the replay store commits with `synchronous=NORMAL` (confirm/replay.py), so a
power loss can roll back its last claims; that can never revive a confirmation only because a
state sealed before a reboot is refused for its boot id.

Guarantees: `boot_id()` is the kernel's id, or None when it cannot be read (no /proc, a
container that hides it, an empty file). Then the reboot check cannot tell one boot from the
next, so its callers fail closed: the replay store makes every claim durable before it counts
(`synchronous=FULL`, an fsync per claim), the server says so at start-up, and `fs-notes check`
reports it (`replay.durable_claims`). Does not: detect a boot id that is forged by whoever can
bind-mount over /proc (they can do anything the server can). Nothing is read at import:
`this_boot()` reads the id on first use and keeps it (a self-confined server may read /proc:
sandbox/selfconfine.py grants it).
"""

from __future__ import annotations

import functools

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as f:
            text = f.read(64).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


@functools.cache
def this_boot() -> str:
    """This boot's id as a state binds it, read once on first use: "unknown" without one (then
    every state says so, and the replay store makes each claim durable instead)."""
    return boot_id() or "unknown"
