"""The loopback page where a person approves a deletion, or a forced change that removes text,
outside the client.

`fs-notes serve` binds a TCP socket on 127.0.0.1 (a port of the kernel's choosing) before it
confines itself, and serves two requests on it: GET and POST of `/approve/<token>`, the token
of one waiting change (approval/store.py; the URL-mode elicitation, or the tool result, gives
the URL). GET shows what would be done: the workspace, who asks, each candidate's title, id
and first lines (for a replacement: what it removes and the first lines it would leave), every
field made safe (render.py, then HTML-escaped) and no script at all. POST approves the chosen
candidate.

Guarantees:
- Only this machine can reach it (127.0.0.1), and only the holder of a token finds a change
  (a 176-bit secret per change, stored hashed; an unknown, expired or used token gets one
  page that says so, whichever it is).
- The Host header must name this very address and port (a DNS rebinding page gets 421), and a
  POST must come from this page: its Origin header this origin, `Sec-Fetch-Site` (when the
  browser sends it) same-origin, and the form's anti-forgery token (an HMAC of the page token
  under a key of this server) - so another web page the person has open cannot approve.
- An approval names one of the sealed candidates and is taken once, before the change
  expires (store.py); the page never changes a note: the tool does, on the client's retry.
- Responses forbid framing, scripts, referrers and caching (Content-Security-Policy and
  friends); the request log line is written without the client's control characters.
- At most 16 connections at once, one request each, dropped after 5 s of silence (a POST's
  body is read only for a change that waits): a local process cannot hold its threads.
- A candidate's first lines are shown only when the principal that asked may read the
  workspace (the URL reaches the client: it must not read through it what it may not).

Does not: tell the person from a program running as the same user on this machine (one that
reads the URL can fetch the page and post its form with forged headers: docs/design.md), serve
HTTPS (loopback traffic does not leave the machine), or work for a person on another machine
than the server (`fs-notes approve` on the server's machine, or the form, then).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import html
import logging
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..render import shown, shown_id
from .store import Approvals, Pending

__all__ = ["ApprovalPage", "FirstLines", "bind_loopback"]

log = logging.getLogger("fs_notes.approval")

#: The first lines of a candidate note (workspace name, note id, the principal that asked), or
#: None if it cannot be read or that principal may not read there.
FirstLines = Callable[[str, str, str], "str | None"]
MAX_BODY = 8192
MAX_CONNECTIONS = 16
_HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STYLE = (
    "body{font:16px/1.45 system-ui,sans-serif;max-width:46em;margin:2em auto;padding:0 1em}"
    "pre{background:#f4f4f4;padding:.6em;white-space:pre-wrap;overflow-wrap:anywhere}"
    "label{display:block;margin:1em 0;padding:.6em;border:1px solid #ccc;border-radius:6px}"
    "button{font-size:1em;padding:.5em 1.2em;background:#b00020;color:#fff;border:0;"
    "border-radius:6px}code{overflow-wrap:anywhere}"
)


def bind_loopback() -> socket.socket:
    """The page's listening socket: 127.0.0.1, a port the kernel picks (bound before the
    server confines itself, which then may not bind)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
    except OSError:
        sock.close()
        raise
    return sock


