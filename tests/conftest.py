"""Two rules for the whole suite, both about who runs it (see tests/mountns.py, tests/layers.py).

- A test marked `mounts`, run by a regular user, runs again alone in a user and mount namespace
  of its own, and is reported as that run's outcome; inside it, the test's body starts with no
  capability (so fs-notes runs as the regular user, with none) - unless it is marked
  `mounts(body=True)`: a test that mounts in its body and starts no fs-notes process.
- In the regular-user pass (.ci/user sets FS_NOTES_TEST_UNPRIVILEGED=1) the session fails if it
  runs as root (the launcher did not drop privilege) or if any test was skipped: every test
  there runs or fails.
- No test touches the state folder of whoever runs the suite (~/.local/state/fs-notes, where
  their own servers keep indexes of their notes): the session fails if anything there was
  made or changed while it ran (a server started without tests/wire.py's child_env).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import mountns
import pytest

_STATE_BEFORE: dict[str, tuple[int, int]] = {}


def _state_listing() -> dict[str, tuple[int, int]]:
    from fs_notes.statefolder import state_home

    folder = state_home()
    out: dict[str, tuple[int, int]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        try:
            st = os.lstat(os.path.join(folder, name))
        except OSError:
            continue
        out[name] = (st.st_ino, st.st_mtime_ns)
    return out


def pytest_configure(config: pytest.Config) -> None:
    _STATE_BEFORE.update(_state_listing())
    if os.environ.get("FS_NOTES_TEST_UNPRIVILEGED") == "1" and os.geteuid() == 0:
        raise pytest.UsageError(
            "FS_NOTES_TEST_UNPRIVILEGED=1 but the tests run as root: the regular-user pass "
            "must be started as a regular user (.ci/user)"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if item.get_closest_marker("mounts") is None or mountns.can_mount():
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    started = time.monotonic()
    marker = item.get_closest_marker("timeout")
    timeout = float(marker.args[0]) if marker and marker.args else 120.0
    passed, output = mountns.rerun(item.nodeid, timeout)
    took = time.monotonic() - started
    for when in ("setup", "call", "teardown"):
        failed = when == "call" and not passed
        report = pytest.TestReport(
            nodeid=item.nodeid, location=item.location, keywords={}, when=when,
            outcome="failed" if failed else "passed", duration=took if when == "call" else 0.0,
            longrepr=f"in a user and mount namespace of its own:\n{output}" if failed else None,
        )  # fmt: skip
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    marker = item.get_closest_marker("mounts")
    in_body = marker is not None and marker.kwargs.get("body") is True
    if os.environ.get(mountns.INSIDE) == "1" and os.geteuid() != 0 and not in_body:
        mountns.drop_capabilities()  # the fixtures mounted; the body runs with none
    yield


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    after = _state_listing()
    touched = sorted(n for n, seen in after.items() if _STATE_BEFORE.get(n) != seen)
    if touched and os.environ.get(mountns.INSIDE) != "1":
        if reporter is not None:
            reporter.write_line(
                f"the tests made or changed {len(touched)} file(s) in the real state folder "
                f"(a server started without child_env): {', '.join(touched[:6])}", red=True,
            )  # fmt: skip
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if os.environ.get("FS_NOTES_TEST_UNPRIVILEGED") != "1":
        return
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped:
        if reporter is not None:
            reporter.write_line(
                f"regular-user pass: {skipped} test(s) skipped; none may be (tests/conftest.py)",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
