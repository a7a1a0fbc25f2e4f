"""Layer 3 on its own: raw unlinks of files outside the workspace, straight to the worker.

The worker's debug op `unlink_raw` is a bare os.unlink(path, dir_fd=...): no lexical check, no
filesystem-layer resolution. Whatever stops it is the OS layer alone. Each case runs in three
modes: "landlock" and "chroot" must refuse it and leave the outside file byte-for-byte intact;
"none" (an unconfined worker) is the positive control: the same request deletes the file there,
so a refusal is the sandbox's doing, not a mistyped path.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from oslayer import layer_runs

from fs_notes.exercises.rawworker import RawWorker
from fs_notes.sandbox.errors import OsRefused

MODES = ["landlock", "chroot", "none"]
SECRET = b"outside secret\n"

# (case name, path template). {outside}: absolute path of the outside folder; {ws_fd}: the
# workspace fd number inside the worker; {name}: the outside file's name. The worker's cwd is
# the workspace.
CASES = [
    ("dotdot", "../outside/{name}"),
    ("absolute", "{outside}/{name}"),
    ("symlinked_folder", "link/{name}"),  # workspace/link -> ../outside
    ("absolute_symlinked_folder", "abslink/{name}"),  # workspace/abslink -> /.../outside
    ("proc_self_fd", "/proc/self/fd/{ws_fd}/../outside/{name}"),
    ("proc_self_root", "/proc/self/root{outside}/{name}"),
    ("proc_self_cwd", "/proc/self/cwd/../outside/{name}"),
]

# What a confined mode must answer: Landlock refuses access (EACCES); in a chroot the outside
# cannot even be named (ENOENT).
REFUSAL = {"landlock": errno.EACCES, "chroot": errno.ENOENT}


def start_worker(
    mode: str,
    workspace: Path,
    kind: str = "delete",
    passed_fds: tuple[int, ...] = (),
    keep_passed_fds: bool = True,
) -> RawWorker | None:
    """The attacker worker (bare syscalls after the real confinement); None when Landlock is
    hidden and it refused to start."""
    if not layer_runs(mode, RawWorker):
        return None
    return RawWorker(
        str(workspace), kind, mode, passed_fds=passed_fds, keep_passed_fds=keep_passed_fds  # type: ignore[arg-type]
    )


def high_fd(fd: int) -> int:
    """Move `fd` to a high number, so the worker's own new fds cannot reuse it by chance."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 300)
    os.close(fd)
    return moved


class Layout:
    def __init__(self, root: Path) -> None:
        self.workspace = root / "workspace"
        self.outside = root / "outside"
        self.workspace.mkdir()
        self.outside.mkdir()
        (self.workspace / "note.md").write_bytes(b"# note\n")
        (self.workspace / "link").symlink_to("../outside")
        (self.workspace / "abslink").symlink_to(self.outside)

    def secret(self, name: str) -> Path:
        path = self.outside / name
        path.write_bytes(SECRET)
        return path


def assert_intact(path: Path, ino: int) -> None:
    assert path.read_bytes() == SECRET
    assert path.stat().st_ino == ino


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    return Layout(tmp_path_factory.mktemp("escapes"))


@pytest.fixture(scope="module")
def workers(layout: Layout) -> Iterator[Callable[..., RawWorker | None]]:
    started: dict[tuple[str, str], RawWorker | None] = {}

    def get(mode: str, kind: str = "delete") -> RawWorker | None:
        if (mode, kind) not in started:
            started[mode, kind] = start_worker(mode, layout.workspace, kind=kind)
        return started[mode, kind]

    yield get
    for worker in started.values():
        if worker is not None:
            worker.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("case", "template"), CASES)
def test_a_raw_unlink_outside_is_refused_by_the_os_layer_alone(
    workers: Callable[..., RawWorker | None],
    layout: Layout,
    mode: str,
    case: str,
    template: str,
) -> None:
    worker = workers(mode)
    if worker is None:
        return  # Landlock hidden: start_worker proved the landlock worker refuses to run
    secret = layout.secret(f"secret-{mode}-{case}.md")
    ino = secret.stat().st_ino
    path = template.format(
        outside=layout.outside, ws_fd=worker.hello["workspace_fd"], name=secret.name
    )
    if mode == "none":  # positive control: the very same request escapes without a sandbox
        worker.unlink_raw(path)
        assert not secret.exists()
        return
    with pytest.raises(OsRefused) as info:
        worker.unlink_raw(path)
    assert info.value.errno == REFUSAL[mode]
    assert_intact(secret, ino)


@pytest.mark.parametrize("mode", MODES)
def test_a_raw_unlink_inside_the_workspace_is_allowed(
    workers: Callable[..., RawWorker | None], layout: Layout, mode: str
) -> None:
    # The other half of every case above: the sandbox lets the worker do its job.
    worker = workers(mode)
    if worker is None:
        return
    note = layout.workspace / f"inside-{mode}.md"
    note.write_bytes(b"x")
    worker.unlink_raw(note.name)
    assert not note.exists()


