"""A note's front-matter properties, as the vault tools show them (issue 14).

The front matter (titles.py `front_matter_node`: YAML composed with a real parser, never
constructed) becomes JSON: `aliases` (the `aliases` or `alias` key, a list or one string) and
`properties`, every key of the mapping (title, tags and aliases included) with its value. Plain
(unquoted) scalars are typed as YAML 1.2's core schema has them, as Obsidian does: `true`/`false`,
`null`/`~`/empty, decimal integers and floats; everything else (dates, `yes`, `0x1F`) stays the
text as written, so `date: 2026-05-01` is "2026-05-01" and `answer: yes` is "yes".

Guarantees: bounded work and output whatever the YAML holds: an anchor used many times (a
"billion laughs" document) is converted at most `MAX_NODES` nodes in all and `MAX_DEPTH` deep,
beyond which values are cut (`null`), and at most `MAX_OUTPUT_CHARS` of text in all (a
4,000-character anchor aliased 3,000 times is not 12 MB of output); keys are text (a key that
is not a scalar is skipped);
strings are cut to `MAX_STRING_CHARS`; a float that JSON cannot carry (`.inf`, `.nan`) stays its
text. Does not: resolve YAML tags other than the core ones (`!!binary` stays its text), or
merge keys (`<<`).
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from .titles import front_matter_node

MAX_NODES = 2000
MAX_DEPTH = 8
MAX_STRING_CHARS = 4096
MAX_ALIASES = 50
_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_NULL = {"", "~", "null", "Null", "NULL"}
_INT = re.compile(r"[-+]?[0-9]{1,18}")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")


MAX_OUTPUT_CHARS = 64 << 10


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_NODES
        self.chars = MAX_OUTPUT_CHARS


def _scalar(node: yaml.ScalarNode) -> Any:
    text = str(node.value)
    if not node.style and len(text) <= 64:  # plain: typed as YAML 1.2's core schema
        if text in _BOOL:
            return _BOOL[text]
        if text in _NULL:
            return None
        if _INT.fullmatch(text):
            return int(text)
        if _FLOAT.fullmatch(text):
            value = float(text)
            return value if math.isfinite(value) else text
    return text[:MAX_STRING_CHARS]


def _json(node: yaml.Node, depth: int, budget: _Budget) -> Any:
    budget.left -= 1
    if budget.left < 0 or depth > MAX_DEPTH:
        return None
    if isinstance(node, yaml.ScalarNode):
        value = _scalar(node)
        budget.chars -= len(value) if isinstance(value, str) else 8
        if budget.chars < 0:  # an anchor used many times: cut, not multiplied
            budget.left = 0
            return None
        return value
    if isinstance(node, yaml.SequenceNode):
        return [_json(item, depth + 1, budget) for item in node.value if budget.left > 0]
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key, value in node.value:
            if budget.left <= 0:
                break
            if isinstance(key, yaml.ScalarNode):
                name = str(key.value)[:MAX_STRING_CHARS]
                budget.chars -= len(name)
                out[name] = _json(value, depth + 1, budget)
        return out
    return None


def properties_of(text: str) -> dict[str, Any]:
    """Every front-matter key of the note with its value as JSON ({} without front matter)."""
    node = front_matter_node(text)
    if node is None:
        return {}
    value = _json(node, 0, _Budget())
    return value if isinstance(value, dict) else {}


def aliases_of(properties: dict[str, Any]) -> list[str]:
    """The note's aliases: `aliases` (or `alias`), a list or a single string (commas do not
    split it: an alias may hold one)."""
    raw = properties.get("aliases", properties.get("alias"))
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        if isinstance(item, str | int | float) and not isinstance(item, bool):
            alias = " ".join(str(item).split())
            if alias and alias not in out:
                out.append(alias[:200])
    return out[:MAX_ALIASES]
