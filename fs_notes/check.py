"""`fs-notes check [--json]`: which containment layers this host can enforce, tested for real.

Landlock is probed in child processes (a ruleset is applied and an outside read must fail);
openat2 by a real call; chroot by trying it in a child. What it reports is what `serve` (without
--allow-unconfined or --no-self-confine) does on this host:
- `deletion_confinement` (and `write_confinement`, the same by design: sandbox/confined.py) follows
  the fail-closed rule of `sandbox.probe.select_mode`; "none" with `deletion_refused: true` means
  serve refuses creates, updates and deletions.
- `self_confinement` is true exactly when the probe saw Landlock enforced: then `serve` confines
  itself at start-up or refuses to start (sandbox/selfconfine.py), never runs unconfined
  silently.
- `user_namespaces` is measured too: a child makes a user and mount namespace and mounts in it
  (sandbox/userns.py); when the kernel refuses, the reason names each setting of this kernel set
  to a refusing value (Debian's kernel.unprivileged_userns_clone, user.max_user_namespaces,
  Ubuntu's kernel.apparmor_restrict_unprivileged_userns, ...) and `fixes` says how to allow
  them; a refusal no setting explains is said to be one.
- `seccomp` says whether the system-call filter can be loaded here (sandbox/seccomp.py), the
  profile the server would load and what each profile refuses.
- `processes` is measured, not predicted: a child confines itself exactly as `serve` does (on an
  empty temporary workspace) and reports its uid, capabilities, Landlock domain and seccomp
  mode; a delete and a write worker are started in the mode serve would use and report theirs
  (the hello the supervisor checks).
- `replay.store` is the replay store serve would use with the same --policy, --replay-store
  and --replay-store-password-file: a shared one (Redis) is asked for its epoch and version, and
  `check` exits 1 when it does not answer (a health probe's signal); the SQLite default is the
  path serve would use (its folder is made 0700 as serve makes it; no database is opened).
- `workspaces` (with --policy): each workspace's folder and why serve could not open it (a
  missing folder, not a folder, not readable); any such problem is a configuration error, as it
  is for serve: `check` reports it on stderr too and exits 2.
Does not: know whether a workspace requires a stronger layer than the host has (serve then
refuses writes in that workspace, and says how to accept a weaker one), or predict a
self-confinement failure caused by serve's own options.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fs_notes.rounds.boot import boot_id
from fs_notes.sandbox import seccomp
from fs_notes.sandbox.allowed import allowed
from fs_notes.sandbox.errors import NoEnforceableLayer
from fs_notes.sandbox.probe import probe, select_mode

if TYPE_CHECKING:
    from fs_notes.confirm.location import RedisLocation

_SERVER_CHILD = """
import json, os, sys
from fs_notes.fs import WorkspaceRoot
from fs_notes.policy import Policy
from fs_notes.sandbox import monitor, seccomp
from fs_notes.sandbox.process import capabilities
from fs_notes.sandbox.selfconfine import confine_server
ws = sys.argv[1]  # made and removed by the parent: the confined child may not remove it
try:
    policy = Policy.for_single_workspace(ws, "check", token_sha256=None)
    root = WorkspaceRoot.open(ws)
    done = confine_server(policy, replay_db=None, roots={policy.workspaces[0].name: root})
    out = {"uid": os.geteuid(), "effective_caps": hex(capabilities()[0]),
           "view": done.view,
           "landlock": {"enforced": done.enforced, "abi": done.abi, "rules": len(done.grants)},
           "seccomp": {"mode": seccomp.status(), **(done.seccomp or {})}}
    watcher = monitor.current()
    if watcher is not None:  # a root server's (sandbox/monitor.py), as it tells itself
        told = watcher.ask({"op": "status"})
        out["monitor"] = {"uid": told["uid"], "effective_caps": hex(told["effective_caps"]),
                          "landlock": {"abi": done.abi} if done.enforced else None,
                          "seccomp": {"profile": told["profile"], "mode": told["seccomp"]}}
except Exception as exc:
    out = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""


def _server_process() -> dict[str, Any]:
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="fs-notes-check-") as ws:
        proc = subprocess.run(
            [sys.executable, "-c", _SERVER_CHILD, ws], capture_output=True, text=True, timeout=60
        )
    try:
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": proc.stderr.strip()[-300:] or "no report"}
    return result


