"""The operator's start-up summary (fs_notes/startup.py): at the default level, every fact once;
warnings only for what is weaker than it should be; never a secret."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from layers import requirement
from regular_user import home_for_nobody, interpreters, reachable, regular_user
from wire import REPO, HttpServer, child_env, write_secret

from fs_notes.sandbox.userns import UserNamespaces, read_settings

KEY = base64.b64encode(bytes(range(32))).decode()


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    """`fs-notes serve ...` over stdio with nothing on stdin: it starts, logs, and exits on EOF."""
    return subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env(),
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _messages(stderr: str, level: str) -> list[str]:
    prefix = f"fs-notes {level} "
    return [line.split(": ", 1)[1] for line in stderr.splitlines() if line.startswith(prefix)]


def test_the_summary_names_workspace_principal_guards_and_where_the_state_is(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    keys = write_secret(tmp_path / "keys", f"kops1:{KEY}\n")
    replay, audit = tmp_path / "state" / "r.db", tmp_path / "audit.jsonl"
    result = _serve(str(notes), "--replay-db", str(replay), "--state-key-file", str(keys),
                    "--audit-log", str(audit))  # fmt: skip
    assert result.returncode == 0, result.stderr
    info = _messages(result.stderr, "INFO")
    assert "policy: one workspace (serve WORKSPACE)" in info
    assert (
        f"serving workspace notes ({notes.as_uri()}) with resolver openat2; symlinks deny; "
        "writes and deletions need sandbox landlock"
    ) in info
    user = [m for m in info if m.startswith("principal ")]
    assert len(user) == 1 and user[0].endswith(" (stdio): notes: delete, read, write")
    assert any(m.startswith("the server confined itself: Landlock ABI ") for m in info)
    seccomp_line = (
        r"self-confinement: seccomp profile server, \d+ system calls refused by name, "
        r"every call but \d+ refused by default"
    )
    assert any(re.fullmatch(seccomp_line, m) for m in info), info
    if os.geteuid() == 0:
        assert "self-confinement: filesystem view private" in info
    else:  # a regular user's: in a user namespace of its own (CI's kernel allows them)
        assert (
            "self-confinement: filesystem view private, in a user namespace of its own "
            "(no capability kept)"
        ) in info
    assert f"replay database: {replay}" in info
    assert f"audit log: {audit}" in info
    assert f"state key: kops1, file {keys}" in info
    assert _messages(result.stderr, "WARNING") == []  # nothing here is weaker than it should be
    if os.geteuid() == 0:
        assert not [m for m in info if m.startswith("started by a regular user")]
    assert KEY not in result.stderr


def test_the_defaults_are_named_and_a_weaker_set_up_is_a_warning(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    state = tmp_path / "state"
    result = _serve(str(notes), "--replay-db", str(state / "r.db"), "--no-self-confine")
    assert result.returncode == 0, result.stderr
    info = _messages(result.stderr, "INFO")
    assert "audit log: off (--audit-log FILE to keep one)" in info
    kept = [m for m in info if m.startswith("state key: ")]
    assert len(kept) == 1 and kept[0].endswith(f", kept at {state}/state.keys")
    assert "self-confinement: off (--no-self-confine)" in info
    warnings = _messages(result.stderr, "WARNING")
    assert "the server does not confine itself (--no-self-confine)" in warnings


def test_http_logs_where_it_listens_and_never_the_token(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    token = "tok-" + "x" * 28
    write_secret(tmp_path / "token", token)
    server = HttpServer(str(notes), "--token-file", str(tmp_path / "token"),
                        "--replay-db", str(tmp_path / "r.db"),
                        tmp=tmp_path, token=token)  # fmt: skip
    try:
        assert server.post({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                            "params": {}}).status_code in (200, 400)  # fmt: skip
    finally:
        server.close()
    log = server.log_path.read_text()
    info = _messages(log, "INFO")
    assert f"listening: Streamable HTTP at http://127.0.0.1:{server.port}/mcp" in info
    assert any(m.startswith("principal ") and m.endswith(" (token): notes: delete, read, write")
               for m in info)  # fmt: skip
    assert token not in log


def test_a_name_planted_at_the_port_files_temporary_name_is_not_followed(tmp_path: Path) -> None:
    """A reviewer's finding: the port was written through `PORT.tmp`, following a symlink
    another user planted there (and overwriting its target as root)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "port.tmp").symlink_to(victim)  # the old temporary name
    token = "tok-" + "y" * 28
    write_secret(tmp_path / "token", token)
    port_file = folder / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fs_notes", "serve", str(notes), "--http", "127.0.0.1:0",
         "--token-file", str(tmp_path / "token"), "--replay-db", str(tmp_path / "r2.db"),
         "--port-file", str(port_file)],
        cwd=REPO, env=child_env(), stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert port_file.is_file() and not port_file.is_symlink()
        assert int(port_file.read_text()) > 0
    finally:
        proc.terminate()
        proc.wait(15)
    assert victim.read_text() == "precious\n"  # the planted link's target is untouched
    assert (folder / "port.tmp").is_symlink()  # and the planted name was left alone
    leftovers = [p.name for p in folder.iterdir() if p.name not in ("port", "port.tmp")]
    assert leftovers == []


