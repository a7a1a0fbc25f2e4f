"""The composition root: the one place the server's parts are built and wired, by one function.

`compose` builds the server from a policy, its state and the door for changes, in order: the
root handles (`open_roots`, layer 2), the confirmation state (`open_confirm_parts`: sealer,
replay store, audit log), the claim on the search indexes, self-confinement (layer 3,
`SelfConfine`), the door every change to a note goes through (fs/changes.py `NoteChanges`:
`ThroughOsLayer`, the confined workers, or `InThisProcess`, the filesystem layer here; a
required argument, never a default), then the tools and the dispatcher. `fs-notes serve`
(serve.py; `fs-notes demo` runs it), the escape exercises' knock-out target
(exercises/target.py, the one caller that changes what the tools see: `Seen`), the in-process
tests and the benchmarks all call it; they only order it in time with what is theirs (the
listening socket, the transport). `Composed.close` closes it all.
"""

from __future__ import annotations

import logging
import os
import shlex
import sqlite3
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

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
from .journal.door import KeptChanges
from .journal.store import Journal, journal_name
from .policy import Policy, Workspace
from .render import shown
from .rounds.seal import KEPT_NAME, KeyFileError, KeyRing, StateSealer
from .statefolder import index_digest

if TYPE_CHECKING:  # the tools import pydantic: serve loads them after the first answer
    from .approval.outofband import OutOfBand
    from .approval.page import ApprovalPage
    from .confirm.location import RedisLocation
    from .fs.changes import ChangeableRoot, NoteChanges
    from .protocol.dispatch import Dispatcher
    from .sandbox.selfconfine import SelfConfinement
    from .tools.context import IdRules, NoteRoot, NotesEnv, WorkspaceRoots

    class ToolRoot(NoteRoot, ChangeableRoot, Protocol):
        """A root handle as the tools read it and the filesystem layer here changes it."""

log = logging.getLogger("fs_notes.compose")
#: What self-confinement says is said by serve, as operators have read it (the start-up lines).
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


def open_journals(policy: Policy, folder: str | None) -> dict[str, Journal]:
    """Each workspace's journal of changes (journal/store.py) in the state folder (`folder`
    None: in memory, for as long as the server runs); ConfigError if one cannot be opened, so
    nothing is ever changed that could not be undone."""
    days, most = policy.limits.undo_days, policy.limits.undo_mib << 20
    journals: dict[str, Journal] = {}
    try:
        for ws in policy.workspaces:
            path = (
                ":memory:" if folder is None
                else os.path.join(folder, journal_name(index_digest(ws.name, ws.path)))
            )  # fmt: skip
            journals[ws.name] = Journal(path, days=days, max_bytes=most)
    except (OSError, sqlite3.Error) as exc:
        for journal in journals.values():
            journal.close()
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"the journal of changes in the state folder: {why}") from None
    if days == 0:
        log.warning("[limits] undo_days = 0: changes through fs-notes cannot be undone")
    return journals


def _needs_approval(policy: Policy) -> bool:
    """Whether a change here may be approved out of band: a workspace that deletes (a grant
    of `delete`) and does not take the form alone, or one that writes and takes a forced
    change only from the person (`force = "out-of-band"`, or `out_of_band_after_hidden`)."""
    return any(
        (
            (ws.approval != "form" or ws.out_of_band_after_hidden)
            and "delete" in policy.operations_in(ws.name)
        )
        or (
            (ws.force == "out-of-band" or ws.out_of_band_after_hidden)
            and "write" in policy.operations_in(ws.name)
        )
        for ws in policy.workspaces
    )


def _approval_page(policy: Policy) -> ApprovalPage | None:
    """The loopback approval page (approval/page.py), bound now; None if no workspace needs
    it or the socket cannot be had (then only `fs-notes approve` approves out of band, and the
    start-up log says so)."""
    if not _needs_approval(policy):
        return None
    from .approval.page import ApprovalPage, bind_loopback

    try:
        return ApprovalPage(bind_loopback())
    except OSError as exc:
        log.warning("the approval page cannot listen on 127.0.0.1 (%s): approvals outside the "
                    "client are only by fs-notes approve", exc.strerror)  # fmt: skip
        return None


def open_out_of_band(
    policy: Policy,
    folder: str | None,
    page: ApprovalPage | None,
    roots: Mapping[str, ToolRoot],
) -> OutOfBand | None:
    """The approvals a person gives outside the client (fs_notes/approval/): the store in the
    state folder (`folder` None: in memory, so only the page reaches it), the page started on
    it. None when no workspace needs it. ConfigError if the store cannot be opened."""
    if not _needs_approval(policy):
        return None
    from .approval.outofband import OutOfBand
    from .approval.store import Approvals, approvals_name
    from .statefolder import state_home

    path = ":memory:" if folder is None else os.path.join(folder, approvals_name())
    try:
        approvals = Approvals(path)
    except (OSError, sqlite3.Error) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"the approvals in the state folder: {why}") from None

    readers = {
        (g.principal.name, g.workspace.name)
        for p in policy.principals
        for g in policy.grants_for(p)
        if "read" in g.operations
    }

    def first_lines(workspace: str, note_id: str, principal: str) -> str | None:
        if (principal, workspace) not in readers:  # a delete-only grant sees titles and ids
            return None
        try:
            data, _ = roots[workspace].read_note(note_id, max_bytes=4096)
        except (FsError, OSError):  # shown as "its text cannot be shown"
            return None
        return "\n".join(data.decode("utf-8", "replace").splitlines()[:8])

    if page is not None:
        page.start(approvals, first_lines)
    out_of_band = OutOfBand.of(approvals, page, folder, state_home())
    where = [f"the page on {page.origin}"] if page is not None else []
    where += [out_of_band.command] if out_of_band.command is not None else []
    log.info("approvals outside the client (deletions and forced changes the person approves): "
             "%s", " and ".join(where) or "none can be given")  # fmt: skip
    return out_of_band


