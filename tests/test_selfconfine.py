"""The server's own Landlock domain (sandbox/selfconfine.py, issue 5 item 5).

Anything that confines runs in a child (`python -c ...`): Landlock cannot be undone. Each child
test has its positive control: what must fail after `confine_server` works just before it.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from layers import requirement
from oslayer import needed
from policy_text import grant, principal, workspace, write_policy
from preludes import ATTEMPT, READ, run_body
from wire import REPO, StdioServer, child_env, request, write_secret

from fs_notes.policy import Policy
from fs_notes.policy_file import load_policy
from fs_notes.sandbox import landlock_abi as ll
from fs_notes.sandbox.confine import DELETE_RIGHTS, WRITE_RIGHTS
from fs_notes.sandbox.selfconfine import (
    LIST,
    NAME_SERVICE_FILES,
    SelfConfinementFailed,
    build_plan,
    elf_interpreter,
    workspace_rights,
)

PRELUDE = (
    """
import errno, json, os, socket, sys, threading
from fs_notes.policy import Policy
from fs_notes.sandbox.selfconfine import SelfConfinementFailed, apply, build_plan, confine_server
out = {}
"""
    + ATTEMPT
    + READ
    + """
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def bind(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
"""
)


def run_child(body: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return run_body(PRELUDE, body, *args, env=env)


def landlock_runs() -> bool:
    """CI rule (tests/layers.py); False when Landlock is hidden, after proving that the
    server then does not confine itself (and says why) instead of failing or pretending."""
    verdict = needed("landlock")
    if verdict == "hidden":
        out = run_child(
            """
            done = confine_server(Policy.for_single_workspace(sys.argv[1], "me", token_sha256=None),
                                  replay_db=None)
            out["enforced"] = done.enforced
            out["reason"] = done.reason
            out["root"] = attempt(lambda: os.listdir("/"))
            """,
            os.getcwd(),
        )
        assert out == {
            "enforced": False,
            "reason": ll.reason_for("landlock_create_ruleset", errno.ENOSYS),
            "root": "ok",
        }
        return False
    return True


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\n")
    (tmp_path / "notes" / "b.md").write_text("# B\n")
    (tmp_path / "outside.md").write_text("# outside\n")
    (tmp_path / "state").mkdir()
    write_secret(tmp_path / "key", "k" * 64)
    return tmp_path


# -- the plan (pure) -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "rights"),
    [
        ((), LIST),
        (("read",), LIST | ll.ACCESS_FS_READ_FILE),
        (("write",), LIST | WRITE_RIGHTS),
        (("delete",), LIST | ll.ACCESS_FS_READ_FILE | DELETE_RIGHTS),
        (("read", "write", "delete"), LIST | ll.ACCESS_FS_READ_FILE | WRITE_RIGHTS | DELETE_RIGHTS),
    ],
)
def test_a_workspace_gets_the_rights_its_grants_need_and_no_more(
    ops: tuple[str, ...], rights: int
) -> None:
    assert workspace_rights(ops) == rights
    assert not workspace_rights(ops) & (ll.ACCESS_FS_EXECUTE | ll.ACCESS_FS_REMOVE_DIR)
    assert not workspace_rights(ops) & ll.ACCESS_FS_MAKE_SYM
    # REFER (renames between folders: notes_move) only where the policy grants write
    assert bool(workspace_rights(ops) & ll.ACCESS_FS_REFER) == ("write" in ops)


def test_the_plan_follows_the_policy_per_workspace(tmp_path: Path) -> None:
    for name in ("ro", "rw"):
        (tmp_path / name).mkdir()
    policy_file = write_policy(
        tmp_path / "policy.toml",
        principal("me"),
        workspace("ro", tmp_path / "ro"),
        workspace("rw", tmp_path / "rw"),
        grant("me", "ro", "read"),
        grant("me", "rw", "read", "write", "delete"),
    )
    plan = build_plan(load_policy(str(policy_file)), replay_db=str(tmp_path / "r.db"))
    rules = {g.path: g.rights for g in plan.grants}
    assert rules[str(tmp_path / "ro")] == workspace_rights(["read"])
    assert rules[str(tmp_path / "rw")] == workspace_rights(["read", "write", "delete"])
    assert plan.bind_ports == ()


def test_the_plan_can_start_workers_and_never_names_the_root_or_the_key(layout: Path) -> None:
    policy = Policy.for_single_workspace(str(layout / "notes"), "me", token_sha256=None)
    plan = build_plan(policy, replay_db=str(layout / "state" / "replay.db"), http_port=8765)
    rules = {g.path: g.rights for g in plan.grants}
    exe = os.path.realpath(sys.executable)
    assert rules[exe] & ll.ACCESS_FS_EXECUTE
    loader = elf_interpreter(exe)
    assert loader is not None and rules[os.path.realpath(loader)] & ll.ACCESS_FS_EXECUTE
    executable = [path for path, rights in rules.items() if rights & ll.ACCESS_FS_EXECUTE]
    assert sorted(executable) == sorted({exe, os.path.realpath(loader)})
    assert "/" not in rules
    assert str(layout / "key") not in rules and str(layout) not in rules
    assert rules[str(layout / "state")] & ll.ACCESS_FS_MAKE_REG
    assert plan.bind_ports == (8765,)
    assert len(rules) == len(plan.grants)  # one rule per path (rights merged)


def test_connect_names_adds_the_name_service_files_only_when_asked(layout: Path) -> None:
    # A replay store named by host name needs the C library's resolver files; one given by
    # address (or none) does not, and stdio without it gets none of them.
    policy = Policy.for_single_workspace(str(layout / "notes"), "me", token_sha256=None)
    present = {os.path.realpath(p) for p in NAME_SERVICE_FILES if os.path.isfile(p)}
    assert os.path.realpath("/etc/hosts") in present  # positive control: there is one to grant
    by_address = build_plan(policy, replay_db=None, connect_ports=[6379])
    by_name = build_plan(policy, replay_db=None, connect_ports=[6379], connect_names=True)
    rules = {g.path: g.rights for g in by_name.grants}
    assert not present & {g.path for g in by_address.grants}
    assert not set(NAME_SERVICE_FILES) & set(by_address.literals)
    assert all(rules[path] == ll.ACCESS_FS_READ_FILE for path in present)
    assert set(NAME_SERVICE_FILES) <= set(by_name.literals)
    # Everything else is the same plan: the connect ports, and no port to bind.
    assert {g.path for g in by_name.grants} - present == {g.path for g in by_address.grants}
    for plan in (by_address, by_name):
        assert plan.connect_ports == (6379,) and plan.bind_ports == ()
    assert build_plan(policy, replay_db=None).connect_ports == ()


@pytest.mark.parametrize("port", [0, 65536, -1, True, "6379"])
def test_a_connect_port_that_is_not_a_tcp_port_is_refused(layout: Path, port: object) -> None:
    policy = Policy.for_single_workspace(str(layout / "notes"), "me", token_sha256=None)
    with pytest.raises(SelfConfinementFailed, match="not a TCP port"):
        build_plan(policy, replay_db=None, connect_ports=[port])  # type: ignore[list-item]


def test_a_replay_database_at_the_filesystem_root_is_refused(layout: Path) -> None:
    policy = Policy.for_single_workspace(str(layout / "notes"), "me", token_sha256=None)
    with pytest.raises(SelfConfinementFailed, match="replay database folder"):
        build_plan(policy, replay_db="/replay.db")


def test_the_elf_loader_is_the_one_this_interpreter_runs_with() -> None:
    loader = elf_interpreter(os.path.realpath(sys.executable))
    assert loader is not None
    mapped = Path("/proc/self/maps").read_text()
    assert os.path.realpath(loader) in {
        os.path.realpath(line.split()[-1]) for line in mapped.splitlines() if "/" in line
    }


def test_a_file_that_is_not_elf_has_no_loader(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_bytes(b"#!/bin/sh\necho hi\n")
    assert elf_interpreter(str(script)) is None


# -- applied, in a child ------------------------------------------------------------------------


def test_landlock_alone_lets_the_server_reach_only_what_its_plan_allows(layout: Path) -> None:
    # Landlock on its own (`apply`, without the private view that confine_server builds first):
    # the rules of the plan must be enough by themselves.
    if not landlock_runs():
        return
    out = run_child(
        """
        base = sys.argv[1]
        ws, outside, key = base + "/notes", base + "/outside.md", base + "/key"
        port, other = free_port(), free_port()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        target = listener.getsockname()[1]
        def connect():
            socket.create_connection(("127.0.0.1", target), timeout=2).close()
        checks = {
            "read_outside": lambda: read(outside),
            "read_key": lambda: read(key),
            "list_root": lambda: os.listdir("/"),
            "make_outside": lambda: os.close(os.open(base + "/new.md", os.O_CREAT | os.O_WRONLY)),
            "connect": connect,
            "bind_other": lambda: bind(other),
        }
        def caps():
            lines = read("/proc/self/status").decode().splitlines()
            status = dict(line.split(":\t", 1) for line in lines)
            return {k: int(status[k], 16) for k in ("CapEff", "CapBnd")}
        out["before"] = {name: attempt(fn) for name, fn in checks.items()}
        out["caps_before"] = caps()
        os.unlink(base + "/new.md")
        policy = Policy.for_single_workspace(ws, "me", token_sha256=None)
        from fs_notes.sandbox import seccomp
        seccomp.available()  # as confine_server does first (finding libseccomp runs ldconfig)
        done = apply(build_plan(policy, replay_db=base + "/state/replay.db", http_port=port))
        out["enforced"], out["abi"] = done.enforced, done.abi
        out["after"] = {name: attempt(fn) for name, fn in checks.items()}
        out["caps_after"] = caps()
        out["unlink_outside"] = attempt(lambda: os.unlink(outside))
        out["read_inside"] = attempt(lambda: read(ws + "/a.md"))
        out["bind_port"] = attempt(lambda: bind(port))

        # What the server does later still works: lazy imports, workers, the replay store.
        import psutil, uvicorn, starlette.applications
        from fs_notes.confirm.replay import ReplayStore
        from fs_notes.fs import WorkspaceRoot
        from fs_notes.sandbox.supervisor import ConfinedWorker
        with WorkspaceRoot.open(ws) as root:
            ident = root.stat_note("b.md")
        with ConfinedWorker(ws, "delete", "landlock") as worker:
            worker.unlink_note("b.md", ident)
        with ConfinedWorker(ws, "write", "landlock") as worker:
            worker.create_note("c.md", b"# C")
        out["workspace"] = sorted(os.listdir(ws))
        store = ReplayStore(base + "/state/replay.db")
        out["claimed"] = store.claim("0" * 32, 2e9)
        store.close()
        """,
        str(layout),
    )
    assert out["before"] == {
        "read_outside": "ok",
        "read_key": "ok",
        "list_root": "ok",
        "make_outside": "ok",
        "connect": "ok",
        "bind_other": "ok",
    }
    assert out["enforced"] is True and out["abi"] >= 1
    tcp = "EACCES" if out["abi"] >= 4 else "ok"
    assert out["after"] == {
        "read_outside": "EACCES",
        "read_key": "EACCES",
        "list_root": "EACCES",
        "make_outside": "EACCES",
        "connect": tcp,
        "bind_other": tcp,
    }
    if os.geteuid() == 0:
        # Root keeps CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER for its workers, CAP_SETPCAP
        # for them to shed more, and CAP_SETUID/CAP_SETGID for them to become a folder's owner;
        # nothing else (CAP_SYS_MODULE and CAP_SYS_RAWIO reach past Landlock), in the bounding
        # set too.
        kept = 0b1_1100_1011
        assert out["caps_before"]["CapEff"] & (1 << 16)  # CAP_SYS_MODULE, before
        assert out["caps_after"] == {"CapEff": kept, "CapBnd": kept}
    assert out["unlink_outside"] == "EACCES"
    assert out["read_inside"] == "ok" and out["bind_port"] == "ok"
    assert out["workspace"] == ["a.md", "c.md"]
    assert out["claimed"] is True
    assert (layout / "outside.md").read_text() == "# outside\n"
    assert not (layout / "new.md").exists()


def _view_runs() -> bool:
    """Whether confine_server builds its private view here (CI rule of tests/layers.py)."""
    verdict, why = requirement("view")
    if verdict == "fail":
        pytest.fail(why)
    return verdict == "run"


@pytest.mark.parametrize(
    ("mode", "given"),
    [("stdio", "store"), ("http", "store"), ("stdio", "none"), ("http", "none")],
)
def test_the_server_connects_to_its_replay_store_s_port_and_no_other(
    layout: Path, mode: str, given: str
) -> None:
    # Two listeners on 127.0.0.1, both reachable before (positive control). After confine_server
    # with connect_ports=(store,) only the store's connects; the other is EACCES (Landlock). In
    # stdio mode the connect proves the view kept the host's network; without connect ports no
    # socket can even be made (the system-call filter), and stdio gets an empty network namespace.
    if not landlock_runs():
        return
    view_on = _view_runs()
    out = run_child(
        """
        base, mode, given = sys.argv[1:4]
        listeners = []
        for _ in range(2):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(8)
            listeners.append(s)
        store, other = (s.getsockname()[1] for s in listeners)
        def connect(port):
            return lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close()
        checks = {"store": connect(store), "other": connect(other)}
        out["before"] = {name: attempt(fn) for name, fn in checks.items()}
        policy = Policy.for_single_workspace(base + "/notes", "me", token_sha256=None)
        http_port = free_port() if mode == "http" else None
        done = confine_server(policy, replay_db=base + "/state/replay.db", http_port=http_port,
                              connect_ports=(store,) if given == "store" else ())
        out["enforced"], out["abi"], out["view"] = done.enforced, done.abi, done.view
        out["after"] = {name: attempt(fn) for name, fn in checks.items()}
        out["recorded"] = done.to_json()["connect_ports"] == ([store] if given == "store" else [])
        out["root"] = attempt(lambda: os.listdir("/"))
        """,
        str(layout),
        mode,
        given,
    )
    assert out["before"] == {"store": "ok", "other": "ok"}
    assert out["enforced"] is True and out["recorded"] is True
    assert out["view"]["enforced"] is view_on
    network = mode == "http" or given == "store"
    if view_on:
        assert out["view"]["network"] is network
    reach = "ok" if network or not view_on else "ENETUNREACH"  # an empty namespace: lo is down
    denied = "EACCES" if out["abi"] >= 4 else reach  # no TCP rules before ABI 4
    if given == "store":
        assert out["after"] == {"store": reach, "other": denied}
    else:  # a server that reaches no store creates no socket at all (sandbox/seccomp.py, issue
        # 26): the filter's EPERM comes before Landlock's EACCES and the empty namespace
        assert out["after"] == {"store": "EPERM", "other": "EPERM"}
    assert out["root"] == "EACCES"  # and the filesystem is confined as ever


def test_connect_ports_are_refused_without_tcp_handled_or_out_of_range() -> None:
    # Validated before anything is applied: / is still listable afterwards in the same child.
    if not landlock_runs():
        return
    out = run_child(
        """
        from fs_notes.sandbox.confine import confine
        def refused(**kwargs):
            try:
                confine([], **kwargs)
                return "confined"
            except ValueError as exc:
                return str(exc)
        out["no_tcp"] = refused(deny_tcp=False, connect_ports=[6379])
        out["range"] = refused(connect_ports=[70000])
        out["root"] = attempt(lambda: os.listdir("/"))
        """
    )
    assert out == {
        "no_tcp": "connect_ports only mean something when TCP is handled (deny_tcp)",
        "range": "not a TCP port: 70000",
        "root": "ok",
    }


@pytest.mark.parametrize("how", ["landlock", "serve"])
def test_a_read_only_grant_gives_the_server_no_way_to_write(layout: Path, how: str) -> None:
    # "landlock": Landlock's rules alone refuse (EACCES); "serve": as serve confines itself, the
    # private view (as root, or a regular user's in its own user namespace) binds a read-only
    # workspace read-only, which refuses first (EROFS).
    if not landlock_runs():
        return
    write_policy(
        layout / "policy.toml",
        principal("me"),
        workspace("notes", layout / "notes"),
        grant("me", "notes", "read"),
    )
    out = run_child(
        """
        from fs_notes.policy_file import load_policy
        base, how = sys.argv[1], sys.argv[2]
        ws = base + "/notes"
        out["before"] = attempt(lambda: os.close(os.open(ws + "/x.md", os.O_CREAT | os.O_WRONLY)))
        os.unlink(ws + "/x.md")
        policy = load_policy(base + "/policy.toml")
        if how == "landlock":
            from fs_notes.sandbox import seccomp
            seccomp.available()
            apply(build_plan(policy, replay_db=base + "/state/r.db"))
        else:
            confine_server(policy, replay_db=base + "/state/r.db")
        out["read"] = attempt(lambda: read(ws + "/a.md"))
        out["create"] = attempt(lambda: os.close(os.open(ws + "/x.md", os.O_CREAT | os.O_WRONLY)))
        out["write"] = attempt(lambda: os.close(os.open(ws + "/a.md", os.O_WRONLY)))
        out["unlink"] = attempt(lambda: os.unlink(ws + "/a.md"))
        """,
        str(layout),
        how,
    )
    refused = "EROFS" if how == "serve" else "EACCES"
    assert out == {
        "before": "ok",
        "read": "ok",
        "create": refused,
        "write": refused,
        "unlink": refused,
    }
    assert sorted(os.listdir(layout / "notes")) == ["a.md", "b.md"]


def test_a_server_with_a_thread_already_running_refuses_to_confine(layout: Path) -> None:
    # Landlock (ABI <= 7) would bind only the calling thread; the other one would stay free.
    if not landlock_runs():
        return
    out = run_child(
        """
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        policy = Policy.for_single_workspace(sys.argv[1] + "/notes", "me", token_sha256=None)
        try:
            confine_server(policy, replay_db=None)
            out["result"] = "confined"
        except SelfConfinementFailed as exc:
            out["result"] = "refused" if "multi-threaded" in str(exc) else str(exc)
        stop.set()
        t.join()
        out["root"] = attempt(lambda: os.listdir("/"))
        out["outside"] = attempt(lambda: read(sys.argv[1] + "/outside.md"))
        """,
        str(layout),
    )
    assert out == {"result": "refused", "root": "ok", "outside": "ok"}


# -- the real server -----------------------------------------------------------------------------


def test_serve_confines_itself_and_says_so(layout: Path) -> None:
    confined = landlock_runs()
    server = StdioServer("--log-level", "info", "serve", str(layout / "notes"))
    try:
        server.ask(request(1, "server/discover", {}))
    finally:
        assert server.close() == 0
    if confined:
        assert "the server confined itself: Landlock ABI " in server.stderr
    else:
        why = ll.reason_for("landlock_create_ruleset", errno.ENOSYS)
        assert f"the server does not confine itself: {why}" in server.stderr


def test_serve_can_be_told_not_to_confine_itself(layout: Path) -> None:
    server = StdioServer("serve", str(layout / "notes"), "--no-self-confine")
    try:
        server.ask(request(1, "server/discover", {}))
    finally:
        assert server.close() == 0
    assert "the server does not confine itself (--no-self-confine)" in server.stderr


def test_serve_refuses_to_start_when_it_cannot_confine_itself(layout: Path) -> None:
    # Fail closed: on a Landlock host a server that cannot confine itself does not run without
    # it. A --port-file in a folder that does not exist cannot get its rule.
    if not landlock_runs():
        return
    proc = subprocess.run(
        [sys.executable, "-m", "fs_notes", "serve", str(layout / "notes"), "--http",
         "127.0.0.1:0", "--token-file", str(layout / "key"), "--port-file",
         str(layout / "missing" / "port")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=child_env(),
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("fs-notes: the server cannot confine itself with Landlock: ")
    assert "--no-self-confine" in proc.stderr
