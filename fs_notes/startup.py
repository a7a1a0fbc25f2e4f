"""The operator's start-up summary: what this server serves, to whom, and under which guards.

Logged at INFO (the default level) by `serve`, one line per fact, so that someone starting
fs-notes on their folder sees at once where its state is and what protects it: the workspaces
(path, URI, resolver, symlink policy, required sandbox), the principals (how each is recognised,
what it may do where), each OS mechanism of the server's own confinement, the replay database,
the audit log, the state key (by key id, never the key) and the listening address (logged by
the transport once it listens). A server started by a regular user is the normal case: for it,
INFO lines say in plain words what holds for this user and what does not (no private view
without root), and whether the kernel gives this user namespaces of its own (and if not, which
settings refuse them and the fix: never a silent fall-back). What is weaker than this user
could have is logged at WARNING where it is decided (self-confinement off or impossible, no
Landlock, no OS layer for the workers, a non-loopback address, a root server without its view);
this module only reports.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .compose import ConfirmParts
from .config import ServeConfig
from .fs import WorkspaceRoot

if TYPE_CHECKING:
    from .sandbox.selfconfine import SelfConfinement
    from .sandbox.userns import UserNamespaces

log = logging.getLogger("fs_notes.serve")


def summary_lines(
    config: ServeConfig,
    roots: Mapping[str, WorkspaceRoot],
    confirm: ConfirmParts,
    confined: SelfConfinement | None,
) -> list[str]:
    policy = config.policy
    lines = [f"policy: {config.policy_file or 'one workspace (serve WORKSPACE)'}"]
    for ws in policy.workspaces:
        lines.append(
            f"serving workspace {ws.name} ({ws.uri}) with resolver {roots[ws.name].resolver_name}"
            f"; symlinks {ws.symlinks}; writes and deletions need sandbox {ws.sandbox}"
        )
    for principal in policy.principals:
        ways = " and ".join(policy.sign_ins(principal)) or "no sign-in"
        grants = "; ".join(
            f"{g.workspace.name}: {', '.join(sorted(g.operations))}"
            for g in policy.grants_for(principal)
        )
        lines.append(f"principal {principal.name} ({ways}): {grants or 'no grants'}")
    lines.extend(_confinement(confined))
    if confirm.replay_db is not None:
        lines.append(f"replay database: {confirm.replay_db}")
    else:
        lines.append(f"replay store: {confirm.replay.describe()}, shared; state folder "
                     f"{confirm.index_dir}")  # fmt: skip
    lines.append(f"audit log: {confirm.audit.path or 'off (--audit-log FILE to keep one)'}")
    lines.append(f"state key: {confirm.key_id}, {confirm.key_source}")
    return lines


def _confinement(done: SelfConfinement | None) -> list[str]:
    if done is None:
        return ["self-confinement: off (--no-self-confine)"]
    if not done.enforced:
        return [f"self-confinement: none ({done.reason})"]
    lines = [f"the server confined itself: Landlock ABI {done.abi}, {len(done.grants)} rules"]
    if done.seccomp is not None:
        lines.append(f"self-confinement: seccomp profile {done.seccomp.get('profile')}, "
                     f"{done.seccomp.get('denied')} system calls refused by name, every call "
                     f"but {done.seccomp.get('allowed')} refused by default")  # fmt: skip
    if done.view is not None:
        view = done.view
        state = "private" if view.get("enforced") else f"not private ({view.get('reason')})"
        if view.get("enforced") and view.get("user_namespace"):
            state += ", in a user namespace of its own (no capability kept)"
        lines.append(f"self-confinement: filesystem view {state}")
    if done.effective_caps is not None:
        lines.append(f"self-confinement: effective capabilities {done.effective_caps:#x}")
    if done.monitor_pid is not None:
        kept = (
            f"which alone keeps their capabilities ({done.monitor_caps:#x})"
            if done.monitor_caps
            else "which holds no capability either"
        )
        lines.append(
            f"self-confinement: workers are started by the monitor (pid {done.monitor_pid}), "
            f"{kept}; the server itself may start nothing"
        )
    if done.view is not None and not done.view.get("enforced"):
        from .sandbox.view import regular_user_without_view

        if regular_user_without_view(done.view.get("reason")):
            lines.extend(_for_a_regular_user(done.abi or 0, done.user_namespaces))
    return lines


def _for_a_regular_user(abi: int, userns: UserNamespaces | None) -> list[str]:
    """What holds for a server a regular user started (Landlock on, no private view), and what
    does not, in plain words (docs/self-confinement.md, "As a regular user"); and whether the
    kernel gives this user namespaces of its own (sandbox/userns.py), with the fix if not."""
    who = f"started by a regular user (uid {os.geteuid()})"
    reach = "read, change, trace or signal" if abi >= 6 else "read, change or trace"
    return [
        f"{who}: what holds: Landlock confines the server to its workspaces (nothing outside "
        "them can be opened, listed, created, changed or run; the Python installation is "
        "read-only), the system-call filter refuses mode, owner, time, attribute, link, mount "
        "and ptrace calls, and writes and deletions run in workers holding only the rights "
        "they need",
        f"{who}: what does not (this kernel refuses it a user namespace): a private view, so a "
        "compromised server could "
        "tell whether a path outside its workspaces exists, and list the host's processes, "
        f"though never {reach} them",
        _user_namespaces(who, userns),
    ]


def _user_namespaces(who: str, userns: UserNamespaces | None) -> str:
    if userns is None:
        return f"{who}: user namespaces: not probed"
    if userns.works:  # a view was refused for another reason (the view's own says which)
        return f"{who}: user namespaces: this kernel allows them"
    fixes = "; ".join(userns.fixes) or "find what refuses them (fs-notes check says what it read)"
    return (
        f"{who}: user namespaces: this kernel refuses them to this user, so no private view is "
        f"possible without root: {userns.reason}; to allow them: {fixes}"
    )


def log_summary(
    config: ServeConfig,
    roots: Mapping[str, WorkspaceRoot],
    confirm: ConfirmParts,
    confined: SelfConfinement | None,
) -> None:
    for line in summary_lines(config, roots, confirm, confined):
        log.info("%s", line)
