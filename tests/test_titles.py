"""A note's title: front matter (a real YAML parser), then the first level-1 heading, then the file
name (docs/interface.md, changed 2026-12-01; issue 11's list of what went wrong is the first
rows)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fs_notes.notes.titles import (
    MAX_FRONT_MATTER_CHARS,
    MAX_TITLE_CHARS,
    TITLE_SCAN_CHARS,
    first_heading,
    split_front_matter,
    title_of,
)

CASES = [
    # issue 11: a folded YAML title used to become the title ">-"
    ("folded", "---\ntitle: >-\n  Folded\n  title\n---\n# Heading\n", "Folded title"),
    ("literal block", "---\ntitle: |\n  Line one\n---\n", "Line one"),
    # issue 11: a byte-order mark used to hide the first heading
    ("bom heading", "\ufeff# Bom heading\nbody\n", "Bom heading"),
    ("bom front matter", "\ufeff---\ntitle: After BOM\n---\n", "After BOM"),
    # issue 11: setext headings used to be ignored
    ("setext", "Setext title\n============\n\nbody\n", "Setext title"),
    ("setext paragraph", "Two line\nsetext\n===\n", "Two line setext"),
    # issue 11: a '# ' heading deep in the body used to beat the front-matter title
    ("front matter first", "---\ntitle: Front\n---\n\nbody\n\n# Deep heading\n", "Front"),
    ("double quoted", '---\ntitle: "Quoted: colon"\n---\n', "Quoted: colon"),
    ("single quoted", "---\ntitle: 'It''s mine'\n---\n", "It's mine"),
    ("no type guessing: yes", "---\ntitle: yes\n---\n", "yes"),
    ("no type guessing: date", "---\ntitle: 2024-05-01\n---\n", "2024-05-01"),
    ("no type guessing: number", "---\ntitle: 1.10\n---\n", "1.10"),
    ("empty title falls through", "---\ntitle:\n---\n# H\n", "H"),
    ("null title falls through", "---\ntitle: ~\n---\n# H\n", "H"),
    ("list title falls through", "---\ntitle: [a, b]\n---\n# H\n", "H"),
    ("other keys only", "---\ntags: [x]\n---\n# H\n", "H"),
    ("crlf", "---\r\ntitle: crlf\r\n---\r\n", "crlf"),
    ("dots close front matter", "---\ntitle: dots\n...\nbody\n", "dots"),
    ("aliases are not expanded", "---\na: &a [1]\nb: [*a, *a]\ntitle: alias\n---\n", "alias"),
    # not front matter: never an error, the headings are looked for from the top
    ("not yaml", "---\n: : [\n---\n# Real\n", "Real"),
    ("yaml but not a mapping", "---\njust text\n---\n# Real\n", "Real"),
    ("never closed", "---\ntitle: open\n\n# Real\n", "Real"),
    ("thematic break then heading", "---\n# After a rule\n---\n", "After a rule"),
    # headings
    ("closing hashes", "# Title ###\n", "Title"),
    ("empty heading skipped", "#\n# Second\n", "Second"),
    ("level two is not a title", "## Install\n\ntext\n", "note"),
    ("hashtag is not a heading", "#tag\n", "note"),
    ("fenced code", "```\n# code\n```\n# After\n", "After"),
    ("tilde fence", "~~~~\n# code\n~~~~\n# After\n", "After"),
    ("unclosed fence hides the rest", "```\n# code\n", "note"),
    ("indented code", "    # indented\n\n# Real\n", "Real"),
    ("inner whitespace kept, ends trimmed", "#   Spaced    out  \n", "Spaced    out"),
    ("no title at all", "just text\n", "note"),
    ("empty", "", "note"),
]


@pytest.mark.parametrize(("text", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_titles_as_people_write_them(text: str, want: str) -> None:
    assert title_of(text, "note.md") == want


def test_the_file_name_is_the_last_resort_without_its_suffix() -> None:
    assert title_of("", "100% done.md") == "100% done"
    assert title_of("", "cafe\u0301.md") == "cafe\u0301"  # exact, not normalized


def test_titles_are_cut_to_the_limit() -> None:
    assert title_of("# " + "x" * 1000, "n.md") == "x" * MAX_TITLE_CHARS
    assert title_of("---\ntitle: " + "y" * 1000 + "\n---\n", "n.md") == "y" * MAX_TITLE_CHARS


def test_front_matter_larger_than_the_bound_is_not_parsed() -> None:
    big = "---\ntitle: big\n" + "k: v\n" * (MAX_FRONT_MATTER_CHARS // 5) + "---\n# Heading\n"
    assert split_front_matter(big)[0] is None


def test_a_heading_past_the_scan_window_is_not_looked_for() -> None:
    assert first_heading("x\n\n" * TITLE_SCAN_CHARS + "# Late\n") is None


def test_the_body_after_front_matter_is_what_follows_the_closing_line() -> None:
    assert split_front_matter("---\ntitle: T\n---\nbody\n") == ("T", "body\n")
    assert split_front_matter("\ufeffno front matter") == (None, "no front matter")


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(list("-#=:\n >|'\"`~\t[]{}&*!\ufeffabc")), max_size=80))
def test_any_text_gives_a_title_and_never_raises(text: str) -> None:
    title = title_of(text, "fallback.md")
    assert 0 < len(title) <= MAX_TITLE_CHARS
    assert "\n" not in title


def test_a_title_that_is_not_valid_utf8_is_dropped_by_either_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import yaml

    from fs_notes.notes import titles

    text = '---\ntitle: "\\ud800"\n---\n# Heading\n'
    for loader in {titles._Loader, yaml.SafeLoader}:
        monkeypatch.setattr(titles, "_Loader", loader)
        assert title_of(text, "n.md") == "Heading"
