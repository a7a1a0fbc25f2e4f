"""Pure logic of layer 2: splitting raw relative paths, Identity and its JSON form, errno mapping.
No filesystem involved."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fs_notes.fs import (
    Escape,
    FsError,
    Identity,
    InvalidPath,
    NoteNotFound,
    NotRegular,
    SymlinkRefused,
)
from fs_notes.fs.errors import DeviceError, NoSpace, ReadOnlyFilesystem, error_for_errno
from fs_notes.fs.paths import MAX_COMPONENTS, NAME_MAX, split_folder, split_relpath


@pytest.mark.parametrize(
    ("raw", "parts"),
    [
        ("n.md", ["n.md"]),
        ("a/b/n.md", ["a", "b", "n.md"]),
        ("café.md", ["café.md"]),
        ("...md", ["...md"]),  # dots inside a name are fine
        ("a\\..\\b.md", ["a\\..\\b.md"]),  # a backslash is an ordinary byte on Linux
        ("a" * (NAME_MAX - 3) + ".md", ["a" * (NAME_MAX - 3) + ".md"]),
        (
            "/".join(["d"] * (MAX_COMPONENTS - 1) + ["n.md"]),
            ["d"] * (MAX_COMPONENTS - 1) + ["n.md"],
        ),
    ],
)
def test_accepted_paths_split_on_slash(raw: str, parts: list[str]) -> None:
    assert split_relpath(raw) == parts


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("/etc/passwd", Escape),
        ("/", Escape),
        ("..", Escape),
        ("../x.md", Escape),
        ("a/../b.md", Escape),
        ("a/..", Escape),
        ("", InvalidPath),
        (".", InvalidPath),
        ("./a.md", InvalidPath),
        ("a/./b.md", InvalidPath),
        ("a//b.md", InvalidPath),
        ("a/", InvalidPath),
        ("a\x00b.md", InvalidPath),
        ("é" * 128 + ".md", InvalidPath),  # 128 characters but 259 bytes
        ("/".join(["d"] * MAX_COMPONENTS + ["n.md"]), InvalidPath),
        ("x" * 4096, InvalidPath),
        ("\ud800.md", InvalidPath),
    ],
)
def test_refused_paths_raise_exactly(raw: str, error: type[FsError]) -> None:
    with pytest.raises(FsError) as info:
        split_relpath(raw)
    assert type(info.value) is error


def test_a_non_string_is_an_invalid_path() -> None:
    with pytest.raises(InvalidPath):
        split_relpath(b"n.md")  # type: ignore[arg-type]


def test_folder_empty_means_the_workspace() -> None:
    assert split_folder("") == []
    assert split_folder("a/b") == ["a", "b"]
    with pytest.raises(InvalidPath):
        split_folder("a/")


@given(st.text(alphabet=st.sampled_from(["a", "/", ".", "\x00", "é", "\\", "\ud800"]), max_size=12))
def test_any_string_is_refused_or_splits_into_plain_names(raw: str) -> None:
    try:
        parts = split_relpath(raw)
    except (Escape, InvalidPath):
        return
    assert "/".join(parts) == raw
    for part in parts:
        assert part not in ("", ".", "..") and "/" not in part and "\x00" not in part
        assert len(os.fsencode(part)) <= NAME_MAX


# --- Identity ----------------------------------------------------------------------------------


def test_identity_round_trips_through_json() -> None:
    ident = Identity(2049, 123456, 10, 1_700_000_000_123_456_789, -5)
    assert Identity.from_json(ident.to_json()) == ident
    assert Identity.from_json(tuple(ident.to_json())) == ident


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "1,2,3,4,5",
        {"dev": 1},
        [1, 2, 3, 4],
        [1, 2, 3, 4, 5, 6],
        [True, 2, 3, 4, 5],
        [1, 2.0, 3, 4, 5],
        ["1", 2, 3, 4, 5],
        [-1, 2, 3, 4, 5],
        [1, 1 << 64, 3, 4, 5],
        [1, 2, -3, 4, 5],
        [1, 2, 3, 1 << 100, 5],
    ],
)
def test_identity_from_json_refuses_anything_else(bad: object) -> None:
    with pytest.raises(ValueError):
        Identity.from_json(bad)


def test_identity_of_a_stat_result_takes_the_nanosecond_fields() -> None:
    st = os.stat_result((0o100644, 7, 3, 1, 0, 0, 42, 1, 2, 3, 1.0, 2.0, 3.0, 10, 20, 30))
    assert Identity.of(st) == Identity(3, 7, 42, 20, 30)


def test_every_field_takes_part_in_equality() -> None:
    base = Identity(1, 2, 3, 4, 5)
    for i in range(5):
        fields = base.to_json()
        fields[i] += 1
        assert Identity.from_json(fields) != base


# --- errno mapping -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (errno.ENOENT, NoteNotFound),
        (errno.EXDEV, Escape),
        (errno.ELOOP, SymlinkRefused),
        (errno.ENXIO, NotRegular),
        (errno.ENAMETOOLONG, InvalidPath),
        (errno.EIO, DeviceError),
        (errno.ENOSPC, NoSpace),
        (errno.EROFS, ReadOnlyFilesystem),
        (errno.EPROTO, FsError),
        (None, FsError),
    ],
)
def test_errno_maps_to_one_class_with_a_fixed_message(code: int | None, error: type) -> None:
    exc = error_for_errno(code)
    assert type(exc) is error
    assert str(exc) == (error.message if error is not FsError else "filesystem error")
