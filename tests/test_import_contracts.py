"""Which way the package's imports run (issue 28 item 4): import-linter's contracts in
pyproject.toml ([tool.importlinter]: no circles at any level, the request path's layers, the
tools and the OS layer independent, the OS layer below the request path) hold over fs_notes as
it is. The positive control copies the package, plants one import that breaks exactly one
contract, and must see `lint-imports` name that contract and only it; an import planted inside
`if TYPE_CHECKING:` (which never runs) must break none."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
NAMES = {c["type"]: c["name"] for c in CONFIG["contracts"]}
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _lint(where: Path) -> tuple[int, str]:
    """`lint-imports` over the package found first from `where` (its own copy, not the one
    installed), with the repository's contracts."""
    proc = subprocess.run(
        [LINT, "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=where,
        env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, re.sub(r"\s+", " ", proc.stdout)


def _broken(output: str) -> set[str]:
    return {kind for kind, name in NAMES.items() if f"{name} BROKEN" in output}


def test_the_import_contracts_hold() -> None:
    code, out = _lint(REPO)
    assert f"Contracts: {len(NAMES)} kept, 0 broken." in out, out
    assert code == 0
    assert len(NAMES) == 4  # one contract of each kind, as pyproject.toml states them


PLANTS = [
    # (module, line planted at its end, the one contract it breaks)
    ("fs_notes/tools/context.py", "import fs_notes.sandbox.kinds", "independence"),
    ("fs_notes/sandbox/kinds.py", "import fs_notes.protocol.models", "forbidden"),
    ("fs_notes/notes/tags.py", "import fs_notes.protocol.models", "layers"),
    ("fs_notes/render.py", "import fs_notes.logline", "acyclic_siblings"),
    (
        "fs_notes/tools/context.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fs_notes.sandbox.kinds",
        None,
    ),
]


@pytest.mark.parametrize(("module", "line", "contract"), PLANTS, ids=[
    "a tool importing the OS layer breaks their independence",
    "the OS layer importing the protocol is forbidden",
    "the note model importing the protocol breaks the layers",
    "two modules importing each other is a circle",
    "an import only type checking sees breaks nothing",
])  # fmt: skip
def test_one_planted_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str | None
) -> None:
    shutil.copytree(REPO / "fs_notes", tmp_path / "fs_notes",
                    ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)  # fmt: skip
    code, out = _lint(tmp_path)
    assert code == 0 and _broken(out) == set(), out  # the copy keeps them all, as the package
    planted = tmp_path / module
    planted.write_text(planted.read_text() + "\n" + line + "\n")
    code, out = _lint(tmp_path)
    if contract is None:
        assert code == 0 and _broken(out) == set(), out
    else:
        assert code == 1 and _broken(out) == {contract}, out
        assert f"Contracts: {len(NAMES) - 1} kept, 1 broken." in out
