"""Known-item search quality on a real notes collection: fs-notes against a plain FTS5 baseline.

    .venv/bin/python benchmarks/search_quality.py FOLDER [--sample 300] [--seed 14] [--json]
        [--questions benchmarks/questions/NAME.json] [--misses]

The two collections the questions are written for, at the commits their files name:
    git clone https://github.com/obsidianmd/obsidian-help   # FOLDER: obsidian-help/en
    git clone https://github.com/tldr-pages/tldr            # FOLDER: a copy of tldr holding
                                                            # only pages/common and pages/linux

From --sample notes of FOLDER (a real public collection, e.g. obsidianmd/obsidian-help's `en/`
pages; the tests never use it) two query sets are built, and each `--questions FILE` adds one
written by a person in their own words (benchmarks/questions/: obsidian-help.json for that
folder, tldr.json for tldr-pages/tldr's pages/common and pages/linux, at the commits they
name): each note's title ("navigational"),
and the first sentence of its first paragraph ("natural", at most 12 words). Every query has
one right answer, the note it came from. Each set is run through the real server
(`fs-notes serve FOLDER` over stdio, `notes_search` with limit 10) and through a baseline built
in the same run: a plain SQLite FTS5 table (one `text` column holding title and body, default
unicode61 tokenizer) queried with the query's words OR'ed and ranked by bm25(). Reports MRR@10
and hit@10 per set and system. Exits 1 if fs-notes is below the baseline on either set.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
from wire import StdioServer, call_tool  # noqa: E402

from fs_notes.notes.titles import split_front_matter, title_of  # noqa: E402

_WORD = re.compile(r"\w+", re.UNICODE)


def _notes(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.rglob("*.md")):
        rel = path.relative_to(folder).as_posix()
        if any(part.startswith(".") for part in rel.split("/")) or path.is_symlink():
            continue
        try:
            out[rel] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
    return out


def _first_sentence(text: str) -> str | None:
    _, body = split_front_matter(text)
    for block in re.split(r"\n\s*\n", body):
        block = block.strip()
        if not block or block.startswith(("#", ">", "|", "-", "*", "!", "```", "<", "[", "1.")):
            continue
        sentence = re.split(r"(?<=[.!?])\s", re.sub(r"\[\[([^|\]]*\|)?([^\]]*)\]\]", r"\2",
                                                       block.replace("\n", " ")))[0]  # fmt: skip
        words = _WORD.findall(sentence)
        if len(words) >= 4:
            return " ".join(words[:12])
    return None


def _baseline(notes: dict[str, str]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(id UNINDEXED, text)")
    rows = (
        (nid, title_of(text, nid.rsplit("/", 1)[-1]) + "\n" + text) for nid, text in notes.items()
    )
    conn.executemany("INSERT INTO t (id, text) VALUES (?, ?)", rows)
    return conn


def _baseline_search(conn: sqlite3.Connection, query: str) -> list[str]:
    words = _WORD.findall(query)
    if not words:
        return []
    expression = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    rows = conn.execute(
        "SELECT id FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 10", (expression,)
    ).fetchall()
    return [r[0] for r in rows]


def _score(ranked: list[list[str]], answers: list[str]) -> dict[str, float]:
    rr = hits = 0.0
    for ids, answer in zip(ranked, answers, strict=True):
        if answer in ids[:10]:
            hits += 1
            rr += 1 / (ids.index(answer) + 1)
    n = max(1, len(answers))
    return {"mrr@10": round(rr / n, 3), "hit@10": round(hits / n, 3), "queries": len(answers)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("folder", type=Path)
    p.add_argument("--sample", type=int, default=300)
    p.add_argument("--seed", type=int, default=14)
    p.add_argument("--json", action="store_true")
    p.add_argument("--misses", action="store_true", help="print what the baseline found and we not")
    p.add_argument(
        "--questions", type=Path, action="append", default=[], metavar="FILE",
        help="a set of questions written by a person (benchmarks/questions/)",
    )  # fmt: skip
    a = p.parse_args()
    folder = a.folder.resolve()
    notes = _notes(folder)
    rng = random.Random(a.seed)
    chosen = rng.sample(sorted(notes), min(a.sample, len(notes)))
    sets: dict[str, list[tuple[str, str]]] = {"navigational": [], "natural": []}
    for nid in chosen:
        title = title_of(notes[nid], nid.rsplit("/", 1)[-1].removesuffix(".md"))
        if _WORD.search(title):
            sets["navigational"].append((title, nid))
        sentence = _first_sentence(notes[nid])
        if sentence:
            sets["natural"].append((sentence, nid))
    for file in a.questions:
        asked = json.loads(file.read_text())["questions"]
        missing = [nid for _, nid in asked if nid not in notes]
        if missing:
            p.error(f"{file}: answers not in {folder}: {missing[:3]} (another collection?)")
        sets[f"person:{file.stem}"] = [(q, nid) for q, nid in asked]
    conn = _baseline(notes)
    state = tempfile.mkdtemp(prefix="fs-notes-quality-")
    server = StdioServer("serve", str(folder), "--replay-db", state + "/replay.db")
    report: dict[str, Any] = {"folder": str(folder), "notes": len(notes), "sets": {}}
    try:
        server.send(call_tool(0, "notes_search", {"workspaceUri": folder.as_uri(), "query": "x"}))
        started = time.monotonic()
        server.recv(timeout=600)  # the cold index build
        report["index_build_s"] = round(time.monotonic() - started, 1)
        n = 0
        for name, queries in sets.items():
            ours, base = [], []
            for query, _ in queries:
                n += 1
                args = {"workspaceUri": folder.as_uri(), "query": query[:256], "limit": 10}
                server.send(call_tool(n, "notes_search", args))
                result = server.recv(timeout=60)["result"]
                found = result.get("structuredContent", {}).get("matches", [])
                ours.append([m["id"] for m in found])
                base.append(_baseline_search(conn, query))
            answers = [nid for _, nid in queries]
            if a.misses:
                for (query, nid), mine, theirs in zip(queries, ours, base, strict=True):
                    if nid in theirs[:10] and nid not in mine[:10]:
                        print(f"miss [{name}] {query!r} -> {nid} (ours: {mine[:3]})")
            report["sets"][name] = {"fs-notes": _score(ours, answers),
                                    "fts5 baseline": _score(base, answers)}  # fmt: skip
    finally:
        server.close()
    worse = [
        name
        for name, s in report["sets"].items()
        if s["fs-notes"]["mrr@10"] < s["fts5 baseline"]["mrr@10"]
        or s["fs-notes"]["hit@10"] < s["fts5 baseline"]["hit@10"]
    ]
    report["below_baseline"] = worse
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['notes']} notes in {folder}; cold index build {report['index_build_s']} s")
        for name, s in report["sets"].items():
            ours, base = s["fs-notes"], s["fts5 baseline"]
            print(f"{name:<20} ({ours['queries']} queries)  fs-notes MRR@10 {ours['mrr@10']:.3f} "
                  f"hit@10 {ours['hit@10']:.3f}   baseline MRR@10 {base['mrr@10']:.3f} "
                  f"hit@10 {base['hit@10']:.3f}")  # fmt: skip
        print("PASS" if not worse else f"BELOW THE BASELINE: {', '.join(worse)}")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
