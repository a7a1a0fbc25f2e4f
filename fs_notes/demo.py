"""`fs-notes demo`: a sample notes folder in a temporary directory, the real server over stdio, and
a scripted client session through listing, reading, searching, writing and the confirmed delete
flow, then a few escape attempts that must all be refused, and last the summary of the escape
exercises (`fs-notes exercises --short`: every attack class, each layer knocked out in turn).
Exits 0 when everything went as expected, 1 otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

SAMPLE = {
    "welcome.md": "# Welcome\n\nThese notes are served by fs-notes.\n",
    "projects/tps-report.md": "# TPS report\n\nThe old TPS report, cover sheet missing.\n",
    "projects/tps-report-2026.md": "# TPS report 2026\n\nThe new one.\n",
    "journal/2026-11-30.md": "---\ntitle: Monday\n---\nMet with Bill about the TPS reports.\n",
}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "fs-notes-demo", "version": "1"},
}


class Session:
    def __init__(self, workspace: Path, state: Path) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fs_notes",
                "serve",
                str(workspace),
                "--replay-db",
                str(state / "replay.db"),
                "--audit-log",
                str(state / "audit.jsonl"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next_id = 0

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        message = {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": method,
            "params": {**params, "_meta": META},
        }
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the server closed the connection")
        response: dict[str, Any] = json.loads(line)
        return response

    def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        return self.call("tools/call", {"name": name, "arguments": arguments})

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)

#: Every tool the server offers (docs/interface.md): the demo checks tools/list against it.
TOOLS = frozenset({
    "notes_list", "notes_read", "notes_search", "notes_tags", "notes_links", "notes_create",
    "notes_update", "notes_append", "notes_edit", "notes_move", "notes_delete", "notes_summarize",
    "notes_workspaces", "notes_history", "notes_restore", "notes_outline", "notes_properties",
})  # fmt: skip


def _show(step: str, ok: bool, detail: str = "") -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {step}{': ' + detail if detail else ''}")
    return ok


def _exercises_summary() -> bool:
    import textwrap

    from .exercises.command import summary

    print("\nescape exercises (fs-notes exercises --short; the full matrix: fs-notes exercises):")
    ok, text = summary(short=True)
    indent = " " * 8
    paragraph, *differences = text.split("\n")  # each differing cell on its own line
    print(textwrap.fill(paragraph, 96, initial_indent=indent, subsequent_indent=indent,
                        break_on_hyphens=False))  # fmt: skip
    for line in differences:
        print(textwrap.fill(line.strip(), 96, initial_indent=indent + "- ",
                            subsequent_indent=indent + "  ", break_on_hyphens=False))  # fmt: skip
    return _show(
        "escape exercises",
        ok,
        "0 escapes with all layers, matrix as documented for this host" if ok else "see above",
    )


def demo() -> int:
    with tempfile.TemporaryDirectory(prefix="fs-notes-demo-") as tmp:
        root = Path(tmp)
        ws = root / "notes"
        for rel, text in SAMPLE.items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text, encoding="utf-8")
        (root / "outside").mkdir()
        secret = root / "outside" / "secret.md"
        secret.write_text("# Secret\nnot yours\n", encoding="utf-8")
        (ws / "link.md").symlink_to(secret)
        uri = "file://" + urllib.parse.quote(str(ws))
        print(f"fs-notes demo: serving {uri} over stdio\n")
        s = Session(ws, root)
        results: list[bool] = []
        try:
            d = s.call("server/discover", {})["result"]
            results.append(
                _show(
                    "server/discover",
                    d["supportedVersions"] == ["2026-07-28"],
                    f"versions {d['supportedVersions']}",
                )
            )
            tools = [t["name"] for t in s.call("tools/list", {})["result"]["tools"]]
            results.append(_show("tools/list", set(tools) == TOOLS, ", ".join(tools)))
            notes = s.tool("notes_list", workspaceUri=uri)["result"]["structuredContent"]["notes"]
            results.append(
                _show(
                    "notes_list",
                    len(notes) == 4,
                    "; ".join(f"{n['id']} ({n['title']})" for n in notes),
                )
            )
            read = s.tool("notes_read", workspaceUri=uri, id="welcome.md")["result"]
            results.append(
                _show("notes_read welcome.md", read["structuredContent"]["title"] == "Welcome")
            )
            found = s.tool("notes_search", workspaceUri=uri, query="tps")["result"][
                "structuredContent"
            ]
            results.append(
                _show(
                    "notes_search 'tps'",
                    len(found["matches"]) == 3,
                    ", ".join(m["id"] for m in found["matches"]),
                )
            )
            created = s.tool(
                "notes_create",
                workspaceUri=uri,
                id="ideas/flair.md",
                content="# Flair\n15 pieces\n",
            )
            results.append(
                _show("notes_create ideas/flair.md", created["result"].get("isError") is not True)
            )
            first = s.tool("notes_delete", workspaceUri=uri, title="TPS report")["result"]
            form = first["inputRequests"]["delete_choice"]["params"]
            choices = [
                o["const"] for o in form["requestedSchema"]["properties"]["note_id"]["oneOf"]
            ]
            results.append(
                _show(
                    "notes_delete asks the user",
                    first["resultType"] == "input_required",
                    f"form offers {choices}",
                )
            )
            print(f"        form message: {form['message']}")
            retry = s.call(
                "tools/call",
                {
                    "name": "notes_delete",
                    "arguments": {"workspaceUri": uri, "title": "TPS report"},
                    "inputResponses": {
                        "delete_choice": {
                            "action": "accept",
                            "content": {"note_id": choices[0], "confirm": True},
                        }
                    },
                    "requestState": first["requestState"],
                },
            )["result"]
            results.append(
                _show(
                    f"user accepts {choices[0]}",
                    retry["structuredContent"]["deleted"] == choices[0]
                    and not (ws / choices[0]).exists(),
                )
            )
            replay = s.call(
                "tools/call",
                {
                    "name": "notes_delete",
                    "arguments": {"workspaceUri": uri, "title": "TPS report"},
                    "inputResponses": {
                        "delete_choice": {
                            "action": "accept",
                            "content": {"note_id": choices[1], "confirm": True},
                        }
                    },
                    "requestState": first["requestState"],
                },
            )
            results.append(
                _show(
                    "the same confirmation replayed",
                    replay.get("error", {}).get("code") == -32602 and (ws / choices[1]).exists(),
                    "refused, nothing deleted",
                )
            )
            history = s.tool("notes_history", workspaceUri=uri, id=choices[0])["result"]
            kept = history["structuredContent"]["versions"]
            restored = s.tool(
                "notes_restore", workspaceUri=uri, id=choices[0],
                version=kept[0]["version"] if kept else "v1:" + "0" * 32,
            )["result"]  # fmt: skip
            results.append(
                _show(
                    f"notes_restore {choices[0]}",
                    restored.get("isError") is not True
                    and (ws / choices[0]).read_text() == SAMPLE[choices[0]],
                    "the deleted note is back, byte for byte, from the journal of changes",
                )
            )
            print("\nescape attempts (each must be refused, the outside file untouched):")
            for label, note_id in [
                ("'..' in the id", "../outside/secret.md"),
                ("absolute id", str(secret)),
                ("symlink to outside", "link.md"),
                ("encoded '..'", "%2e%2e/outside/secret.md"),
            ]:
                r = s.tool("notes_read", workspaceUri=uri, id=note_id)["result"]
                leaked = "not yours" in json.dumps(r)
                results.append(
                    _show(label, r.get("isError") is True and not leaked, r["content"][0]["text"])
                )
            sibling = "file://" + urllib.parse.quote(str(root / "notes-evil"))
            r = s.tool("notes_list", workspaceUri=sibling)["result"]
            results.append(
                _show(
                    "prefix-sibling workspace URI",
                    r.get("isError") is True,
                    r["content"][0]["text"],
                )
            )
            results.append(
                _show("outside file intact", secret.read_text() == "# Secret\nnot yours\n")
            )
        finally:
            code = s.close()
        results.append(_show("server exited cleanly on EOF", code == 0))
        results.append(_exercises_summary())
        failed = results.count(False)
        print(f"\n{len(results) - failed} passed, {failed} failed")
        return 0 if failed == 0 else 1
