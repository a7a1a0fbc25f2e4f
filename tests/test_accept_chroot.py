"""On a kernel without Landlock, the refusal of every write says how the operator accepts
chroot, and zero-config `serve FOLDER --sandbox chroot` is that explicit choice (issue 25).

Landlock is hidden from outside by tests/hide_landlock.py (a seccomp launcher); the product has
no switch for it. The weaker mode is never taken without the option: the first server refuses,
its folder unchanged."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from oslayer import needed
from wire import REPO, StdioServer, call_tool, child_env

HIDE = (sys.executable, str(REPO / "tests" / "hide_landlock.py"))


def _create(folder: Path, *extra: str) -> tuple[dict[str, object], str]:
    server = StdioServer("serve", str(folder), *extra, launcher=HIDE, env=child_env())
    try:
        answer = server.ask(
            call_tool(1, "notes_create",
                      {"workspaceUri": folder.as_uri(), "id": "a.md", "content": "hello"})
        )  # fmt: skip
    finally:
        assert server.close() == 0
    result: dict[str, object] = answer["result"]
    return result, server.stderr


def test_without_landlock_the_refusal_and_the_log_say_how_to_accept_chroot(
    tmp_path: Path,
) -> None:
    needed("chroot")
    folder = tmp_path / "notes"
    folder.mkdir()
    result, stderr = _create(folder)
    assert result["isError"] is True
    hint = "(to accept chroot, the operator starts serve with --sandbox chroot)"
    assert result["content"] == [{"type": "text", "text":
        'writing is refused in this workspace: the workspace policy requires sandbox '
        f'"landlock", this host provides "chroot" {hint}'}]  # fmt: skip
    assert any("WARNING" in line and hint in line for line in stderr.splitlines())
    assert os.listdir(folder) == []  # nothing written


def test_serve_folder_sandbox_chroot_accepts_chroot_and_says_so(tmp_path: Path) -> None:
    needed("chroot")
    folder = tmp_path / "notes"
    folder.mkdir()
    result, stderr = _create(folder, "--sandbox", "chroot")
    assert result.get("isError") is not True, result
    assert (folder / "a.md").read_text() == "hello"
    assert "writes and deletions need sandbox chroot" in stderr
    assert "workers for creates, updates and deletions: chroot" in stderr


def test_a_policys_refusal_names_its_sandbox_key_and_sandbox_is_refused_with_a_policy(
    tmp_path: Path,
) -> None:
    from fs_notes.sandbox.confined import accept_hint

    assert accept_hint("chroot", "/etc/p.toml") == (
        ' (to accept chroot, the operator sets sandbox = "chroot" in its [[workspace]])'
    )
    assert "/etc/p.toml" not in accept_hint("chroot", "/etc/p.toml")  # no path on the wire
    assert accept_hint("none", None) == ""  # --allow-unconfined is named by its own message
    import subprocess

    policy = tmp_path / "p.toml"
    policy.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", "--policy", str(policy), "--sandbox",
         "chroot"], capture_output=True, text=True, cwd=REPO, env=child_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "fs-notes: --sandbox is for WORKSPACE mode; in a policy, set sandbox in each "
        "[[workspace]]\n"
    )