class ApprovalPage:
    """The page: made on its socket before the server confines itself, served from its own
    thread once `start` gives it the approvals (after confinement: no thread before it)."""

    approvals: Approvals

    def __init__(self, sock: socket.socket) -> None:
        self._key = secrets.token_bytes(32)
        self.port = int(sock.getsockname()[1])
        self.origin = f"http://127.0.0.1:{self.port}"
        page = self

        class Handler(_Handler):
            owner = page

        self._server = _Bounded(("127.0.0.1", self.port), Handler, False)
        self._server.socket.close()
        self._server.socket = sock
        self._server.daemon_threads = True
        self._started = False

    def start(self, approvals: Approvals, first_lines: FirstLines) -> None:
        self.approvals = approvals
        self._first_lines = first_lines
        threading.Thread(
            target=self._server.serve_forever, name="fs-notes-approval", daemon=True
        ).start()
        self._started = True

    def url(self, token: str) -> str:
        return f"{self.origin}/approve/{token}"

    def csrf(self, token: str) -> str:
        return hmac.new(self._key, b"csrf:" + token.encode(), hashlib.sha256).hexdigest()

    def close(self) -> None:
        """Stop serving, and close the socket before returning."""
        if self._started:
            stopper = threading.Thread(target=self._server.shutdown, daemon=True)
            stopper.start()  # (it asks the loop to stop, and waits for it)
            # Shutting the listening socket down wakes the loop's poll at once (its accept then
            # fails and it sees the stop), instead of at the end of its half-second poll; no
            # connection to it is needed, which the server's Landlock domain would refuse.
            with contextlib.suppress(OSError):
                self._server.socket.shutdown(socket.SHUT_RDWR)
            stopper.join(5.0)
        self._server.server_close()

    # -- what the handler shows ------------------------------------------------------------

    def show(self, token: str, pending: Pending) -> str:
        if pending.action == "replace":
            return self._show_replace(token, pending)
        options = []
        for n, (note_id, title) in enumerate(pending.candidates):
            lines = self._first_lines(pending.workspace, note_id, pending.principal)
            preview = _lines(lines) if lines else "<p><em>(its text cannot be shown)</em></p>"
            checked = " checked" if n == 0 else ""
            name = html.escape(shown(title or "(untitled)", 200))
            options.append(
                f'<label><input type="radio" name="note" value="{n}"{checked}> '
                f"<strong>{name}</strong>"
                f"<br><code>{html.escape(shown_id(note_id, 300))}</code>{preview}</label>"
            )
        left = max(0, int(pending.expires - time.time()))
        return _page(
            "Approve a deletion",
            f"<p>An AI client asks fs-notes to delete a note from the workspace "
            f"<strong>{html.escape(shown(pending.workspace, 128))}</strong>, for "
            f"<strong>{html.escape(shown(pending.principal, 128))}</strong>. Nothing is deleted "
            "unless you approve it here; to refuse, close this page.</p>"
            f'<form method="post" action="/approve/{html.escape(token)}">'
            + "".join(options)
            + f'<input type="hidden" name="csrf" value="{self.csrf(token)}">'
            f"<p>This request expires in {left // 60} min {left % 60} s. The client deletes "
            "the note you choose when it asks again.</p>"
            "<button type=submit>Delete the chosen note</button></form>",
        )

    def _show_replace(self, token: str, pending: Pending) -> str:
        """A forced update or edit: the note, what the change removes, its text now (for a
        principal who may read it) and the first lines it would have."""
        note_id, title = pending.candidates[0]
        now = self._first_lines(pending.workspace, note_id, pending.principal)
        losses = "".join(
            f"<li>{html.escape(shown(str(x), 300))}</li>" for x in pending.detail.get("losses", [])
        )
        after = str(pending.detail.get("after", ""))
        left = max(0, int(pending.expires - time.time()))
        return _page(
            "Approve a change that removes text",
            f"<p>An AI client asks fs-notes to replace the note "
            f"<strong>{html.escape(shown(title or '(untitled)', 200))}</strong> "
            f"(<code>{html.escape(shown_id(note_id, 300))}</code>) in the workspace "
            f"<strong>{html.escape(shown(pending.workspace, 128))}</strong>, for "
            f"<strong>{html.escape(shown(pending.principal, 128))}</strong>, with text that "
            f"removes part of it:</p><ul>{losses}</ul>"
            + (f"<p>It begins now:</p>{_lines(now)}" if now else "")
            + f"<p>It would begin:</p>{_lines(after) if after else '<p><em>(empty)</em></p>'}"
            "<p>Nothing is written unless you approve it here; to refuse, close this page. "
            "(The text it replaces is kept in fs-notes' journal, so that it can be restored.)"
            f'</p><form method="post" action="/approve/{html.escape(token)}">'
            '<input type="hidden" name="note" value="0">'
            f'<input type="hidden" name="csrf" value="{self.csrf(token)}">'
            f"<p>This request expires in {left // 60} min {left % 60} s. The client makes the "
            "change when it asks again.</p>"
            "<button type=submit>Approve this change</button></form>",
        )


def _lines(text: str) -> str:
    return "<pre>" + html.escape("\n".join(shown(x, 200) for x in text.splitlines())) + "</pre>"


