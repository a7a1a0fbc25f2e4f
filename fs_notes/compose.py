"""The composition root: the one place the server's parts are built and wired.

`fs-notes serve` (serve.py), the escape exercises' knock-out target (exercises/target.py), the
in-process tests and the benchmarks all build the server here, from a policy and `StatePaths`:
`open_roots` (layer 2's root handles), `open_confirm_parts` (sealer, replay store, audit log) and
`build_server` (the tools and the dispatcher, around the door for changes); for `serve`, also
`confine_self` (layer 3's self-confinement) and `build_served` (the OS layer's workers and the
lazily built dispatcher); serve.py only orders these steps in time. What a caller chooses is named
at the call: the one door every change to a note goes through (fs/changes.py `NoteChanges`: the
confined workers, `sandbox.confined.ConfinedChanges`, or the filesystem layer in this process,
`InProcessChanges`; a required argument, never a default) and the id rules (the lexical layer
unless the knock-out target says otherwise).
"""

from __future__ import annotations

import logging
import os
import shlex
import sqlite3
import stat
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .config import StatePaths, folder_problem
from .confirm.audit import AuditLog, AuditLogDamaged
from .confirm.replay import (
    MAX_ROWS,
    NETWORK_FILESYSTEMS,
    ReplayStore,
    UnsafeLocation,
    default_replay_path,
    filesystem_type,
)
from .confirm.spent import SpentNonces, StoreUnavailable
from .errors import ConfigError
from .fs import FsError, WorkspaceRoot
from .fs.trusted import UntrustedFolder, open_trusted
from .policy import Policy, Workspace
from .render import shown
from .rounds.seal import KEPT_NAME, KeyFileError, KeyRing, StateSealer

if TYPE_CHECKING:  # the tools import pydantic: serve loads them after the first answer
    from .config import ServeConfig
    from .fs.changes import NoteChanges
    from .protocol.dispatch import Dispatcher, LazyDispatcher
    from .sandbox.confined import ConfinedChanges, OsLayer
    from .sandbox.probe import HostReport
    from .sandbox.selfconfine import SelfConfinement
    from .tools.context import IdRules, NotesEnv, WorkspaceRoots

log = logging.getLogger("fs_notes.compose")
#: What `confine_self` says is said by serve, as operators have read it (the start-up lines).
serve_log = logging.getLogger("fs_notes.serve")


# At INFO: in a user namespace every way passes root's "/" (shown as the overflow uid), so a
# warning would be printed at every start there (Flatpak, `unshare -r`) and say nothing new.
_UNMAPPED = (
    "%s: the way to it passes folders or links of users outside this user namespace (the "
    "overflow uid): they are taken as root's, as root's own show so here; another user's would "
    "pass too (docs/policy.md)"
)


def open_roots(policy: Policy) -> dict[str, WorkspaceRoot]:
    """A root handle per workspace; ConfigError names the workspace, its path and the problem.

    Each folder is opened by a walk that no one but its owner (and root) could have redirected
    (fs/trusted.py: a principal who owns a folder above another's workspace, or its own, cannot
    make it serve a folder someone else owns), and the folders opened must be distinct and not
    nested: by device and inode, whatever the paths say (a link or a bind mount on the way)."""
    roots: dict[str, WorkspaceRoot] = {}
    opened: dict[tuple[int, int], tuple[Workspace, frozenset[tuple[int, int]]]] = {}
    try:
        for ws in policy.workspaces:
            where = f'workspace "{ws.name}" ({shown(ws.path)})'
            problem = folder_problem(ws.path)
            if problem is not None:
                raise ConfigError(f"{where}: {problem}")
            try:
                trusted = open_trusted(ws.path)
            except UntrustedFolder as exc:
                raise ConfigError(f"{where}: {shown(exc.where)} {exc.why}") from None
            except OSError as exc:
                raise ConfigError(f"{where}: cannot open the folder: {exc.strerror}") from None
            if trusted.unmapped:
                log.info(_UNMAPPED, where)
            try:
                roots[ws.name] = WorkspaceRoot.from_fd(trusted.fd, symlinks=ws.symlinks)
                st = os.fstat(roots[ws.name].fd)
            except (FsError, OSError) as exc:
                raise ConfigError(f"{where}: cannot open the folder: {exc}") from None
            here = (st.st_dev, st.st_ino)
            for other, (twin, above) in opened.items():
                if other == here:
                    how = "opens the same folder as"
                elif other in trusted.above:
                    how = "is inside"
                elif here in above:
                    how = "holds"
                else:
                    continue
                raise ConfigError(
                    f'{where} {how} workspace "{twin.name}" ({shown(twin.path)}): two '
                    "workspaces must be two folders, neither inside the other"
                )
            opened[here] = (ws, trusted.above)
    except ConfigError:
        for root in roots.values():
            root.close()
        raise
    return roots