def _dispatcher(
    policy: Policy, roots: WorkspaceRoots, confirm: ConfirmParts, changes: KeptChanges,
    ids: IdRules | None,
    out_of_band: OutOfBand | None = None,
) -> tuple[Dispatcher, NotesEnv]:
    """The tools (tools/catalogue.py) around the door for changes, and the dispatcher."""
    from .app import build_dispatcher, build_methods
    from .protocol.subscriptions import listen_method
    from .tools import resources
    from .tools.catalogue import server_tools
    from .tools.context import NotesEnv
    from .tools.granted import sole_workspace
    from .tools.live import LiveNotes

    env = NotesEnv(policy, roots, ids, confirm.index_dir, changes.journals)
    tools = server_tools(
        env, changes, confirm.sealer, confirm.replay, confirm.audit, out_of_band
    )
    list_resources, read_resource = resources.build(env)
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


@dataclass(frozen=True)
class SelfConfine:
    """Confine this process (sandbox/selfconfine.py) once the state is open: what, besides the
    policy and the state, it must keep reachable. The replay store's port (and the name files,
    for a store named by host name) come from the state."""

    http_port: int | None = None  # the listening socket's, bound before
    port_file: str | None = None
    #: What a root server's monitor may start (the escape exercises add their attacker worker).
    worker_programs: tuple[str, ...] | None = None


@dataclass
class Opened:
    """What a door is opened on: the policy and root handles as opened, what the tools see of
    them (the same, unless the knock-out target says otherwise) and what self-confinement did."""

    policy: Policy
    roots: dict[str, WorkspaceRoot]
    tool_roots: Mapping[str, ToolRoot]
    confined: SelfConfinement | None


class Door(Protocol):
    """The one door every change to a note goes through (fs/changes.py `NoteChanges`), as the
    caller of `compose` names it: opened on the parts, with what closes it."""

    def open(self, opened: Opened) -> tuple[NoteChanges, Callable[[], None]]: ...


@dataclass(frozen=True)
class ThroughOsLayer:
    """Layer 3: the confined workers (sandbox/confined.py `OsLayer`, started on first need, their
    mode chosen from what self-confinement proved, else from the host probe it made before the
    private view) and `ConfinedChanges` through them. What `serve` opens."""

    allow_unconfined: bool = False

    def open(self, opened: Opened) -> tuple[NoteChanges, Callable[[], None]]:
        from .sandbox.confined import ConfinedChanges, OsLayer

        confined = opened.confined
        layer = OsLayer(
            opened.policy,
            opened.roots,
            allow_unconfined=self.allow_unconfined,
            self_confined=confined is not None and confined.enforced,
            host=confined.host if confined is not None else None,
        )
        return ConfinedChanges(layer), layer.close


@dataclass(frozen=True)
class InThisProcess:
    """The filesystem layer in this process (fs/changes.py `InProcessChanges` on the tools'
    root handles), no worker: for in-process tests, benchmarks and the exercises' knock-out of
    the OS layer."""

    def open(self, opened: Opened) -> tuple[NoteChanges, Callable[[], None]]:
        from .fs.changes import InProcessChanges

        return InProcessChanges(opened.tool_roots), _nothing


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Seen:
    """What the escape exercises' knock-out target (exercises/target.py) puts between the tools
    and the real parts: the policy they read, the root handles they use (made from the real
    ones; `real_roots` False opens none: layer 2 knocked out) and their id rules. Nothing else
    passes one; `serve` cannot."""

    policy: Callable[[Policy], Policy]
    roots: Callable[[dict[str, WorkspaceRoot]], Mapping[str, ToolRoot]]
    ids: IdRules
    real_roots: bool = True


@dataclass
class Composed:
    """The server as built: its dispatcher, the parts it holds, what self-confinement did and the
    door; `close` closes them in reverse order of opening (the door and the OS layer, the tools'
    search indexes, the index claim, the root handles, the confirmation state if opened here)."""

    dispatcher: Dispatcher
    roots: dict[str, WorkspaceRoot]
    confirm: ConfirmParts
    confined: SelfConfinement | None
    changes: NoteChanges
    #: The tool state built (one once the dispatcher is built; lazily for `serve`).
    envs: list[NotesEnv]
    _closers: list[Callable[[], None]]

    @property
    def env(self) -> NotesEnv:
        return self.envs[0]

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()


