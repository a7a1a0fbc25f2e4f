"""The note model stays below the tools (issue 28 item 3; which way the rest of the package's
imports run is import-linter's, tests/test_import_contracts.py): fs_notes.notes imports nothing from
fs_notes.tools, fs_notes.fs, fs_notes.search, fs_notes.protocol, fs_notes.transport or
fs_notes.sandbox, directly or through the modules it imports, counting `if TYPE_CHECKING:`
imports too; the only package modules it reaches are its own, fs_notes.render and
fs_notes.lexical; from outside the package they import only PyYAML, ruamel.yaml and pure
standard-library modules (no os, io, pathlib, socket, sqlite3, ...), and call none of the
builtins that do I/O or run code (`open`, `print`, `input`, `exec`, `eval`, `compile`,
`__import__`, `breakpoint`). Its positive control breaks each rule once in a synthetic package
and must see every break."""

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


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes inside `if TYPE_CHECKING:` blocks."""
    return {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for node in ast.walk(block)
    }


def _graph(mods: dict[str, Path], type_checking: bool = False) -> dict[str, set[str]]:
    """Which module imports which (`type_checking`: `if TYPE_CHECKING:` imports count too)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        skipped = set() if type_checking else _type_checking_only(tree)
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                prefix = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{prefix}.{alias.name}"
                    target = full if full in mods else prefix
                    if target in mods and target != mod:
                        edges[mod].add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    target = alias.name
                    while target and target not in mods:
                        target = target.rpartition(".")[0]
                    if target and target != mod:
                        edges[mod].add(target)
    return edges


def _package() -> dict[str, Path]:
    return _modules(REPO / "fs_notes", "fs_notes")


PURE_STDLIB = frozenset({
    "__future__", "bisect", "collections", "collections.abc", "dataclasses", "difflib", "enum",
    "functools", "itertools", "json", "math", "re", "typing", "unicodedata", "urllib.parse",
})  # fmt: skip
"""The standard-library modules the note model may import: text and data only, no I/O."""
IO_BUILTINS = frozenset({
    "open", "print", "input", "exec", "eval", "compile", "__import__", "breakpoint",
})  # fmt: skip


def _outside_imports(path: Path, root: str) -> set[str]:
    """The modules from outside the package `root` that `path` imports (every import, in
    functions and `if TYPE_CHECKING:` blocks too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        out |= {n for n in names if n != root and not n.startswith(root + ".")}
    return out


def _layer_breaches(
    mods: dict[str, Path],
    layer: str,
    may_reach: set[str],
    forbidden: tuple[str, ...],  # packages
    may_import: frozenset[str],
) -> list[str]:
    """Every way the modules of package `layer` break its rule: a module of the package it
    reaches (directly or through the modules it imports) that is in `forbidden` or is neither in
    `layer` nor in `may_reach`; a module from outside the package, imported by one it reaches,
    that is not in `may_import`; a call of one of `IO_BUILTINS` in one it reaches."""
    edges = _graph(mods, type_checking=True)
    root = layer.split(".")[0]
    start = sorted(m for m in mods if m == layer or m.startswith(layer + "."))
    seen, work, out = set(start), list(start), []
    while work:
        mod = work.pop()
        for target in sorted(edges[mod]):
            if any(target == p or target.startswith(p + ".") for p in forbidden):
                out.append(f"{mod} -> {target} (forbidden)")
            elif not (target == layer or target.startswith(layer + ".") or target in may_reach):
                out.append(f"{mod} -> {target} (not allowed)")
            elif target not in seen:
                seen.add(target)
                work.append(target)
        for name in sorted(_outside_imports(mods[mod], root) - may_import):
            out.append(f"{mod} imports {name}")
        for node in ast.walk(ast.parse(mods[mod].read_text())):
            if isinstance(node, ast.Name) and node.id in IO_BUILTINS:
                out.append(f"{mod} uses {node.id}")
    return sorted(out)


#: The YAML libraries the note model reads and edits front matter with (PyYAML; ruamel.yaml's
#: round trip for notes_properties).
_YAML = {"yaml", "ruamel.yaml", "ruamel.yaml.comments", "ruamel.yaml.error"}
NOTE_MODEL_FORBIDDEN = tuple(
    f"fs_notes.{p}" for p in ("tools", "fs", "search", "protocol", "transport", "sandbox")
)


def test_the_note_model_imports_nothing_above_it() -> None:
    mods = _package()
    layer = sorted(m for m in mods if m.startswith("fs_notes.notes."))
    assert len(layer) >= 6 and "fs_notes.notes" in mods  # the package is real
    edges = _graph(mods)
    assert "fs_notes.notes.titles" in edges["fs_notes.notes.tags"]  # edges inside it are seen
    assert "fs_notes.notes.links" in edges["fs_notes.tools.indexed"]  # the tools stand on it
    breaches = _layer_breaches(mods, "fs_notes.notes", {"fs_notes.render", "fs_notes.lexical"},
                               NOTE_MODEL_FORBIDDEN, PURE_STDLIB | _YAML)  # fmt: skip
    assert breaches == []


def test_a_layer_breach_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    for folder in ("notes", "tools", "search"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "render.py").write_text("import json\nfrom .search import index\n")  # reached: checked
    (pkg / "other.py").write_text("")
    (pkg / "search" / "index.py").write_text("import sqlite3\n")
    (pkg / "tools" / "t.py").write_text("from ..notes import a\n")  # downwards: fine
    (pkg / "notes" / "a.py").write_text(
        "from __future__ import annotations\nimport re\n"
        "from . import b\nfrom ..render import shown\n"
    )
    (pkg / "notes" / "b.py").write_text("def f():\n    from ..tools.t import g\n")  # in a function
    (pkg / "notes" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    import pkg.other\n    import os.path\n"
    )
    (pkg / "notes" / "d.py").write_text("def f(p):\n    return open(p).read()\n")
    allowed = frozenset({"__future__", "re", "json", "typing"})
    breaches = _layer_breaches(_modules(pkg, "pkg"), "pkg.notes", {"pkg.render"},
                               ("pkg.tools",), allowed)  # fmt: skip
    assert breaches == [
        "pkg.notes.b -> pkg.tools.t (forbidden)",  # in a function
        "pkg.notes.c -> pkg.other (not allowed)",  # under TYPE_CHECKING
        "pkg.notes.c imports os.path",
        "pkg.notes.d uses open",
        "pkg.render -> pkg.search.index (not allowed)",  # through a module it may reach
    ]  # and nothing for a.py's imports, nor for tools/t.py importing the model
