"""The walk that opens a workspace (fs_notes/fs/trusted.py, issue 27 item 1), case by case: who
may own and who may write each folder and link on the way, what is opened when the way changes
during the walk, and the rules a user namespace changes. Each refusal has its control: the same
way, made right, opens the folder it names (judged by device and inode, not by what the walk
says). What needs another user's files runs as root; the regular-user pass proves instead that
such a way cannot be made there. Through `serve`: tests/test_startup_refusals.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from oslayer import needed

from fs_notes.fs import trusted
from fs_notes.fs.trusted import UntrustedFolder, open_trusted

OTHER = 12345  # a uid that is neither root, nor whoever runs the tests, nor a user here


def _opens(path: Path, real: Path, **how: bool) -> trusted.Trusted:
    """open_trusted(path) opens `real` (the control), and nothing is left open but its fd."""
    t = open_trusted(str(path), **how)
    st, want = os.fstat(t.fd), os.stat(real)
    os.close(t.fd)
    assert (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino)
    return t


def _refused(path: Path, **how: object) -> tuple[str, str]:
    with pytest.raises(UntrustedFolder) as caught:
        open_trusted(str(path), **how)  # type: ignore[arg-type]
    return caught.value.where, caught.value.why


def _as_root() -> bool:
    return needed("root") == "run"


def test_a_way_of_the_owners_own_folders_and_links_opens_the_folder_it_names(
    tmp_path: Path,
) -> None:
    real = tmp_path / "a" / "b" / "notes"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to("a/b")  # relative: followed beneath the folder it is in
    (tmp_path / "a" / "up").symlink_to("../a/./b")  # "..", "." and a link inside a link
    t = _opens(tmp_path / "link" / "notes", real)
    assert t.owner == os.geteuid()
    above = {(s.st_dev, s.st_ino) for s in map(os.stat, (tmp_path, tmp_path / "a", real.parent))}
    assert above <= t.above  # the folders really above it, for the nesting check
    assert (os.stat(real).st_dev, os.stat(real).st_ino) not in t.above
    _opens(tmp_path / "a" / "up" / "notes", real)
    (tmp_path / "abs").symlink_to(real.parent)  # an absolute link: from / again
    _opens(tmp_path / "abs" / "notes", real)


def test_a_folder_on_the_way_that_others_can_write_is_refused_unless_sticky(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    (shared / "notes").mkdir(parents=True)
    for mode in (0o777, 0o703, 0o757):
        shared.chmod(mode)
        assert _refused(shared / "notes") == (
            str(shared),
            f"can be written by others (mode {mode:04o}; chmod go-w fixes it)",
        )
    shared.chmod(0o1777)  # like /tmp: no one may rename or remove another's entry
    _opens(shared / "notes", shared / "notes")
    shared.chmod(0o755)
    _opens(shared / "notes", shared / "notes")
    # the folder itself is not the way to it: a workspace others may write in is served
    (shared / "notes").chmod(0o777)
    _opens(shared / "notes", shared / "notes")


def test_a_folder_on_the_way_its_group_can_write_is_refused_unless_the_group_is_the_owners_own(
    tmp_path: Path,
) -> None:
    import grp
    import pwd

    shared = tmp_path / "shared"
    (shared / "notes").mkdir(parents=True)
    shared.chmod(0o775)
    me = pwd.getpwuid(os.geteuid())
    own = trusted._private_group(me.pw_gid, me.pw_uid)
    os.chown(shared, -1, me.pw_gid)
    if own:  # a user private group (Fedora's umask 002 makes folders 0775 with it): served
        _opens(shared / "notes", shared / "notes")
    else:
        assert _refused(shared / "notes")[0] == str(shared)
    if not _as_root():
        return  # a regular user cannot give a folder to a group that is not one of theirs
    users = grp.getgrnam("users") if "users" in {g.gr_name for g in grp.getgrall()} else None
    gid = users.gr_gid if users is not None else OTHER
    os.chown(shared, -1, gid)
    name = f"{users.gr_name} (gid {gid})" if users is not None else f"gid {gid}"
    assert _refused(shared / "notes") == (
        str(shared),
        f"can be written by its group {name} (mode 0775; chmod g-w fixes it)",
    )
    shared.chmod(0o755)  # the control
    _opens(shared / "notes", shared / "notes")


def test_a_link_or_folder_of_another_user_on_the_way_is_refused(tmp_path: Path) -> None:
    """Issue 27's attack: bob owns a folder above his workspace and replaces it by a link to
    alice's folder; alice's notes are served as bob's. Here the folder opened belongs to
    whoever runs the tests ("alice"), and the link to OTHER ("bob")."""
    alice = tmp_path / "alice"
    (alice / "notes").mkdir(parents=True)
    bob = tmp_path / "bob"
    bob.mkdir()
    (bob / "projects").symlink_to(alice)
    _opens(bob / "projects" / "notes", alice / "notes")  # the control: alice's own link
    if not _as_root():  # the regular user's outcome: such a way cannot be made
        with pytest.raises(PermissionError):
            os.chown(bob / "projects", OTHER, OTHER, follow_symlinks=False)
        return
    os.chown(bob / "projects", OTHER, OTHER, follow_symlinks=False)
    me = os.geteuid()
    allowed = "root" if me == 0 else f"root or of uid {me}"
    assert _refused(bob / "projects" / "notes") == (
        str(bob / "projects"),
        f"is a symbolic link of uid {OTHER}, not of {allowed}, the folder's owner: "
        "its owner could make the path lead to another folder",
    )
    # a folder of another user above the workspace: its owner could swap what is beneath it
    os.chown(bob, OTHER, OTHER)
    (bob / "projects").unlink()
    (bob / "projects").mkdir()
    (bob / "projects" / "notes").mkdir()
    where, why = _refused(bob / "projects" / "notes")
    assert (where, why.split(",")[0]) == (str(bob), f"is a folder of uid {OTHER}")
    # the same folders, bob's own workspace: served (bob redirects only to what is his)
    os.chown(bob / "projects", OTHER, OTHER)
    os.chown(bob / "projects" / "notes", OTHER, OTHER)
    assert _opens(bob / "projects" / "notes", bob / "projects" / "notes").owner == OTHER


def test_the_last_component_must_not_be_a_link_unless_asked_and_loops_end(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "notes").symlink_to(real)
    assert _refused(tmp_path / "notes") == (
        str(tmp_path / "notes"),
        "is a symbolic link (serve the folder it points to)",
    )
    _opens(tmp_path / "notes", real, last_link=True)  # a state folder may be one
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    assert _refused(tmp_path / "a" / "x") == (
        str(tmp_path / "a"),
        "more than 40 symbolic links on the way",
    )
    (tmp_path / "file").write_text("")
    assert _refused(tmp_path / "file" / "x") == (str(tmp_path / "file"), "is not a folder")
    assert _refused(Path("relative")) == ("relative", "not an absolute path")


def test_a_state_folder_must_be_its_users_and_private_even_if_sticky(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    me = os.geteuid()
    _opens(state, state, owner=me, private=True)  # type: ignore[arg-type]
    state.chmod(0o1777)
    assert _refused(state, owner=me, private=True) == (
        str(state),
        "can be written by others (mode 1777; chmod go-w fixes it)",
    )
    # the folder of a state file (the audit log's) may be root's, never one others can write,
    # sticky or not: a file there is opened by its name (found by review: another user's file
    # or link planted in /tmp would be written to)
    assert _refused(state, owner=me, private=False) == (
        str(state),
        "can be written by others (mode 1777; chmod go-w fixes it)",
    )
    state.chmod(0o755)
    _opens(state, state, owner=me, private=False)  # type: ignore[arg-type]
    if me != 0:
        assert _refused(Path("/"), owner=me, private=True)[1].startswith("belongs to root")
        _opens(Path("/"), Path("/"), owner=me, private=False)  # type: ignore[arg-type]


def test_what_is_opened_is_what_was_checked_when_the_way_changes_during_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attacker swaps a checked folder for a link to an unchecked one between the walk's
    look at it and its open (faked from outside: os.stat swaps once it has looked).
    The walk opens each component O_NOFOLLOW beneath the one before, so it fails (ENOTDIR)
    instead of opening the folder the link leads to. The control: without the swap, it opens."""
    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    theirs = tmp_path / "theirs"
    (theirs / "notes").mkdir(parents=True)
    (theirs / "notes" / "secret.md").write_text("# theirs\n")
    real_stat = os.stat
    swapped: list[str] = []

    def stat_then_swap(name: str, *args: object, **kwargs: object) -> os.stat_result:
        st = real_stat(name, *args, **kwargs)  # type: ignore[arg-type]
        if name == "mine" and not swapped:
            os.rename(mine, tmp_path / "mine.old")
            os.symlink(theirs, mine)
            swapped.append(name)
        return st

    _opens(mine / "notes", mine / "notes")
    monkeypatch.setattr(os, "stat", stat_then_swap)  # the walk's lstat, as it looks
    with pytest.raises(NotADirectoryError):
        open_trusted(str(mine / "notes"))
    assert swapped == ["mine"]
    monkeypatch.undo()
    # the way now leads through a link: walked again, it is checked as a link (ours: opens)
    _opens(mine / "notes", theirs / "notes")


