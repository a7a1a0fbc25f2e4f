"""One log record, one line: nothing a client sends can forge or hide a line of the operator's log.

Every handler fs-notes installs (`install`) formats records with `LineFormatter`: the formatted
message, and the traceback of a logged exception, go through `render.shown`, so a newline, a
carriage return, a line or paragraph separator, a bidi control or any other invisible character
in a client-supplied string (a protocol version, a method name, a URI, an id, a header) is
written as its escape (`\\n`, `\\u2028`, ...) and a backslash is doubled. A record is therefore
exactly one line, starting with the fixed `fs-notes LEVEL logger:` prefix; a traceback follows on
the same line after ` | `.

`--log-format json` (`JsonLineFormatter`) writes each record as one JSON object instead
(`time`, `level`, `logger`, `message`, and `traceback` when there is one), for log collectors; the
same escaping is applied to the message first, and JSON escapes what is left, so it is one line too.
A request's line (protocol/requestlog.py) is written escaped field by field by its call site
(`escaped`), and as JSON its fields are keys of the object (`fields`), each value escaped.

Guarantees this for every call site at once, including third-party loggers (uvicorn) and future
ones: call sites need not remember. Does not: shorten long values (call sites cut what they log
with `shown(value, limit)`), or keep a secret out of the log (call sites never log tokens).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TextIO

from .render import shown


class LineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        # A request line (protocol/requestlog.py) comes escaped field by field; anything else
        # is escaped here, whole.
        escaped = getattr(record, "escaped", False) is True and isinstance(record.msg, str)
        message = record.msg if escaped else shown(record.getMessage())
        line = f"{self.prefix(record)}{message}"
        if record.exc_info:
            line += " | " + shown(self.formatException(record.exc_info))
        elif record.exc_text:
            line += " | " + shown(record.exc_text)
        if record.stack_info:
            line += " | " + shown(self.formatStack(record.stack_info))
        return line

    def prefix(self, record: logging.LogRecord) -> str:
        return f"{self.tag} {record.levelname} {record.name}: "

    def __init__(self, tag: str = "fs-notes") -> None:
        super().__init__()
        self.tag = tag


class JsonLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, str | int] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": shown(record.getMessage()),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):  # a request line: its fields as keys, each value escaped
            entry["message"] = "request"
            for key, value in fields.items():
                entry[key] = value if isinstance(value, int) else shown(str(value), 200)
        if record.exc_info:
            entry["traceback"] = shown(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


def install(
    level: int,
    *,
    stream: TextIO | None = None,
    tag: str = "fs-notes",
    json_lines: bool = False,
) -> None:
    """Log to `stream` (stderr) at `level`, one line per record (replaces basicConfig)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonLineFormatter() if json_lines else LineFormatter(tag))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
