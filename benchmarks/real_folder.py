"""Serve a real folder of markdown notes and check that every note on disk can be listed and read.

    .venv/bin/python benchmarks/real_folder.py FOLDER [--json] [--concurrency N] [--timeout S]

Starts `python -m fs_notes serve FOLDER` on stdio through the official MCP Python SDK client and:
  - walks every page of `notes_list` (limit 1000, following `nextCursor`), collecting the ids and
    summing the `skipped` counts (reason -> count) the server may return with a page;
  - walks every page of `resources/list` (following `nextCursor`);
  - reads every listed note with `notes_read` (and compares its content with the file on disk)
    and every listed resource with `resources/read`;
  - counts the `*.md` regular files on disk itself (not following symlinks, skipping every path
    component that starts with '.'); a name that is not UTF-8 cannot be a note id, so it is
    reported as skipped on disk ("not UTF-8") rather than expected in the listing.
Prints what was found (notes on disk, listed, read ok/failed, skipped by reason, ids on disk but
not listed and the reverse) and the wall time of each phase; --json prints the same as JSON.
Each request has a timeout; a timeout or a lost connection ends the run with what was gathered.

Exits 0 when nothing failed (every read ok, no content mismatch, no id listed that is not on disk)
and every note on disk was listed by both listings or covered by the server's skipped counts
(the server reports counts, not ids, so that check is by count); else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parent.parent
LIST_LIMIT = 1000
MAX_PAGES = 100_000  # a cursor that never ends is a bug, not a big folder
SHOW = 10  # ids shown per difference
SHOW_ERRORS = 5  # error messages kept per kind


class Aborted(Exception):
    """The run cannot go on (a timeout, a lost connection, a cursor loop)."""


@dataclass
class Disk:
    ids: set[str] = field(default_factory=set)
    hard_linked: int = 0
    not_utf8: list[bytes] = field(default_factory=list)


@dataclass
class Reads:
    ok: int = 0
    failed: int = 0
    mismatched: int = 0
    errors: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.failed += 1
        if len(self.errors) < SHOW_ERRORS:
            self.errors.append(message)


@dataclass
class Report:
    folder: str
    disk: Disk = field(default_factory=Disk)
    listed: list[str] = field(default_factory=list)
    resources: list[tuple[str, str]] = field(default_factory=list)  # (name, uri)
    skipped: Counter[str] = field(default_factory=Counter)
    note_reads: Reads = field(default_factory=Reads)
    resource_reads: Reads = field(default_factory=Reads)
    seconds: dict[str, float] = field(default_factory=dict)
    aborted: str | None = None
    server_stderr: str = ""
    structure: dict[str, Any] = field(default_factory=dict)
    structure_errors: list[str] = field(default_factory=list)


def walk_disk(folder: str) -> Disk:
    """The *.md regular files under ``folder``, as ids ('/'-separated paths relative to it)."""
    disk = Disk()
    top = os.fsencode(folder)
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(b"."))
        for name in filenames:
            if name.startswith(b".") or not name.endswith(b".md"):
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue  # gone since the listing
            if not stat.S_ISREG(st.st_mode):
                continue  # a symlink, a fifo, ...
            rel = os.path.relpath(path, top).replace(os.sep.encode(), b"/")
            try:
                note_id = rel.decode("utf-8")
            except UnicodeDecodeError:
                disk.not_utf8.append(rel)
                continue
            disk.ids.add(note_id)
            disk.hard_linked += st.st_nlink > 1
    return disk


def folder_uri(folder: str) -> str:
    return "file://" + urllib.parse.quote(os.fsencode(os.path.abspath(folder)))


def on_disk(folder: str, note_id: str) -> str | None:
    """The file's text as the server decodes it, or None when it cannot be read."""
    try:
        return (Path(folder) / note_id).read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


async def timed(seconds: float, what: str, call: Awaitable[Any]) -> Any:
    try:
        with anyio.fail_after(seconds):
            return await call
    except TimeoutError:
        raise Aborted(f"no answer to {what} within {seconds:g} s") from None


async def walk_notes_list(client: Client, uri: str, report: Report, timeout: float) -> None:
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        args: dict[str, Any] = {"workspaceUri": uri, "limit": LIST_LIMIT}
        if cursor is not None:
            args["cursor"] = cursor
        page = await timed(timeout, "notes_list", client.call_tool("notes_list", args))
        if page.is_error or page.structured_content is None:
            raise Aborted(f"notes_list failed: {text_of(page.content)}")
        structured = page.structured_content
        report.listed.extend(note["id"] for note in structured.get("notes", []))
        report.skipped.update(structured.get("skipped") or {})
        cursor = structured.get("nextCursor")
        if cursor is None:
            return
        if cursor in seen:
            raise Aborted("notes_list returned the same nextCursor twice")
        seen.add(cursor)
    raise Aborted(f"notes_list: more than {MAX_PAGES} pages")


