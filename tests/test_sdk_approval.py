"""The approval the model cannot give, through the real `fs-notes serve` (self-confined: its
loopback page served from inside Landlock and the system-call filter) from the official Python
SDK client, which here has no elicitation at all (as Claude Desktop): notes_delete answers in
words where the person approves; a retry before that deletes nothing; the page's approval and
then `fs-notes approve CODE` typed at a terminal (a pseudo-terminal the test drives) each let
the retry delete; run without a terminal, `fs-notes approve` approves nothing."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from test_approval import OLD, _approve_on_page
from trees import files
from wire import REPO, child_env, sdk_stdio


def _structured(result: Any) -> dict[str, Any]:
    assert result.is_error is not True, result
    out: dict[str, Any] = result.structured_content
    return out


def _at_terminal(code: str, state: Path, answer: str) -> tuple[int, str]:
    """`fs-notes approve CODE` with a terminal of its own, answering `answer` when asked."""
    argv = [sys.executable, "-m", "fs_notes", "approve", code, "--state-dir", str(state)]
    env = child_env(PYTHONPATH=str(REPO))
    pid, fd = pty.fork()
    if pid == 0:  # the child: its controlling terminal is the pty
        os.execve(sys.executable, argv, env)
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while b"Type " not in seen and time.monotonic() < deadline:
            try:
                seen += os.read(fd, 4096)
            except OSError:  # EIO: it ended before asking (its words are in `seen`)
                break
        os.write(fd, answer.encode() + b"\n")
        while time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.decode("utf-8", "replace")


def test_official_client_without_elicitation_deletes_only_what_the_person_approved(
    tmp_path: Path,
) -> None:
    ws = files(tmp_path / "notes", {"old.md": OLD, "draft.md": "# Draft\n\nnot yet\n"})
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "notes"\npath = "{ws}"\napproval = "out-of-band"\n\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "notes"\n'
        'operations = ["read", "write", "delete"]\n'
    )
    uri = "file://" + urllib.parse.quote(str(ws))
    seen: dict[str, Any] = {}

    async def main() -> None:
        params = sdk_stdio("--policy", str(policy), "--state-dir", str(state),
                           "--replay-db", str(state / "replay.sqlite3"))  # fmt: skip
        async with Client(params, cache=None, read_timeout_seconds=60) as client:
            asked = _structured(await client.call_tool(
                "notes_delete", {"workspaceUri": uri, "id": "old.md"}))  # fmt: skip
            assert asked["outcome"] == "approval-needed"
            approval = asked["approval"]
            again = _structured(await client.call_tool("notes_delete", {
                "workspaceUri": uri, "id": "old.md", "approval": approval["state"]}))  # fmt: skip
            assert again["outcome"] == "approval-needed" and (ws / "old.md").exists()
            await anyio.to_thread.run_sync(_approve_on_page, approval["url"])
            done = _structured(await client.call_tool("notes_delete", {
                "workspaceUri": uri, "id": "old.md", "approval": approval["state"]}))  # fmt: skip
            assert done["deleted"] == "old.md"

            draft = _structured(await client.call_tool(
                "notes_delete", {"workspaceUri": uri, "id": "draft.md"}))["approval"]  # fmt: skip
            seen["refused"] = await anyio.to_thread.run_sync(_no_terminal, draft["code"], state)
            still = _structured(await client.call_tool("notes_delete", {
                "workspaceUri": uri, "id": "draft.md", "approval": draft["state"]}))  # fmt: skip
            assert still["outcome"] == "approval-needed" and (ws / "draft.md").exists()
            seen["no"] = await anyio.to_thread.run_sync(_at_terminal, draft["code"], state, "no")
            seen["yes"] = await anyio.to_thread.run_sync(_at_terminal, draft["code"], state,
                                                         "yes")  # fmt: skip
            done = _structured(await client.call_tool("notes_delete", {
                "workspaceUri": uri, "id": "draft.md", "approval": draft["state"]}))  # fmt: skip
            assert done["deleted"] == "draft.md", done

    anyio.run(main)
    assert not (ws / "old.md").exists() and not (ws / "draft.md").exists()
    refused = seen["refused"]
    assert refused.returncode == 2 and "has none" in refused.stderr, refused
    status, text = seen["no"]
    assert status == 1 and "Refused" in text and "draft.md" in text
    status, text = seen["yes"]
    assert status == 0 and re.search(r"Approved: draft\.md", text), text


def _no_terminal(code: str, state: Path) -> subprocess.CompletedProcess[str]:
    """`fs-notes approve` run by a program: pipes, and no controlling terminal at all."""
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", "approve", code, "--state-dir", str(state)],
        input="yes\n", capture_output=True, text=True, timeout=60, check=False,
        env=child_env(PYTHONPATH=str(REPO)), start_new_session=True,
    )  # fmt: skip
