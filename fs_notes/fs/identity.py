"""The identity of a file, which confirmations are bound to.

Guarantees: two ``Identity`` values are equal only if device, inode, size, mtime and ctime (all in
integer nanoseconds) are equal, so a replaced file (new inode), a rewritten one (size or mtime) or
one whose metadata changed (ctime: rename, chmod, link, utime) compares unequal.
``from_json`` accepts only a list of five plain integers within 64-bit range.
Does not: detect a change that keeps all five values (a same-size write within the filesystem's
time stamp granularity that also restores mtime, which needs CAP_SYS_TIME-level control of the
clock or a filesystem that does not update ctime). It is not secret and not authenticated:
callers that hand it to a client must seal it themselves.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .statx import NoteStat

__all__ = ["Identity"]

_U64 = 1 << 64
_I64 = 1 << 63
# st_*time_ns is seconds (64-bit) * 10**9 + ns: wider than 64 bits for dates past 2262.
_TIME = 1 << 96


def _int_in(value: object, low: int, high: int) -> int:
    if type(value) is not int or not low <= value < high:
        raise ValueError("identity field out of range")
    return value


class Identity(NamedTuple):
    # A NamedTuple, not a frozen dataclass: it is built and compared on every listed note and
    # every deletion, and a tuple costs a third as much. It compares equal to a tuple of the same
    # five integers, which is the intended meaning.
    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result | NoteStat) -> Identity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def to_json(self) -> list[int]:
        return [self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns]

    @classmethod
    def from_json(cls, v: object) -> Identity:
        """Parse ``to_json`` output; raises ValueError on anything else (bools are not ints)."""
        if not isinstance(v, list | tuple) or len(v) != 5:
            raise ValueError("identity must be a list of five integers")
        dev, ino, size, mtime_ns, ctime_ns = v
        return cls(
            _int_in(dev, 0, _U64),
            _int_in(ino, 0, _U64),
            _int_in(size, 0, _I64),
            _int_in(mtime_ns, -_TIME, _TIME),
            _int_in(ctime_ns, -_TIME, _TIME),
        )
