"""The chroot fallback (sandbox.chroot): chroot-mode workers apply no Landlock of their own, so
what is proven here is chroot alone (the CI pass under tests/hide_landlock.py proves it again
with Landlock absent from the whole process tree). The escape table itself runs in
test_sandbox_escapes.py for every mode; this file covers what is particular to chroot."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from layers import status_field
from oslayer import needed

from fs_notes.exercises.rawworker import RawWorker
from fs_notes.sandbox.errors import OsRefused
from fs_notes.sandbox.supervisor import ConfinedWorker

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "outside.md").write_bytes(b"outside")
    return ws


@pytest.mark.parametrize(("kind", "caps"), [("delete", 0b1010), ("write", 0b1011)])
def test_the_chroot_worker_keeps_only_the_capabilities_it_needs(
    workspace: Path, kind: str, caps: int
) -> None:
    # CAP_DAC_OVERRIDE (1) and CAP_FOWNER (3); the write worker also CAP_CHOWN (0). Everything
    # else, CAP_SYS_CHROOT and CAP_SYS_ADMIN (the chroot escapes) included, is gone, also from
    # the bounding set, so no exec can bring it back.
    needed("chroot")
    with ConfinedWorker(str(workspace), kind, "chroot") as worker:  # type: ignore[arg-type]
        pid = worker.pid
        assert pid is not None
        for field in ("CapEff", "CapPrm", "CapBnd"):
            assert int(status_field(pid, field), 16) == caps, field
        assert int(status_field(pid, "CapInh"), 16) == 0
        assert int(status_field(pid, "CapAmb"), 16) == 0
        assert status_field(pid, "NoNewPrivs") == "1"
        assert os.readlink(f"/proc/{pid}/root") == str(workspace)
        assert worker.hello["confinement"]["effective_caps"] == caps


def test_an_update_in_a_chroot_keeps_the_mode_and_gives_the_note_to_the_worker(
    workspace: Path,
) -> None:
    # Decided with the system-call filter (issue 12): fchown is refused in every process (a
    # server that may fchown could give away any file it can open for reading), so an updated
    # note belongs to the worker's user, as a file saved by any editor does; its mode is kept
    # (the temp file is created with it, umask 0).
    needed("chroot")
    note = workspace / "n.md"
    note.write_bytes(b"old")
    if os.geteuid() == 0:  # someone else's note; a regular user's worker (uid 0 of a user
        os.chown(note, 1234, 1234)  # namespace of its own) must leave it the user's on disk
    os.chmod(note, 0o640)
    with ConfinedWorker(
        str(workspace), "write", "chroot"
    ) as worker:
        worker.update_note("n.md", b"new")
    st = note.stat()
    assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert note.read_bytes() == b"new"


def test_absolute_paths_in_a_chroot_name_things_inside_the_workspace(workspace: Path) -> None:
    needed("chroot")
    outside = workspace.parent / "outside.md"
    decoy = workspace / outside.relative_to("/")
    decoy.parent.mkdir(parents=True)
    decoy.write_bytes(b"decoy inside")
    with RawWorker(
        str(workspace), "delete", "chroot"
    ) as worker:
        worker.unlink_raw(str(outside))  # the same absolute path...
        with pytest.raises(OsRefused):
            worker.unlink_raw(str(outside))
    assert not decoy.exists()  # ...removed the file inside,
    assert outside.read_bytes() == b"outside"  # never the one outside


def test_a_non_root_process_enters_the_chroot_through_a_user_namespace(tmp_path: Path) -> None:
    # The unprivileged path: as root, a child drops to nobody (after importing everything,
    # since the interpreter's files may not be readable by nobody); as a regular user the child
    # is one already. enter_chroot() must then unshare a user + mount namespace to be allowed to
    # chroot at all.
    needed("chroot")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "inside.md").write_bytes(b"inside")
    drop = ""
    if os.geteuid() == 0:
        os.chown(ws, NOBODY, NOBODY)
        os.chown(ws / "inside.md", NOBODY, NOBODY)
        drop = (f"os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY}); "
                "prctl(4, 1)")  # PR_SET_DUMPABLE: setuid() clears it; a real user's is set
    outside = tmp_path / "outside.md"
    outside.write_bytes(b"outside")
    code = textwrap.dedent(
        f"""
        import json, os, sys
        sys.path.insert(0, {str(REPO)!r})
        from fs_notes.sandbox.chroot import enter_chroot
        from fs_notes.sandbox.process import prctl
        fd = os.open({str(ws)!r}, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        {drop}
        assert os.geteuid() != 0
        try:
            report = enter_chroot(fd)
        except OSError as exc:
            print(json.dumps({{"error": str(exc)}}))
            sys.exit(0)
        out = {{"userns": report.user_namespace, "uid": os.getuid()}}
        out["outside_visible"] = os.path.exists({str(outside)!r})
        os.unlink("/inside.md")
        out["inside_deleted"] = not os.path.exists("/inside.md")
        print(json.dumps(out))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    if "error" in out:
        ci = os.environ.get("CI", "").lower() == "true"
        (pytest.fail if ci else pytest.skip)(f"no unprivileged user namespace: {out['error']}")
    assert out == {"userns": True, "uid": 0, "outside_visible": False, "inside_deleted": True}
    assert outside.read_bytes() == b"outside"
    assert not (ws / "inside.md").exists()
