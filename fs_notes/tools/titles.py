"""A note's title (CONTRACT.md): the first `# ` heading, else a front-matter `title:`, else the
file name without `.md`. Headings inside front matter or fenced code blocks do not count."""

from __future__ import annotations

MAX_TITLE_CHARS = 200


def _front_matter(lines: list[str]) -> tuple[str | None, int]:
    """(the front-matter title if any, index of the first line after the front matter)."""
    if not lines or lines[0].strip() != "---":
        return None, 0
    title = None
    for i in range(1, min(len(lines), 200)):
        line = lines[i]
        if line.strip() in ("---", "..."):
            return title, i + 1
        key, sep, value = line.partition(":")
        if sep and key.strip() == "title" and title is None:
            title = value.strip().strip("'\"").strip() or None
    return None, 0  # not closed: not front matter


def title_of(text: str, note_name: str) -> str:
    lines = text.splitlines()
    fm_title, start = _front_matter(lines)
    fence: str | None = None
    for line in lines[start:]:
        stripped = line.lstrip()
        if line[: len(line) - len(stripped)].count(" ") > 3:
            continue  # indented code
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if stripped.startswith("# ") or stripped.rstrip() == "#":
            heading = stripped[1:].strip().rstrip("#").strip()
            if heading:
                return heading[:MAX_TITLE_CHARS]
    if fm_title:
        return fm_title[:MAX_TITLE_CHARS]
    stem = note_name[: -len(".md")] if note_name.endswith(".md") else note_name
    return stem[:MAX_TITLE_CHARS]
