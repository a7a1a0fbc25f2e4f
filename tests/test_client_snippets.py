"""docs/clients.md, and the client example in the README, work as written.

Every fenced block is checked, in the order of the page:
- ```json: must parse, with the top-level key the section's client reads ("servers" for VS Code,
  whose entries need "type": "stdio" or "http"; "mcpServers" elsewhere), and each server entry is
  run: a `command` (stdio) is started and asked `server/discover` and `notes_list` on its stdin;
  a `url` (HTTP) is sent the same two requests with the entry's headers.
- ```sh: one command a line. `claude mcp add ... NAME -- COMMAND` and `npx
  @modelcontextprotocol/inspector@2 COMMAND` (pinned, issue 25: an unpinned one is an error) run
  COMMAND as a stdio server; their HTTP forms, a URL
  with `--header`s, are HTTP entries. `fs-notes serve ... --http HOST:PORT` starts the server
  the HTTP entries after it talk to (on a free port instead of PORT: the entries' PORT is mapped
  to it), `ssh -L LOCAL:127.0.0.1:PORT` records a tunnel (an entry's URL on LOCAL then reaches
  the server with `Host: 127.0.0.1:LOCAL`, as a forwarded client sends it), and the line that
  writes the token file is run with bash (the file it makes must be private). Any other command
  is an error: a snippet the checker does not know is a snippet nobody has run.
- A stdio command given to ssh (Claude Desktop reaching the Linux host) is run here, as the host
  would run it: the test cannot log in anywhere.
The placeholders of docs/clients.md (its table) are replaced with a sample notes folder holding
one note, a private token file and the venv's fs-notes. The server runs as it would for a user:
self-confinement on (no --no-self-confine).

Positive control: broken snippets run through the same checker fail, each for its reason.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import shlex
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from wire import PROTOCOL_VERSION, REPO, call_tool, check_message, child_env, request

CLIENTS_MD = REPO / "docs" / "clients.md"
README = REPO / "README.md"
FS_NOTES = Path(sys.executable).with_name("fs-notes")  # the venv's console script
NOTE_ID = "hello.md"
TIMEOUT = 30.0


class SnippetError(AssertionError):
    """A snippet that is malformed, or whose command does not start a server that answers."""


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    line: int  # of the opening fence
    section: str  # the `## ` heading above it


def fenced_blocks(markdown: str) -> list[Block]:
    found: list[Block] = []
    section, start, body = "", 0, list[str]()
    lang: str | None = None
    for number, line in enumerate(markdown.splitlines(), 1):
        if lang is None:
            opening = re.fullmatch(r"```(\S*)\s*", line)
            if opening:
                lang, start, body = opening.group(1), number, []
            elif line.startswith("## "):
                section = line[3:].strip()
        elif line.strip() == "```":
            found.append(Block(lang, "\n".join(body), start, section))
            lang = None
        else:
            body.append(line)
    if lang is not None:
        raise SnippetError(f"line {start}: a code fence that is never closed")
    return found


@dataclass
class Sample:
    """What the placeholders stand for in the test: a notes folder, a token file, fs-notes."""

    work: Path
    folder: Path
    token_file: Path  # config/fs-notes/token in `work`, for ~/.config/fs-notes/token
    token: str

    def placeholders(self) -> list[tuple[str, str]]:
        config = str(self.token_file.parent)
        return [  # longest first, so no placeholder eats part of another
            ("/home/me/.local/bin/fs-notes", str(FS_NOTES)),
            ("/home/me/.config/fs-notes", config),
            ("~/.config/fs-notes", config),
            ("/home/me/notes", str(self.folder)),
            ("~/notes", str(self.folder)),
            ("<token>", self.token),
        ]

    def fill(self, text: str) -> str:
        for placeholder, value in self.placeholders():
            text = text.replace(placeholder, value)
        return text

    def env(self) -> dict[str, str]:
        return child_env(XDG_STATE_HOME=str(self.work / "state"))


def make_sample(tmp: Path) -> Sample:
    folder = tmp / "notes"
    folder.mkdir()
    (folder / NOTE_ID).write_text("# Hello\n\nA note for the client snippets.\n")
    token_file = tmp / "config" / "fs-notes" / "token"
    token_file.parent.mkdir(parents=True)
    token = "snippet-token-0123456789abcdef"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    return Sample(tmp, folder, token_file, token)


@dataclass
class HttpServer:
    proc: subprocess.Popen[bytes]
    doc_port: int  # the port the snippet named
    port: int  # the port it listens on
    log: Path


SSH_OPTIONS_WITH_VALUE = {f"-{c}" for c in "BbcDEeFIiJLlmOopQRSWw"}
LOOPBACK = {"127.0.0.1", "localhost"}


def _reader(stream: Any, lines: queue.Queue[bytes | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


@dataclass
class Checker:
    sample: Sample
    server: HttpServer | None = None
    tunnels: dict[int, int] = field(default_factory=dict)  # desktop port -> host port
    checked: list[tuple[str, str]] = field(default_factory=list)  # (section, kind)
    _section: str = ""

    # -- the page ---------------------------------------------------------------------------

    def run(self, markdown: str) -> None:
        for block in fenced_blocks(markdown):
            self._section = block.section
            try:
                if block.lang == "json":
                    self.json_block(block.text)
                elif block.lang in ("sh", "bash", "shell"):
                    self.sh_block(block.text)
            except SnippetError as exc:
                raise SnippetError(
                    f"snippet at line {block.line} ({block.section}): {exc}\n---\n{block.text}"
                ) from None

    def close(self) -> None:
        self._stop_server()

    def _done(self, kind: str) -> None:
        self.checked.append((self._section, kind))

    # -- JSON configurations ----------------------------------------------------------------

    def json_block(self, text: str) -> None:
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SnippetError(f"not valid JSON: {exc}") from None
        vscode = "VS Code" in self._section
        key = "servers" if vscode else "mcpServers"
        allowed = {"servers", "inputs"} if vscode else {"mcpServers"}
        if not isinstance(config, dict) or key not in config or set(config) - allowed:
            keys = sorted(config) if isinstance(config, dict) else type(config).__name__
            raise SnippetError(f"top level {keys}: this client reads {key!r}")
        servers = config[key]
        if not isinstance(servers, dict) or not servers:
            raise SnippetError(f"{key!r} must map server names to entries")
        secrets = self._password_inputs(config.get("inputs", []))
        for name, entry in servers.items():
            if not isinstance(entry, dict):
                raise SnippetError(f"server {name!r} is not an object")
            self._entry(entry, secrets, vscode)

    def _password_inputs(self, inputs: Any) -> set[str]:
        if not isinstance(inputs, list):
            raise SnippetError("'inputs' must be a list")
        ids = set()
        for item in inputs:
            if not (isinstance(item, dict) and item.get("type") == "promptString"):
                raise SnippetError(f"an input that is not a promptString: {item!r}")
            if item.get("password") is not True:
                raise SnippetError(f"input {item.get('id')!r} holds a token: needs password true")
            ids.add(str(item["id"]))
        return ids

    def _entry(self, entry: dict[str, Any], secrets: set[str], vscode: bool) -> None:
        kind = entry.get("type")
        if vscode and kind not in ("stdio", "http"):
            raise SnippetError(f'VS Code needs "type": "stdio" or "http", not {kind!r}')
        if kind not in (None, "stdio", "http"):
            raise SnippetError(f"unknown type {kind!r}")
        if "command" in entry and "url" not in entry and kind != "http":
            args = entry.get("args", [])
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise SnippetError("'args' must be a list of strings")
            command = [str(entry["command"]), *args]
            self.stdio([self._fill_json(word, secrets) for word in command])
        elif "url" in entry and "command" not in entry and kind != "stdio":
            headers = entry.get("headers", {})
            if not isinstance(headers, dict) or not all(
                isinstance(v, str) for v in headers.values()
            ):
                raise SnippetError("'headers' must map names to strings")
            self.http(
                self._fill_json(str(entry["url"]), secrets),
                {k: self._fill_json(v, secrets) for k, v in headers.items()},
            )
        else:
            raise SnippetError(f"an entry needs a command (stdio) or a url (HTTP): {entry}")

    def _fill_json(self, value: str, secrets: set[str]) -> str:
        def input_value(match: re.Match[str]) -> str:
            if match.group(1) not in secrets:
                raise SnippetError(f"${{input:{match.group(1)}}} has no password input")
            return self.sample.token

        return re.sub(r"\$\{input:([^}]*)\}", input_value, self.sample.fill(value))

    # -- shell commands -----------------------------------------------------------------------

    def sh_block(self, text: str) -> None:
        for line in re.sub(r"\\\n", " ", text).splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if "> ~/.config/fs-notes/token" in line:
                self._make_token_file(line)
                continue
            try:
                words = shlex.split(self.sample.fill(line), comments=True)
            except ValueError as exc:
                raise SnippetError(f"not a shell command ({exc}): {line}") from None
            if any(w in ("&&", "||", "|", ";", ">", "<") for w in words):
                raise SnippetError(f"a pipeline the checker does not run: {line}")
            words = [self._command_substitution(w) for w in words]
            self._command(words)

    def _make_token_file(self, line: str) -> None:
        self.sample.token_file.unlink()
        self.sample.token_file.parent.rmdir()
        filled = self.sample.fill(line)
        self._left_over([filled])
        subprocess.run(["bash", "-c", filled], check=True, cwd=self.sample.work, timeout=30)
        mode = stat.S_IMODE(self.sample.token_file.stat().st_mode)
        if mode & 0o077:
            raise SnippetError(f"the token file it writes is not private (mode {mode:04o})")
        self.sample.token = self.sample.token_file.read_text().strip()
        self._done("token")

    def _command_substitution(self, word: str) -> str:
        def cat(match: re.Match[str]) -> str:
            return Path(match.group(1)).read_text().strip()

        return re.sub(r"\$\(cat ([^)\s]+)\)", cat, word)

    def _command(self, words: list[str]) -> None:
        if words[:3] == ["claude", "mcp", "add"]:
            self._claude_mcp_add(words[3:])
        elif words[:2] == ["npx", "@modelcontextprotocol/inspector@2"]:
            self._inspector(words[2:])
        elif words[0] == "npx" and words[1:2] and words[1].startswith("@modelcontextprotocol/insp"):
            # Node 20's npx installs 0.15 of an unpinned Inspector, whose HTTP form fails.
            raise SnippetError(f"pin the Inspector, @modelcontextprotocol/inspector@2: {words[1]}")
        elif words[0] == "ssh" and "-L" in words:
            self._tunnel(words)
        elif _is_fs_notes(words[0]) and "--http" in words:
            self._start_server(words)
        elif _is_fs_notes(words[0]):
            self.stdio(words)
        else:
            raise SnippetError(f"a command the checker does not know: {shlex.join(words)}")

    def _claude_mcp_add(self, rest: list[str]) -> None:
        options, command = (
            (rest[: rest.index("--")], rest[rest.index("--") + 1 :]) if "--" in rest else (rest, [])
        )
        transport, headers, positional = "stdio", dict[str, str](), list[str]()
        i = 0
        while i < len(options):
            word = options[i]
            if word in ("--transport", "-t", "--scope", "-s", "--env", "-e", "--header", "-H"):
                if i + 1 >= len(options):
                    raise SnippetError(f"{word} needs a value")
                value = options[i + 1]
                if word in ("--transport", "-t"):
                    transport = value
                elif word in ("--scope", "-s") and value not in ("local", "project", "user"):
                    raise SnippetError(f"unknown scope {value!r}")
                elif word in ("--header", "-H"):
                    headers.update(_header(value))
                i += 2
            elif word.startswith("-"):
                raise SnippetError(f"an option claude mcp add does not have: {word}")
            else:
                positional.append(word)
                i += 1
        if transport == "stdio":
            if len(positional) != 1 or not command:
                raise SnippetError("stdio: claude mcp add [OPTIONS] NAME -- COMMAND [ARGS...]")
            self.stdio(command)
        elif transport == "http":
            if command or len(positional) != 2:
                raise SnippetError("http: claude mcp add --transport http [OPTIONS] NAME URL")
            self.http(positional[1], headers)
        else:
            raise SnippetError(f"a transport this page does not use: {transport!r}")

    def _inspector(self, rest: list[str]) -> None:
        mode = "web"
        if rest and rest[0] in ("--cli", "--tui", "--web"):
            mode, rest = rest[0][2:], rest[1:]
        if mode == "cli" and "--" in rest:  # under --cli, what comes before -- is the target
            target, options = rest[: rest.index("--")], rest[rest.index("--") + 1 :]
        else:
            n = next((i for i, w in enumerate(rest) if w.startswith("-")), len(rest))
            target, options = rest[:n], rest[n:]
        url, transport, method, headers = None, None, None, dict[str, str]()
        for word, value in zip(options[::2], options[1::2], strict=False):
            if word == "--server-url":
                url = value
            elif word == "--transport":
                transport = value
            elif word == "--method":
                method = value
            elif word == "--header":
                headers.update(_header(value))
            elif word != "-e":
                raise SnippetError(f"an Inspector option this checker does not know: {word}")
        if len(options) % 2:
            raise SnippetError(f"an Inspector option without its value: {options}")
        if mode == "cli" and method is None:
            raise SnippetError("--cli makes one request: it needs --method")
        if target and target[0].startswith(("http://", "https://")):
            url, target = target[0], target[1:]
        if url is not None:
            if target:
                raise SnippetError(f"a URL and a command: {target}")
            if transport not in (None, "http", "streamable-http") or (
                transport is None and not urllib.parse.urlsplit(url).path.endswith("/mcp")
            ):
                raise SnippetError("the Inspector infers HTTP only from a path ending in /mcp")
            self.http(url, headers)
        elif target:
            self.stdio(target)
        else:
            raise SnippetError("neither a command nor a URL for the Inspector")

    def _tunnel(self, words: list[str]) -> None:
        spec = words[words.index("-L") + 1].split(":")
        if len(spec) == 4:
            spec = spec[1:]
        if len(spec) != 3 or spec[1] not in LOOPBACK:
            raise SnippetError(f"-L LOCALPORT:127.0.0.1:HOSTPORT, not {':'.join(spec)}")
        self.tunnels[int(spec[0])] = int(spec[2])
        self._done("tunnel")

    # -- servers ------------------------------------------------------------------------------

    def _argv(self, words: list[str]) -> list[str]:
        """The command a client would run, with the venv's fs-notes for the fs-notes command;
        for ssh, the command the host would run."""
        if not words:
            raise SnippetError("an empty command")
        if words[0] == "ssh":
            i = 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in SSH_OPTIONS_WITH_VALUE else 1
            if i + 1 >= len(words) or "-N" in words[:i]:
                raise SnippetError(f"ssh with no command for the host: {shlex.join(words)}")
            # ssh hands the host one line, which the host's shell splits again.
            return self._argv(shlex.split(" ".join(words[i + 1 :])))
        if not _is_fs_notes(words[0]):
            raise SnippetError(f"not the fs-notes command: {words[0]}")
        return [str(FS_NOTES), *words[1:]]

    def _left_over(self, values: list[str]) -> None:
        for value in values:
            if re.search(r"/home/me|<[a-z ]+>|\$\{|\$\(|~", value):
                raise SnippetError(f"a placeholder this page does not define: {value!r}")

    def stdio(self, words: list[str]) -> None:
        argv = self._argv(words)
        self._left_over(argv)
        log = self.sample.work / f"stdio-{time.monotonic_ns()}.log"
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=self.sample.env(),
                cwd=self.sample.work,
            )
        assert proc.stdin is not None and proc.stdout is not None
        lines: queue.Queue[bytes | None] = queue.Queue()
        reader = threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True)
        reader.start()

        def ask(message: dict[str, Any]) -> dict[str, Any]:
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(message).encode() + b"\n")
                proc.stdin.flush()
                line = lines.get(timeout=TIMEOUT)
            except (BrokenPipeError, queue.Empty):
                line = None
            if line is None:
                proc.kill()
                raise SnippetError(
                    f"{shlex.join(argv)} did not answer {message['method']} "
                    f"(exit {proc.wait()}): {log.read_text()[-2000:]}"
                )
            answer: dict[str, Any] = json.loads(line)
            return answer

        try:
            self._conversation(ask)
            proc.stdin.close()
            if proc.wait(TIMEOUT) != 0:
                raise SnippetError(f"exit {proc.returncode} at end of input: {log.read_text()}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(TIMEOUT)  # at EOF, before its pipe is closed
            for stream in (proc.stdin, proc.stdout):
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        self._done("stdio")

    def _conversation(self, ask: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """server/discover, then notes_list must list the sample note."""
        for message in (
            request(1, "server/discover"),
            call_tool(2, "notes_list", {"workspaceUri": self.sample.folder.as_uri()}),
        ):
            answer = ask(message)
            try:
                check_message(answer, message["method"])
            except jsonschema.ValidationError as exc:
                raise SnippetError(f"{message['method']}: not a valid answer: {exc}") from None
            if "error" in answer:
                raise SnippetError(f"{message['method']}: {answer['error']}")
        structured = answer["result"].get("structuredContent", {})
        if NOTE_ID not in [n.get("id") for n in structured.get("notes", [])]:
            raise SnippetError(f"notes_list does not list {NOTE_ID}: {answer['result']}")

    def _start_server(self, words: list[str]) -> None:
        self._stop_server()
        argv = self._argv(words)
        self._left_over(argv)
        i = argv.index("--http")
        host, _, port = argv[i + 1].rpartition(":")
        if host not in LOOPBACK or not port.isdigit():
            raise SnippetError(f"--http {argv[i + 1]}: this page serves on loopback only")
        port_file = self.sample.work / f"port-{time.monotonic_ns()}"
        argv[i + 1] = f"{host}:0"
        argv += ["--port-file", str(port_file)]
        log = self.sample.work / f"http-{time.monotonic_ns()}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=self.sample.env(),
                cwd=self.sample.work,
            )
        deadline = time.monotonic() + TIMEOUT
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise SnippetError(f"the HTTP server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        self.server = HttpServer(proc, int(port), int(port_file.read_text()), log)
        self.http(f"http://{host}:{port}/mcp", {"Authorization": f"Bearer {self.sample.token}"})
        self.checked[-1] = (self._section, "server")

    def _stop_server(self) -> None:
        if self.server is not None:
            self.server.proc.terminate()
            try:
                self.server.proc.wait(15)
            finally:
                if self.server.proc.poll() is None:
                    self.server.proc.kill()
                    self.server.proc.wait()
            self.server = None
            self.tunnels.clear()

    def http(self, url: str, headers: Mapping[str, str]) -> None:
        self._left_over([url, *headers.values()])
        server = self.server
        if server is None:
            raise SnippetError(f"{url}: no `fs-notes serve ... --http` command above it")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or parts.path != "/mcp" or parts.port is None:
            raise SnippetError(f"{url}: the endpoint is http://HOST:PORT/mcp")
        if parts.hostname not in LOOPBACK:
            raise SnippetError(f"{url}: the server of this page listens on loopback")
        if parts.port == server.doc_port:
            host = f"{parts.hostname}:{server.port}"  # the client's Host, on the real port
        elif self.tunnels.get(parts.port) == server.doc_port:
            host = parts.netloc  # what a client at the desktop's end of the tunnel sends
        else:
            raise SnippetError(
                f"{url}: nothing listens on port {parts.port} (the server is on "
                f"{server.doc_port}, and no ssh -L above forwards {parts.port} to it)"
            )
        target = f"http://127.0.0.1:{server.port}/mcp"

        def ask(message: dict[str, Any]) -> dict[str, Any]:
            sent = {
                "Host": host,
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": PROTOCOL_VERSION,
                "Mcp-Method": message["method"],
                **({"Mcp-Name": message["params"]["name"]} if "name" in message["params"] else {}),
                **headers,
            }
            try:
                response = httpx.post(target, content=json.dumps(message), headers=sent, timeout=20)
            except httpx.HTTPError as exc:
                raise SnippetError(f"{url}: {exc}") from None
            if response.status_code != 200:
                raise SnippetError(f"{url}: HTTP {response.status_code} {response.text}")
            answer: dict[str, Any] = response.json()
            return answer

        self._conversation(ask)
        self._done("http")


def _is_fs_notes(word: str) -> bool:
    return word in ("fs-notes", ".venv/bin/fs-notes", str(FS_NOTES))


def _header(value: str) -> dict[str, str]:
    name, colon, content = value.partition(":")
    if not colon or not name.strip():
        raise SnippetError(f"a header is 'Name: value', not {value!r}")
    return {name.strip(): content.strip()}


@pytest.fixture
def checker(tmp_path: Path) -> Iterator[Checker]:
    assert FS_NOTES.exists(), f"no fs-notes command beside {sys.executable}"
    checker = Checker(make_sample(tmp_path))
    try:
        yield checker
    finally:
        checker.close()


# What each client's section must show, working.
SECTIONS = {
    "Placeholders": {"token", "server"},
    "Claude Code": {"stdio", "http"},
    "VS Code": {"stdio", "http"},
    "Cursor": {"stdio", "http"},
    "Claude Desktop": {"stdio"},
    "MCP Inspector": {"stdio", "http"},
    "Any other client": {"stdio", "http"},
    "From a desktop to a Linux host over HTTP": {"server", "tunnel", "http"},
}


def test_every_snippet_of_the_clients_page_starts_a_server_that_answers(checker: Checker) -> None:
    checker.run(CLIENTS_MD.read_text())
    shown: dict[str, set[str]] = {}
    for section, kind in checker.checked:
        shown.setdefault(section, set()).add(kind)
    for section, kinds in SECTIONS.items():
        assert kinds <= shown.get(section, set()), (section, shown.get(section))


def test_the_readme_points_to_the_clients_page_and_its_example_works(checker: Checker) -> None:
    readme = README.read_text()
    start = readme.index("## Serve your own notes folder")
    section = readme[start : readme.index("\n## ", start + 1)]
    assert "docs/clients.md" in section
    checker.run(section)
    kinds = {kind for _, kind in checker.checked}
    assert {"stdio", "server"} <= kinds, checker.checked


HTTP_SERVER = (
    "```sh\nfs-notes serve ~/notes --http 127.0.0.1:8765"
    " --token-file ~/.config/fs-notes/token\n```\n"
)


def _json(entry: str, key: str = "mcpServers") -> str:
    return f'```json\n{{"{key}": {{"fs-notes": {entry}}}}}\n```\n'


STDIO_ENTRY = '{"command": "/home/me/.local/bin/fs-notes", "args": ["serve", "/home/me/notes"]}'
BROKEN = {
    "malformed JSON": (
        '```json\n{"mcpServers": {"fs-notes": {"command": "fs-notes" "args": []}}}\n```\n',
        "not valid JSON",
    ),
    "a misspelt subcommand": (
        _json('{"command": "/home/me/.local/bin/fs-notes", "args": ["server", "/home/me/notes"]}'),
        "did not answer server/discover",
    ),
    "an unknown placeholder": (
        _json('{"command": "/home/me/.local/bin/fs-notes", "args": ["serve", "/home/me/nots"]}'),
        "placeholder",
    ),
    "a folder that is not there": (
        _json('{"command": "/home/me/.local/bin/fs-notes", "args": ["serve", "/home/me/notes/x"]}'),
        "did not answer server/discover",
    ),
    "a missing folder argument": (
        "```sh\nclaude mcp add fs-notes -- fs-notes serve\n```\n",
        "did not answer server/discover",
    ),
    "a stdio entry with no command": (_json('{"args": ["serve"]}'), "needs a command"),
    "VS Code without type": ("## VS Code\n" + _json(STDIO_ENTRY, "servers"), '"type"'),
    "VS Code with mcpServers": ("## VS Code\n" + _json(STDIO_ENTRY), "reads 'servers'"),
    "Cursor with servers": ("## Cursor\n" + _json(STDIO_ENTRY, "servers"), "'mcpServers'"),
    "an HTTP entry without a server": (_json('{"url": "http://127.0.0.1:8765/mcp"}'), "no `fs-"),
    "an HTTP entry without the token": (
        HTTP_SERVER + _json('{"url": "http://127.0.0.1:8765/mcp"}'),
        "HTTP 401",
    ),
    "a wrong token": (
        HTTP_SERVER
        + _json('{"url": "http://127.0.0.1:8765/mcp", "headers": {"Authorization": "Bearer x"}}'),
        "HTTP 401",
    ),
    "an undeclared VS Code input": (
        "## VS Code\n"
        + HTTP_SERVER
        + _json(
            '{"type": "http", "url": "http://127.0.0.1:8765/mcp",'
            ' "headers": {"Authorization": "Bearer ${input:token}"}}',
            "servers",
        ),
        "no password input",
    ),
    "a port nothing forwards": (
        HTTP_SERVER
        + _json(
            '{"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer <token>"}}'
        ),
        "nothing listens on port 9000",
    ),
    "a tunnel to a server without --allow-host": (
        HTTP_SERVER
        + "```sh\nssh -N -L 9000:127.0.0.1:8765 me@linuxhost\n```\n"
        + _json(
            '{"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer <token>"}}'
        ),
        "HTTP 403",
    ),
    "claude mcp add http without a URL": (
        HTTP_SERVER + "```sh\nclaude mcp add --transport http fs-notes\n```\n",
        "NAME URL",
    ),
    "a command the checker does not know": ("```sh\nfs-note serve ~/notes\n```\n", "not know"),
    "ssh with no command for the host": (
        _json('{"command": "ssh", "args": ["-T", "me@linuxhost"]}'),
        "no command for the host",
    ),
    "the Inspector's CLI without --method": (
        "```sh\nnpx @modelcontextprotocol/inspector@2 --cli fs-notes serve ~/notes\n```\n",
        "--method",
    ),
    "an Inspector not pinned to version 2": (
        "```sh\nnpx @modelcontextprotocol/inspector fs-notes serve ~/notes\n```\n",
        "pin the Inspector",
    ),
    "an unclosed fence": ("```json\n{}\n", "never closed"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_snippet_fails_the_same_checker(checker: Checker, name: str) -> None:
    text, reason = BROKEN[name]
    with pytest.raises(SnippetError, match=re.escape(reason)):
        checker.run(text)