@dataclass
class ConfirmParts:
    """What notes_delete needs besides the workspaces (see tools/delete.py), and where it is."""

    sealer: StateSealer
    replay: SpentNonces
    audit: AuditLog
    # For the start-up summary: where the key ring came from, and the id of the signing key.
    key_source: str = "given"  # "file PATH", "kept at PATH", "in memory ..."
    key_id: str = ""
    #: This host's own state folder (the search index); None: beside the SQLite database.
    state_dir: str | None = None

    @property
    def replay_db(self) -> str | None:
        """The SQLite file of the replay store, if that is the store (None: a shared one)."""
        return self.replay.path if isinstance(self.replay, ReplayStore) else None

    @property
    def index_dir(self) -> str | None:
        """Where the search index is kept (None: in memory, with an in-memory database)."""
        if self.state_dir is not None:
            return self.state_dir
        db = self.replay_db
        return None if db is None or db == ":memory:" else os.path.dirname(os.path.abspath(db))

    def close(self) -> None:
        self.replay.close()
        self.audit.close()


def _shared_store(state: StatePaths, policy: Policy | None) -> SpentNonces:
    """The Redis store `state.replay_store` names, checked now: it answers and keeps keys
    (noeviction). Unreachable at start-up is not fatal (the store may start later): the
    server serves, refuses every deletion until it answers, and says so."""
    from .confirm.redis_store import RedisReplayStore

    location = state.replay_store
    assert location is not None
    per = policy.limits.nonces_per_principal if policy is not None else None
    rows = max(MAX_ROWS, (per or 0) * (len(policy.principals) if policy is not None else 0))
    try:
        store = RedisReplayStore(location, max_rows=rows, per_principal=per)
    except StoreUnavailable as exc:  # its TLS files
        raise ConfigError(str(exc)) from None
    try:
        store.epoch()
    except StoreUnavailable as exc:
        log.warning("%s; deletions are refused until it answers", exc)
    return store


def _state_dir(state: StatePaths) -> str:
    """This host's own state folder, made 0700 if missing; refused on a network or FUSE
    filesystem, where the SQLite search indexes it holds could not rely on their locks."""
    if state.state_dir is None:
        try:
            folder = os.path.dirname(default_replay_path())
        except (ValueError, OSError) as exc:
            raise ConfigError(f"the default state folder: {exc} (or pass --state-dir)") from None
        where = f"the state folder {folder}"
    else:
        folder, where = state.state_dir, f"--state-dir {state.state_dir}"
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{where}: {exc.strerror}") from None
    _private(folder, where)
    try:
        kind = NETWORK_FILESYSTEMS.get(filesystem_type(os.path.realpath(folder)))
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror}") from None
    if kind is not None:
        raise ConfigError(
            f"{where} is on a {kind} filesystem: each instance needs a state folder of its own "
            "on a local disk (docs/deploy.md)"
        )
    return folder


def _private(folder: str, where: str) -> None:
    """As ssh wants the folder of its keys: this user's, and no one else may write in it (the
    replay database, the key ring and the search indexes live there); ConfigError with the fix."""
    try:
        st = os.stat(folder)
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{where} is not a folder")
    if st.st_uid != os.geteuid():
        raise ConfigError(f"{where} belongs to another user (uid {st.st_uid}): use one of yours")
    if st.st_mode & 0o022:
        raise ConfigError(
            f"{where} can be written by the group or others (mode {stat.S_IMODE(st.st_mode):04o});"
            f" fix it with: chmod go-w {shlex.quote(folder)}"
        )
    _way(folder, where, private=True)


def _folder_of(path: str) -> str:
    """The folder holding `path`, as the kernel will find it: made absolute but not normalised
    (`l/../x` goes through the link `l`, where os.path.abspath would drop it as text)."""
    return os.path.dirname(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))


