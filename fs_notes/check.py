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
Does not: know a policy (a workspace may require a stronger layer than the host has: serve then
refuses that workspace), or predict a self-confinement failure caused by serve's own options.
"""

from __future__ import annotations

import json
from typing import Any

from fs_notes.sandbox import seccomp
from fs_notes.sandbox.errors import NoEnforceableLayer
from fs_notes.sandbox.probe import probe, select_mode


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
    sc = data["seccomp"]
    counts = ", ".join(f"{p} {len(names)}" for p, names in sc["denied"].items())
    if sc["available"]:
        print(f"system-call filter:    yes (calls refused: {counts})")
    else:
        print(f"system-call filter:    no ({sc['reason']}): serve refuses to start confined")
    return 0
