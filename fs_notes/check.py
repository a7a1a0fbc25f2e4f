"""`fs-notes check [--json]`: which containment layers this host can enforce, tested for real.

Landlock is probed in child processes (a ruleset is applied and an outside read must fail);
openat2 by a real call; chroot by trying it in a child. The mechanism `serve` would use for
deletion follows the fail-closed rule of `sandbox.probe.select_mode`.
"""

from __future__ import annotations

import json
from typing import Any

from sandbox.errors import NoEnforceableLayer
from sandbox.probe import probe, select_mode


def report(*, allow_unconfined: bool = False) -> dict[str, Any]:
    host = probe()
    out = host.to_json()
    try:
        out["deletion_confinement"] = select_mode(host, allow_unconfined)
    except NoEnforceableLayer:
        out["deletion_confinement"] = "none"
        out["deletion_refused"] = True
    # Self-confinement of the server process (issue #5, item 5) is not implemented.
    out["self_confinement"] = False
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
    print(
        f"deletion confinement:  {data['deletion_confinement']}"
        + (" (deletion refused unless --allow-unconfined)" if data.get("deletion_refused") else "")
    )
    print(f"self-confinement:      {'yes' if data['self_confinement'] else 'no'}")
    return 0
