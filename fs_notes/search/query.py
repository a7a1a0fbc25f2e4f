"""A person's search words as an FTS5 MATCH expression (spec of the ranking in index.py).

What people type: a few words, not all of which need to match (OR: BM25 ranks notes with more of
them, and rarer ones, first), a "quoted phrase" that must appear as it is, and, in a query of
at most `PREFIX_UP_TO` words, the last word still being typed (a prefix); a query of three or
more plain words also matches them in order, as a phrase, which ranks a note holding the words
in that order first (a sentence a person remembers). Every word is quoted
for FTS5, so no character a person types is FTS5 syntax (AND, NEAR, column filters,
parentheses): a query can only ever match words.

Guarantees: `match_expression` returns None when the query holds no word (nothing to search),
else an expression FTS5 accepts for any input. Does not: stem ("plans" does not find "plan"),
or split scripts written without spaces into words (unicode61 keeps such a run as one token).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r'"([^"]*)"|(\w+)', re.UNICODE)
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32
#: Queries of at most this many words treat their last word as a prefix.
PREFIX_UP_TO = 3


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def match_expression(query: str) -> str | None:
    """The FTS5 expression for `query` (see the module docstring), or None."""
    terms: list[str] = []
    matches = list(_TOKEN.finditer(query))
    typing = len(matches) <= PREFIX_UP_TO  # a short query is still being typed; a long one
    # (a sentence pasted or asked) gains only noise from a prefix
    for n, m in enumerate(matches):
        phrase, word = m.group(1), m.group(2)
        if phrase is not None:
            words = _WORD.findall(phrase)
            if words:
                terms.append(_quoted(" ".join(words)))
            continue
        last = n == len(matches) - 1 and m.end() == len(query.rstrip()) and len(word) >= 2
        last = last and typing
        terms.append(_quoted(word) + ("*" if last else ""))
        if len(terms) >= MAX_TERMS:
            break
    words = [m.group(2) for m in matches if m.group(2) is not None]
    if len(words) >= 3 and len(words) == len(matches):  # the words in order count extra
        terms.append(_quoted(" ".join(words[:MAX_TERMS])))
    return " OR ".join(terms) if terms else None


def plain(query: str) -> str:
    """The query's words, lower-cased and joined by single spaces (to compare with titles)."""
    return " ".join(w.lower() for w in _WORD.findall(query))