def _says_what_holds_without_a_view(info: list[str], who: str) -> None:
    assert (
        f"{who}: what holds: Landlock confines the server to its workspaces (nothing outside "
        "them can be opened, listed, created, changed or run; the Python installation is "
        "read-only), the system-call filter refuses mode, owner, time, attribute, link, mount "
        "and ptrace calls, and writes and deletions run in workers holding only the rights "
        "they need"
    ) in info
    prefix = f"{who}: what does not (this kernel refuses it a user namespace): "
    does_not = [m for m in info if m.startswith(prefix)]
    assert len(does_not) == 1 and "tell whether a path outside its workspaces exists" in does_not[0]
    view = [m for m in info if m.startswith("self-confinement: filesystem view not private (")]
    assert len(view) == 1 and "a user namespace, which this kernel refuses: " in view[0], info


def _regular_users_start(*wrapper: str) -> tuple[subprocess.CompletedProcess[str], str, bool]:
    """`serve` started by a regular user (under `wrapper`, a launcher and its arguments, before
    the Python), with whether the probe run as that same user found user namespaces working;
    and who the start-up lines say started it."""
    verdict, why = requirement("landlock")
    if verdict != "run":
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    pythons, folder = interpreters()
    home = home_for_nobody()
    try:
        python = next((p for p in pythons.values() if p is not None and reachable(p, home)), None)
        assert python is not None, "no Python a regular user can run here"
        notes = home / "notes"
        notes.mkdir()
        if os.geteuid() == 0:
            os.chown(notes, 65534, 65534)
        env = {**child_env(), "XDG_STATE_HOME": str(home / "state")}
        launch = [str(python), *wrapper, str(python)] if wrapper else [str(python)]
        result = subprocess.run(
            regular_user([*launch, "-m", "fs_notes", "serve", str(notes)], home),
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        probed = subprocess.run(
            regular_user([*launch, "-m", "fs_notes.sandbox.probe"], home),
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
    assert probed.returncode == 0, probed.stderr
    works = json.loads(probed.stdout)["user_namespaces"]["works"]
    uid = 65534 if os.geteuid() == 0 else os.geteuid()
    return result, f"started by a regular user (uid {uid})", works


def test_a_regular_users_start_says_what_holds_and_what_does_not_at_info(tmp_path: Path) -> None:
    """Issue 25: unprivileged is the normal case. A regular user's self-confined start logs, at
    INFO, what holds for this user (Landlock, the filter, the workers) and what does not (no
    private view), with no warning and no advice to run as root; and (issue 26) whether the
    kernel gives this user namespaces, as the probe run as the same user finds."""
    result, who, works = _regular_users_start()
    assert result.returncode == 0, result.stderr
    info = _messages(result.stderr, "INFO")
    if works:  # the private view, in a user namespace of its own, and no capability left
        assert (
            "self-confinement: filesystem view private, in a user namespace of its own "
            "(no capability kept)"
        ) in info
        assert "self-confinement: effective capabilities 0x0" in info
        assert [m for m in info if m.startswith(f"{who}: ")] == []
    else:
        _says_what_holds_without_a_view(info, who)
        userns = [m for m in info if m.startswith(f"{who}: user namespaces: ")]
        assert len(userns) == 1 and "refuses them to this user" in userns[0]
    assert _messages(result.stderr, "WARNING") == []
    assert "run as root" not in result.stderr


def test_a_regular_user_refused_user_namespaces_is_told_why_and_the_fix() -> None:
    """Issue 26: where the kernel refuses user namespaces (faked from outside: unshare answers
    EPERM, tests/deny_syscalls.py), serve says so at INFO, naming the refused step and each
    setting of this kernel set to a refusing value, or that none is (then something else
    refuses, which is all it can know); never silently."""
    deny = str(Path(__file__).with_name("deny_syscalls.py"))
    result, who, works = _regular_users_start(deny, "unshare", "--")
    assert result.returncode == 0, result.stderr
    assert works is False  # the probe as that user sees the refusal too
    refused = UserNamespaces(False, "unshare", "EPERM", tuple(read_settings().items()))
    fixes = "; ".join(refused.fixes) or "find what refuses them (fs-notes check says what it read)"
    assert refused.reason is not None and refused.reason.startswith(
        "unshare(CLONE_NEWUSER | CLONE_NEWNS) was refused (EPERM); "
    )
    said = (
        f"{who}: user namespaces: this kernel refuses them to this user, so no private view is "
        f"possible without root: {refused.reason}; to allow them: {fixes}"
    )
    assert _messages(result.stderr, "INFO").count(said) == 1
    _says_what_holds_without_a_view(_messages(result.stderr, "INFO"), who)
    assert _messages(result.stderr, "WARNING") == []
