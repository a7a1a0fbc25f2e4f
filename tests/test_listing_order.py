"""Listing order and cursors: ids come in code-point order, so pages are cheap and exact."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fs_notes.fs import WorkspaceRoot

TRICKY = [
    "a.md",
    "a/x.md",
    "a-b.md",
    "a-b/c.md",
    "ab.md",
    "a/b/c.md",
    "a/b.md",
    "b.md",
    "Z.md",
    "é.md",
    "a/b-c/d.md",
    "a/b/a.md",
    "aa/a.md",
]


def _build(root: Path, ids: list[str]) -> None:
    for note_id in ids:
        path = root / note_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# x\n")


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_iter_notes_yields_ids_in_code_point_order(tmp_path: Path, resolver: str) -> None:
    _build(tmp_path, TRICKY)
    with WorkspaceRoot.open(tmp_path, resolver=resolver) as root:  # type: ignore[arg-type]
        ids = [i for i, _ in root.iter_notes()]
        assert ids == sorted(TRICKY)
        for cut in ["", *sorted(TRICKY), "a/", "a/b", "a/b/", "zzz", "a-"]:
            assert [i for i, _ in root.iter_notes(after=cut)] == [
                i for i in sorted(TRICKY) if i > cut
            ]


names = st.sampled_from(["a", "b", "a-b", "ab", "a.b", "é", "Z", "a0"])


@settings(max_examples=60, deadline=None)
@given(
    st.sets(
        st.lists(names, min_size=1, max_size=3).map(lambda p: "/".join(p) + ".md"),
        min_size=1,
        max_size=12,
    ),
    st.text(alphabet="ab-./éZ0", max_size=8),
)
def test_paging_after_any_cursor_matches_sorting(
    tmp_path_factory: pytest.TempPathFactory, ids: set[str], cut: str
) -> None:
    root_dir = tmp_path_factory.mktemp("tree")
    # A name cannot be both a note folder and ... keep only ids whose folders are not also notes
    usable = sorted(i for i in ids if not any(j != i and j.startswith(i[:-3] + "/") for j in ids))
    _build(root_dir, usable)
    with WorkspaceRoot.open(root_dir) as root:
        assert [i for i, _ in root.iter_notes()] == usable
        assert [i for i, _ in root.iter_notes(after=cut)] == [i for i in usable if i > cut]


def test_cached_listings_follow_every_change_of_the_folder(tmp_path: Path) -> None:
    import os

    _build(tmp_path, ["a.md", "sub/b.md"])
    old = 1_000_000_000
    for p in (tmp_path, tmp_path / "sub"):
        os.utime(p, (old, old))  # old enough to be cached
    with WorkspaceRoot.open(tmp_path) as root:
        assert [i for i, _ in root.iter_notes()] == ["a.md", "sub/b.md"]
        assert [i for i, _ in root.iter_notes()] == ["a.md", "sub/b.md"]  # served from cache
        (tmp_path / "sub" / "c.md").write_text("# c\n")
        os.utime(tmp_path / "sub", (old, old))  # mtime put back; ctime still moves
        assert [i for i, _ in root.iter_notes()] == ["a.md", "sub/b.md", "sub/c.md"]
        (tmp_path / "a.md").unlink()
        (tmp_path / "a.md").symlink_to("/etc/passwd")
        os.utime(tmp_path, (old, old))
        assert [i for i, _ in root.iter_notes()] == ["sub/b.md", "sub/c.md"]
