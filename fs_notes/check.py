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
- `seccomp` says whether the system-call filter can be loaded here (sandbox/seccomp.py), the
  profile the server would load and what each profile refuses.
- `processes` is measured, not predicted: a child confines itself exactly as `serve` does (on an
  empty temporary workspace) and reports its uid, capabilities, Landlock domain and seccomp
  mode; a delete and a write worker are started in the mode serve would use and report theirs
  (the hello the supervisor checks).
Does not: know a policy (a workspace may require a stronger layer than the host has: serve then
refuses that workspace), or predict a self-confinement failure caused by serve's own options.
"""

from __future__ import annotations

import json
from typing import Any

from fs_notes.confirm.boot import boot_id
from fs_notes.sandbox import seccomp
from fs_notes.sandbox.errors import NoEnforceableLayer
from fs_notes.sandbox.probe import probe, select_mode

_SERVER_CHILD = """
import json, os, sys, tempfile
from fs_notes.fs import WorkspaceRoot
from fs_notes.policy import Policy
from fs_notes.sandbox import seccomp
from fs_notes.sandbox.process import capabilities
from fs_notes.sandbox.selfconfine import confine_server
ws = tempfile.mkdtemp(prefix="fs-notes-check-")
try:
    policy = Policy.for_single_workspace(ws, "check", token_sha256=None)
    root = WorkspaceRoot.open(ws)
    done = confine_server(policy, replay_db=None, roots={policy.workspaces[0].name: root})
    out = {"uid": os.geteuid(), "effective_caps": hex(capabilities()[0]),
           "view": done.view,
           "landlock": {"enforced": done.enforced, "abi": done.abi, "rules": len(done.grants)},
           "seccomp": {"mode": seccomp.status(), **(done.seccomp or {})}}
except Exception as exc:
    out = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""


def _server_process() -> dict[str, Any]:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _SERVER_CHILD], capture_output=True, text=True, timeout=60
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
    out: dict[str, Any] = {"server": _server_process()}
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
        # without it the reboot check cannot run: each claim is fsync'ed (confirm/boot.py)
        "durable_claims": not known,
    }
    why = seccomp.available()
    out["seccomp"] = {
        "available": why is None,
        "reason": why,
        # what serve loads (unless --no-self-confine) and what each worker loads
        "server_profile": "server" if host.landlock_enforced else "server-chroot",
        "denied": {p: sorted(seccomp.denied_for(p)) for p in seccomp.PROFILES},
    }
    return out


def check(*, as_json: bool) -> int:
    data = report()
    if as_json:
        print(json.dumps(data, indent=2))
        return 0
    ll = data["landlock"]
    print(f"Landlock ABI:          {ll['abi'] if ll['abi'] is not None else 'not available'}")
    print(f"Landlock enforced:     {'yes' if ll['enforced'] else 'no (' + str(ll['reason']) + ')'}")
    print(f"openat2:               {'yes' if data['openat2'] else 'no (component walk fallback)'}")
    print(f"chroot:                {'yes' if data['chroot'] else 'no'}")
    refused = " (refused unless --allow-unconfined)" if data.get("deletion_refused") else ""
    print(f"deletion confinement:  {data['deletion_confinement']}{refused}")
    print(f"write confinement:     {data['write_confinement']}{refused}")
    print(f"self-confinement:      {'yes (Landlock)' if data['self_confinement'] else 'no'}")
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
    return 0
