"""Which tools the server has: every tool, built around the door for changes and the
confirmation parts, in the order `tools/list` shows them. The one list; compose.py calls it."""

from __future__ import annotations

from ..confirm.audit import AuditLog
from ..confirm.spent import SpentNonces
from ..fs.changes import NoteChanges
from ..rounds.seal import StateSealer
from . import edit_tools, read_tools, structure_tools, write_tools
from .context import NotesEnv
from .delete import DeleteTool
from .move_tool import build as move_tools
from .registry import ToolSpec
from .summarize import SummarizeTool


def server_tools(
    env: NotesEnv,
    changes: NoteChanges,
    sealer: StateSealer,
    replay: SpentNonces,
    audit: AuditLog,
) -> list[ToolSpec]:
    delete = DeleteTool(env, sealer, replay, audit, changes)
    return (
        read_tools.build(env)
        + structure_tools.build(env)
        + write_tools.build(env, changes)
        + move_tools(env, changes)
        + edit_tools.build(env, changes)
        + [delete.spec(), SummarizeTool(env, sealer).spec()]
    )
