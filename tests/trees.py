"""Test trees: folders of notes written one way, from a mapping of path to content.

`files(root, {"projects/tps.md": "# TPS report\\n", "outside/": ""})` makes `root` and every
folder on the way, writes each file (text as UTF-8, bytes as they are) and makes each name that
ends in "/" an empty folder; it returns `root`. Tests that need links, modes or owners make
them after, by hand, where the reader sees them.

Does not: remove anything, follow or refuse links (the tests' own tmp_path is the root).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def files(root: Path, contents: Mapping[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in contents.items():
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root
