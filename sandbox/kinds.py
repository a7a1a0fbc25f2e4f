"""The two words layer 3 is built from, defined once: what a worker does, and how it is confined.

`Kind`: "delete" (unlink only) or "write" (create and replace). `Mode`: "landlock" (its own
Landlock domain, preferred), "chroot" (the fallback without Landlock) or "none" (unconfined, only
when the operator allowed it explicitly; see `probe.select_mode`). Every module of the package
imports them from here.
"""

from __future__ import annotations

from typing import Final, Literal

Kind = Literal["delete", "write"]
Mode = Literal["landlock", "chroot", "none"]
KINDS: Final[tuple[Kind, ...]] = ("delete", "write")
MODES: Final[tuple[Mode, ...]] = ("landlock", "chroot", "none")

__all__ = ["KINDS", "MODES", "Kind", "Mode"]
