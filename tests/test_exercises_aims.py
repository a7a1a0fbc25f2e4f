"""The process-level attacks' aims (fs_notes/exercises/aims.py): each harm is seen from outside.

Unconfined here, so each attack succeeds: that is the positive control the matrix's no-os
column relies on. Each test also checks that an aim nobody touched reports nothing.
"""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Iterator

import pytest

from fs_notes.exercises.aims import Aims
from fs_notes.exercises.compromised import attack, learned

SECRET = "FSN-SECRET-aims-test"


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("op", ["connect-unix", "mptcp", "kill", "prlimit"])
def test_an_attack_that_succeeds_is_harm_seen_from_outside(
    op: str, victim: subprocess.Popen[bytes]
) -> None:
    untouched = Aims(op, SECRET, victim)
    try:
        assert untouched.harm() == []  # nothing done yet: nothing seen
    finally:
        untouched.close()
    aims = Aims(op, SECRET, victim)
    try:
        result = attack(op, "/nonexistent/outside/secret.md", "/nonexistent/p", victim.pid,
                        aims.aim)  # fmt: skip
        assert result == "ok"
        harm = aims.harm()
    finally:
        aims.close()
    assert len(harm) == 1, harm


def test_a_shared_segment_is_read_and_removed_afterwards(victim: subprocess.Popen[bytes]) -> None:
    aims = Aims("sysv-shm", SECRET, victim)
    key = int(aims.aim)
    try:
        result = attack("sysv-shm", "/x/outside/secret.md", "/x/p", victim.pid, aims.aim)
        assert result == "ok"
        assert learned("sysv-shm", result) is not None
        assert aims.harm() == []  # a read is told by the result, not seen from outside
    finally:
        aims.close()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.shmget(key, 0, 0) == -1  # close() removed it


def test_a_program_from_a_memfd_runs_unconfined() -> None:
    result = attack("memfd-exec", "/x/outside/secret.md", "/x/p", 0)
    assert result == "ok"
    assert learned("memfd-exec", result) == "a program written to a memfd ran"
    assert learned("memfd-exec", "EPERM") is None


def test_the_unix_listener_is_gone_after_close(victim: subprocess.Popen[bytes]) -> None:
    import os

    aims = Aims("connect-unix", SECRET, victim)
    folder = os.path.dirname(aims.aim)
    aims.close()
    assert not os.path.exists(folder)
    assert attack("connect-unix", "/x/outside/s", "/x/p", 0, aims.aim) == "ENOENT"
