"""Layer 2 and mount points inside the workspace (a tmpfs, a same-device bind mount of a folder
outside, a bind mount of an outside file over a note). Each scenario runs in a child with a
private mount namespace (tests/mountns.py: ``unshare -m`` as root; as a regular user, in a user
namespace of its own too): nothing it mounts is visible to, or left behind for, anyone else.
Without unshare the tests fail under CI=true and are skipped otherwise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mountns import command_prefix
from test_fs_support import RESOLVERS, unavailable

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys
from fs_notes.fs import FsError, Identity, WorkspaceRoot, mounts
base, resolver, policy, hide_mount_ids = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
ws, out = base + "/ws", base + "/outside"
def sh(*cmd):
    import subprocess
    subprocess.run(cmd, check=True)
sh("mount", "-t", "tmpfs", "tmpfs", ws + "/mnt")
with open(ws + "/mnt/x.md", "w") as f:
    f.write("TMPFS")
sh("mount", "--bind", out, ws + "/bind")
sh("mount", "--bind", out + "/secret.md", ws + "/f.md")
if hide_mount_ids:  # a kernel without STATX_MNT_ID: only st_dev is compared
    from fs_notes.fs import statx
    mounts.mount_id = lambda fd: None
    mounts.mount_id_at = lambda dirfd, name: None
    statx.STATX_MNT_ID = 0  # lstat_at then reports mnt_id=None
secret = Identity.of(os.stat(out + "/secret.md"))
results = {}
def run(label, call):
    try:
        value = call()
        results[label] = "ok:" + repr(value)[:200]
    except FsError as exc:
        results[label] = type(exc).__name__
with WorkspaceRoot.open(ws, resolver=resolver, symlinks=policy) as root:
    assert root.resolver_name == resolver
    for note in ("mnt/x.md", "bind/secret.md", "f.md"):
        run("read " + note, lambda: root.read_note(note)[0])
        run("stat " + note, lambda: root.stat_note(note))
        run("update " + note, lambda: root.update_note(note, b"PWNED"))
        run("unlink " + note, lambda: root.unlink_note(note, secret))
    for note in ("mnt/new.md", "bind/new.md", "bind/sub/new.md"):
        run("create " + note, lambda: root.create_note(note, b"PWNED"))
    run("list", lambda: [n for n, _ in root.iter_notes()])
    for folder in ("mnt", "bind"):
        run("list " + folder, lambda: [n for n, _ in root.iter_notes(folder)])
        run("open_dir " + folder, lambda: os.close(root.open_dir(folder)))
results["outside"] = sorted(os.listdir(out))
results["secret"] = open(out + "/secret.md").read()
print(json.dumps(results))
"""


def _scenario(tmp_path: Path, resolver: str, policy: str, hide_mount_ids: bool) -> dict[str, Any]:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        unavailable("mount tests need unshare and mount")
    (tmp_path / "ws" / "mnt").mkdir(parents=True)
    (tmp_path / "ws" / "bind").mkdir()
    (tmp_path / "ws" / "f.md").write_bytes(b"placeholder")
    (tmp_path / "ws" / "note.md").write_bytes(b"inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_bytes(b"SECRET")
    prefix, _ = command_prefix()  # as a regular user: a user namespace of its own too
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        unavailable(f"unshare -m failed: {probe.stderr.decode(errors='replace').strip()}")
    args = [str(tmp_path), resolver, policy, "1" if hide_mount_ids else "0"]
    cmd = [*prefix, sys.executable, "-c", CHILD, *args]
    env = {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert sorted(os.listdir(tmp_path / "ws" / "mnt")) == []  # the tmpfs died with the namespace
    if hide_mount_ids:
        return result
    # Whatever happened in the child, the world outside the namespace is untouched.
    assert sorted(os.listdir(tmp_path / "outside")) == ["secret.md"]
    assert (tmp_path / "outside" / "secret.md").read_bytes() == b"SECRET"
    return result


@pytest.mark.parametrize("policy", ["deny", "within"])
@pytest.mark.parametrize("resolver", RESOLVERS)
def test_every_mount_inside_the_workspace_is_refused(
    tmp_path: Path, resolver: str, policy: str
) -> None:
    got = _scenario(tmp_path, resolver, policy, hide_mount_ids=False)
    expected: dict[str, Any] = {}
    for note in ("mnt/x.md", "bind/secret.md", "f.md"):
        for op in ("read", "stat", "update", "unlink"):
            expected[f"{op} {note}"] = "Escape"
    for note in ("mnt/new.md", "bind/new.md", "bind/sub/new.md"):
        expected[f"create {note}"] = "Escape"
    expected["list"] = "ok:['note.md']"
    for folder in ("mnt", "bind"):
        expected[f"list {folder}"] = "Escape"
        expected[f"open_dir {folder}"] = "Escape"
    expected["outside"] = ["secret.md"]
    expected["secret"] = "SECRET"
    assert got == expected


def test_without_mount_ids_the_walk_sees_only_other_devices(tmp_path: Path) -> None:
    """Documented limit (root.py): on a kernel without STATX_MNT_ID the walk compares st_dev, so a
    tmpfs is refused but a bind mount of the same device is not. This is also the control that
    shows the bind mounts above are same-device, i.e. that the mount-id check is what refuses
    them."""
    got = _scenario(tmp_path, "walk", "deny", hide_mount_ids=True)
    assert got["read mnt/x.md"] == "Escape"
    assert got["list mnt"] == "Escape"
    assert got["read bind/secret.md"] == "ok:b'SECRET'"
    assert got["stat f.md"].startswith("ok:Identity(")
    # Without mount ids the same-device bind mount's notes are listed too (the documented limit).
    assert got["list bind"] == "ok:['bind/new.md', 'bind/secret.md', 'bind/sub/new.md']"
