"""The openat2 binding (plumbing) and how a resolver is chosen: 'auto' uses openat2 only when the
one-time probe says it works, and falls back to the walk otherwise (as when a seccomp filter
answers EPERM or an old kernel ENOSYS)."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_fs_support import unavailable

from fs_notes.fs import FsError, WorkspaceRoot
from fs_notes.fs import openat2 as binding
from fs_notes.fs.openat2 import (
    RESOLVE_BENEATH,
    RESOLVE_NO_MAGICLINKS,
    RESOLVE_NO_SYMLINKS,
    RESOLVE_NO_XDEV,
    openat2,
)

ALL = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV


@pytest.fixture
def dirfd(tmp_path: Path) -> Iterator[int]:
    if not binding.available():
        unavailable("openat2 is not available on this host")
    (tmp_path / "ws" / "a").mkdir(parents=True)
    (tmp_path / "ws" / "a" / "n.md").write_bytes(b"n")
    (tmp_path / "secret.md").write_bytes(b"SECRET")
    os.symlink("a", tmp_path / "ws" / "link")
    fd = os.open(tmp_path / "ws", os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def _errno_of(dirfd: int, path: str, resolve: int, flags: int = os.O_RDONLY) -> int:
    with pytest.raises(OSError) as info:
        os.close(openat2(dirfd, path, flags | os.O_CLOEXEC, resolve))
    assert info.value.errno is not None
    return info.value.errno


def test_the_struct_is_the_kernels_open_how() -> None:
    assert ctypes.sizeof(binding.OpenHow) == 24
    assert (RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH) == (
        1,
        2,
        4,
        8,
    )


def test_the_kernel_refuses_what_the_resolver_relies_on(dirfd: int, tmp_path: Path) -> None:
    """Straight at the syscall, no lexical checks of ours in between."""
    assert _errno_of(dirfd, "../secret.md", ALL) == errno.EXDEV
    assert _errno_of(dirfd, "a/../../secret.md", ALL) == errno.EXDEV
    assert _errno_of(dirfd, str(tmp_path / "secret.md"), ALL) == errno.EXDEV
    assert _errno_of(dirfd, "link/n.md", ALL) == errno.ELOOP
    assert _errno_of(dirfd, "/proc/self/fd/0", RESOLVE_NO_MAGICLINKS) == errno.ELOOP
    assert _errno_of(dirfd, "/proc/self/fd/0", RESOLVE_NO_XDEV) == errno.EXDEV
    fd = openat2(dirfd, "a/../a/n.md", os.O_RDONLY | os.O_CLOEXEC, ALL)  # '..' kept beneath
    try:
        assert os.read(fd, 10) == b"n"
    finally:
        os.close(fd)


def test_flags_the_kernel_does_not_know_are_an_error_not_ignored(dirfd: int) -> None:
    assert _errno_of(dirfd, "a", ALL | (1 << 40)) == errno.EINVAL
    assert _errno_of(dirfd, "a\x00b", ALL) == errno.EINVAL


def test_eagain_is_retried_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def busy(*args: object) -> int:
        calls.append(1)
        ctypes.set_errno(errno.EAGAIN)
        return -1

    monkeypatch.setattr(binding, "_syscall", busy)
    with pytest.raises(OSError) as info:
        openat2(-100, ".", os.O_PATH, ALL)
    assert info.value.errno == errno.EAGAIN and len(calls) == binding.MAX_RETRIES


def test_eagain_then_success_returns_the_fd(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([-1, -1, 42])

    def flaky(*args: object) -> int:
        ctypes.set_errno(errno.EAGAIN)
        return next(answers)

    monkeypatch.setattr(binding, "_syscall", flaky)
    assert openat2(-100, ".", os.O_PATH, ALL) == 42


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EPERM, errno.EINVAL])
def test_the_probe_says_no_when_the_syscall_is_refused(
    monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    def refused(*args: object) -> int:
        ctypes.set_errno(code)
        return -1

    monkeypatch.setattr(binding, "_syscall", refused)
    binding.available.cache_clear()
    try:
        assert binding.available() is False
    finally:
        monkeypatch.undo()
        binding.available.cache_clear()


def test_auto_falls_back_to_the_walk_when_openat2_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "n.md").write_bytes(b"n")
    monkeypatch.setattr(binding, "available", lambda: False)
    with WorkspaceRoot.open(tmp_path) as root:
        assert root.resolver_name == "walk"
        assert root.read_note("n.md")[0] == b"n"
    with pytest.raises(FsError, match="openat2"):
        WorkspaceRoot.open(tmp_path, resolver="openat2")  # forcing it fails loudly, not silently
    monkeypatch.setattr(binding, "available", lambda: True)
    with WorkspaceRoot.open(tmp_path) as root:
        assert root.resolver_name == "openat2"


def test_this_host_has_openat2_when_ci_says_so() -> None:
    """Under CI=true a host without openat2 fails here instead of silently testing only the walk."""
    if not binding.available():
        unavailable("openat2 is not available on this host")
    with WorkspaceRoot.open("/") as root:
        assert root.resolver_name == "openat2"
