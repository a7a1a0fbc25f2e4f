"""What a second review of issue 25's change found, each kept as the test that failed before its
fix: pruning never drops the replay database's SQLite locks (a planted hard link is never
opened), a stopped FUSE mount at a state-folder name never hangs serve, a regular user can plant
a device node (so the filesystem tests make one), and a log file in a bind mount of a workspace
is refused."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mountns import command_prefix
from test_fs_support import device_node, one_note
from wire import REPO, child_env

from fs_notes.confirm.replay import ReplayStore
from fs_notes.forget import prune_unused

# A child that asks (F_GETLK) whether some other process holds a lock on a byte of a file:
# SQLite's DMS byte of a WAL database's -shm file, which every connection holds read-locked.
_LOCKED = textwrap.dedent(
    """
    import fcntl, os, struct, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 128, 1, 0)
    kind, *_rest, pid = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, query))
    print(pid if kind != fcntl.F_UNLCK else 0)
    """
)


def _dms_holder(shm: Path) -> int:
    done = subprocess.run([sys.executable, "-c", _LOCKED, str(shm)], capture_output=True,
                          text=True, timeout=30, check=True)  # fmt: skip
    return int(done.stdout)


def test_serves_pruning_never_drops_the_replay_databases_sqlite_locks(tmp_path: Path) -> None:
    """serve opens the replay database (open_confirm_parts) before it prunes (claim_and_prune),
    in the same process. A record planted as a hard link to replay.sqlite3-shm (or -wal, or the
    database) is a regular file, so scan() opens it to read it and closes it again - and a
    close() of any fd on an inode drops every POSIX lock this process holds on that inode
    (SQLite's "how to corrupt" 2.2). The server then runs with its replay connection's
    dead-man-switch lock gone: the next process that opens the database believes it is alone
    and resets the wal-index under it. Positive control: the lock is held before pruning."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    store = ReplayStore(str(state / "replay.sqlite3"))
    try:
        shm = state / "replay.sqlite3-shm"
        assert _dms_holder(shm) == os.getpid()  # the control: our connection holds it
        os.link(shm, state / "search-0123456789abcdef.json")  # a planted "record"
        prune_unused(str(state), 30, frozenset())
        assert _dms_holder(shm) == os.getpid(), "the replay connection's lock was dropped"
    finally:
        store.close()


def test_a_regular_user_can_plant_a_device_node_and_the_helper_makes_one(
    tmp_path: Path,
) -> None:
    """Since Linux 5.8 anyone may mknod a character device 0:0 (an overlayfs whiteout): a
    device node a regular user's own process can plant in the workspace. So
    tests/test_fs_support.device_node() makes one for a regular user too, and the layer's
    refusal is proved in both passes (test_fs_files, test_fs_listing). Run here in a forked
    child that becomes nobody (as root)."""
    import tempfile

    # (tmp_path's parents are root's, 0700: nobody needs a folder it can reach)
    folder = Path(tempfile.mkdtemp(prefix="review-r2-"))
    os.chmod(folder, 0o777)
    pid = os.fork()
    if pid == 0:  # the child: a regular user (as root here: nobody), then the helper
        code = 3
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            whiteout = folder / "whiteout"
            os.mknod(whiteout, stat.S_IFCHR | 0o600, os.makedev(0, 0))
            code = 4 if stat.S_ISCHR(os.lstat(whiteout).st_mode) else 3
            if code == 4:  # a regular user made a character device; now the helper
                device_node(folder / "null.md")
                code = 0 if stat.S_ISCHR(os.lstat(folder / "null.md").st_mode) else 5
        except BaseException as exc:
            os.write(2, f"child: {exc!r}\n".encode())
            code = 6
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    shutil.rmtree(folder)
    assert code != 3 and code != 6, "control: a regular user could not mknod a whiteout here"
    assert code == 0, "device_node() made nothing for a regular user, who can make one"


def _unshare_works() -> list[str]:
    prefix, _drop = command_prefix()
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.fail("unshare and mount are needed (CI has them)")
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    assert probe.returncode == 0, probe.stderr
    return prefix


def test_a_log_file_in_a_bind_mount_of_a_workspace_folder_is_refused(tmp_path: Path) -> None:
    """refuse_inside compares realpath() strings: a second path to the same folder that is not
    a symbolic link (a bind mount, as a desktop's /run/media, a container's volume, or
    bindfs) is not seen, and the log is made inside the served folder - here as a note
    (server.log.md), which the server then serves. Compared by (st_dev, st_ino) of the log's
    folder and its parents, it is refused as the symlinked path is. Positive control: the same
    folder through a symlink is refused (test_log_file.py)."""
    prefix = _unshare_works()
    notes = one_note(tmp_path)
    alias = tmp_path / "alias"
    alias.mkdir()
    log = alias / "server.log.md"
    script = f'mount --bind {notes} {alias} && exec "$@"'
    done = subprocess.run(
        [*prefix, "sh", "-c", script, "sh", sys.executable, "-m", "fs_notes", "serve",
         str(notes), "--log-file", str(log)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=child_env(), cwd=REPO,
        timeout=60, check=False,
    )  # fmt: skip
    made = sorted(p.name for p in notes.iterdir())
    assert done.returncode == 2 and made == ["a.md"], (done.returncode, made, done.stderr)


_STOPPED_FUSE = r"""
set -u
state="$1"; src="$2"; notes="$3"; stop="$4"; planted="$state/search-0123456789abcdef.json"
mkdir "$planted"
# A FUSE filesystem whose daemon stops answering (a stale sshfs, a hung bindfs): no attribute
# cache, so every stat of it is a request the daemon never answers.
bindfs -f --no-allow-other -o attr_timeout=0,entry_timeout=0 "$src" "$planted" & daemon=$!
for _ in $(seq 100); do grep -q " $planted " /proc/self/mounts && break; sleep 0.05; done
grep -q " $planted " /proc/self/mounts || { echo "bindfs did not mount" >&2; exit 90; }
[ "$stop" = stop ] && kill -STOP "$daemon"
shift 4
timeout -s KILL 20 "$@" </dev/null
rc=$?
kill -CONT "$daemon"; umount "$planted" 2>/dev/null; kill "$daemon" 2>/dev/null
exit $rc
"""


def test_a_mount_at_a_state_folder_name_never_hangs_serves_start_up(tmp_path: Path) -> None:
    """scan() lstat()s every name of the state folder that looks like an index's. A FUSE mount
    at such a name (a same-user process's, or a stale sshfs mounted there) answers that lstat
    only if its daemon does: a stopped one hangs serve's start-up (and forget) for ever, before
    it serves anything - not a FIFO's hang, the same effect. Mount points beneath the state
    folder can be told from /proc/self/mountinfo without touching them, and reported as what
    they are. Here serve must end (stdin closed) within 20 s; it is killed otherwise (137)."""
    prefix = _unshare_works()
    if shutil.which("bindfs") is None:
        pytest.fail("bindfs is needed (.ci/bootstrap installs it)")
    state, src, notes = tmp_path / "state", tmp_path / "src", tmp_path / "notes"
    for folder in (state, src, notes):
        folder.mkdir(mode=0o700)
    (notes / "a.md").write_text("# A\n")
    serve = [sys.executable, "-m", "fs_notes", "serve", str(notes), "--state-dir", str(state)]

    def run(stop: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*prefix, "sh", "-c", _STOPPED_FUSE, "sh", str(state), str(src), str(notes), stop,
             *serve],
            capture_output=True, text=True, env=child_env(), cwd=REPO, timeout=90, check=False,
        )  # fmt: skip
        assert done.returncode != 90, done.stderr  # the mount was made
        (state / "search-0123456789abcdef.json").rmdir()
        return done

    control = run("go")  # the daemon answers: serve starts and ends
    assert control.returncode == 0, control.stderr[-2000:]
    done = run("stop")
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
