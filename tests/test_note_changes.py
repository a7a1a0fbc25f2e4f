"""One door for every change to a note (issue 28 item 1; fs_notes/fs/changes.py).

Every tool that changes a note goes through the `NoteChanges` the composition root is given, by
the filesystem layer's own verb; a door that refuses stops each tool before anything is done.
Judged from outside: a door that records (and passes on to the filesystem layer) and one that
refuses, given to the real tools through the composition root (`compose`); the files are
compared byte for byte and stat for stat.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from inprocess import InProcess

from fs_notes.compose import compose
from fs_notes.fs import Identity
from fs_notes.fs.changes import OPS, ChangeableRoot, InProcessChanges, Op
from fs_notes.policy_file import load_policy
from fs_notes.rounds.seal import KeyRing

KEYS = KeyRing([("k", bytes(range(32)))])


class Recording(InProcessChanges):
    """The filesystem layer in this process, each verb written down first."""

    def __init__(self, roots: Mapping[str, ChangeableRoot]) -> None:
        super().__init__(roots)
        self.calls: list[tuple[str, str, str]] = []

    def create_note(self, workspace: str, relpath: str, data: bytes) -> Identity:
        self.calls.append(("create_note", workspace, relpath))
        return super().create_note(workspace, relpath, data)

    def update_note(
        self, workspace: str, relpath: str, data: bytes, *, expected: Identity | None = None
    ) -> Identity:
        self.calls.append(("update_note", workspace, relpath))
        return super().update_note(workspace, relpath, data, expected=expected)

    def unlink_note(self, workspace: str, relpath: str, expected: Identity) -> None:
        self.calls.append(("unlink_note", workspace, relpath))
        super().unlink_note(workspace, relpath, expected)

    def move_note(
        self, workspace: str, relpath: str, new_relpath: str, *, expected: Identity | None = None
    ) -> Identity:
        self.calls.append(("move_note", workspace, relpath))
        return super().move_note(workspace, relpath, new_relpath, expected=expected)


class Refusing(Recording):
    """A door whose layer is down: every verb refused, with its reason."""

    def __init__(self, roots: Mapping[str, ChangeableRoot]) -> None:
        super().__init__(roots)
        self.asked: list[Op] = []

    def refusal(self, workspace: str, op: Op) -> str | None:
        self.asked.append(op)
        return "the OS containment layer is down"


def _server(tmp_path: Path, door: type[Recording]) -> tuple[Any, Recording]:
    ws = tmp_path / "notes"
    ws.mkdir()
    (ws / "a.md").write_text("# Alpha\n\nSee [[b]].\n")
    (ws / "b.md").write_text("# Beta\n\nbody\n")
    policy_file = tmp_path / "p.toml"
    policy_file.write_text(
        '[[principal]]\nname = "me"\nlocal = true\n\n'
        f'[[workspace]]\nname = "notes"\npath = "{ws}"\n\n'
        '[[grant]]\nprincipal = "me"\nworkspace = "notes"\n'
        'operations = ["read", "write", "delete"]\n'
    )
    policy = load_policy(str(policy_file))
    (tmp_path / "state").mkdir()
    made: list[Recording] = []

    def make(roots: Mapping[str, ChangeableRoot]) -> Recording:
        made.append(door(roots))
        return made[0]

    srv: Any = InProcess(policy, tmp_path / "state", keyring=KEYS, clock=time.time, door=make)
    srv.ws, srv.me = ws, policy.local_principal()
    return srv, made[0]


def _call(srv: Any, name: str, **args: Any) -> dict[str, Any]:
    answer: dict[str, Any] = srv.call(srv.me, name, {"workspaceUri": srv.ws.as_uri(), **args})
    result: dict[str, Any] = answer["result"]
    return result


def _version(srv: Any, note_id: str) -> str:
    return str(_call(srv, "notes_read", id=note_id)["structuredContent"]["version"])


def _delete(srv: Any, note_id: str) -> dict[str, Any]:
    args = {"workspaceUri": srv.ws.as_uri(), "id": note_id}
    first = srv.call(srv.me, "notes_delete", args)["result"]
    if first.get("resultType") != "input_required":
        result: dict[str, Any] = first
        return result
    answer = {"delete_choice": {"action": "accept",
                                "content": {"note_id": note_id, "confirm": True}}}  # fmt: skip
    done: dict[str, Any] = srv.call(
        srv.me, "notes_delete", args, inputResponses=answer, requestState=first["requestState"]
    )["result"]
    return done


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int, int, int, int]]:
    out = {}
    for path in sorted(folder.rglob("*")):
        st = os.lstat(path)
        data = path.read_bytes() if path.is_file() else b""
        out[str(path.relative_to(folder))] = (data, st.st_mode, st.st_ino, st.st_mtime_ns,
                                              st.st_uid)  # fmt: skip
    return out


def test_every_change_a_tool_makes_goes_through_the_door_by_its_own_verb(tmp_path: Path) -> None:
    srv, door = _server(tmp_path, Recording)
    try:
        steps: list[tuple[str, dict[str, Any], str]] = [
            ("notes_create", {"content": "# C\n"}, "create_note"),
            ("notes_update", {"content": "# C2\n"}, "update_note"),
            ("notes_append", {"content": "more\n"}, "update_note"),
            ("notes_edit", {"edits": [{"oldText": "C2", "newText": "C3"}]}, "update_note"),
            ("notes_update", {"content": "# C4\n", "expectedVersion": None}, "update_note"),
        ]
        for tool, args, verb in steps:
            if "expectedVersion" in args:
                args["expectedVersion"] = _version(srv, "c.md")
            door.calls.clear()
            result = _call(srv, tool, id="c.md", **args)
            assert result.get("isError") is not True, result
            assert door.calls == [(verb, "notes", "c.md")], tool
        assert (srv.ws / "c.md").read_text() == "# C4\n"
        door.calls.clear()
        moved = _call(srv, "notes_move", id="b.md", newId="beta.md", updateLinks=True)
        assert moved.get("isError") is not True, moved
        # the move, then the linking note's rewrite: both through the door
        assert door.calls == [("move_note", "notes", "b.md"), ("update_note", "notes", "a.md")]
        assert (srv.ws / "a.md").read_text() == "# Alpha\n\nSee [[beta]].\n"
        door.calls.clear()
        done = _delete(srv, "c.md")
        assert done["structuredContent"] == {"deleted": "c.md", "outcome": "deleted"}, done
        assert door.calls == [("unlink_note", "notes", "c.md")]
        assert sorted(p.name for p in srv.ws.iterdir()) == ["a.md", "beta.md"]
    finally:
        srv.close()


@pytest.mark.parametrize(
    ("tool", "args", "op", "says"),
    [
        ("notes_create", {"id": "n.md", "content": "x"}, "create_note", "writing"),
        ("notes_update", {"id": "a.md", "content": "x"}, "update_note", "writing"),
        ("notes_append", {"id": "a.md", "content": "x"}, "update_note", "writing"),
        ("notes_edit", {"id": "a.md", "edits": [{"oldText": "Alpha", "newText": "A"}]},
         "update_note", "writing"),
        ("notes_move", {"id": "b.md", "newId": "c.md"}, "move_note", "moving"),
        ("notes_delete", {"id": "b.md"}, "unlink_note", "deletion"),
    ],
)  # fmt: skip
def test_a_door_that_refuses_stops_each_tool_before_anything_is_done(
    tmp_path: Path, tool: str, args: dict[str, Any], op: Op, says: str
) -> None:
    srv, door = _server(tmp_path, Refusing)
    assert isinstance(door, Refusing)
    try:
        before = _snapshot(srv.ws)
        delete = tool == "notes_delete"
        result = _delete(srv, args["id"]) if delete else _call(srv, tool, **args)
        assert result["isError"] is True
        assert result["content"][0]["text"] == (
            f"{says} is refused in this workspace: the OS containment layer is down"
        )
        assert door.asked == [op]
        assert door.calls == []  # no verb was called
        assert _snapshot(srv.ws) == before  # nothing changed, not even a time
    finally:
        srv.close()


def test_the_composition_root_takes_the_door_as_a_required_argument() -> None:
    """No default and no string sentinel: a caller that names no door cannot build a server."""
    param = inspect.signature(compose).parameters["door"]
    assert param.default is inspect.Parameter.empty
    assert param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert param.annotation == "Door"  # a protocol, opened on the parts: never a string
    assert OPS == ("create_note", "update_note", "unlink_note", "move_note")


def test_each_verb_of_the_door_is_the_filesystem_layers_and_the_workers_own() -> None:
    """`grep unlink_note` leads from the tool to unlinkat: the door, the confined door, the
    worker's client, its frame operation and the root handle carry the same four names."""
    from fs_notes.fs import WorkspaceRoot
    from fs_notes.sandbox.confined import ConfinedChanges
    from fs_notes.sandbox.protocol import OP_CODES
    from fs_notes.sandbox.supervisor import ConfinedWorker

    for op in OPS:
        assert callable(getattr(InProcessChanges, op))
        assert callable(getattr(ConfinedChanges, op))
        assert callable(getattr(ConfinedWorker, op))
        assert callable(getattr(WorkspaceRoot, op))
    assert set(OP_CODES) == set(OPS)


