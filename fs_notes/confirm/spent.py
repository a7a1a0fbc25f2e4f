"""What every replay store promises: the contract of the spent-nonce stores, and their errors.

A replay store records the one-time nonce of each confirmation that has been spent, so that a
sealed requestState is acted on at most once. Two stores keep it: `replay.ReplayStore` (SQLite:
the processes of one host) and `redis_store.RedisReplayStore` (Redis: every host that names the
same server). The delete tool (tools/delete.py) sees only this contract.

Guarantees every store gives:
- `claim(nonce, expires_at, principal, epoch)` returns True for at most one caller, ever, among
  everyone sharing the store; False if the nonce was spent; raises otherwise, and then the
  nonce is *not* claimed by this call (a claim whose answer was lost may have been recorded: it
  then stays spent, which only ever refuses, never accepts twice).
- A nonce is kept until at least its expiry plus `RETENTION_MARGIN`, and then pruned by the
  store (SQLite) or the engine (Redis key expiry): clocks that disagree by less than the margin
  cannot revive one.
- Full (`ReplayStoreFull`) or at a principal's quota (`PrincipalQuotaFull`), a claim is refused,
  never made by evicting a live nonce.
- Unreachable, broken or misconfigured (`StoreUnavailable`): refused, with a reason for the log.
- The epoch: a state is sealed with `epoch()` and the claim passes it back. A store whose claims
  can be lost at a restart says so by changing its epoch, and refuses (`EpochChanged`) a claim
  made under an older one. SQLite has no epoch of its own (None): its durability rests on the
  kernel's boot id, which the request state binds when `binds_boot` is true (rounds/boot.py).

Not guaranteed here: that the token is authentic and unexpired (rounds/seal.py checks that before
any claim), or anything about the note the confirmation names.
"""

from __future__ import annotations

import math
import re
from typing import Protocol

__all__ = [
    "RETENTION_MARGIN",
    "EpochChanged",
    "PrincipalQuotaFull",
    "ReplayStoreFull",
    "SpentNonces",
    "StoreUnavailable",
    "check_claim",
]

#: Seconds a nonce outlives its token's expiry.
RETENTION_MARGIN = 600.0

_NONCE_RE = re.compile(r"[0-9a-f]{32}")


class ReplayStoreFull(RuntimeError):
    """`max_rows` unexpired nonces are stored; the claim is refused rather than evict one."""


class PrincipalQuotaFull(ReplayStoreFull):
    """This principal holds `per_principal` unexpired nonces (others are not affected)."""


class StoreUnavailable(RuntimeError):
    """The store cannot be reached, or refuses to be used as it is set up: nothing is claimed.
    The message is for the operator's log (it never names a password), not for the wire."""


class EpochChanged(RuntimeError):
    """The state was sealed under an earlier epoch of the store (it restarted, failed over or
    was emptied since), whose claims may be lost: the confirmation is refused."""


class SpentNonces(Protocol):
    """The replay store as the delete tool uses it."""

    #: True when the store's durability rests on the boot id (states must bind it).
    binds_boot: bool

    def describe(self) -> str:
        """Where the store is, for the start-up summary and `fs-notes check` (no secrets)."""
        ...

    def epoch(self) -> str | None:
        """What a state sealed now carries; StoreUnavailable if it cannot be learnt."""
        ...

    def claim(
        self, nonce: str, expires_at: float, principal: str = "", epoch: str | None = None
    ) -> bool: ...

    def is_spent(self, nonce: str) -> bool: ...

    def close(self) -> None: ...


def check_claim(nonce: object, expires_at: object) -> float:
    """Validate a claim's nonce and expiry; the time to keep the nonce until (ValueError)."""
    if not (isinstance(nonce, str) and _NONCE_RE.fullmatch(nonce)):
        raise ValueError("nonce must be 32 lowercase hex characters")
    if not (
        isinstance(expires_at, int | float)
        and not isinstance(expires_at, bool)
        and math.isfinite(expires_at)
    ):
        raise ValueError("expires_at must be a finite number")
    return float(expires_at) + RETENTION_MARGIN