def compose(
    policy: Policy,
    state: StatePaths | ConfirmParts,
    door: Door,
    *,
    confine: Callable[[], SelfConfine | None] | None = None,
    seen: Seen | None = None,
    unused_days: float | None = None,
    lazy: bool = False,
) -> Composed:
    """The server, every part in order: the root handles (`open_roots`: a refused workspace
    leaves nothing in the state folder), the confirmation state (`open_confirm_parts`, unless
    the caller gives the parts, and then closes them), the claim on the search indexes and the
    pruning of unused ones (`unused_days`: `serve` only, before self-confinement hides the
    state folder's other files), self-confinement (`confine`, called just before, says what it
    must keep reachable, or None for no self-confinement, when the caller says why: serve
    binds its listening socket then, so a refused workspace binds nothing), the door (a
    required argument: `ThroughOsLayer` for `serve`, `InThisProcess`, or a test's own), the
    tools and the dispatcher. `lazy` (serve): `server/discover` is answered at
    once and the tools (and pydantic) load just after, on a thread (`LazyDispatcher.warm_up`).
    On ConfigError what was opened is closed."""
    closers: list[Callable[[], None]] = []

    def closing() -> None:
        while closers:
            closers.pop()()

    try:
        roots = open_roots(policy) if seen is None or seen.real_roots else {}
        for root in roots.values():
            closers.append(root.close)
        if isinstance(state, ConfirmParts):
            confirm = state
        else:
            confirm = open_confirm_parts(state, policy)
            closers.append(confirm.close)
        if unused_days is not None:
            from .forget import claim_and_prune

            closers.append(claim_and_prune(confirm.index_dir, policy, unused_days).release)
        confined = None
        page = _approval_page(policy)  # its socket bound before confinement, which forbids it
        if page is not None:
            closers.append(page.close)
        asked = confine() if confine is not None else None
        if asked is not None:
            store = state.replay_store if isinstance(state, StatePaths) else None
            confined = _confine_self(policy, confirm, roots, asked, store)
        tool_roots: Mapping[str, ToolRoot] = roots if seen is None else seen.roots(roots)
        inner, close_door = door.open(Opened(policy, roots, tool_roots, confined))
        closers.append(close_door)
        journals = open_journals(policy, confirm.index_dir)
        for journal in journals.values():
            closers.append(journal.close)
        changes = KeptChanges(
            inner, tool_roots, journals, {ws.name: ws.read_limit for ws in policy.workspaces}
        )
        out_of_band = open_out_of_band(policy, confirm.index_dir, page, tool_roots)
        if out_of_band is not None:
            closers.append(out_of_band.approvals.close)
        envs: list[NotesEnv] = []

        def close_envs() -> None:  # (each scrubs its search indexes: search/index.py)
            for env in envs:
                env.close()

        closers.append(close_envs)
        tools_policy = policy if seen is None else seen.policy(policy)
        ids = None if seen is None else seen.ids

        def build() -> Dispatcher:
            full, env = _dispatcher(tools_policy, tool_roots, confirm, changes, ids, out_of_band)
            envs.append(env)
            return full

        dispatcher: Dispatcher
        if lazy:
            from .discovery import discover_method
            from .protocol.dispatch import LazyDispatcher

            early = {"server/discover": discover_method(policy=policy, resources=True, live=True)}
            lazily = LazyDispatcher(early, build)
            lazily.warm_up(1.0)
            dispatcher = lazily
        else:
            dispatcher = build()
    except BaseException:
        closing()
        raise
    return Composed(dispatcher, roots, confirm, confined, changes, envs, closers)


def _confine_self(
    policy: Policy,
    confirm: ConfirmParts,
    roots: dict[str, WorkspaceRoot],
    confine: SelfConfine,
    store: RedisLocation | None,
) -> SelfConfinement:
    """Confine this process now, before any thread starts (sandbox/selfconfine.py); ConfigError
    when Landlock is there and cannot be applied."""
    from .sandbox.launch import WORKER_PROGRAM
    from .sandbox.selfconfine import SelfConfinementFailed, confine_server

    # The folder it keeps state in (SQLite's, or the state folder beside a shared store).
    db = confirm.replay_db
    if db is None and confirm.index_dir is not None:
        db = os.path.join(confirm.index_dir, "replay.sqlite3")
    try:
        done = confine_server(
            policy,
            replay_db=db,
            connect_ports=(store.port,) if store is not None else (),
            connect_names=store is not None and store.host_is_name,
            http_port=confine.http_port,
            port_file=confine.port_file,
            roots=roots,
            worker_programs=confine.worker_programs or (WORKER_PROGRAM,),
        )
    except SelfConfinementFailed as exc:
        raise ConfigError(
            f"the server cannot confine itself with Landlock: {exc} "
            "(--no-self-confine runs without it)"
        ) from None
    if not done.enforced:  # what it did is in the start-up summary (startup.py)
        serve_log.warning("the server does not confine itself: %s", done.reason)
    return done
