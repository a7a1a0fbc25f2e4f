"""Child processes for the tests that confine: the prelude their code starts with, and one way
to run it.

Landlock, seccomp filters and mount namespaces cannot be undone, so a test that applies one
does so in a child (`python -c CODE ARG ...`), which reports by printing one JSON object on its
last line of output.

- `ATTEMPT` defines `attempt(fn)` in the child: "ok" if `fn()` returned, else the name of the
  errno of the OSError it raised ("EACCES", "ENOENT", ...; the number for one errno names not).
- `READ` defines `read(path)`: the file's bytes.
- `REPO_ON_PATH` puts the repository first on sys.path, for a child run isolated (`-I`).
- `run_child(code, *args)` runs code from the repository with tests/wire.py's `child_env()`
  (or `env`), or `isolated` (`python -I`, an empty environment): it asserts exit status 0 (its
  stderr is the message otherwise) and returns the JSON object of the last line.
- `run_body(prelude, body, *args)` runs `prelude`, then `body` (dedented), then prints the
  dict `out` the prelude made and the body filled.
- `release(holder)`: a child that holds something (a lock, an open database) until its stdin
  closes is told to let go, and waited for.

Does not: judge what the child found (each test asserts that, with its positive control).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

from wire import REPO, child_env

ATTEMPT = """
import errno

def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
"""

READ = """
def read(path):
    with open(path, "rb") as f:
        return f.read()
"""

REPO_ON_PATH = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
"""


def run_child(
    code: str,
    *args: str,
    env: dict[str, str] | None = None,
    isolated: bool = False,
    timeout: float = 60,
) -> dict[str, Any]:
    """`python -c code *args` (`-I` and an empty environment if `isolated`); exit 0 asserted;
    the JSON object on its last line of stdout."""
    flags = ["-I"] if isolated else []
    proc = subprocess.run(
        [sys.executable, *flags, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=None if isolated else REPO,
        env={} if isolated else (env if env is not None else child_env()),
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert isinstance(result, dict), proc.stdout
    return result


def run_body(prelude: str, body: str, *args: str, **how: Any) -> dict[str, Any]:
    """`prelude`, then `body` dedented, then `print(json.dumps(out))`, run by `run_child`."""
    code = prelude + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    return run_child(code, *args, **how)


def release(holder: subprocess.Popen[str]) -> None:
    """Close the holder's stdin (its signal to let go), wait for it, close its stdout."""
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(10)
    assert holder.stdout is not None
    holder.stdout.close()
