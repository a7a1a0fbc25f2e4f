"""The package has no import circles (issue 15): the graph of which module imports which is built
from the source (every import, at module level or inside a function; only `if TYPE_CHECKING:`
blocks are left out, since they never run), and it must have no strongly connected component of
more than one module. The positive control builds the same graph over a package that does have a
circle."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _modules(package: Path, name: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        parts = [name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _canonical(name: str) -> str:
    """`sandbox.x` is `fs_notes.sandbox.x` (the top-level name is a symlink to the same files)."""
    return "fs_notes." + name if name == "sandbox" or name.startswith("sandbox.") else name


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        skipped = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for node in ast.walk(block)
        }
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                prefix = _canonical(".".join([*base, *([node.module] if node.module else [])]))
                for alias in node.names:
                    full = f"{prefix}.{alias.name}"
                    target = full if full in mods else prefix
                    if target in mods and target != mod:
                        edges[mod].add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    target = _canonical(alias.name)
                    while target and target not in mods:
                        target = target.rpartition(".")[0]
                    if target and target != mod:
                        edges[mod].add(target)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_of_the_package_imports_itself_through_others() -> None:
    mods = {m: p for m, p in _modules(REPO / "fs_notes", "fs_notes").items()
            if not m.startswith("fs_notes.sandbox")}  # fmt: skip
    mods.update(_modules(REPO / "sandbox", "fs_notes.sandbox"))  # fs_notes/sandbox -> ../sandbox
    edges = _graph(mods)
    assert "fs_notes.sandbox.process" in edges["fs_notes.sandbox.view"]  # absolute, in functions
    assert len(edges) > 100 and sum(map(len, edges.values())) > 300  # the graph is real
    assert _circles(edges) == []


def test_a_circle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .sub.c import g\n")  # inside a function too
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from ..a import x\nfrom typing import TYPE_CHECKING\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .e import y\n")  # fmt: skip
    (pkg / "e.py").write_text("from .d import z\n")  # only through TYPE_CHECKING: no circle
    assert _circles(_graph(_modules(pkg, "pkg"))) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
