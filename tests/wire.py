"""Test helpers: run the real server (stdio or HTTP) as a child process and talk raw JSON to it,
validating every message it sends against the official MCP schema."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import jsonschema

DATA = Path(__file__).parent / "data"
PROTOCOL_VERSION = "2026-07-28"
REPO = Path(__file__).resolve().parent.parent
#: Every tool the server lists, whoever asks (tools/list: the same names over every transport).
TOOLS = {
    "notes_list",
    "notes_read",
    "notes_outline",
    "notes_search",
    "notes_tags",
    "notes_links",
    "notes_create",
    "notes_update",
    "notes_append",
    "notes_edit",
    "notes_properties",
    "notes_move",
    "notes_history",
    "notes_restore",
    "notes_delete",
    "notes_summarize",
    "notes_workspaces",
}


@cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((DATA / "mcp-schema-2026-07-28.json").read_text())
    return schema


def schema_validator(definition: str) -> jsonschema.protocols.Validator:
    root = _schema()
    return _validator(definition, id(root))


@cache
def _validator(definition: str, _root_id: int) -> jsonschema.protocols.Validator:
    root = _schema()
    sub = {"$ref": f"#/$defs/{definition}", "$defs": root["$defs"]}
    cls = jsonschema.validators.validator_for(root)
    return cls(sub)


RESULT_DEFS = {
    "server/discover": "DiscoverResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "resources/list": "ListResourcesResult",
    "resources/read": "ReadResourceResult",
    "subscriptions/listen": "SubscriptionsListenResult",
}
NOTIFICATION_DEFS = {
    "notifications/subscriptions/acknowledged": "SubscriptionsAcknowledgedNotification",
    "notifications/resources/updated": "ResourceUpdatedNotification",
    "notifications/resources/list_changed": "ResourceListChangedNotification",
    "notifications/tools/list_changed": "ToolListChangedNotification",
    "notifications/prompts/list_changed": "PromptListChangedNotification",
    "notifications/cancelled": "CancelledNotification",
    "notifications/progress": "ProgressNotification",
    "notifications/message": "LoggingMessageNotification",
}
ERROR_DEFS = {
    -32700: "ParseError",
    -32600: "InvalidRequestError",
    -32601: "MethodNotFoundError",
    -32602: "InvalidParamsError",
    -32603: "InternalError",
    -32020: "HeaderMismatchError",
    -32021: "MissingRequiredClientCapabilityError",
    -32022: "UnsupportedProtocolVersionError",
}


def check_message(message: Mapping[str, Any], method: str | None = None) -> None:
    """Validate a server message against the official 2026-07-28 schema (raises on mismatch)."""
    if "method" in message and "id" not in message:  # a notification (subscriptions/listen)
        schema_validator("JSONRPCNotification").validate(message)
        schema_validator(NOTIFICATION_DEFS[message["method"]]).validate(message)
        return
    if "error" in message:
        schema_validator("JSONRPCErrorResponse").validate(message)
        definition = ERROR_DEFS.get(message["error"]["code"])
        if definition is not None:
            shape = _schema()["$defs"][definition]
            # Some definitions describe the whole response, others only the error object.
            target = message if "error" in shape.get("properties", {}) else message["error"]
            schema_validator(definition).validate(target)
        return
    schema_validator("JSONRPCResultResponse").validate(message)
    result = message["result"]
    if result.get("resultType") == "input_required":
        schema_validator("InputRequiredResult").validate(result)
    elif method in RESULT_DEFS:
        schema_validator(RESULT_DEFS[method]).validate(result)


# -- the 2025-11-25 schema, for handshake-era clients (fs_notes/legacy) ------------------------


@cache
def _legacy_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((DATA / "mcp-schema-2025-11-25.json").read_text())
    return schema


def _validate_legacy(definition: str, value: Any) -> None:
    sub = {"$ref": f"#/$defs/{definition}", "$defs": _legacy_schema()["$defs"]}
    jsonschema.Draft202012Validator(sub).validate(value)


LEGACY_RESULTS = {
    "initialize": "InitializeResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "resources/list": "ListResourcesResult",
    "resources/read": "ReadResourceResult",
    "ping": "EmptyResult",
}
LEGACY_SERVER_REQUESTS = {
    "elicitation/create": "ElicitRequest",
    "sampling/createMessage": "CreateMessageRequest",
}


def check_legacy(message: dict[str, Any], method: str | None = None) -> None:
    """Validate one server -> client message against the 2025-11-25 schema."""
    if "error" in message:
        _validate_legacy("JSONRPCErrorResponse", message)
    elif "result" in message:
        _validate_legacy("JSONRPCResultResponse", message)
        if method in LEGACY_RESULTS:
            _validate_legacy(LEGACY_RESULTS[method], message["result"])
        assert "resultType" not in message["result"], message
    elif "id" in message:
        _validate_legacy("JSONRPCRequest", message)
        _validate_legacy(LEGACY_SERVER_REQUESTS[message["method"]], message)
    else:
        _validate_legacy("JSONRPCNotification", message)
        _validate_legacy(LEGACY_NOTIFICATIONS[message["method"]], message)


LEGACY_NOTIFICATIONS = {
    "notifications/cancelled": "CancelledNotification",
    "notifications/progress": "ProgressNotification",
}


def meta(caps: dict[str, Any] | None = None, version: Any = PROTOCOL_VERSION) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": caps if caps is not None else {},
        "io.modelcontextprotocol/clientInfo": {"name": "fs-notes-tests", "version": "0"},
    }


def request(
    id: int | str,
    method: str,
    params: dict[str, Any] | None = None,
    caps: dict[str, Any] | None = None,
) -> dict[str, Any]:
    p = dict(params or {})
    p.setdefault("_meta", meta(caps))
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": p}


def call_tool(
    id: int | str,
    name: str,
    arguments: dict[str, Any],
    caps: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return request(id, "tools/call", {"name": name, "arguments": arguments, **extra}, caps)


_STATE_HOME: str | None = None


def _state_home() -> str:
    """A private XDG_STATE_HOME so servers under test never touch the user's replay database."""
    global _STATE_HOME
    if _STATE_HOME is None:
        import tempfile

        _STATE_HOME = tempfile.mkdtemp(prefix="fs-notes-test-state-")
    return _STATE_HOME


