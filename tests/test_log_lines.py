"""Log hygiene (issue 13 item 2): a client-supplied string never forges or hides a log line.

Each case below drives one place where a client's string reaches the log (a legacy
initialize's protocolVersion and clientInfo, a method name, a notification, request ids, a
resource URI, a tool's arguments) with line breaks, a carriage return, Unicode line and paragraph
separators, a bidi override and an escape sequence, over a real server at --log-level debug.
Every line of its stderr must then be one whole record with the fixed prefix, and the forged
line must appear nowhere as a line of its own (positive control: the forged text does reach the
log, escaped, so the call sites are really driven)."""

from __future__ import annotations

import json
import re

from wire import StdioServer, call_tool, meta, request

FORGED = "fs-notes ERROR fs_notes.audit: FORGED"
EVIL = [
    f"x\n{FORGED}", f"x\r{FORGED}", f"x\u2028{FORGED}", f"x\u2029{FORGED}",
    f"\x1b[2K\r{FORGED}", f"\u202e{FORGED}",
]  # fmt: skip
LINE = re.compile(r"^fs-notes (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")


def _drive(server: StdioServer, evil: str, n: int) -> None:
    legacy = {
        "protocolVersion": evil,
        "capabilities": {"roots": {}},
        "clientInfo": {"name": evil, "version": evil},
    }
    server.send({"jsonrpc": "2.0", "id": f"{n}-init", "method": "initialize", "params": legacy})
    server.recv()
    server.ask(request(f"{n}-m", evil, {"_meta": meta()}))  # unknown method
    server.send({"jsonrpc": "2.0", "method": evil, "params": {}})  # unknown notification
    server.ask(request(f"{n}-r", "resources/read", {"uri": f"file:///{evil}", "_meta": meta()}))
    server.ask(call_tool(f"{n}-t", evil, {"id": evil}))  # unknown tool
    server.ask(call_tool(f"{n}-i", "notes_read", {"workspaceUri": evil, "id": evil}))


def test_every_record_is_one_line_whatever_the_client_sends(tmp_path: object) -> None:
    from pathlib import Path

    notes = Path(str(tmp_path)) / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n")
    server = StdioServer("--log-level", "debug", "serve", str(notes))
    try:
        for n, evil in enumerate(EVIL):
            _drive(server, evil, n)
    finally:
        assert server.close() == 0
    lines = server.stderr.splitlines()
    assert lines, "the server logged nothing"
    for line in lines:
        assert LINE.match(line), repr(line)
        assert line != FORGED and not line.startswith(FORGED)
    assert "\u202e" not in server.stderr and "\x1b" not in server.stderr
    assert "\u2028" not in server.stderr and "\u2029" not in server.stderr
    # Positive control: the evil strings were logged, escaped.
    assert f"x\\n{FORGED}" in server.stderr or json.dumps(f"x\n{FORGED}")[1:-1] in server.stderr
