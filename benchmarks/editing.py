"""A move and an edit through the confined write worker, against the raw system calls (issue 17;
not in the test suite).

    .venv/bin/python benchmarks/editing.py [--runs N] [--kib K]

Starts `python -m fs_notes serve DIR` on stdio (self-confined, with the Landlock write worker)
and times, per call and on the client side, `notes_move` of one note back and forth between two
folders, and `notes_edit` of one exact replacement in a note of `--kib` KiB (default 16), each
`--runs` times (default 50) after two warm-up calls. Baselines in the same run, in this process:
a raw `renameat2(RENAME_NOREPLACE)` between two folder fds (fs/rename.py's binding) for the
move, and a raw edit (read, replace, temp file, fsync, rename) for the edit. The figures are
medians; the ratios to the baselines are what carries over between machines. Informational:
the issue names no target, so nothing here can MISS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from protocol import Row, StdioClient, print_table

from fs_notes.fs.rename import RENAME_NOREPLACE, renameat2


def raw_moves(folder: Path, runs: int) -> list[float]:
    (folder / "a").mkdir()
    (folder / "b").mkdir()
    (folder / "a" / "n.md").write_text("# N\n")
    a = os.open(folder / "a", os.O_RDONLY | os.O_DIRECTORY)
    b = os.open(folder / "b", os.O_RDONLY | os.O_DIRECTORY)
    times = []
    try:
        for n in range(runs):
            src, dst = (a, b) if n % 2 == 0 else (b, a)
            start = time.perf_counter()
            renameat2(src, "n.md", dst, "n.md", RENAME_NOREPLACE)
            times.append(time.perf_counter() - start)
    finally:
        os.close(a)
        os.close(b)
    return times


def raw_edits(note: Path, runs: int) -> list[float]:
    times = []
    for n in range(runs):
        start = time.perf_counter()
        text = note.read_text()
        new = text.replace(f"marker {n}\n", f"marker {n + 1}\n", 1)
        tmp = note.with_name(f".{note.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, new.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, note)
        times.append(time.perf_counter() - start)
    return times


def body(kib: int) -> str:
    line = "A line of an ordinary note, with some words in it.\n"
    return "# Note\n" + line * max(1, kib * 1024 // len(line)) + "marker 0\n"


def through_server(root: Path, runs: int, kib: int) -> tuple[list[float], list[float]]:
    (root / "a").mkdir()
    (root / "b").mkdir()
    (root / "a" / "m.md").write_text("# M\n")
    (root / "e.md").write_text(body(kib))
    client = StdioClient(str(root))
    uri = root.as_uri()
    try:
        at = "a"
        moves = []
        for n in range(runs + 2):
            to = "b" if at == "a" else "a"
            args = {"workspaceUri": uri, "id": f"{at}/m.md", "newId": f"{to}/m.md"}
            start = time.perf_counter()
            result = client.tool("notes_move", args)
            took = time.perf_counter() - start
            if result.get("isError"):
                raise RuntimeError(f"notes_move failed: {result}")
            at = to
            if n >= 2:
                moves.append(took)
        edits = []
        for n in range(runs + 2):
            edit = {"oldText": f"marker {n}\n", "newText": f"marker {n + 1}\n"}
            asked: dict[str, Any] = {"workspaceUri": uri, "id": "e.md", "edits": [edit]}
            start = time.perf_counter()
            result = client.tool("notes_edit", asked)
            took = time.perf_counter() - start
            if result.get("isError"):
                raise RuntimeError(f"notes_edit failed: {result}")
            if n >= 2:
                edits.append(took)
        return moves, edits
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--kib", type=int, default=16)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fs-notes-editing-"))
    try:
        (tmp / "raw").mkdir()
        raw_move = statistics.median(raw_moves(tmp / "raw", args.runs))
        note = tmp / "raw" / "e.md"
        note.write_text(body(args.kib))
        raw_edit = statistics.median(raw_edits(note, args.runs))
        (tmp / "notes").mkdir()
        moves, edits = through_server(tmp / "notes", args.runs, args.kib)
        move, edit = statistics.median(moves), statistics.median(edits)
        rows = [
            Row("raw renameat2(RENAME_NOREPLACE) (baseline)", raw_move, "s", None),
            Row(
                "notes_move through the confined worker, median",
                move,
                "s",
                None,
                note=f"{len(moves)} moves; max {max(moves) * 1000:.1f} ms",
            ),
            Row(
                "notes_move / raw renameat2",
                move / raw_move,
                "x",
                None,
                note="the tool also checks identities, fsyncs both folders, crosses a pipe",
            ),
            Row("raw edit: read, replace, temp, fsync, rename (baseline)", raw_edit, "s", None),
            Row(
                "notes_edit through the confined worker, median",
                edit,
                "s",
                None,
                note=f"{len(edits)} edits of a {args.kib} KiB note",
            ),
            Row("notes_edit / raw edit", edit / raw_edit, "x", None),
        ]
        print_table("move and edit over stdio, confined write worker", rows)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