def test_in_a_user_namespace_the_overflow_uid_counts_as_roots(tmp_path: Path) -> None:
    """`unshare -r`, a rootless container: root's folders show as the overflow uid there. The
    walk accepts it as root's (every other user's outside shows the same: the module says so),
    and still checks the mode. The control is the same walk outside the namespace."""
    tmp_path.chmod(0o755)
    way = tmp_path / "theirs" / "notes"  # as root, "theirs" is another user's: overflow inside
    way.mkdir(parents=True)
    (tmp_path / "open" / "notes").mkdir(parents=True)
    (tmp_path / "open").chmod(0o777)
    if _as_root():
        os.chown(tmp_path / "theirs", OTHER, OTHER)
    code = (
        "import os, sys\n"
        "from fs_notes.fs.trusted import open_trusted, UntrustedFolder\n"
        "print(os.stat('/').st_uid, os.stat(os.path.dirname(sys.argv[1])).st_uid)\n"
        "open_trusted(sys.argv[1])\n"
        "try:\n"
        "    open_trusted(sys.argv[2])\n"
        "except UntrustedFolder as exc:\n"
        "    print(exc.why)\n"
    )
    done = subprocess.run(
        ["unshare", "--user", "--map-current-user", sys.executable, "-c", code, str(way),
         str(tmp_path / "open" / "notes")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    overflow = int(Path("/proc/sys/kernel/overflowuid").read_text())
    first, why = done.stdout.splitlines()
    me = os.geteuid()
    root_there, theirs_there = (0, overflow) if _as_root() else (overflow, me)
    assert first.split() == [str(root_there), str(theirs_there)]
    assert why == "can be written by others (mode 0777; chmod go-w fixes it)"
    if _as_root():  # outside it, the same folder of another user is refused
        assert _refused(way)[0] == str(tmp_path / "theirs")
        os.chown(tmp_path / "theirs", 0, 0)


_FUSE_WALK = r"""
import json, os, subprocess, sys, time
from fs_notes.fs.trusted import UntrustedFolder, open_trusted
source, mounted, mounter, way = sys.argv[1:5]
drop = ([] if int(mounter) == os.geteuid() else
        ["setpriv", f"--reuid={mounter}", f"--regid={mounter}", "--clear-groups"])
other = [] if drop else ["--no-allow-other"]  # (bindfs asks allow_other by default)
daemon = subprocess.Popen([*drop, "bindfs", "-f", *other, source, mounted])
out = {}
try:
    deadline = time.monotonic() + 10
    while not os.path.ismount(mounted):
        assert daemon.poll() is None, f"bindfs exited {daemon.returncode}"
        assert time.monotonic() < deadline, "bindfs did not mount in 10 s"
        time.sleep(0.02)
    out["shown"] = [os.lstat(os.path.join(mounted, n)).st_uid for n in sorted(os.listdir(mounted))]
    try:
        t = open_trusted(way)
        out["opened"] = {"owner": t.owner}
        os.close(t.fd)
    except UntrustedFolder as exc:
        out["refused"] = [exc.where, exc.why]
finally:
    subprocess.run(["fusermount", "-u", mounted], capture_output=True)
    daemon.terminate()
    daemon.wait(timeout=10)
print(json.dumps(out))
"""


def test_what_is_on_a_users_fuse_mount_counts_as_the_mounters_whatever_it_reports(
    tmp_path: Path,
) -> None:
    """Found by review: bob's FUSE daemon reports its folders and a link as root's, the link
    leading to alice's folder, and bob's workspace served alice's. What is on a FUSE file system
    counts as its mounter's (`user_id=`). Here bindfs relays a root-owned tree holding such a
    link, mounted by another user (as root; /etc/fuse.conf's user_allow_other given in a mount
    namespace of the test's own); as a regular user, the user's own mount of root's /usr counts
    as the user's. The control: the same tree walked without the mount is root's."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="fs-notes-fuse-"))  # (tmp_path's parents are 0700)
    try:
        _fuse_case(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _fuse_case(tmp_path: Path) -> None:
    import pwd

    tmp_path.chmod(0o755)
    source, mounted = tmp_path / "tree", tmp_path / "mnt"
    source.mkdir()
    mounted.mkdir()
    alice = tmp_path / "alice"
    (alice / "notes").mkdir(parents=True)
    if _as_root():
        (source / "link").symlink_to(alice)
        user = pwd.getpwnam("fsnotes-ci") if "fsnotes-ci" in {
            p.pw_name for p in pwd.getpwall()} else pwd.getpwnam("nobody")  # fmt: skip
        mounter = user.pw_uid
        os.chown(mounted, mounter, mounter)
        os.chown(alice, OTHER, OTHER)
        os.chown(alice / "notes", OTHER, OTHER)
        conf = tmp_path / "fuse.conf"
        conf.write_text("user_allow_other\n")
        # and /dev/fuse open to the mounter as a desktop has it (Debian's udev rule gives it
        # 0666; a container's is often 0600): a node of the same device, bound over it there
        device = tmp_path / "fuse-device"
        os.mknod(device, 0o600 | stat.S_IFCHR, os.stat("/dev/fuse").st_rdev)
        device.chmod(0o666)
        prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                  f'mount --bind "{conf}" /etc/fuse.conf'
                  f' && mount --bind "{device}" /dev/fuse && exec "$@"', "sh"]  # fmt: skip
        way = mounted / "link" / "notes"
        _opens(source / "link" / "notes", alice / "notes")  # the control, without the mount:
        # the link is root's, alice's folder hers: the way is root's and alice's
    else:
        mounter = os.geteuid()
        prefix = []
        source.rmdir()
        source = Path("/usr")
        way = mounted / "share"
        assert _opens(Path("/usr/share"), Path("/usr/share")).owner == 0  # the control
    done = subprocess.run(
        [*prefix, sys.executable, "-c", _FUSE_WALK, str(source), str(mounted), str(mounter),
         str(way)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if not _as_root() and _bounding_set() == 0:
        # the CI's regular-user pass has no capability at all, not even in its bounding set:
        # the setuid fusermount cannot mount, so such a user makes no FUSE mount to lie with
        assert "fusermount: mount failed: Operation not permitted" in done.stderr, done.stderr
        return
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert 0 in out["shown"]  # bindfs reports root as the owner
    if _as_root():
        name = pwd.getpwuid(mounter).pw_name
        assert out["refused"] == [
            str(mounted),
            f"is a folder of {name} (uid {mounter}) (on a file system it mounted), not of root "
            f"or of uid {OTHER}, the folder's owner: its owner could make the path lead to "
            "another folder",
        ]
    else:
        assert out["opened"] == {"owner": mounter}


def _bounding_set() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    raise AssertionError("no CapBnd in /proc/self/status")