@pytest.mark.parametrize("mode", ["landlock", "none"])
def test_an_outside_directory_fd_leaked_into_the_worker_does_not_help_under_landlock(
    tmp_path: Path, mode: str
) -> None:
    layout = Layout(tmp_path)
    secret = layout.secret("secret.md")
    via_proc = layout.secret("via-proc.md")
    leaked = high_fd(os.open(layout.outside, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    try:
        worker = start_worker(mode, layout.workspace, passed_fds=(leaked,), keep_passed_fds=True)
        if worker is None:
            return
        with worker:
            assert leaked in worker.hello["fds"]  # the leak really reached the worker
            if mode == "none":
                worker.unlink_raw(secret.name, dir_fd=leaked)
                worker.unlink_raw(f"/proc/self/fd/{leaked}/{via_proc.name}")
                assert not secret.exists()
                assert not via_proc.exists()
                return
            for path, dir_fd in [
                (secret.name, leaked),
                (f"/proc/self/fd/{leaked}/{via_proc.name}", None),
            ]:
                with pytest.raises(OsRefused) as info:
                    worker.unlink_raw(path, dir_fd=dir_fd)
                assert info.value.errno == errno.EACCES
            assert secret.read_bytes() == SECRET
            assert via_proc.read_bytes() == SECRET
    finally:
        os.close(leaked)


@pytest.mark.parametrize("mode", MODES)
def test_the_worker_closes_every_fd_it_was_not_told_to_keep(tmp_path: Path, mode: str) -> None:
    layout = Layout(tmp_path)
    secret = layout.secret("secret.md")
    leaked = high_fd(os.open(layout.outside, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    try:
        worker = start_worker(mode, layout.workspace, passed_fds=(leaked,), keep_passed_fds=False)
        if worker is None:
            return
        with worker:
            assert worker.pid is not None
            assert leaked not in worker.hello["fds"]
            assert len(worker.hello["fds"]) == 5  # stdin, stdout, stderr, workspace, channel
            assert str(leaked) not in os.listdir(f"/proc/{worker.pid}/fd")
            with pytest.raises(OsRefused) as info:
                worker.unlink_raw(secret.name, dir_fd=leaked)
            assert info.value.errno == errno.EBADF
            assert secret.read_bytes() == SECRET
    finally:
        os.close(leaked)


def test_chroot_alone_does_not_stop_a_kept_outside_fd_which_is_why_the_worker_closes_them(
    tmp_path: Path,
) -> None:
    # Documents the weakness written in sandbox/chroot.py: an inherited directory fd reaches
    # outside a chroot. The worker closes such fds (test above); Landlock stops them (above).
    layout = Layout(tmp_path)
    secret = layout.secret("secret.md")
    leaked = high_fd(os.open(layout.outside, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    try:
        worker = start_worker("chroot", layout.workspace, passed_fds=(leaked,))
        assert worker is not None
        with worker:
            worker.unlink_raw(secret.name, dir_fd=leaked)
            assert not secret.exists()
    finally:
        os.close(leaked)


@pytest.mark.parametrize("mode", MODES)
def test_a_write_worker_cannot_unlink_outside_either(tmp_path: Path, mode: str) -> None:
    layout = Layout(tmp_path)
    secret = layout.secret("secret.md")
    worker = start_worker(mode, layout.workspace, kind="write")
    if worker is None:
        return
    with worker:
        if mode == "none":
            worker.unlink_raw(str(secret))
            assert not secret.exists()
            return
        with pytest.raises(OsRefused) as info:
            worker.unlink_raw(str(secret))
        assert info.value.errno == REFUSAL[mode]
        assert secret.read_bytes() == SECRET


# (kind, op, target, expected under landlock). "inside"/"outside" name a folder; the file is
# fresh per row. Under "none" every row succeeds (positive control); under "chroot" every
# outside row is ENOENT and every inside row succeeds (chroot does not limit rights).
LEAST_PRIVILEGE = [
    ("delete", "read_raw", "inside", errno.EACCES),  # no READ_FILE: cannot read notes
    ("delete", "create_raw", "inside", errno.EACCES),  # no MAKE_REG: cannot create
    ("delete", "read_raw", "outside", errno.EACCES),
    ("delete", "create_raw", "outside", errno.EACCES),
    ("write", "create_raw", "inside", None),  # MAKE_REG + WRITE_FILE beneath the workspace
    ("write", "read_raw", "inside", errno.EACCES),  # still no READ_FILE
    ("write", "read_raw", "outside", errno.EACCES),
    ("write", "create_raw", "outside", errno.EACCES),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("kind", "op", "where", "landlock"), LEAST_PRIVILEGE)
def test_each_worker_kind_holds_only_the_rights_it_needs(
    workers: Callable[..., RawWorker | None],
    layout: Layout,
    mode: str,
    kind: str,
    op: str,
    where: str,
    landlock: int | None,
) -> None:
    worker = workers(mode, kind)
    if worker is None:
        return
    folder = layout.workspace if where == "inside" else layout.outside
    target = folder / f"target-{mode}-{kind}-{op}.md"
    if op == "read_raw":
        target.write_bytes(SECRET)
    # Inside: relative to the worker's cwd (the workspace, also in a chroot); outside: absolute.
    path = target.name if where == "inside" else str(target)
    expected = {"none": None, "landlock": landlock}.get(mode)
    if mode == "chroot":
        expected = errno.ENOENT if where == "outside" else None
    call = worker.read_raw if op == "read_raw" else worker.create_raw
    if expected is None:
        call(path)
        assert target.exists()
        return
    with pytest.raises(OsRefused) as info:
        call(path)
    assert info.value.errno == expected
    if op == "read_raw":
        assert target.read_bytes() == SECRET
    else:
        assert not target.exists()
