"""The TypeScript MCP SDK v1 client (`@modelcontextprotocol/sdk`, protocol 2025-11-25) over stdio:
list, read and the confirmed delete flow, where node is available (issue 7).

The client is pinned by tests/ts_client/package.json + package-lock.json and installed with
`npm ci` into a cache folder keyed by those two files (outside the work tree). Without node or npm
the test is skipped; when node exists but the install fails, it fails under CI=true and is skipped
otherwise. Every message the server sent the client is validated against the 2025-11-25 schema.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import pytest
from wire import REPO, check_legacy, child_env

PROJECT = Path(__file__).parent / "ts_client"
FILES = ("package.json", "package-lock.json")
SDK = Path("node_modules") / "@modelcontextprotocol" / "sdk" / "package.json"


def _unavailable(why: str) -> NoReturn:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def ts_client() -> tuple[str, Path]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are not installed")
    digest = hashlib.sha256(b"".join((PROJECT / f).read_bytes() for f in FILES)).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fs-notes-tests"
    home = cache / f"ts-client-{digest}"
    if not (home / SDK).is_file():
        cache.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="ts-client-", dir=cache))
        for name in FILES:
            shutil.copy(PROJECT / name, work / name)
        try:
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=300,
            )
        except subprocess.TimeoutExpired:
            shutil.rmtree(work, ignore_errors=True)
            _unavailable("npm ci timed out")
        if done.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            _unavailable(f"npm ci failed: {done.stderr.strip()[-600:]}")
        try:
            work.rename(home)
        except OSError:  # another run installed it first
            shutil.rmtree(work, ignore_errors=True)
    shutil.copy(PROJECT / "delete_flow.mjs", home / "delete_flow.mjs")
    return node, home


def _result_method(result: dict[str, Any]) -> str:
    for key, method in (
        ("protocolVersion", "initialize"),
        ("tools", "tools/list"),
        ("resources", "resources/list"),
        ("content", "tools/call"),
    ):
        if key in result:
            return method
    raise AssertionError(f"unexpected result {result}")


@pytest.mark.parametrize("action", ["accept", "decline"])
def test_the_typescript_sdk_v1_client_lists_reads_and_deletes_with_confirmation(
    ts_client: tuple[str, Path], tmp_path: Path, action: str
) -> None:
    node, home = ts_client
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "tps.md").write_text("# TPS report\nold\n")
    (tmp_path / "secret.md").write_text("# TPS report\nSECRET\n")
    run = subprocess.run(
        [
            node,
            str(home / "delete_flow.mjs"),
            sys.executable,
            str(REPO),
            str(ws),
            str(tmp_path / "replay.db"),
            action,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout)
    assert seen["protocolVersion"] == "2025-11-25"
    assert seen["serverInfo"]["name"] == "fs-notes"
    assert len(seen["tools"]) == 17 and "notes_delete" in seen["tools"]
    assert [n["id"] for n in seen["listed"]["notes"]] == ["tps.md"]
    assert seen["read"]["content"] == "# TPS report\nold\n"
    assert seen["escape"]["isError"] is True and "SECRET" not in json.dumps(seen["escape"])
    assert seen["resources"] == ["tps.md"]
    [asked] = seen["asked"]
    assert asked["requestedSchema"]["properties"]["note_id"]["oneOf"][0]["const"] == "tps.md"
    outcome = {"accept": "deleted", "decline": "declined"}[action]
    assert seen["deleted"]["structuredContent"]["outcome"] == outcome
    assert (ws / "tps.md").exists() is (action != "accept")
    assert (tmp_path / "secret.md").read_text() == "# TPS report\nSECRET\n"
    for message in seen["received"]:
        result = message.get("result")
        check_legacy(message, _result_method(result) if isinstance(result, dict) else None)
    assert [m["method"] for m in seen["received"] if "method" in m] == ["elicitation/create"]