async def walk_resources(client: Client, report: Report, timeout: float) -> None:
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        try:
            page = await timed(timeout, "resources/list", client.list_resources(cursor=cursor))
        except MCPError as exc:
            raise Aborted(f"resources/list failed: {exc.message}") from None
        report.resources.extend((r.name, str(r.uri)) for r in page.resources)
        cursor = page.next_cursor
        if cursor is None:
            return
        if cursor in seen:
            raise Aborted("resources/list returned the same nextCursor twice")
        seen.add(cursor)
    raise Aborted(f"resources/list: more than {MAX_PAGES} pages")


def text_of(content: Iterable[Any]) -> str:
    return " ".join(c.text for c in content if isinstance(c, types.TextContent)) or "(no text)"


async def read_notes(client: Client, uri: str, report: Report, timeout: float, n: int) -> None:
    reads = report.note_reads

    async def read(note_id: str) -> None:
        args = {"workspaceUri": uri, "id": note_id}
        result = await timed(timeout, "notes_read", client.call_tool("notes_read", args))
        if result.is_error:
            reads.fail(f"{note_id!r}: {text_of(result.content)}")
            return
        reads.ok += 1
        content = (result.structured_content or {}).get("content")
        expected = on_disk(report.folder, note_id)
        if expected is not None and content != expected:
            reads.mismatched += 1
            if len(reads.errors) < SHOW_ERRORS:
                reads.errors.append(f"{note_id!r}: content differs from the file on disk")

    await in_parallel(read, sorted(set(report.listed)), n)


LINK_SAMPLE = 400
QUERIES = ("getting started", "how to embed images", "keyboard shortcuts", "sync")