class _Bounded(ThreadingHTTPServer):
    """At most `MAX_CONNECTIONS` connections served at once; one more is closed unanswered."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{title} - fs-notes"
        f"</title><style>{_STYLE}</style></head><body><h1>{title}</h1>{body}</body></html>"
    )


_GONE = _page(
    "Nothing to approve",
    "<p>This approval is unknown, has expired or was already given. Nothing was deleted by "
    "this page. Ask the client to delete the note again for a new one.</p>",
)


class _Handler(BaseHTTPRequestHandler):
    owner: ApprovalPage
    server_version = "fs-notes"
    sys_version = ""
    #: Seconds a connection may sit silent (or a body stay unsent) before it is dropped.
    timeout = 5

    def log_message(self, format: str, *args: Any) -> None:
        log.info("approval page: %s", shown(format % args, 300))

    def _send(self, status: int, body: str) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        for name, value in _HEADERS.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.close_connection = True  # one request a connection: none is held open after
        self.end_headers()
        self.wfile.write(data)

    def _token(self) -> str | None:
        """The page token of the path, if the request is for this page at all."""
        if self.headers.get("Host") != f"127.0.0.1:{self.owner.port}":
            self._send(421, _page("Wrong address", "<p>Open the address the client gave.</p>"))
            return None
        path = urllib.parse.urlsplit(self.path).path
        prefix = "/approve/"
        token = path[len(prefix) :] if path.startswith(prefix) else ""
        if not (16 <= len(token) <= 100 and token.replace("-", "").replace("_", "").isalnum()):
            self._send(404, _GONE)
            return None
        return token

    def do_GET(self) -> None:
        token = self._token()
        if token is None:
            return
        pending = self.owner.approvals.by_page(token)
        if pending is None or pending.chosen is not None:
            self._send(404, _GONE)
            return
        self._send(200, self.owner.show(token, pending))

    def do_POST(self) -> None:
        token = self._token()
        if token is None:
            return
        refused = self._forged(token)
        if refused is not None:
            self._send(403, _page("Refused", f"<p>{refused} Nothing was approved.</p>"))
            return
        pending = self.owner.approvals.by_page(token)
        if pending is None or pending.chosen is not None:  # before its body is read at all
            self._send(404, _GONE)
            return
        length = int(self.headers.get("Content-Length") or 0)
        fields = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
        if not hmac.compare_digest(fields.get("csrf", [""])[0], self.owner.csrf(token)):
            self._send(403, _page("Refused", "<p>This form is not this page's.</p>"))
            return
        picked = fields.get("note", [""])[0]
        number = int(picked) if picked.isascii() and picked.isdigit() and len(picked) < 4 else -1
        chosen = (
            pending.candidates[number][0]
            if pending is not None and 0 <= number < len(pending.candidates)
            else ""
        )
        if not self.owner.approvals.approve(pending.nonce, chosen, "page"):
            self._send(404, _GONE)
            return
        verb = "replacing" if pending.action == "replace" else "deleting"
        log.warning(
            "approval page: %s approved %s %s in workspace %s",
            shown(pending.principal, 128), verb, shown_id(chosen, 300),
            shown(pending.workspace, 128),
        )  # fmt: skip
        if pending.action == "replace":
            self._send(200, _page(
                "Approved",
                f"<p>You approved this change to <code>{html.escape(shown_id(chosen, 300))}"
                "</code>. Go back to your client: it is made when the client asks again (the "
                "text it replaces is kept in fs-notes' journal so that it can be restored).</p>",
            ))  # fmt: skip
            return
        self._send(
            200,
            _page(
                "Approved",
                f"<p>You approved deleting <code>{html.escape(shown_id(chosen, 300))}</code>. "
                "Go back to your client: the note is deleted when it asks again (its text is "
                "kept in fs-notes' journal so that it can be restored).</p>",
            ),
        )

    def _forged(self, token: str) -> str | None:
        """Why this POST is not the page's own form being sent by a browser (None: it is)."""
        if self.headers.get("Origin") != self.owner.origin:
            return "The form was not sent from this page."
        site = self.headers.get("Sec-Fetch-Site")
        if site is not None and site != "same-origin":
            return "The form was not sent from this page."
        if self.headers.get_content_type() != "application/x-www-form-urlencoded":
            return "That is not this page's form."
        length = self.headers.get("Content-Length") or ""
        if not length.isdigit() or int(length) > MAX_BODY:
            return "That is not this page's form."
        return None
