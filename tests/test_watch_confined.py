"""The folder watch works in a self-confined server with every Python (issue 25).

Debian's /usr/bin/python3 lost the watch once the server had confined itself: the watch looked
the C library up with ctypes.util.find_library, which runs ldconfig and gcc and makes a
temporary file (all refused by Landlock), and on that Python it raised, so every search walked
the whole folder. Now the C functions are looked up before confinement, without any search
(fs_notes/clib.py). Each case starts the real `fs-notes serve`, self-confined, as a regular user
(nobody, when the tests run as root), with the Python running the tests and with a virtualenv
over /usr/bin/python3, and asserts from its log and its answers that the watch is on: the log
says so and never says it is unavailable, and an edit made from outside is found by the next
search. As root, a Python that others cannot run (a pyenv under a 0700 /root) runs as root;
the regular-user CI pass runs it as a regular user. Skipped only off CI, on a host without
Landlock or without /usr/bin/python3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from layers import requirement
from regular_user import home_for_nobody, interpreters, reachable, regular_user
from wire import call_tool

CI = os.environ.get("CI", "").lower() == "true"
WATCH_ON = "folder watch on (inotify)"


def _not_here(why: str) -> None:
    if CI:
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def pythons() -> Iterator[dict[str, Path | None]]:
    found, folder = interpreters()
    yield found
    shutil.rmtree(folder, ignore_errors=True)


def _serve(command: list[str], ws: Path, log: Path) -> list[list[str]]:
    with (
        log.open("wb") as err,
        subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
        ) as proc,
    ):
        stdin, stdout = proc.stdin, proc.stdout
        assert stdin is not None and stdout is not None

        def search(n: int, query: str) -> list[str]:
            args = {"workspaceUri": ws.as_uri(), "query": query}
            stdin.write((json.dumps(call_tool(n, "notes_search", args)) + "\n").encode())
            stdin.flush()
            line = stdout.readline()
            assert line, log.read_text(errors="replace")
            answer: dict[str, Any] = json.loads(line)
            return [m["id"] for m in answer["result"]["structuredContent"]["matches"]]

        try:
            found = [search(1, "numbat")]
            (ws / "b" / "n3.md").write_text("# N3\n\nnumbat\n")  # from outside, as an editor
            found.append(search(2, "numbat"))
            stdin.close()
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    return found


@pytest.mark.parametrize("which", ["default", "distribution"])
def test_a_self_confined_server_run_by_a_regular_user_keeps_its_folder_watch(
    which: str, pythons: dict[str, Path | None]
) -> None:
    verdict, why = requirement("landlock")
    if verdict != "run":
        _not_here(f"self-confinement needs Landlock here: {why}")
    python = pythons[which]
    if python is None:
        _not_here("no /usr/bin/python3 on this host")
    assert python is not None
    home = home_for_nobody()
    state: str | None = None
    try:
        ws = home / "notes"
        for folder in ("a", "b"):
            (ws / folder).mkdir(parents=True)
            for i in range(3):
                (ws / folder / f"n{i}.md").write_text(f"# N{i}\n\nquokka\n")
        if os.geteuid() == 0:
            for path in (home, *home.rglob("*")):
                os.chown(path, 65534, 65534)
        command = [str(python), "-m", "fs_notes", "serve", str(ws), "--log-level", "debug"]
        if reachable(python, home):
            command = regular_user(command, home)
        else:  # root's pyenv under a 0700 /root: as root (the regular-user CI pass runs it so)
            assert which == "default", f"{python} cannot be run by a regular user"
            # never root's own state folder, nor one in nobody's folder, which nobody could
            # redirect (serve refuses that: fs_notes/fs/trusted.py)
            state = tempfile.mkdtemp(prefix="fs-notes-state-")
            command = ["env", f"XDG_STATE_HOME={state}", *command]
        found = _serve(command, ws, home / "serve.log")
        log = (home / "serve.log").read_text(errors="replace")
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if state is not None:
            shutil.rmtree(state, ignore_errors=True)
    assert "the server confined itself: Landlock" in log, log
    assert "folder watch unavailable" not in log, log
    assert log.count(WATCH_ON) >= 1, log
    assert found == [[], ["b/n3.md"]]
