"""The composition root: the one place the server's parts are built and wired.

`fs-notes serve` (serve.py), the escape exercises' knock-out target (exercises/target.py), the
in-process tests and the benchmarks all build the server here, from a policy and `StatePaths`:
`open_roots` (layer 2's root handles), `open_confirm_parts` (sealer, replay store, audit log) and
`build_server` (the tools and the dispatcher). What a caller chooses is named at the call: the
deleter and the writer (the confined workers, or "unconfined", never a default) and the id rules
(the lexical layer unless the knock-out target says otherwise).
"""

from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .config import StatePaths, folder_problem
from .confirm.audit import AuditLog, AuditLogDamaged
from .confirm.replay import MAX_ROWS, ReplayStore, UnsafeLocation, default_replay_path
from .errors import ConfigError
from .fs import FsError, WorkspaceRoot
from .policy import Policy
from .rounds.seal import KEPT_NAME, KeyFileError, KeyRing, StateSealer

if TYPE_CHECKING:  # the tools import pydantic: serve loads them after the first answer
    from .protocol.dispatch import Dispatcher
    from .tools.context import IdRules, NotesEnv, WorkspaceRoots
    from .tools.delete import NoteDeleter
    from .tools.move_tool import NoteMover
    from .tools.write_tools import NoteWriter

log = logging.getLogger("fs_notes.compose")


def open_roots(policy: Policy) -> dict[str, WorkspaceRoot]:
    """A root handle per workspace; ConfigError names the workspace, its path and the problem."""
    roots: dict[str, WorkspaceRoot] = {}
    for ws in policy.workspaces:
        problem = folder_problem(ws.path)
        try:
            if problem is not None:
                raise ConfigError(f'workspace "{ws.name}" ({ws.path}): {problem}')
            try:
                roots[ws.name] = WorkspaceRoot.open(ws.path, symlinks=ws.symlinks)
            except (FsError, OSError) as exc:
                raise ConfigError(
                    f'workspace "{ws.name}" ({ws.path}): cannot open the folder: {exc}'
                ) from None
        except ConfigError:
            for root in roots.values():
                root.close()
            raise
    return roots


@dataclass
class ConfirmParts:
    """What notes_delete needs besides the workspaces (see tools/delete.py), and where it is."""

    sealer: StateSealer
    replay: ReplayStore
    audit: AuditLog
    # For the start-up summary: where the key ring came from, and the id of the signing key.
    key_source: str = "given"  # "file PATH", "kept at PATH", "in memory ..."
    key_id: str = ""

    def close(self) -> None:
        self.replay.close()
        self.audit.close()


def open_confirm_parts(state: StatePaths, policy: Policy | None = None) -> ConfirmParts:
    """The sealer, replay store and audit log. Without a state key file the key ring is kept
    beside the replay database (made there, 0600, on first start), so that a confirmation in
    flight survives a restart; an in-memory replay database gets a key that dies with us."""
    try:
        path = state.replay_db or default_replay_path()
    except (ValueError, OSError) as exc:
        raise ConfigError(f"the default state folder: {exc} (or pass --replay-db)") from None
    try:
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        if policy is not None:  # each principal's quota fits whatever the others hold
            per = policy.limits.nonces_per_principal
            rows = max(MAX_ROWS, per * len(policy.principals))
            replay = ReplayStore(path, max_rows=rows, per_principal=per)
        else:
            replay = ReplayStore(path)
    except UnsafeLocation as exc:
        raise ConfigError(f"the replay database {path}: {exc}") from None
    except sqlite3.DatabaseError as exc:
        raise ConfigError(
            f"the replay database {path} is damaged ({exc}); move it aside to start afresh "
            "(confirmations in flight are then lost)"
        ) from None
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"--replay-db {path}: {exc}") from None
    if replay.durable_claims:
        log.warning(
            "the kernel's boot id cannot be read: states sealed before a reboot cannot be "
            "told apart, so every confirmation claim is fsync'ed (synchronous=FULL)"
        )
    key_file = state.state_key_file
    keep = None if key_file or path == ":memory:" else os.path.dirname(path) or "."
    try:
        if key_file:
            keyring, source = KeyRing.from_file(key_file), f"file {key_file}"
        elif keep is not None:
            os.makedirs(keep, mode=0o700, exist_ok=True)
            keyring = KeyRing.kept_in(keep)
            source = f"kept at {os.path.join(keep, KEPT_NAME)}"
        else:
            keyring, source = KeyRing.ephemeral(), "in memory (dies with the server)"
    except (KeyFileError, OSError) as exc:
        replay.close()
        if key_file:
            raise ConfigError(f"--state-key-file {key_file}: {exc}") from None
        where = os.path.join(keep or "", KEPT_NAME)
        raise ConfigError(f"the state key file kept at {where}: {exc}") from None
    try:
        audit = AuditLog(state.audit_log)
    except AuditLogDamaged as exc:
        replay.close()
        raise ConfigError(f"the audit log {state.audit_log}: {exc}") from None
    except OSError as exc:
        replay.close()
        raise ConfigError(f"--audit-log {state.audit_log}: {exc.strerror}") from None
    return ConfirmParts(StateSealer(keyring), replay, audit, source, keyring.signing_kid)