class Flaky(Recording):
    """A door whose layer goes down between the rounds of a deletion, and comes back."""

    def __init__(self, roots: Mapping[str, ChangeableRoot]) -> None:
        super().__init__(roots)
        self.down = False

    def refusal(self, workspace: str, op: Op) -> str | None:
        return "the OS containment layer is down" if self.down else None


def test_the_confirmed_round_asks_the_door_again_before_anything_is_recorded(
    tmp_path: Path,
) -> None:
    """Reviewer's find: the retry of notes_delete went to unlink_note without asking refusal()
    again; the confirmation was recorded and its nonce spent before the layer's own check.
    Now a layer gone between the rounds refuses first, and the same confirmation, sent again
    once the layer is back, deletes (the control: it was not spent)."""
    srv, door = _server(tmp_path, Flaky)
    assert isinstance(door, Flaky)
    try:
        args = {"workspaceUri": srv.ws.as_uri(), "id": "b.md"}
        first = srv.call(srv.me, "notes_delete", args)["result"]
        answer = {"delete_choice": {"action": "accept",
                                    "content": {"note_id": "b.md", "confirm": True}}}  # fmt: skip
        token = first["requestState"]
        door.down = True
        refused = srv.call(
            srv.me, "notes_delete", args, inputResponses=answer, requestState=token
        )["result"]
        assert refused["isError"] is True
        assert refused["content"][0]["text"] == (
            "deletion is refused in this workspace: the OS containment layer is down"
        )
        assert door.calls == [] and (srv.ws / "b.md").exists()
        door.down = False
        done = srv.call(
            srv.me, "notes_delete", args, inputResponses=answer, requestState=token
        )["result"]
        assert done["structuredContent"] == {"deleted": "b.md", "outcome": "deleted"}, done
        assert door.calls == [("unlink_note", "notes", "b.md")]
    finally:
        srv.close()
