"""Which tools the server has: every tool, built around the door for changes (the one that keeps
the journal: fs_notes/journal/door.py) and the confirmation parts, in the order `tools/list`
shows them. The one list; compose.py calls it."""

from __future__ import annotations

from ..approval.outofband import OutOfBand
from ..confirm.audit import AuditLog
from ..confirm.spent import SpentNonces
from ..journal.door import KeptChanges
from ..rounds.seal import StateSealer
from .context import NotesEnv
from .delete import DeleteTool
from .edit_tools import NotesAppend, NotesEdit
from .forced import ForcedChanges
from .history_tools import NotesHistory, NotesRestore
from .move_tool import NotesMove
from .outline_tools import NotesOutline
from .properties_tool import NotesProperties
from .read_tools import NotesList, NotesRead, NotesSearch
from .registry import ServerTool, ToolSpec
from .structure_tools import NotesLinks, NotesTags
from .summarize import SummarizeTool
from .workspaces_tool import NotesWorkspaces
from .write_tools import NotesCreate, NotesUpdate


def server_tools(
    env: NotesEnv,
    changes: KeptChanges,
    sealer: StateSealer,
    replay: SpentNonces,
    audit: AuditLog,
    out_of_band: OutOfBand | None = None,
) -> list[ToolSpec]:
    """Every tool, each one class made from what it needs, whose `spec()` is its definition and
    handler (its `run`)."""
    forced = ForcedChanges(env, out_of_band)
    tools: list[ServerTool] = [
        NotesWorkspaces(env),
        NotesList(env),
        NotesRead(env),
        NotesOutline(env),
        NotesSearch(env),
        NotesTags(env),
        NotesLinks(env),
        NotesCreate(env, changes),
        NotesUpdate(env, changes, forced),
        NotesMove(env, changes),
        NotesAppend(env, changes),
        NotesEdit(env, changes, forced),
        NotesProperties(env, changes),
        NotesHistory(env, changes.journals),
        NotesRestore(env, changes, changes.journals),
        DeleteTool(env, sealer, replay, audit, changes, out_of_band),
        SummarizeTool(env, sealer),
    ]
    return [tool.spec() for tool in tools]