def build_server(
    policy: Policy,
    roots: WorkspaceRoots,
    confirm: ConfirmParts,
    *,
    deleter: NoteDeleter | Literal["unconfined"],
    writer: NoteWriter | Literal["unconfined"],
    ids: IdRules | None = None,
    mover: NoteMover | Literal["unconfined"] | None = None,
) -> tuple[Dispatcher, NotesEnv]:
    """The dispatcher and tool state for these roots. `deleter` and `writer` are named by every
    caller: `serve` passes the confined workers (sandbox/confined.py); "unconfined" (the tools
    act in this process, through the filesystem layer only) is for in-process tests and the
    exercises' knock-out of the OS layer, and never a default. `serve` passes the default for
    `ids` (the lexical layer); only the escape exercises' knock-out target passes other rules.
    `mover` (notes_move, added 2026-12-01): `serve` passes the confined one (sandbox/movers.py);
    None is "unconfined" when the writer is, and otherwise refuses every move (fail closed:
    a server whose writes are confined never moves unconfined by omission)."""
    from .app import build_dispatcher, build_methods
    from .tools import edit_tools, read_tools, resources, structure_tools, write_tools
    from .tools.context import NotesEnv
    from .tools.delete import DeleteTool, DirectDeleter
    from .tools.move_tool import DirectMover, NoMover
    from .tools.move_tool import build as move_tools
    from .tools.summarize import SummarizeTool

    replay = confirm.replay.path
    index_dir = None if replay == ":memory:" else os.path.dirname(os.path.abspath(replay))
    env = NotesEnv(policy, roots, ids, index_dir)
    delete = DeleteTool(
        env,
        confirm.sealer,
        confirm.replay,
        confirm.audit,
        DirectDeleter(env) if deleter == "unconfined" else deleter,
    )
    note_writer = write_tools.DirectWriter(env) if writer == "unconfined" else writer
    if mover is None:
        mover = "unconfined" if writer == "unconfined" else NoMover()
    note_mover = DirectMover(env) if mover == "unconfined" else mover
    tools = (
        read_tools.build(env)
        + structure_tools.build(env)
        + write_tools.build(env, note_writer)
        + move_tools(env, note_mover, note_writer)
        + edit_tools.build(env, note_writer)
        + [delete.spec(), SummarizeTool(env, confirm.sealer).spec()]
    )
    list_resources, read_resource = resources.build(env)
    from .protocol.subscriptions import listen_method
    from .tools.live import LiveNotes

    methods = build_methods(
        tools,
        list_resources=list_resources,
        read_resource=read_resource,
        listen=listen_method(LiveNotes(env)),
    )
    return build_dispatcher(methods), env
