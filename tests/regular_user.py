"""Test helper: run fs-notes as a regular user, with the default Python or the distribution's.

The product's users are not root, and desktop MCP clients start the server with the
distribution's Python (Debian's /usr/bin/python3), so some tests run the real command both
ways (issue 25):
- `interpreters()`: the Python running the tests, and a virtualenv over /usr/bin/python3 made
  without pip, holding copies of fs-notes' runtime dependencies as this Python has them (the same
  packages, another interpreter; CPython 3.11's ABI is the same across patch levels), with this
  checkout on its path through a .pth.
- `regular_user(command, home)`: the command as it is when the tests do not run as root; as
  root, under `setpriv` as nobody (uid and gid 65534, no groups, no capabilities), with HOME and
  TMPDIR in `home`. `reachable(python)` says whether nobody can run that interpreter at all (a
  pyenv Python under a 0700 /root cannot be).

Does not: import the product, or decide whether a test may skip (the tests do, by CI=true).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DISTRIBUTION_PYTHON = Path("/usr/bin/python3")
NOBODY = 65534


def _runtime_files() -> list[Path]:
    """The installed files of fs-notes' runtime dependencies (recursively), beneath this
    Python's site-packages (the checkout itself goes on the path through a .pth)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    wanted, seen, files = ["fs-notes"], set(), []
    while wanted:
        name = wanted.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                wanted.append(req.name)
        if name == "fs-notes":
            continue
        base = Path(str(dist.locate_file("")))
        files += [base / f for f in dist.files or () if ".." not in Path(f).parts]
    return files


def distribution_venv(tmp: Path) -> Path | None:
    """A virtualenv over /usr/bin/python3 holding fs-notes' dependencies (copied from this
    Python's, so inside the venv as an installed one's are) and this checkout on its path
    (None: no such Python)."""
    if not DISTRIBUTION_PYTHON.exists():
        return None
    venv = tmp / "distribution-venv"
    subprocess.run(
        [str(DISTRIBUTION_PYTHON), "-m", "venv", "--without-pip", str(venv)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip())  # fmt: skip
    here = Path(sysconfig.get_paths()["purelib"])
    for file in _runtime_files():
        try:
            relative = file.relative_to(here)
        except ValueError:
            continue
        (purelib / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, purelib / relative)
    (purelib / "fs_notes_checkout.pth").write_text(f"{REPO}\n")
    for path in (venv, *venv.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644 | (path.stat().st_mode & 0o111))
    return python


def interpreters() -> tuple[dict[str, Path | None], Path]:
    """{"default": the Python running the tests, "distribution": a venv over /usr/bin/python3},
    and the folder holding that venv (readable by everyone; the caller removes it)."""
    tmp = Path(tempfile.mkdtemp(prefix="fs-notes-pythons-"))
    tmp.chmod(0o755)
    return {"default": Path(sys.executable), "distribution": distribution_venv(tmp)}, tmp


def home_for_nobody() -> Path:
    """A fresh folder under /tmp that the regular user owns (tmp_path is root's, 0700)."""
    home = Path(tempfile.mkdtemp(prefix="fs-notes-user-"))
    if os.geteuid() == 0:
        os.chown(home, NOBODY, NOBODY)
    return home


def regular_user(command: list[str], home: Path) -> list[str]:
    private = [f"HOME={home}", f"TMPDIR={home}", f"XDG_STATE_HOME={home}/state"]
    if os.geteuid() != 0:  # already a regular user: only the private home (never the real one)
        return ["env", *private, *command]
    setpriv = shutil.which("setpriv") or "setpriv"
    return [
        setpriv, "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--",
        "env", *private, "PATH=/usr/bin:/bin", "PYTHONUNBUFFERED=1", *command,
    ]  # fmt: skip


def reachable(python: Path, home: Path) -> bool:
    """Whether `regular_user` can run `python` at all."""
    probe = subprocess.run(
        regular_user([str(python), "-c", "import fs_notes"], home),
        capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    return probe.returncode == 0
