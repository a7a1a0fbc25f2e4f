"""A person's search words as an FTS5 MATCH expression (spec of the ranking in index.py).

What people type: a few words, not all of which need to match (OR: BM25 ranks notes with more of
them, and rarer ones, first), a "quoted phrase" that must appear as it is, and, in a query of
at most `PREFIX_UP_TO` words, the last word still being typed (a prefix); a query of three or
more plain words also matches them in order, as a phrase, which ranks a note holding the words
in that order first (a sentence a person remembers). Every word is quoted
for FTS5, so no character a person types is FTS5 syntax (AND, NEAR, column filters,
parentheses): a query can only ever match words.

Scripts written without spaces (Han, kana, Hangul syllables): unicode61 would keep a whole run
of them as one token, so a word inside a sentence could never be found. `segment` puts an
invisible separator (U+2060, which unicode61 does not take for a letter) around each such
character, in the index and in the query alike; a query word holding them becomes a phrase of
its characters, which matches them adjacent and in order anywhere in a run. `unsegment` removes
the separators from snippets again.

Code words (`C#`, `--force`, `.gitignore`, `std::vector`, `C++17`): besides its plain words,
a query's code words are searched whole, as the index keeps them (`code_words`, `code_term`),
so the note that has `C#` comes before the thousand that have the letter C.

Guarantees: `match_expression` returns None when the query holds no word (nothing to search),
else an expression FTS5 accepts for any input. Does not: stem ("plans" does not find "plan"),
or segment scripts with combining marks and no spaces (Thai, Khmer).
"""

from __future__ import annotations

import re
import unicodedata

SEPARATOR = "\u2060"
MARK_START, MARK_END = "\x02", "\x03"  # snippet markers, turned into ** by `unsegment`
_SPACELESS = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]"
)
_TOKEN = re.compile(r'"([^"]*)"|(\w+)', re.UNICODE)
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32
#: Queries of at most this many words treat their last word as a prefix.
PREFIX_UP_TO = 3


def segment(text: str) -> str:
    """`text` with each character of a script written without spaces set apart (see above)."""
    if _SPACELESS.search(text) is None:
        return text
    return _SPACELESS.sub(lambda m: SEPARATOR + m.group() + SEPARATOR, text)


def unsegment(snippet: str) -> str:
    """A snippet as the note has it, on one line: separators gone, runs of white space made one
    space, matched words marked **like this**."""
    text = " ".join(snippet.replace(SEPARATOR, "").split())
    text = text.replace(MARK_END + MARK_START, "")
    return text.replace(MARK_START, "**").replace(MARK_END, "**")


def _quoted(text: str) -> str:
    return '"' + segment(text).replace('"', '""') + '"'


def words_of(query: str) -> list[str]:
    """The query's plain words (not its quoted phrases), lower-cased, each once, in order."""
    out: list[str] = []
    for m in _TOKEN.finditer(normal(query)):
        word = m.group(2)
        if word is not None and word.lower() not in out:
            out.append(word.lower())
    return out


def word_expression(word: str) -> str:
    """The FTS5 expression of one plain word (as `match_expression` writes it, no prefix)."""
    return _quoted(word)


def normal(query: str) -> str:
    """The query in NFC: a word typed or pasted decomposed ("cre\u0300me", as macOS writes
    names) is one word, as unicode61 reads it in the notes, not "cre" and "me"."""
    return unicodedata.normalize("NFC", query)


def match_expression(query: str, skip: frozenset[str] = frozenset()) -> str | None:
    """The FTS5 expression for `query` (see the module docstring), or None. The words in `skip`
    (lower-cased) are left out of the "any of the words" part, not out of phrases: index.py
    skips words most notes hold, which BM25 gives no weight but which cost a look at most
    notes."""
    query = normal(query)
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
        last = last and typing and _SPACELESS.search(word) is None  # a phrase has no prefix
        if word.lower() in skip:
            continue
        terms.append(_quoted(word) + ("*" if last else ""))
        if len(terms) >= MAX_TERMS:
            break
    words = [m.group(2) for m in matches if m.group(2) is not None]
    if len(words) >= 3 and len(words) == len(matches):  # the words in order count extra
        terms.append(_quoted(" ".join(words[:MAX_TERMS])))
    if terms:  # (a query of symbols alone holds no word: nothing to search)
        terms += [_quoted(code_term(w)) for w in code_words(query, prose=False)[:MAX_TERMS]]
    return " OR ".join(terms) if terms else None