def _way(folder: str, where: str, *, private: bool = False) -> None:
    """No one but this user and root could have redirected the way to `folder` (fs/trusted.py:
    the folders above it and the links on the way), and no one else may write in it (the
    folder of a state file may be root's, `private` False; a state folder must be ours)."""
    absolute = folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)
    try:
        trusted = open_trusted(absolute, owner=os.geteuid(), private=private, last_link=True)
    except UntrustedFolder as exc:
        raise ConfigError(f"{shown(where)}: {shown(exc.where)} {exc.why}") from None
    except OSError as exc:
        raise ConfigError(f"{shown(where)}: {exc.strerror}") from None
    os.close(trusted.fd)
    if trusted.unmapped:
        log.info(_UNMAPPED, shown(where))


def open_confirm_parts(state: StatePaths, policy: Policy | None = None) -> ConfirmParts:
    """The sealer, replay store and audit log. Without a state key file the key ring is kept
    beside the replay database (made there, 0600, on first start), so that a confirmation in
    flight survives a restart; an in-memory replay database gets a key that dies with us.
    With a shared store (`state.replay_store`) the key ring is the state key file (config.py
    requires one) and the state folder holds only this host's search index. The folders of the
    key file and the audit log are checked first (fs/trusted.py), so a refusal makes nothing."""
    if state.state_key_file:
        _way(_folder_of(state.state_key_file), f"--state-key-file {state.state_key_file}")
    if state.audit_log:
        _way(_folder_of(state.audit_log), f"--audit-log {state.audit_log}")
    if state.replay_store is not None:
        folder = _state_dir(state)
        shared = _shared_store(state, policy)
        try:
            parts = _with_keys_and_audit(state, shared, None)
        except ConfigError:
            shared.close()
            raise
        return replace(parts, state_dir=folder)
    try:
        path = state.replay_db or default_replay_path()
    except (ValueError, OSError) as exc:
        raise ConfigError(f"the default state folder: {exc} (or pass --replay-db)") from None
    try:
        if path != ":memory:":
            os.makedirs(_folder_of(path), mode=0o700, exist_ok=True)
        if state.state_dir is not None:
            _private(state.state_dir, f"--state-dir {state.state_dir}")
        if path != ":memory:":
            _way(_folder_of(path), f"the replay database {path}")
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
    keep = None if state.state_key_file or path == ":memory:" else os.path.dirname(path) or "."
    try:
        return _with_keys_and_audit(state, replay, keep)
    except ConfigError:
        replay.close()
        raise