def write_secret(path: Path, text: str) -> Path:
    """A token or key file as the server requires one: readable by its owner only."""
    path.write_text(text)
    path.chmod(0o600)
    return path


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["XDG_STATE_HOME"] = _state_home()
    env.update(extra)
    return env


def sdk_stdio(*args: str) -> Any:
    """The official MCP SDK's parameters to start `fs-notes serve ARGS` on stdio from the
    repository: an environment of PYTHONPATH, PATH, CI (when set) and the tests' private
    XDG_STATE_HOME (never the real one), nothing else."""
    from mcp import StdioServerParameters

    env = child_env(PYTHONPATH=str(REPO), PATH=os.environ.get("PATH", ""))
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "fs_notes", "serve", *args],
        env={k: env[k] for k in ("PYTHONPATH", "PATH", "XDG_STATE_HOME", "CI") if k in env},
        cwd=str(REPO),
    )


class StdioServer:
    """`fs-notes serve ...` on pipes; lines in, parsed JSON lines out."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, launcher: tuple[str, ...] = ()
    ) -> None:
        self.proc = subprocess.Popen(
            [*launcher, sys.executable, "-m", "fs_notes", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env or child_env(),
            cwd=REPO,
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr: list[bytes] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return b"".join(self._stderr).decode(errors="replace")

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: Any) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def recv(self, timeout: float = 10.0) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no response within {timeout}s; stderr:\n{self.stderr}") from None
        if line is None:
            raise AssertionError(f"server closed stdout; stderr:\n{self.stderr}")
        message: dict[str, Any] = json.loads(line)
        return message

    def expect_silence(self, timeout: float = 0.3) -> None:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected output: {line!r}")

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        response = self.recv()
        check_message(response, message.get("method"))
        return response

    def close(self, timeout: float = 10.0) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()


class HttpServer:
    """`fs-notes serve ... --http 127.0.0.1:0`; waits for the bound port."""

    def __init__(
        self,
        *args: str,
        tmp: Path,
        token: str | None,
        env: dict[str, str] | None = None,
        prefix: tuple[str, ...] = (),
        top: tuple[str, ...] = (),
    ) -> None:
        """`prefix`: a launcher to run the server under (e.g. prlimit); `top`: options that go
        before `serve` (e.g. --log-level)."""
        self.port_file = tmp / f"port-{time.monotonic_ns()}"
        extra = [*args, "--http", "127.0.0.1:0", "--port-file", str(self.port_file)]
        self.token = token
        self.log_path = tmp / f"server-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "fs_notes", *top, "serve", *extra],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=env or child_env(),
            cwd=REPO,
        )
        deadline = time.monotonic() + 20
        while not self.port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                self._log.close()
                raise AssertionError(f"HTTP server did not start: {self.log_path.read_text()}")
            time.sleep(0.02)
        self.port = int(self.port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.client = httpx.Client(timeout=20)

    def headers_for(self, message: Any) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if isinstance(message, dict):
            raw_params = message.get("params")
            params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
            raw_meta = params.get("_meta")
            m: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
            version = m.get("io.modelcontextprotocol/protocolVersion")
            headers["MCP-Protocol-Version"] = (
                version if isinstance(version, str) else PROTOCOL_VERSION
            )
            if isinstance(message.get("method"), str):
                headers["Mcp-Method"] = message["method"]
            for key in ("name", "uri"):
                if isinstance(params.get(key), str):
                    value = params[key]
                    if value.isascii() and value.isprintable() and value == value.strip():
                        headers["Mcp-Name"] = value
                    else:
                        import base64

                        headers["Mcp-Name"] = (
                            "=?base64?" + base64.b64encode(value.encode()).decode() + "?="
                        )
                    break
        return headers

    def post_raw(self, body: bytes, headers: Mapping[str, str]) -> httpx.Response:
        return self.client.post(self.url, content=body, headers=dict(headers))

    def post(self, message: Any, headers: Mapping[str, str] | None = None) -> httpx.Response:
        h = self.headers_for(message)
        if headers:
            h.update(headers)
            h = {k: v for k, v in h.items() if v is not None}
        return self.post_raw(json.dumps(message).encode(), h)

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        response = self.post(message)
        body: dict[str, Any] = response.json()
        check_message(body, message.get("method"))
        return body

    def close(self) -> int:
        self.client.close()
        self.proc.terminate()
        try:
            return self.proc.wait(15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()


def sse_messages(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON of each event of a streamed (text/event-stream) response, as it arrives; not
    validated (a test of the legacy era checks them with check_legacy)."""
    data: list[str] = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line == "" and data:
            yield json.loads("\n".join(data))
            data = []


def tool_text(result: dict[str, Any]) -> str:
    """The text of a tools/call result's first content block."""
    text: str = result["content"][0]["text"]
    return text


@contextmanager
def stdio_server(*args: str, env: dict[str, str] | None = None) -> Iterator[StdioServer]:
    server = StdioServer("serve", *args, env=env)
    try:
        yield server
    finally:
        server.close()


def token_http_server(
    folder: Path, *args: str, tmp: Path, token: str
) -> AbstractContextManager[HttpServer]:
    """`http_server` on `folder` with the bearer `token` in a file TMP/token (written first,
    owner-only), then `args`."""
    write_secret(tmp / "token", token)
    return http_server(str(folder), "--token-file", str(tmp / "token"), *args, tmp=tmp, token=token)


@contextmanager
def http_server(
    *args: str, tmp: Path, token: str | None, env: dict[str, str] | None = None
) -> Iterator[HttpServer]:
    server = HttpServer(*args, tmp=tmp, token=token, env=env)
    try:
        yield server
    finally:
        server.close()
