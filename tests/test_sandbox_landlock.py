"""Landlock plumbing (sandbox.landlock_abi) and porcelain (sandbox.confine).

Everything that restricts a process runs in a child (`python -I -c ...`): Landlock cannot be
undone. Each confinement test has its positive control: the forbidden action works in the same
child just before `confine()`.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path
from typing import Any

import pytest
from layers import requirement
from oslayer import needed
from preludes import ATTEMPT, READ, REPO_ON_PATH, run_body

from fs_notes.sandbox import landlock_abi as ll
from fs_notes.sandbox.process import no_new_privs

#: no_new_privs as the children inherit it: a refusal leaves it so (nothing was applied). Set
#: already where tests/hide_landlock.py loaded its filter as a regular user (which needs it).
INHERITED_NNP = no_new_privs()

PRELUDE = (
    REPO_ON_PATH
    + """
import errno, json, os, socket, sys, threading
from fs_notes.sandbox import landlock_abi as ll
from fs_notes.sandbox.confine import confine
from fs_notes.sandbox.errors import ConfinementError
from fs_notes.sandbox.process import no_new_privs  # prctl: /proc is out of reach once confined
out = {}
"""
    + ATTEMPT
    + READ
    + """
def dir_fd(path):
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
"""
)


def run_child(body: str, *args: str) -> dict[str, Any]:
    return run_body(PRELUDE, body, *args, isolated=True, timeout=30)


def landlock_runs() -> bool:
    verdict = needed("landlock")
    if verdict == "hidden":
        # Fail closed: confine() refuses, and nothing was applied.
        out = run_child(
            """
            try:
                confine([(dir_fd("/"), ll.ACCESS_FS_READ_FILE)])
                out["confined"] = True
            except ll.LandlockUnavailable:
                out["confined"] = False
            out["nnp"] = no_new_privs()
            """
        )
        assert out == {"confined": False, "nnp": INHERITED_NNP}
        return False
    return True


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "note.md").write_bytes(b"inside")
    (tmp_path / "outside.md").write_bytes(b"outside")
    return tmp_path


# -- plumbing: pure -------------------------------------------------------------------------


def test_rights_grow_with_the_abi_as_the_kernel_documents() -> None:
    abi1 = ll.fs_rights(1)
    assert abi1 == (1 << 13) - 1 and bin(abi1).count("1") == 13  # EXECUTE .. MAKE_SYM
    assert ll.fs_rights(2) == abi1 | ll.ACCESS_FS_REFER
    assert ll.fs_rights(3) == ll.fs_rights(2) | ll.ACCESS_FS_TRUNCATE
    assert ll.fs_rights(4) == ll.fs_rights(3)  # ABI 4 adds network rights only
    assert ll.fs_rights(5) == ll.fs_rights(4) | ll.ACCESS_FS_IOCTL_DEV
    assert ll.fs_rights(7) == ll.fs_rights(6) == ll.fs_rights(5)
    assert ll.fs_rights(0) == 0
    assert (ll.net_rights(3), ll.net_rights(4)) == (0, 0b11)
    assert (ll.scopes(5), ll.scopes(6)) == (0, 0b11)
    assert [ll.ruleset_attr_size(a) for a in (1, 3, 4, 5, 6, 7)] == [8, 8, 16, 16, 24, 24]


def test_kernel_structs_have_the_kernel_layout() -> None:
    assert ctypes.sizeof(ll.RulesetAttr) == 24
    assert ctypes.sizeof(ll.PathBeneathAttr) == 12  # packed, as in the uapi header
    assert ll.PathBeneathAttr.parent_fd.offset == 8


def test_errno_reasons_are_readable() -> None:
    assert "CONFIG_SECURITY_LANDLOCK" in ll.reason_for("landlock_add_rule", errno.ENOSYS)
    assert "disabled at boot" in ll.reason_for("landlock_restrict_self", errno.EOPNOTSUPP)
    assert "non-directory" in ll.reason_for("landlock_add_rule", errno.EINVAL)
    assert "no_new_privs" in ll.reason_for("landlock_restrict_self", errno.EPERM)
    assert ll.describe_fs(ll.ACCESS_FS_REMOVE_FILE | 1 << 40) == ["REMOVE_FILE", hex(1 << 40)]


def test_the_product_has_no_switch_to_hide_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 12: the old test switch is gone; hiding is done from outside (tests/hide_landlock.py).
    monkeypatch.setenv("FS_NOTES_HIDE_LANDLOCK", "1")
    if requirement("landlock")[0] == "run":
        assert ll.abi_version() >= 1
    assert not hasattr(ll, "hidden")


# -- plumbing: real syscalls that do not restrict anything ----------------------------------


def test_a_stale_errno_does_not_turn_a_success_into_an_error() -> None:
    if not landlock_runs():
        return
    ctypes.set_errno(errno.EPERM)  # the PyPI package would raise on this
    assert ll.abi_version() >= 1
    fd = ll.create_ruleset(ll.abi_version(), ll.ACCESS_FS_READ_FILE)
    os.close(fd)


def test_failures_raise_with_the_kernels_errno(tmp_path: Path) -> None:
    if not landlock_runs():
        return
    abi = ll.abi_version()
    with pytest.raises(ll.LandlockError) as info:
        ll.create_ruleset(abi, 0)
    assert info.value.errno == errno.ENOMSG
    with pytest.raises(ll.LandlockError) as info:
        ll.create_ruleset(abi, 1 << 60)
    assert info.value.errno == errno.EINVAL
    (tmp_path / "file").write_bytes(b"")
    ruleset = ll.create_ruleset(abi, ll.fs_rights(abi))
    file_fd = os.open(tmp_path / "file", os.O_PATH | os.O_CLOEXEC)
    try:
        with pytest.raises(ll.LandlockError) as info:
            ll.add_path_rule(ruleset, file_fd, ll.ACCESS_FS_REMOVE_FILE)  # rules go on dirs
        assert info.value.errno == errno.EINVAL
        ll.add_path_rule(ruleset, file_fd, ll.ACCESS_FS_READ_FILE)  # file rights are fine
        with pytest.raises(ll.LandlockError) as info:
            ll.add_path_rule(ruleset, -1, ll.ACCESS_FS_READ_FILE)
        assert info.value.errno == errno.EBADF
        with pytest.raises(ll.LandlockError) as info:
            ll.restrict_self(-1)  # never restrict_self(ruleset) here: it would bind pytest
        if os.geteuid() == 0:
            assert info.value.errno == errno.EBADF
        else:  # the kernel checks no_new_privs or CAP_SYS_ADMIN before the fd, and says so
            assert info.value.errno == errno.EPERM
            assert "no_new_privs is not set and CAP_SYS_ADMIN is missing" in str(info.value)
    finally:
        os.close(file_fd)
        os.close(ruleset)


# -- porcelain: confine() in children --------------------------------------------------------


def test_confine_denies_outside_and_allows_inside(tree: Path) -> None:
    if not landlock_runs():
        return
    out = run_child(
        """
        inside, outside = sys.argv[1], sys.argv[2]
        out["before"] = attempt(lambda: read(outside))
        report = confine([(dir_fd(inside), ll.ACCESS_FS_READ_FILE | ll.ACCESS_FS_READ_DIR)])
        out["handled_all"] = report.handled_fs == ll.fs_rights(report.abi)
        out["inside"] = attempt(lambda: read(inside + "/note.md"))
        out["outside"] = attempt(lambda: read(outside))
        out["nnp"] = no_new_privs()
        """,
        str(tree / "inside"),
        str(tree / "outside.md"),
    )
    assert out == {
        "before": "ok",
        "handled_all": True,
        "inside": "ok",
        "outside": "EACCES",
        "nnp": True,
    }


def test_every_right_not_allowed_is_denied_even_inside(tree: Path) -> None:
    if not landlock_runs():
        return
    out = run_child(
        """
        inside = sys.argv[1]
        out["read_before"] = attempt(lambda: read(inside + "/note.md"))
        confine([(dir_fd(inside), ll.ACCESS_FS_REMOVE_FILE)])
        out["read"] = attempt(lambda: read(inside + "/note.md"))
        new = inside + "/new.md"
        out["create"] = attempt(lambda: os.close(os.open(new, os.O_CREAT | os.O_WRONLY)))
        out["mkdir"] = attempt(lambda: os.mkdir(inside + "/d"))
        out["unlink"] = attempt(lambda: os.unlink(inside + "/note.md"))
        """,
        str(tree / "inside"),
    )
    assert out == {
        "read_before": "ok",
        "read": "EACCES",
        "create": "EACCES",
        "mkdir": "EACCES",
        "unlink": "ok",
    }
    assert not (tree / "inside" / "new.md").exists()


def test_confine_closes_its_ruleset_fd(tree: Path) -> None:
    if not landlock_runs():
        return
    out = run_child(
        """
        fd = dir_fd(sys.argv[1])
        before = sorted(os.listdir("/proc/self/fd"))
        confine([(fd, ll.ACCESS_FS_READ_DIR)])
        # /proc/self/fd is outside the rule now; probe the fd numbers directly.
        after = [n for n in range(64) if attempt(lambda n=n: os.fstat(n)) == "ok"]
        out["leaked"] = [n for n in after if str(n) not in before]
        """,
        str(tree / "inside"),
    )
    assert out == {"leaked": []}


def test_confine_refuses_bad_rules_before_changing_anything(tree: Path) -> None:
    if not landlock_runs():
        return
    out = run_child(
        """
        inside, outside = sys.argv[1], sys.argv[2]
        file_fd = os.open(outside, os.O_PATH | os.O_CLOEXEC)
        for name, rules in [
            ("file_rule", [(file_fd, ll.ACCESS_FS_REMOVE_FILE)]),
            ("not_handled", [(dir_fd(inside), 1 << 40)]),
            ("empty", [(dir_fd(inside), 0)]),
        ]:
            try:
                confine(rules)
                out[name] = "confined"
            except ValueError:
                out[name] = "ValueError"
        try:
            confine([(dir_fd(inside), ll.ACCESS_FS_READ_FILE)], handled=ll.ACCESS_FS_REMOVE_FILE)
            out["allowed_not_handled"] = "confined"
        except ValueError:
            out["allowed_not_handled"] = "ValueError"
        out["nnp"] = no_new_privs()
        out["outside"] = attempt(lambda: read(outside))
        """,
        str(tree / "inside"),
        str(tree / "outside.md"),
    )
    assert out == {
        "file_rule": "ValueError",
        "not_handled": "ValueError",
        "empty": "ValueError",
        "allowed_not_handled": "ValueError",
        "nnp": INHERITED_NNP,
        "outside": "ok",
    }


def test_confine_refuses_a_multi_threaded_process(tree: Path) -> None:
    if not landlock_runs():
        return
    out = run_child(
        """
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        try:
            confine([(dir_fd(sys.argv[1]), ll.ACCESS_FS_READ_FILE)])
            out["result"] = "confined"
        except ConfinementError:
            out["result"] = "ConfinementError"
        stop.set()
        t.join()
        out["nnp"] = no_new_privs()
        """,
        str(tree / "inside"),
    )
    assert out == {"result": "ConfinementError", "nnp": INHERITED_NNP}


def test_tcp_and_signals_leave_the_domain_only_before_confining(tree: Path) -> None:
    if not landlock_runs():
        return
    out = run_child(
        """
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        def connect():
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                pass
        out["connect_before"] = attempt(connect)
        out["signal_before"] = attempt(lambda: os.kill(os.getppid(), 0))
        report = confine([(dir_fd(sys.argv[1]), ll.ACCESS_FS_READ_FILE)])
        out["abi"] = report.abi
        out["connect_after"] = attempt(connect)
        out["signal_after"] = attempt(lambda: os.kill(os.getppid(), 0))
        """,
        str(tree / "inside"),
    )
    assert out["connect_before"] == "ok" and out["signal_before"] == "ok"
    assert out["connect_after"] == ("EACCES" if out["abi"] >= 4 else "ok")
    assert out["signal_after"] == ("EPERM" if out["abi"] >= 6 else "ok")