async def structure(client: Client, uri: str, report: Report, timeout: float) -> None:
    """Tags, links and backlinks, search and recent notes, as a client sees them; checks that
    they agree with each other: every backlink's note links to the note, every note a tag lists
    carries it, every id named is a listed note."""
    listed = set(report.listed)
    errors = report.structure_errors

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await timed(timeout, name, client.call_tool(name, {"workspaceUri": uri, **args}))
        if result.is_error:
            errors.append(f"{name} {args}: {text_of(result.content)}")
            return {}
        return dict(result.structured_content or {})

    tags = (await call("notes_tags", {})).get("tags", [])
    report.structure["tags"] = len(tags)
    report.structure["top tags"] = [f"#{t['tag']} ({t['count']})" for t in tags[:5]]
    if tags:
        top = tags[0]
        carrying = (await call("notes_tags", {"tag": top["tag"]})).get("notes", [])
        if len(carrying) < min(top["count"], 500) or any(n["id"] not in listed for n in carrying):
            errors.append(f"notes_tags {top['tag']!r}: {len(carrying)} notes, count {top['count']}")
    sample = sorted(listed)[:: max(1, len(listed) // LINK_SAMPLE)]
    links = resolved = backlinks = 0
    outgoing: dict[str, set[str]] = {}
    backs: dict[str, list[str]] = {}
    for note_id in sample:
        got = await call("notes_links", {"id": note_id})
        outs = got.get("links", [])
        links += len(outs)
        resolved += sum(1 for o in outs if o["id"])
        outgoing[note_id] = {o["id"] for o in outs if o["id"]}
        backs[note_id] = got.get("backlinks", [])
        backlinks += len(backs[note_id])
        for other in [o["id"] for o in outs if o["id"]] + backs[note_id]:
            if other not in listed:
                errors.append(f"notes_links {note_id!r} names {other!r}, which is not listed")
    for note_id, sources in backs.items():  # each backlink's own links lead here
        for source in sources[:3]:
            if source not in outgoing:
                got = await call("notes_links", {"id": source})
                outgoing[source] = {o["id"] for o in got.get("links", []) if o["id"]}
            if note_id not in outgoing[source]:
                errors.append(f"{source!r} is a backlink of {note_id!r} but does not link to it")
    report.structure["notes_links sampled"] = len(sample)
    report.structure["links (resolved)"] = f"{links} ({resolved})"
    report.structure["backlinks"] = backlinks
    for query in QUERIES:
        matches = (await call("notes_search", {"query": query, "limit": 3})).get("matches", [])
        report.structure[f"search {query!r}"] = [m["id"] for m in matches]
    recent = (await call("notes_list", {"recent": True, "limit": 3})).get("notes", [])
    report.structure["recent"] = [n["id"] for n in recent]


async def read_resources(client: Client, report: Report, timeout: float, n: int) -> None:
    reads = report.resource_reads

    async def read(uri: str) -> None:
        try:
            result = await timed(timeout, "resources/read", client.read_resource(uri))
        except MCPError as exc:
            reads.fail(f"{uri}: {exc.code} {exc.message}")
            return
        if any(isinstance(c, types.TextResourceContents) for c in result.contents):
            reads.ok += 1
        else:
            reads.fail(f"{uri}: no text contents")

    await in_parallel(read, sorted({u for _, u in report.resources}), n)


async def in_parallel(work: Callable[[str], Awaitable[None]], items: list[str], n: int) -> None:
    """``work`` on every item, at most ``n`` at a time (the first Aborted stops them all)."""
    pending = iter(items)

    async def worker() -> None:
        for item in pending:  # one shared iterator: each item is taken once
            await work(item)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(worker)
    except BaseExceptionGroup as group:
        aborted = group.subgroup(Aborted)
        if aborted is None:
            raise
        raise aborted.exceptions[0] from None


async def run(report: Report, concurrency: int, timeout: float) -> None:
    folder = report.folder
    uri = folder_uri(folder)
    start = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal start
        now = time.perf_counter()
        report.seconds[name] = round(now - start, 3)
        start = now

    report.disk = walk_disk(folder)
    phase("disk walk")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "fs_notes", "serve", folder],
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        # The handshake is bounded by read_timeout_seconds; each later request by fail_after.
        transport = stdio_client(params, errlog=errlog)
        try:
            async with Client(transport, cache=None, read_timeout_seconds=timeout) as client:
                phase("server start")
                await walk_notes_list(client, uri, report, timeout)
                phase("notes_list walk")
                await walk_resources(client, report, timeout)
                phase("resources/list walk")
                await read_notes(client, uri, report, timeout, concurrency)
                phase("notes_read all")
                await read_resources(client, report, timeout, concurrency)
                phase("resources/read all")
                await structure(client, uri, report, timeout)
                phase("tags, links, search")
        except Exception as exc:  # Aborted, no handshake, or the connection dropped
            report.aborted = describe(exc)
        if report.aborted is not None:
            errlog.seek(0)
            report.server_stderr = errlog.read()[-4000:]


def describe(exc: BaseException) -> str:
    """The innermost first exception of (possibly nested) exception groups, as one line."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return str(exc) if isinstance(exc, Aborted) else f"{type(exc).__name__}: {exc}"


def summary(report: Report) -> dict[str, Any]:
    disk = report.disk.ids
    listed, named = set(report.listed), {name for name, _ in report.resources}
    missing, phantom = sorted(disk - listed), sorted(listed - disk)
    skipped_total = sum(report.skipped.values())
    notes, res = report.note_reads, report.resource_reads
    failures = {
        "notes_read failed": notes.failed,
        "notes_read content mismatch": notes.mismatched,
        "resources/read failed": res.failed,
        "listed but not on disk": len(phantom),
        "duplicate ids in notes_list": len(report.listed) - len(listed),
        "on disk, not listed by notes_list, beyond skipped": max(0, len(missing) - skipped_total),
        "on disk, not in resources/list, beyond skipped": max(0, len(disk - named) - skipped_total),
        "tags, links or search disagree": len(report.structure_errors),
    }
    ok = report.aborted is None and not any(failures.values())
    return {
        "folder": report.folder,
        "ok": ok,
        "aborted": report.aborted,
        "notes on disk": len(disk),
        "notes on disk hard-linked": report.disk.hard_linked,
        "skipped on disk": {"not UTF-8": len(report.disk.not_utf8)},
        "skipped on disk, first": [repr(p) for p in report.disk.not_utf8[:SHOW]],
        "listed by notes_list": len(listed),
        "listed by resources/list": len(named),
        "skipped by the server": dict(sorted(report.skipped.items())),
        "notes_read ok": notes.ok,
        "notes_read failed": notes.failed,
        "notes_read content mismatch": notes.mismatched,
        "notes_read errors, first": notes.errors,
        "resources/read ok": res.ok,
        "resources/read failed": res.failed,
        "resources/read errors, first": res.errors,
        "on disk, not listed": len(missing),
        "on disk, not listed, first": [repr(i) for i in missing[:SHOW]],
        "listed, not on disk": len(phantom),
        "listed, not on disk, first": [repr(i) for i in phantom[:SHOW]],
        "in notes_list, not in resources/list": len(listed - named),
        "in resources/list, not in notes_list": len(named - listed),
        **report.structure,
        "tags, links, search errors, first": report.structure_errors[:SHOW],
        "failures": {k: v for k, v in failures.items() if v},
        "seconds": report.seconds,
        "server stderr (tail)": report.server_stderr or None,
    }


def print_summary(s: dict[str, Any]) -> None:
    width = max(len(k) for k in s)
    for key, value in s.items():
        if value in (None, [], {}) and key != "skipped by the server":
            continue
        if isinstance(value, list):
            print(f"{key}:")
            for item in value:
                print(f"    {item}")
        elif key == "server stderr (tail)":
            print(f"{key}:")
            print("    " + str(value).rstrip().replace("\n", "\n    "))
        elif isinstance(value, dict):
            print(f"{key:<{width}}  " + (", ".join(f"{k}: {v}" for k, v in value.items()) or "-"))
        else:
            print(f"{key:<{width}}  {value}")
    print("PASS" if s["ok"] else "FAIL")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a folder of markdown notes (read only)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--concurrency", type=int, default=8, help="reads in flight (default 8)")
    parser.add_argument(
        "--timeout", type=float, default=30, help="seconds per request (default 30)"
    )
    args = parser.parse_args()
    if not os.path.isdir(args.folder):
        parser.error(f"not a folder: {args.folder}")
    report = Report(folder=os.path.abspath(args.folder))
    anyio.run(run, report, max(1, args.concurrency), args.timeout)
    s = summary(report)
    if args.json:
        print(json.dumps(s, indent=2, ensure_ascii=False))
    else:
        print_summary(s)
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
