"""What notes_search puts first, and what its snippets show (issue 29 items 1 and 5): a word of
the question that is some note's name does not outweigh the note that answers all of it, and
a snippet is the note's text, never its front matter. Judged through the filesystem layer and
the index as the tools use them (`tools/indexed.current`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fs_notes.fs import WorkspaceRoot
from fs_notes.policy import Policy
from fs_notes.search.index import Hit
from fs_notes.tools.context import NotesEnv, Opened
from fs_notes.tools.indexed import current

FRONT = "---\naliases: [Ardea]\ndescription: A field guide to wading birds.\ntags: [birds]\n---\n"


class _Folder:
    def __init__(self, tmp_path: Path, notes: dict[str, str]) -> None:
        folder = tmp_path / "notes"
        for name, text in notes.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
        policy = Policy.for_single_workspace(str(folder), "me", token_sha256=None)
        self.root = WorkspaceRoot.open(str(folder))
        ws = policy.workspaces[0]
        state = tmp_path / "state"
        state.mkdir()
        self.env = NotesEnv(policy, {ws.name: self.root}, index_dir=str(state))
        self.ws = Opened(ws, self.root, ws.uri)

    def search(self, query: str) -> list[Hit]:
        return current(self.env, self.ws).index.search(query, limit=10)

    def close(self) -> None:
        self.env.close()
        self.root.close()


@pytest.fixture
def backups(tmp_path: Path) -> Iterator[_Folder]:
    """backup.md, the note that answers how to restore one, and twenty others, four of which
    say "restore" and "yesterday" (so "backup" is the question's rarest word)."""
    notes = {
        "backup.md": "# Backup\n\nBackups are copies of your vault, made every night. A backup"
        " is kept for a week.\n",
        "guides/getting notes back.md": "# Getting notes back\n\nTo restore a backup from"
        " yesterday, open the folder of copies and pick the one you want.\n",
    }
    for i in range(20):
        said = "Restore and yesterday and other words" if i < 4 else "Something else entirely"
        notes[f"misc/n{i}.md"] = f"# Misc {i}\n\n{said} {i}.\n"
    folder = _Folder(tmp_path, notes)
    yield folder
    folder.close()


def test_one_word_of_a_question_that_names_a_note_does_not_outweigh_the_answer(
    backups: _Folder,
) -> None:
    """"restore a backup from yesterday": the note about restoring comes first, not backup.md,
    whose name is one of the question's five words. The control: asked for "backup" alone,
    backup.md is first (a note the whole query names comes first)."""
    assert backups.search("restore a backup from yesterday")[0].id == "guides/getting notes back.md"
    assert backups.search("backup")[0].id == "backup.md"


def test_a_snippet_shows_the_matched_text_never_the_front_matter(tmp_path: Path) -> None:
    """A note that opens with front matter: a search of its body shows the body's matched
    words; one found by its description only (front matter, searched with the aliases) shows
    the body's start. No snippet holds the front matter's lines. The control: the words of the
    front matter do find the note."""
    folder = _Folder(tmp_path, {
        "herons.md": FRONT + "# Herons\n\nGrey herons wade in shallow water and wait.\n",
        "other.md": "# Other\n\nNothing about birds at all.\n",
    })  # fmt: skip
    try:
        (body,) = [h for h in folder.search("shallow water") if h.id == "herons.md"]
        assert "shallow" in body.snippet and "water" in body.snippet
        (described,) = folder.search("wading guide")
        assert described.id == "herons.md"  # the control: the description is searched
        (alias,) = folder.search("ardea")
        assert alias.id == "herons.md"
        for hit in (body, described, alias):
            assert "---" not in hit.snippet
            assert "aliases" not in hit.snippet and "description" not in hit.snippet
            assert "field guide" not in hit.snippet
        assert described.snippet.startswith("# Herons Grey herons wade")
    finally:
        folder.close()


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("C#", "c-sharp.md"),
        ("C++17", "cpp.md"),
        ("git push --force", "push.md"),
        (".gitignore", "ignore.md"),
        ("std::vector", "vector.md"),
    ],
)
def test_a_code_word_finds_the_note_that_has_it_whole(
    tmp_path: Path, query: str, answer: str
) -> None:
    """Symbols people type as part of a word are not dropped: each note below shares the
    query's plain words with a dozen shorter ones that hold them more often (C, force,
    gitignore, std and vector: BM25 alone puts those first), and the one with the code word
    whole comes first, whether it is in the title, in `inline code`, or in
    prose (C#, C++17, std::vector, .gitignore)."""
    notes = {
        "c-sharp.md": "# Language notes\n\nWe write the service in C# and test it nightly.\n",
        "cpp.md": "# Standards\n\nThe build needs C++17 for structured bindings.\n",
        "push.md": "# Publishing\n\nRun `git push --force` only on your own branch.\n",
        "ignore.md": "# Keeping files out\n\nList them in .gitignore at the top.\n",
        "vector.md": "# Containers\n\nA std::vector grows as you add to it.\n",
    }
    for i in range(12):
        plain = "C C, push git, force force, gitignore, vector std 17"
        notes[f"other/n{i}.md"] = f"# C {i}\n\n{plain}\n"
    folder = _Folder(tmp_path, notes)
    try:
        assert folder.search(query)[0].id == answer
    finally:
        folder.close()
