"""A clock a test moves: `Clock()` reads 1,800,000,000 (2027-01-15) until the test sets `now`;
given to what takes a `clock` callable (the state sealer, the replay store, InProcess)."""

from __future__ import annotations

T0 = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
