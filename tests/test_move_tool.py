"""notes_move over the real protocol (`fs-notes serve`: the confined write worker, self-confined
server) and in process: the moved note, the wikilinks report and rewrite, and every refusal."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from wire import call_tool, stdio_server

from fs_notes.notes.relink import relink


def _uri(p: Path) -> str:
    return "file://" + urllib.parse.quote(str(p))


def _state(path: Path) -> tuple[object, ...]:
    st = path.lstat()
    return (path.read_bytes(), st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns,
            st.st_ctime_ns)  # fmt: skip


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "projects").mkdir(parents=True)
    (ws / "projects" / "plan.md").write_text("# Plan\nthe plan\n")
    (ws / "index.md").write_text(
        "# Index\nsee [[plan]] and [[projects/plan|the plan]] and ![[plan#Goals]]\n"
        "`[[plan]]` in code stays\n```\n[[plan]]\n```\nand [md](projects/plan.md)\n"
    )
    (ws / "other.md").write_text("# Other\n[[Plan]]\n")
    (ws / "unrelated.md").write_text("# Unrelated\n[[index]]\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_text("# secret\n")
    return ws


def _move(server: Any, n: int, ws: Path, **arguments: Any) -> dict[str, Any]:
    result: dict[str, Any] = server.ask(
        call_tool(n, "notes_move", {"workspaceUri": _uri(ws), **arguments})
    )["result"]
    return result


def test_notes_move_renames_through_the_confined_worker_and_reports_the_links(
    vault: Path,
) -> None:
    ino = (vault / "projects" / "plan.md").stat().st_ino
    outside = _state(vault.parent / "outside" / "secret.md")
    index_before = (vault / "index.md").read_bytes()
    with stdio_server(str(vault)) as server:
        res = _move(server, 1, vault, id="projects/plan.md", newId="archive/2026/plan.md")
        assert res.get("isError") is not True, res
        sc = res["structuredContent"]
        assert sc["id"] == "projects/plan.md" and sc["newId"] == "archive/2026/plan.md"
        linking = {b["id"]: b for b in sc["backlinks"]}
        assert set(linking) == {"index.md", "other.md"}
        assert linking["index.md"]["wikilinks"] == 3 and not linking["index.md"]["updated"]
        read = server.ask(
            call_tool(2, "notes_read", {"workspaceUri": _uri(vault), "id": "archive/2026/plan.md"})
        )["result"]
        assert "the plan" in read["content"][0]["text"]
    assert not (vault / "projects" / "plan.md").exists()
    moved = vault / "archive" / "2026" / "plan.md"
    assert moved.read_text() == "# Plan\nthe plan\n" and moved.stat().st_ino == ino
    assert (vault / "index.md").read_bytes() == index_before  # reported, not rewritten
    assert _state(vault.parent / "outside" / "secret.md") == outside


def test_update_links_rewrites_each_linking_note_through_the_worker(vault: Path) -> None:
    with stdio_server(str(vault)) as server:
        res = _move(
            server, 1, vault, id="projects/plan.md", newId="done/plan-v1.md", updateLinks=True
        )
        assert res.get("isError") is not True, res
        linking = {b["id"]: b for b in res["structuredContent"]["backlinks"]}
        assert linking["index.md"]["updated"] and linking["other.md"]["updated"]
    assert (vault / "index.md").read_text() == (
        "# Index\nsee [[done/plan-v1]] and [[done/plan-v1|the plan]] and "
        "![[done/plan-v1#Goals]]\n"
        "`[[plan]]` in code stays\n```\n[[plan]]\n```\nand [md](projects/plan.md)\n"
    )
    assert (vault / "other.md").read_text() == "# Other\n[[done/plan-v1]]\n"
    assert (vault / "unrelated.md").read_text() == "# Unrelated\n[[index]]\n"


@pytest.mark.parametrize(
    ("new_id", "says"),
    [
        ("../outside/x.md", "invalid note id"),
        ("/tmp/x.md", "invalid note id"),
        (".hidden.md", "invalid note id"),
        ("sub/.git/x.md", "invalid note id"),
        ("x.txt", "invalid note id"),
        ("other.md", "a note already exists at other.md"),
        ("d/x.md", "refused"),  # d is a symlink to outside
    ],
)
def test_bad_targets_are_refused_and_nothing_moves(vault: Path, new_id: str, says: str) -> None:
    (vault / "d").symlink_to("../outside")
    outside = sorted(os.listdir(vault.parent / "outside"))
    with stdio_server(str(vault)) as server:
        res = _move(server, 1, vault, id="projects/plan.md", newId=new_id)
    assert res["isError"] is True
    assert says in res["content"][0]["text"]
    assert (vault / "projects" / "plan.md").exists()
    assert (vault / "other.md").read_text() == "# Other\n[[Plan]]\n"
    assert sorted(os.listdir(vault.parent / "outside")) == outside


def test_bad_sources_are_refused(vault: Path) -> None:
    (vault / "d").symlink_to("../outside")
    os.link(vault.parent / "outside" / "secret.md", vault / "h.md")
    (vault / "l.md").symlink_to("../outside/secret.md")
    outside = _state(vault.parent / "outside" / "secret.md")
    with stdio_server(str(vault)) as server:
        for n, (src, says) in enumerate(
            [
                ("d/secret.md", "refused"),
                ("h.md", "more than one hard link"),
                ("l.md", "refused"),
                ("missing.md", "note not found"),
            ]
        ):
            res = _move(server, n, vault, id=src, newId="stolen.md")
            assert res["isError"] is True and says in res["content"][0]["text"], (src, res)
    assert not (vault / "stolen.md").exists()
    assert _state(vault.parent / "outside" / "secret.md") == outside


def test_expected_version_must_match(vault: Path) -> None:
    with stdio_server(str(vault)) as server:
        read = server.ask(
            call_tool(1, "notes_read", {"workspaceUri": _uri(vault), "id": "other.md"})
        )["result"]["structuredContent"]
        version = read["version"]
        assert version.startswith("v1:")
        stale = "v1:" + "0" * 32
        res = _move(server, 2, vault, id="other.md", newId="o2.md", expectedVersion=stale)
        assert res["isError"] is True and "changed since version" in res["content"][0]["text"]
        assert (vault / "other.md").exists()
        res = _move(server, 3, vault, id="other.md", newId="o2.md", expectedVersion=version)
        assert res.get("isError") is not True, res
    assert (vault / "o2.md").exists()


# -- relink (pure) -------------------------------------------------------------------------------


def _resolve(source: str, target: str) -> str | None:
    return "a/note.md" if target.lower() in ("note", "a/note", "a/note.md", "../a/note") else None


def test_relink_keeps_aliases_headings_embeds_and_the_md_suffix_as_written() -> None:
    text = "---\ntags: [[note]]\n---\n[[note]] [[a/note.md|x]] ![[Note#H]] [[note^b]] [[zz]]\r\n"
    new, count = relink(text, "b/src.md", "a/note.md", "c/new.md", _resolve)
    assert count == 4
    assert new == (
        "---\ntags: [[note]]\n---\n[[c/new]] [[c/new.md|x]] ![[c/new#H]] [[c/new^b]] [[zz]]\r\n"
    )


def test_relink_leaves_code_alone() -> None:
    text = "`[[note]]` x\n    [[note]]\n~~~\n[[note]]\n~~~\n[[note]]\n"
    new, count = relink(text, "s.md", "a/note.md", "n.md", _resolve)
    assert count == 1
    assert new == "`[[note]]` x\n    [[note]]\n~~~\n[[note]]\n~~~\n[[n]]\n"