MAX_GRAMS = 24
GRAM_WORDS = 4

#: Code words: a word with the symbols people type as part of it (`C#`, `C++17`, `--force`,
#: `.gitignore`, `std::vector`, `two-step`), which unicode61 cuts into plain words or drops
#: (`C#` is the word "c" of a thousand notes). Each is also indexed whole, as one token of its
#: own (`code_term`), in a column of its own, and a query's code words are searched so too.
_SYMBOLS = frozenset("#+.:-")
_CODE_SPAN = re.compile(r"`([^`\n]{1,200})`")
_CODE_TOKEN = re.compile(r"[-.]*\w[\w#+.:\-]*")
#: A token with a symbol in it (the others are no code words: not looked at one by one).
_SYMBOL_TOKEN = re.compile(r"[-.]+\w[\w#+.:\-]*|\w+[#+.:\-][\w#+.:\-]*")
MAX_CODE_WORDS = 256
_CODE_CHARS = 64


def _code_word(token: str) -> str | None:
    token = token.rstrip(".:-").casefold()
    if len(token) > _CODE_CHARS or _SYMBOLS.isdisjoint(token):
        return None
    return token


def code_words(text: str, *, prose: bool = True) -> list[str]:
    """The code words of `text`, each once, case-folded. In `prose` (a note's body, which may
    be long) only where code is written: in `inline code`, where a word runs into `#`, `+` or
    `::` (C#, C++, std::vector), and a word that starts with a dot (.gitignore): a scan of
    every word costs a 100,000-note build seconds; otherwise (a title, a heading, a query) in
    every word."""
    found: dict[str, None] = {}

    def add(tokens: list[str]) -> None:
        for token in dict.fromkeys(tokens):
            word = _code_word(token)
            if word is not None and len(found) < MAX_CODE_WORDS:
                found[word] = None

    if not prose:
        add(_SYMBOL_TOKEN.findall(normal(text)))
        return list(found)
    add(_SYMBOL_TOKEN.findall(" ".join(_CODE_SPAN.findall(text))))
    for symbol in ("#", "+", "::", " ."):  # (str.find: 20 times a regular expression's speed)
        at = text.find(symbol, 1)
        while at > 0 and len(found) < MAX_CODE_WORDS:
            start = at + 1 if symbol == " ." else at
            while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_.:-"):
                start -= 1
            m = _CODE_TOKEN.match(text, start) if start < at or symbol == " ." else None
            if m is not None:
                add([m.group()])
            at = text.find(symbol, at + 1)
    return list(found)


def code_term(word: str) -> str:
    """A code word as one token unicode61 keeps whole: its UTF-8 in hexadecimal after a `q`."""
    return "q" + word.encode("utf-8", "surrogatepass").hex()


def name_grams(query: str) -> list[str]:
    """The runs of the query's words (of up to `GRAM_WORDS` words; a lone word of at least two
    letters) that a note's title, file name or alias may be, shorter than the whole query (which
    is `plain`), as `plain` text: "extract a tar archive" -> ["extract", "tar", "archive",
    "extract a", ...]. A note named by one of them is what a person asking for it often means."""
    words = [w.lower() for w in _WORD.findall(normal(query))]
    grams: list[str] = []
    for size in range(1, min(GRAM_WORDS, len(words) - 1) + 1):
        for start in range(len(words) - size + 1):
            gram = " ".join(words[start : start + size])
            if (size > 1 or len(gram) >= 2) and gram not in grams:
                grams.append(gram)
    return grams[:MAX_GRAMS]


def plain(query: str) -> str:
    """The query's words, lower-cased and joined by single spaces (to compare with titles; both
    in NFC)."""
    return " ".join(w.lower() for w in _WORD.findall(normal(query)))
