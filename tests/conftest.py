"""Two rules for the whole suite, both about who runs it (see tests/mountns.py, tests/layers.py).

- A test marked `mounts`, collected for a regular user, is replaced by a `MountRerun` item of
  the same id: it runs the test again alone in a user and mount namespace of its own, and is
  reported as that run's outcome; inside it, the test's body starts with no
  capability (so fs-notes runs as the regular user, with none) - unless it is marked
  `mounts(body=True)`: a test that mounts in its body and starts no fs-notes process.
- In the regular-user pass (.ci/user sets FS_NOTES_TEST_UNPRIVILEGED=1) the session fails if it
  runs as root (the launcher did not drop privilege) or if any test was skipped: every test
  there runs or fails.
- No test touches the state folder of whoever runs the suite (~/.local/state/fs-notes, where
  their own servers keep indexes of their notes): the session fails if anything there was
  made or changed while it ran (a server started without tests/wire.py's child_env).

And the one fixture several files share: `os_layers`, a list a test appends the OS layers it
made to (tests/oslayer.py `make_layer`), each closed after the test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import mountns
import pytest

if TYPE_CHECKING:
    from fs_notes.sandbox.confined import OsLayer

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


class _RerunFailed(Exception):
    pass


class MountRerun(pytest.Item):
    """A test marked `mounts`, collected for a regular user: run again alone, inside a user and
    mount namespace of its own (tests/mountns.py); it passes only if that run passed."""

    def __init__(self, *, original: pytest.Item, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.original_nodeid = original.nodeid
        marker = original.get_closest_marker("timeout")
        self.timeout = float(marker.args[0]) if marker and marker.args else 120.0
        self.own_markers.extend(original.own_markers)

    def runtest(self) -> None:
        args = list(self.config.invocation_params.args)
        plugins = tuple(
            args[i + 1] for i, arg in enumerate(args[:-1])
            if arg == "-p" and args[i + 1] != "no:cacheprovider"
        )  # fmt: skip
        passed, output = mountns.rerun(self.original_nodeid, self.timeout,
                                       self.config.rootpath, plugins)  # fmt: skip
        if not passed:
            raise _RerunFailed(output)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: object = None
    ) -> str:
        if isinstance(excinfo.value, _RerunFailed):
            return f"in a user and mount namespace of its own:\n{excinfo.value}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[str, int | None, str]:
        return self.original_nodeid.split("::")[0], None, self.name


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:  # fmt: skip
    if mountns.can_mount():
        return
    for i, item in enumerate(items):
        if item.get_closest_marker("mounts") is not None and item.parent is not None:
            items[i] = MountRerun.from_parent(item.parent, name=item.name, original=item)


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


@pytest.fixture
def os_layers() -> Iterator[list[OsLayer]]:
    made: list[OsLayer] = []
    yield made
    for layer in made:
        layer.close()
