"""notes_delete goes through the OS layer chosen by the host probe, and fails closed without one."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from wire import REPO, child_env

from fs_notes.fs import Identity, WorkspaceRoot
from fs_notes.policy import Policy
from fs_notes.tools import confined
from sandbox.probe import probe


def _policy(ws: Path, sandbox: str = "landlock") -> Policy:
    return Policy.for_single_workspace(str(ws), "me", token_sha256=None, sandbox=sandbox)  # type: ignore[arg-type]


def _nothing_enforceable(timeout: float = 10.0) -> object:
    real = probe()
    return dataclasses.replace(
        real,
        landlock_enforced=False,
        landlock_abi=None,
        chroot=False,
        landlock_reason="test",
        chroot_reason="test",
    )


def test_without_an_enforceable_layer_deletion_is_refused_and_the_file_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.md").write_text("# A\n")
    monkeypatch.setattr(confined, "probe", _nothing_enforceable)
    deleters = confined.ConfinedDeleters(_policy(tmp_path), allow_unconfined=False)
    try:
        ws_name = tmp_path.name
        assert deleters.unavailable(ws_name) is not None
        with WorkspaceRoot.open(tmp_path) as root:
            ident = root.stat_note("a.md")
        with pytest.raises(confined.OsLayerFailed):
            deleters.delete(ws_name, "a.md", ident)
        assert (tmp_path / "a.md").exists()
    finally:
        deleters.close()


def test_allow_unconfined_is_the_only_way_to_delete_without_an_os_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.md").write_text("# A\n")
    monkeypatch.setattr(confined, "probe", _nothing_enforceable)
    policy = _policy(tmp_path, sandbox="none")
    deleters = confined.ConfinedDeleters(policy, allow_unconfined=True)
    try:
        assert deleters.mode == "none" or deleters.unavailable(tmp_path.name) is None
        with WorkspaceRoot.open(tmp_path) as root:
            ident: Identity = root.stat_note("a.md")
        deleters.delete(tmp_path.name, "a.md", ident)
        assert not (tmp_path / "a.md").exists()
    finally:
        deleters.close()


def test_a_workspace_requiring_landlock_refuses_a_chroot_only_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FS_NOTES_HIDE_LANDLOCK", "1")
    deleters = confined.ConfinedDeleters(
        _policy(tmp_path, sandbox="landlock"), allow_unconfined=False
    )
    try:
        reason = deleters.unavailable(tmp_path.name)
        assert reason is not None and "landlock" in reason
    finally:
        deleters.close()


@pytest.mark.parametrize("hide,mode", [("", "landlock"), ("1", "chroot")])
def test_check_reports_the_mechanism_serve_uses(hide: str, mode: str) -> None:
    env = child_env(FS_NOTES_HIDE_LANDLOCK=hide) if hide else child_env()
    env.pop("FS_NOTES_HIDE_LANDLOCK", None) if not hide else None
    out = subprocess.run(
        [sys.executable, "-m", "fs_notes", "check", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["deletion_confinement"] == mode
    assert data["openat2"] is True
    assert data["landlock"]["enforced"] is (mode == "landlock")
