"""The OS layer alone holds moves in: a write worker confined as `serve` confines it (Landlock
REFER beneath its workspace only) cannot rename a note out of its workspace, or an outside file
into it, even when asked with bare renameat2 calls and no check of ours (the attacker worker,
fs_notes/exercises/rawworker.py). Positive controls: the same calls succeed unconfined, and a
rename between two folders inside succeeds in the confined worker."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from layers import requirement
from oslayer import host_mode

from fs_notes.exercises.rawworker import RawWorker
from fs_notes.fs.rename import RENAME_NOREPLACE, renameat2
from fs_notes.sandbox.errors import OsRefused
from fs_notes.sandbox.movers import refer_refusal

AT_FDCWD = -100


def _not_here(what: str) -> None:
    """Without the layer: a failure under CI (tests/layers.py's rule), a skip elsewhere."""
    verdict, why = requirement("landlock")
    if verdict == "fail" or os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"needs {what}: {why}")
    pytest.skip(f"needs {what}: {why}")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "note.md").write_bytes(b"# note\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_bytes(b"# secret\n")
    return ws


@pytest.fixture
def landlock_worker(tree: Path) -> Iterator[RawWorker]:
    if host_mode() != "landlock":
        _not_here("Landlock")
    worker = RawWorker(str(tree), "write", "landlock")
    try:
        yield worker
    finally:
        worker.close()


def _refused(call: object) -> int:
    assert callable(call)
    with pytest.raises(OsRefused) as exc:
        call()
    return exc.value.errno


def test_unconfined_the_same_renames_succeed(tree: Path) -> None:
    """Positive control: nothing but the worker's confinement stops the calls below."""
    outside = tree.parent / "outside"
    renameat2(AT_FDCWD, str(tree / "note.md"), AT_FDCWD, str(outside / "x.md"), RENAME_NOREPLACE)
    renameat2(AT_FDCWD, str(outside / "secret.md"), AT_FDCWD, str(tree / "s.md"), 1)
    assert (outside / "x.md").exists() and (tree / "s.md").exists()


def test_a_confined_write_worker_renames_between_folders_inside(
    landlock_worker: RawWorker, tree: Path
) -> None:
    conf = landlock_worker.hello["confinement"]
    assert "REFER" in conf["allowed_names"][0]
    landlock_worker.rename_raw("note.md", "sub/note.md")
    assert (tree / "sub" / "note.md").read_bytes() == b"# note\n"
    assert not (tree / "note.md").exists()


def test_a_confined_write_worker_cannot_rename_a_note_out_or_a_file_in(
    landlock_worker: RawWorker, tree: Path
) -> None:
    outside = tree.parent / "outside"
    secret = (outside / "secret.md").stat()
    for src, dst in [
        ("note.md", "../outside/x.md"),
        ("note.md", str(outside / "x.md")),
        ("../outside/secret.md", "stolen.md"),
        (str(outside / "secret.md"), "sub/stolen.md"),
        ("../outside/secret.md", "../outside/moved.md"),
    ]:
        code = _refused(lambda s=src, d=dst: landlock_worker.rename_raw(s, d))
        assert code in (errno.EXDEV, errno.EACCES), (src, dst, code)
    assert (tree / "note.md").read_bytes() == b"# note\n"
    assert sorted(os.listdir(outside)) == ["secret.md"]
    now = (outside / "secret.md").stat()
    assert (now.st_ino, now.st_mtime_ns, now.st_ctime_ns) == (
        secret.st_ino,
        secret.st_mtime_ns,
        secret.st_ctime_ns,
    )
    assert not (tree / "stolen.md").exists() and not (tree / "sub" / "stolen.md").exists()


def test_a_delete_worker_cannot_move_at_all(tree: Path) -> None:
    if host_mode() != "landlock":
        _not_here("Landlock")
    with RawWorker(str(tree), "delete", "landlock") as worker:
        code = _refused(lambda: worker.rename_raw("note.md", "sub/note.md"))
        assert code in (errno.EXDEV, errno.EACCES)
    assert (tree / "note.md").exists()


def test_moves_are_refused_on_a_landlock_without_refer() -> None:
    assert refer_refusal("landlock", {"confinement": {"abi": 2}}) is None
    assert refer_refusal("chroot", {}) is None
    hellos: list[dict[str, object]] = [{"confinement": {"abi": 1}}, {"confinement": {}}, {}]
    for hello in hellos:
        reason = refer_refusal("landlock", hello)
        assert reason is not None and "REFER" in reason
