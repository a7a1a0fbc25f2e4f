"""The judge of what a person or a model reads: rendering attacks, seen from the client's side.

A rendering attack does not reach outside the workspace: it plants a name that, once shown, forges
a line, hides a character or looks exactly like another note. The runner cannot see "escaped" on
disk, so this module reads the responses the way a person would: every text content, the delete
form's message and its option labels (never the structured content, which carries exact ids, and
never a note's own content, which is the user's).

Guarantees: independent of the product's rendering (`fs_notes.render` is not imported): a raw
control (other than the newline between lines), format, separator, surrogate, private-use or
unassigned character in any shown text is harm (balanced isolate pairs around a field, the way a
server keeps a right-to-left title from reordering its line, are allowed); so is a shown line
equal to a forged one, and two options whose labels look the same once NFKC-normalized with
format characters removed and the modification time ignored. Does not: judge rendering in a
terminal or a font: two labels that differ only by a Cyrillic look-alike letter pass here (that
is `render.skeleton`'s job, tested in tests/test_render.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any

_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_MODIFIED = re.compile(r"\s*\(modified [^)]*\)\s*$")


def _options(result: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for req in (result.get("inputRequests") or {}).values():
        params = req.get("params", {}) if isinstance(req, dict) else {}
        schema = params.get("requestedSchema", {}) if isinstance(params, dict) else {}
        for prop in (schema.get("properties") or {}).values():
            if isinstance(prop, dict):
                out += [o for o in prop.get("oneOf", []) if isinstance(o, dict)]
    return out


def shown_texts(response: dict[str, Any]) -> list[str]:
    """Every string of ``response`` a person reads (not notes_read content: the caller skips
    those responses)."""
    if "error" in response:
        return [str(response["error"].get("message", ""))]
    result = response.get("result")
    if not isinstance(result, dict):
        return []
    texts = [
        str(c.get("text", ""))
        for c in result.get("content", [])
        if isinstance(c, dict) and c.get("type") == "text"
    ]
    for req in (result.get("inputRequests") or {}).values():
        params = req.get("params", {}) if isinstance(req, dict) else {}
        if isinstance(params, dict) and "message" in params:
            texts.append(str(params["message"]))
    texts += [str(o.get("title", "")) for o in _options(result)]
    return texts


def served_ids(response: dict[str, Any]) -> set[str]:
    """The exact note ids ``response`` hands a client (structured content, form options)."""
    result = response.get("result")
    if not isinstance(result, dict):
        return set()
    ids = {str(o.get("const")) for o in _options(result)}
    structured = result.get("structuredContent") or {}
    for key in ("notes", "matches"):
        ids |= {str(n.get("id")) for n in structured.get(key, []) if isinstance(n, dict)}
    if isinstance(structured.get("id"), str):
        ids.add(structured["id"])
    return ids


_FSI, _PDI = "\u2068", "\u2069"


def _without_isolates(text: str) -> str | None:
    """``text`` without balanced FIRST STRONG ISOLATE ... POP DIRECTIONAL ISOLATE pairs (what a
    server puts around a right-to-left field, UAX #9); None if they do not balance."""
    depth = 0
    for c in text:
        if c == _FSI:
            depth += 1
        elif c == _PDI:
            depth -= 1
            if depth < 0:
                return None
    return text.replace(_FSI, "").replace(_PDI, "") if depth == 0 else None


def _seen(label: str) -> str:
    visible = "".join(c for c in label if unicodedata.category(c) not in _HIDDEN)
    return unicodedata.normalize("NFKC", _MODIFIED.sub("", visible))


def harm(responses: Iterable[dict[str, Any]], forged: Iterable[str]) -> list[str]:
    """What a person would have been misled by, one line per finding ([] when nothing)."""
    found: list[str] = []
    forged_lines = set(forged)
    for response in responses:
        for raw in shown_texts(response):
            text = _without_isolates(raw)
            if text is None:
                found.append("shown text carries unbalanced directional isolates")
                text = raw
            hidden = sorted({c for c in text if c != "\n" and unicodedata.category(c) in _HIDDEN})
            if hidden:
                codes = ", ".join(f"U+{ord(c):04X}" for c in hidden)
                found.append(f"shown text carries hidden characters {codes}")
            for line in text.splitlines():
                if line in forged_lines:
                    found.append(f"a name forged the line {line!r}")
        result = response.get("result")
        options = _options(result) if isinstance(result, dict) else []
        seen: dict[str, str] = {}
        for option in options:
            label, const = _seen(str(option.get("title", ""))), str(option.get("const"))
            if label in seen and seen[label] != const:
                found.append(f"two delete options look the same: {label!r}")
            seen.setdefault(label, const)
    return list(dict.fromkeys(found))