def _worker_process(kind: str, mode: str) -> dict[str, Any]:
    import tempfile

    from fs_notes.sandbox.errors import SandboxError
    from fs_notes.sandbox.supervisor import ConfinedWorker

    with tempfile.TemporaryDirectory(prefix="fs-notes-check-") as ws:
        try:
            with ConfinedWorker(ws, kind, mode) as worker:  # type: ignore[arg-type]
                hello = dict(worker.hello)
        except (SandboxError, OSError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
    conf = hello.get("confinement") or {}
    return {
        "uid": hello.get("uid"),
        "mode": hello.get("mode"),
        "effective_caps": hex(int(conf.get("effective_caps") or 0)),
        "landlock": {"abi": conf.get("abi")} if "abi" in conf else None,
        "seccomp": conf.get("seccomp"),
        "no_new_privs": hello.get("no_new_privs"),
    }


def _processes(mode: str, refused: bool) -> dict[str, Any]:
    server = _server_process()
    out: dict[str, Any] = {"server": server}
    if "monitor" in server:
        out["monitor"] = server.pop("monitor")
    if not refused:
        for kind in ("delete", "write"):
            out[f"{kind}_worker"] = _worker_process(kind, mode)
    return out


def report(*, allow_unconfined: bool = False) -> dict[str, Any]:
    host = probe()
    out = host.to_json()
    try:
        out["deletion_confinement"] = select_mode(host, allow_unconfined)
    except NoEnforceableLayer:
        out["deletion_confinement"] = "none"
        out["deletion_refused"] = True
    out["write_confinement"] = out["deletion_confinement"]
    out["self_confinement"] = host.landlock_enforced
    if not host.landlock_enforced:
        out["self_confinement_reason"] = host.landlock_reason
    out["processes"] = _processes(out["deletion_confinement"], out.get("deletion_refused", False))
    known = boot_id() is not None
    out["replay"] = {
        "boot_id_readable": known,
        # without it the reboot check cannot run: each claim is fsync'ed (rounds/boot.py)
        "durable_claims": not known,
    }
    why = seccomp.available()
    out["seccomp"] = {
        "available": why is None,
        "reason": why,
        # what serve loads (unless --no-self-confine) and what each worker loads
        "server_profile": "server",
        "denied": {p: sorted(seccomp.denied_for(p)) for p in seccomp.PROFILES},
        # everything else is refused (ENOSYS, and the kernel logs it): sandbox/allowed.py
        "allowed": {p: sorted(allowed(p)) for p in seccomp.PROFILES},
    }
    return out


def store_location(
    policy_file: str | None, url: str | None, password_file: str | None
) -> RedisLocation | None:
    """The shared replay store serve would use with these options (config.py's rules and
    messages: --replay-store, else the policy's [replay_store]); ConfigError."""
    from fs_notes.config import expand_path, replay_store_location
    from fs_notes.errors import ConfigError
    from fs_notes.policy import PolicyError

    policy = None
    if policy_file is not None:
        from fs_notes.policy_file import load_policy

        try:
            policy = load_policy(expand_path(policy_file))
        except PolicyError as exc:
            raise ConfigError(str(exc)) from None
    return replay_store_location(url, password_file, policy)


def workspace_report(policy_file: str | None) -> list[dict[str, Any]] | None:
    """Each workspace of the policy with the problem serve would refuse it for (None: fine);
    None without a policy. ConfigError for a policy serve could not load."""
    if policy_file is None:
        return None
    from fs_notes.config import expand_path, folder_problem
    from fs_notes.errors import ConfigError
    from fs_notes.policy import PolicyError
    from fs_notes.policy_file import load_policy

    try:
        policy = load_policy(expand_path(policy_file))
    except PolicyError as exc:
        raise ConfigError(str(exc)) from None
    return [
        {"name": ws.name, "path": ws.path, "problem": folder_problem(ws.path)}
        for ws in policy.workspaces
    ]


def store_report(location: RedisLocation | None) -> dict[str, Any]:
    """`replay.store`: the shared store's own check (RedisReplayStore.check), or the SQLite
    database serve would open by default."""
    if location is not None:
        from fs_notes.confirm.redis_store import RedisReplayStore
        from fs_notes.confirm.replay import MAX_ROWS
        from fs_notes.confirm.spent import StoreUnavailable

        try:
            store = RedisReplayStore(location, max_rows=MAX_ROWS)
        except StoreUnavailable as exc:  # its TLS files
            where = location.describe()
            return {"kind": "redis", "store": where, "answers": False, "error": str(exc)}
        with store:
            return {"kind": "redis", **store.check()}
    from fs_notes.confirm.replay import default_replay_path

    try:
        return {"kind": "sqlite", "path": default_replay_path(), "answers": True}
    except (ValueError, OSError) as exc:
        error = f"the default state folder: {exc}"
        return {"kind": "sqlite", "path": None, "answers": False, "error": error}


def _store_line(store: dict[str, Any]) -> str:
    where = store.get("store") or f"SQLite {store.get('path') or '(default path)'}"
    if not store["answers"]:
        error = str(store.get("error", ""))
        error = error.removeprefix(f"{where}: ")  # the store's messages start with where it is
        return f"{where}: does not answer ({error})"
    if store["kind"] == "sqlite":
        return f"{where}: answers (this host's own)"
    return f"{where}: answers (Redis {store.get('version')})"


def check(
    *,
    as_json: bool,
    store: RedisLocation | None = None,
    workspaces: list[dict[str, Any]] | None = None,
) -> int:
    """Print the report; 0, 1 when a shared replay store is configured and does not answer,
    2 when a workspace folder of the policy cannot be served (serve would exit 2 too)."""
    import sys

    from fs_notes.render import shown

    data = report()
    data["replay"]["store"] = store_report(store)
    status = 1 if store is not None and not data["replay"]["store"]["answers"] else 0
    if workspaces is not None:
        data["workspaces"] = workspaces
        for ws in workspaces:
            if ws["problem"] is not None:
                status = 2
                print(
                    f'fs-notes: workspace "{ws["name"]}" ({shown(ws["path"])}): {ws["problem"]} '
                    "(serve refuses to start)",
                    file=sys.stderr,
                )
    if as_json:
        print(json.dumps(data, indent=2))
        return status
    ll = data["landlock"]
    print(f"Landlock ABI:          {ll['abi'] if ll['abi'] is not None else 'not available'}")
    print(f"Landlock enforced:     {'yes' if ll['enforced'] else 'no (' + str(ll['reason']) + ')'}")
    print(f"openat2:               {'yes' if data['openat2'] else 'no (component walk fallback)'}")
    print(f"chroot:                {'yes' if data['chroot'] else 'no'}")
    userns = data["user_namespaces"]
    print(f"user namespaces:       {'yes' if userns['works'] else 'no (' + userns['reason'] + ')'}")
    for fix in userns["fixes"]:
        print(f"  to allow them:       {fix}")
    refused = " (refused unless --allow-unconfined)" if data.get("deletion_refused") else ""
    print(f"deletion confinement:  {data['deletion_confinement']}{refused}")
    print(f"write confinement:     {data['write_confinement']}{refused}")
    print(f"self-confinement:      {'yes (Landlock)' if data['self_confinement'] else 'no'}")
    print(f"replay store:          {_store_line(data['replay']['store'])}")
    for ws in workspaces or ():
        problem = ws["problem"] or "a folder serve can open"
        print(f"{'workspace ' + ws['name'] + ':':22} {shown(ws['path'])}: {problem}")
    if store is None:  # SQLite's claims (a shared store's rest on its epoch instead)
        durable = data["replay"]["durable_claims"]
        claims = "fsync'ed each (no boot id)" if durable else "WAL, boot id checked"
        print(f"confirmation claims:   {claims}")
    for name, proc in data["processes"].items():
        if "error" in proc:
            print(f"{name + ':':22} could not be measured: {proc['error']}")
            continue
        filt = (proc.get("seccomp") or {}).get("profile", "none")
        ll = proc.get("landlock") or {}
        domain = f"Landlock ABI {ll.get('abi')}" if ll.get("abi") else "no Landlock domain"
        print(
            f"{name.replace('_', ' ') + ':':22} uid {proc['uid']}, capabilities "
            f"{proc['effective_caps']}, {domain}, system-call filter {filt}"
        )
    sc = data["seccomp"]
    counts = ", ".join(f"{p} {len(names)}" for p, names in sc["denied"].items())
    if sc["available"]:
        print(f"system-call filter:    yes (calls refused: {counts})")
    else:
        print(f"system-call filter:    no ({sc['reason']}): serve refuses to start confined")
    return status
