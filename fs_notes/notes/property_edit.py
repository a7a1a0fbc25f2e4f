"""Front-matter properties set and removed without touching anything else (issue 31 item 2).

The front matter (titles.py `front_matter_block`) is loaded with a round-trip YAML library
(ruamel.yaml: it keeps comments, key order, quoting and unknown keys, which PyYAML's loader
throws away), the asked keys are set or removed, and the mapping is written back.

Guarantees:
- Nothing but the asked keys changes: before anything is changed, the front matter is written
  back unchanged with each indentation style tried, and only a style that gives back every byte
  of it is used to write the whole mapping; if none does (trailing blanks, an unusual layout),
  only the lines of the asked keys are replaced or removed and new keys added at its end (the
  other lines are the note's own), never the user's other keys rewritten. The note's body, its
  BOM, its fences and its line endings (CRLF kept) are the note's own bytes.
- What is written reads back as asked: the new front matter is read again with the parser the
  tools read properties with (properties.py), and every property must be what it was, but the
  set ones (the values given, as JSON) and the removed ones (gone); else refused.
- A front matter that does not parse as a YAML mapping, one that is never closed, a key that
  is not there to remove, or a key with a control character is refused, with the reason.
A refusal is `PropertiesRefused`; nothing is half done (this module only computes the text).

Does not: keep a comment that sat on a removed key's line, or the layout of a value it replaces
(the new value is written in the library's style).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from .properties import properties_of
from .titles import front_matter_block, front_matter_node

__all__ = ["MAX_KEYS", "PropertiesRefused", "change_properties"]

MAX_KEYS = 50
MAX_KEY_CHARS = 200
MAX_VALUE_JSON = 16 << 10
#: (mapping, sequence, offset) indentations tried, the common ones first: "- a" under its key,
#: then "  - a".
_STYLES = ((2, 2, 0), (2, 4, 2), (4, 4, 2), (4, 4, 0), (4, 6, 4), (3, 3, 0))


class PropertiesRefused(ValueError):
    """Why the properties cannot be changed so (nothing was changed)."""


def _yaml(style: tuple[int, int, int]) -> Any:
    from ruamel.yaml import YAML

    y = YAML(typ="rt", pure=True)
    y.preserve_quotes = True
    y.width = 1 << 16  # never fold a long line the user wrote on one
    y.indent(mapping=style[0], sequence=style[1], offset=style[2])
    return y


class _Written(list[str]):
    """Where the dumper writes (any object with write(); no I/O module in the note model)."""

    def write(self, text: str | bytes) -> None:
        # (without an `encoding` of its stream, the dumper writes UTF-8 bytes)
        self.append(text.decode("utf-8") if isinstance(text, bytes) else text)


def _dump(y: Any, data: Any) -> str:
    out = _Written()
    y.dump(data, out)
    return "".join(out)


def _check_key(key: str) -> None:
    if not key or len(key) > MAX_KEY_CHARS:
        raise PropertiesRefused(f"a property name must be 1 to {MAX_KEY_CHARS} characters")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in key):
        raise PropertiesRefused("a property name may not hold control or format characters")


def change_properties(text: str, set_: Mapping[str, Any], unset: Sequence[str]) -> str:
    """`text` with the front-matter keys of `set_` set (JSON values) and those of `unset`
    removed (see the module docstring); PropertiesRefused if that cannot be done exactly."""
    if len(set_) + len(unset) > MAX_KEYS:
        raise PropertiesRefused(f"at most {MAX_KEYS} properties can be changed at once")
    if set(set_) & set(unset):
        raise PropertiesRefused("a property cannot be both set and removed")
    for key in [*set_, *unset]:
        _check_key(key)
    for key, value in set_.items():
        if len(json.dumps(value)) > MAX_VALUE_JSON:
            raise PropertiesRefused(f"the value of {key!r} is over {MAX_VALUE_JSON} characters")
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    block, body = front_matter_block(text)
    if block is None:
        if text[len(bom) :].startswith("---"):
            raise PropertiesRefused(
                "the note opens with --- but its front matter is never closed (or is too long)"
            )
        opening, closing, work, crlf = "---\n", "---\n", "", False
        head_body = text[len(bom) :]
    else:
        if front_matter_node(text) is None and block.strip():
            raise PropertiesRefused("the note's front matter does not parse as YAML properties")
        head = text[len(bom) : len(text) - len(body)]
        opening = head[: head.index("\n") + 1]
        closing = head[len(opening) + len(block) :]
        crlf = "\r\n" in block
        work = block.replace("\r\n", "\n")
        head_body = body
    y, data, faithful = _faithful(work)
    for key in unset:
        if key not in data:
            raise PropertiesRefused(f"the note has no property {key!r} to remove")
    if faithful:
        for key in unset:
            del data[key]
        for key, value in set_.items():
            data[key] = value
        new_block = _dump(y, data) if data else ""
    else:
        new_block = _spliced(y, data, work, set_, unset)
    if crlf:
        new_block = new_block.replace("\n", "\r\n")
    result = bom + opening + new_block + closing + head_body
    expected = {k: v for k, v in properties_of(text).items() if k not in unset}
    expected.update(set_)
    if properties_of(result) != json.loads(json.dumps(expected)):
        raise PropertiesRefused(
            "the new front matter would not read back as given (a value YAML would type "
            "differently, or a key the parser reads otherwise); nothing was changed"
        )
    return result


def _spliced(y: Any, data: Any, work: str, set_: Mapping[str, Any], unset: Sequence[str]) -> str:
    """`work` with only the lines of the asked keys replaced or removed, and new keys added at
    its end: for a front matter the writer does not reproduce (trailing blanks, say). A key's
    lines are its own line and those below it up to the next top-level key, less the blank and
    comment lines that end them (they stay)."""
    lines = work.splitlines(keepends=True)
    starts = sorted((data.lc.key(k)[0], k) for k in data)
    extent: dict[Any, tuple[int, int]] = {}
    for n, (line, key) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        while end > line + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
            end -= 1
        extent[key] = (line, end)
    out = list(lines)
    for key in [*unset, *(k for k in set_ if k in data)]:
        line, end = extent[key]
        out[line:end] = [""] * (end - line)
        if key in set_:
            out[line] = _dump(y, {key: set_[key]})
    added = "".join(_dump(y, {k: v}) for k, v in set_.items() if k not in data)
    text = "".join(out)
    if added and text and not text.endswith("\n"):
        text += "\n"
    return text + added


def _faithful(work: str) -> tuple[Any, Any, bool]:
    """The YAML dumper that writes `work` back byte for byte (the first style tried when
    none does: False), and the loaded mapping."""
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError

    if not work.strip():
        return _yaml(_STYLES[0]), CommentedMap(), True
    first: tuple[Any, Any] | None = None
    for style in _STYLES:
        y = _yaml(style)
        try:
            data = y.load(work)
        except (YAMLError, RecursionError, ValueError) as exc:
            raise PropertiesRefused(
                f"the note's front matter does not parse as YAML ({type(exc).__name__})"
            ) from None
        if not isinstance(data, CommentedMap):
            raise PropertiesRefused("the note's front matter is not a mapping of properties")
        if _dump(y, data) == work:
            return y, data, True
        first = first or (y, data)
    assert first is not None
    return first[0], first[1], False