def _with_keys_and_audit(
    state: StatePaths, replay: SpentNonces, keep: str | None
) -> ConfirmParts:
    """The key ring (the state key file, else kept in `keep`, else in memory) and the audit
    log, around `replay` (the caller closes it on ConfigError)."""
    key_file = state.state_key_file
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
        if key_file:
            raise ConfigError(f"--state-key-file {key_file}: {exc}") from None
        where = os.path.join(keep or "", KEPT_NAME)
        raise ConfigError(f"the state key file kept at {where}: {exc}") from None
    try:
        audit = AuditLog(state.audit_log)
    except AuditLogDamaged as exc:
        raise ConfigError(f"the audit log {state.audit_log}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"--audit-log {state.audit_log}: {exc.strerror}") from None
    return ConfirmParts(StateSealer(keyring), replay, audit, source, keyring.signing_kid)


def build_server(
    policy: Policy,
    roots: WorkspaceRoots,
    confirm: ConfirmParts,
    changes: NoteChanges,
    *,
    ids: IdRules | None = None,
) -> tuple[Dispatcher, NotesEnv]:
    """The dispatcher and tool state for these roots. `changes` is the one door every tool
    changes notes through, named by every caller: `serve` passes the confined workers
    (`sandbox.confined.ConfinedChanges`); the filesystem layer in this process
    (`fs.changes.InProcessChanges`) is for in-process tests and the exercises' knock-out of the
    OS layer. `serve` passes the default for `ids` (the lexical layer); only the escape
    exercises' knock-out target passes other rules."""
    from .app import build_dispatcher, build_methods
    from .tools import resources
    from .tools.catalogue import server_tools
    from .tools.context import NotesEnv
    from .tools.granted import sole_workspace

    env = NotesEnv(policy, roots, ids, confirm.index_dir)
    tools = server_tools(env, changes, confirm.sealer, confirm.replay, confirm.audit)
    list_resources, read_resource = resources.build(env)
    from .protocol.subscriptions import listen_method
    from .tools.live import LiveNotes

    methods = build_methods(
        tools,
        policy=policy,
        list_resources=list_resources,
        read_resource=read_resource,
        listen=listen_method(LiveNotes(env)),
    )
    dispatcher = build_dispatcher(methods)
    # The request log names workspaces, never their paths; a call without workspaceUri is
    # logged under the principal's only workspace (tools/granted.py), the one it then uses.
    names = {ws.uri: ws.name for ws in policy.workspaces}
    dispatcher.workspace_names = names

    def default_workspace(principal: object) -> str | None:
        uri = sole_workspace(policy, principal)
        return names.get(uri) if uri is not None else None

    dispatcher.default_workspace = default_workspace
    return dispatcher, env


def confine_self(
    config: ServeConfig,
    confirm: ConfirmParts,
    port: int | None,
    roots: dict[str, WorkspaceRoot],
) -> SelfConfinement | None:
    """Confine this process (sandbox/selfconfine.py), before any thread starts; what was done
    (None: --no-self-confine). ConfigError when Landlock is there and cannot be applied."""
    if not config.self_confine:
        serve_log.warning("the server does not confine itself (--no-self-confine)")
        return None
    from .sandbox.selfconfine import SelfConfinementFailed, confine_server

    try:
        store = config.state.replay_store
        # The folder it keeps state in (SQLite's, or the state folder beside a shared store).
        db = confirm.replay_db
        if db is None and confirm.index_dir is not None:
            db = os.path.join(confirm.index_dir, "replay.sqlite3")
        done = confine_server(
            config.policy,
            replay_db=db,
            connect_ports=(store.port,) if store is not None else (),
            connect_names=store is not None and store.host_is_name,
            http_port=port,
            port_file=config.http.port_file if config.http is not None else None,
            roots=roots,
        )
    except SelfConfinementFailed as exc:
        raise ConfigError(
            f"the server cannot confine itself with Landlock: {exc} "
            "(--no-self-confine runs without it)"
        ) from None
    if not done.enforced:  # what it did is in the start-up summary (startup.py)
        serve_log.warning("the server does not confine itself: %s", done.reason)
    return done


def open_os_layer(
    policy: Policy,
    roots: dict[str, WorkspaceRoot],
    *,
    allow_unconfined: bool,
    self_confined: bool,
    host: HostReport | None,
) -> tuple[OsLayer, ConfinedChanges]:
    """Layer 3 for `serve` and the knock-out target: the OS layer (its workers start on first
    need, their mode chosen from what self-confinement proved, else from `host`, the probe made
    before the private view) and the door for changes through it. The caller closes the layer."""
    from .sandbox.confined import ConfinedChanges, OsLayer

    layer = OsLayer(
        policy, roots, allow_unconfined=allow_unconfined, self_confined=self_confined, host=host
    )
    return layer, ConfinedChanges(layer)


@dataclass
class Served:
    """What `serve` runs: the dispatcher, the OS layer behind its door, and the tool state it
    built (its search indexes), closed in that order by `close`."""

    dispatcher: LazyDispatcher
    os_layer: OsLayer
    envs: list[NotesEnv]

    def close(self) -> None:
        self.os_layer.close()
        for env in self.envs:  # (each scrubs its search indexes: search/index.py)
            env.close()


def build_served(
    policy: Policy,
    roots: dict[str, WorkspaceRoot],
    confirm: ConfirmParts,
    *,
    allow_unconfined: bool,
    confined: SelfConfinement | None,
) -> Served:
    """The server `serve` runs: the OS layer (sandbox/confined.py: the workers, their mode
    chosen from what `confine_self` proved, or the host probe) and the tools behind its door
    (`ConfinedChanges`), built by `build_server` on first need. `server/discover` is answered at
    once; the tools (and pydantic) load just after, on a thread (`LazyDispatcher.warm_up`)."""
    from .discovery import discover_method
    from .protocol.dispatch import LazyDispatcher

    os_layer, changes = open_os_layer(
        policy,
        roots,
        allow_unconfined=allow_unconfined,
        self_confined=confined is not None and confined.enforced,
        host=confined.host if confined is not None else None,
    )
    envs: list[NotesEnv] = []

    def build() -> Dispatcher:
        full, env = build_server(policy, roots, confirm, changes)
        envs.append(env)
        return full

    dispatcher = LazyDispatcher(
        {"server/discover": discover_method(policy=policy, resources=True, live=True)}, build
    )
    dispatcher.warm_up(1.0)
    return Served(dispatcher, os_layer, envs)
