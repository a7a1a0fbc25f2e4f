"""The words layer 3 is built from, defined once: what a worker does, how it is confined, and
which role and network its system-call filter is built for.

`Kind`: "delete" (unlink only) or "write" (create and replace). `Mode`: "landlock" (its own
Landlock domain, preferred), "chroot" (the fallback without Landlock) or "none" (unconfined, only
when the operator allowed it explicitly; see `probe.select_mode`). `Profile` and `Network`: see
sandbox/seccomp.py and sandbox/allowed.py. Every module of the package imports them from here.
"""

from __future__ import annotations

from typing import Final, Literal

Kind = Literal["delete", "write"]
Mode = Literal["landlock", "chroot", "none"]
KINDS: Final[tuple[Kind, ...]] = ("delete", "write")
MODES: Final[tuple[Mode, ...]] = ("landlock", "chroot", "none")

#: A process's role, as its system-call filter knows it (sandbox/seccomp.py, sandbox/allowed.py).
Profile = Literal["server", "delete", "write", "relay", "monitor", "monitor-chroot"]
PROFILES: Final[tuple[Profile, ...]] = (
    "server", "delete", "write", "relay", "monitor", "monitor-chroot"
)  # fmt: skip

#: What socket() a server may still call after start-up (a worker: none, its socket() is refused
#: by name). "none": the server creates no socket (its HTTP listener is made before confinement,
#: accepted connections come from accept4, the workers' channels and asyncio's wake-up pair from
#: socketpair, which stays). "tcp": it reaches the replay store (redis-py: AF_INET or AF_INET6,
#: SOCK_STREAM, protocol 0 or IPPROTO_TCP). "tcp+dns": the store is named by host name, and the
#: C library's resolver asks DNS over UDP (SOCK_DGRAM, protocol 0) before it connects.
Network = Literal["none", "tcp", "tcp+dns"]
NETWORKS: Final[tuple[Network, ...]] = ("none", "tcp", "tcp+dns")

__all__ = ["KINDS", "MODES", "NETWORKS", "PROFILES", "Kind", "Mode", "Network", "Profile"]
