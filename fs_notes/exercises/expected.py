"""The documented knock-out matrix: what each attack must give in each configuration.

This is the matrix docs/design.md shows (a test keeps the two equal), on a host like CI's: root,
Landlock enforced (or chroot), openat2. `fs-notes exercises` exits 1 on any difference, and on
any escape with every layer on. Cells that depend on the host, not on fs-notes, are expected per
host: `HOST_CONDITIONS` (also in docs/design.md) states, for each, what the cell is under which
condition, decided from what the run measured (host.py); `expected_on(name, facts)` is the row
for a host. Codes: a layer name is "blocked:<layer>", ESCAPED is "escaped",
n/a is "n/a" (nothing there for a layer to refuse; the run says why).

Read a row as: which layer refused first with everything on ("all"), and whether the others
still held when one layer was knocked out. A row with ESCAPED is an attack only one layer stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .cases import CASES
from .host import DOCUMENTED, HostFacts

COLUMNS = ("all", "no-lexical", "no-filesystem", "no-os")

P, L, F, OS, X, NA = "policy", "lexical", "filesystem", "os", "ESCAPED", "n/a"
R = "render"  # layer 1's other half: names made safe where they are shown (fs_notes/render.py)

#: attack name -> (all, no-lexical, no-filesystem, no-os)
EXPECTED: dict[str, tuple[str, str, str, str]] = {
    "plain-note": (NA, NA, NA, NA),
    "nested-note": (NA, NA, NA, NA),
    "unicode-note": (NA, NA, NA, NA),
    "percent-and-newline-note": (NA, NA, NA, NA),
    "prefix-sibling": (P, P, P, P),
    "dotdot-id": (L, F, L, L),
    "dotdot-uri": (L, F, L, L),
    "dotdot-deep": (L, F, L, L),
    "dotdot-staying-inside": (L, F, L, L),
    "encoded-dotdot-uri": (L, F, L, L),
    "double-encoded-uri": (NA, NA, NA, NA),
    "encoded-dotdot-id": (NA, NA, NA, NA),
    "encoded-slash-uri": (L, F, L, L),
    "encoded-backslash-uri": (L, NA, L, L),
    "backslash-id": (L, NA, L, L),
    "nul-id": (L, F, L, L),
    "nul-uri": (L, F, L, L),
    "invalid-utf8-uri": (L, NA, L, L),
    "unencodable": (NA, NA, NA, NA),  # the argument check refuses a lone surrogate (issue 25)
    "uri-host": (L, P, L, L),
    "uri-unc": (L, P, L, L),
    "uri-relative": (L, P, L, L),
    "uri-query": (L, NA, L, L),
    "uri-fragment": (L, NA, L, L),
    "absolute-id": (L, F, L, L),
    "absolute-proc-root": (L, F, L, L),
    "absolute-slash": (L, F, L, L),
    "id-dot": (L, F, L, L),
    "id-dotdot": (L, F, L, L),
    "id-empty": (L, F, L, L),
    "id-trailing-slash": (L, F, L, L),
    "empty-id": (NA, NA, NA, NA),  # the tools' argument schema wants an id of 1 character or more
    "dot-component": (L, F, L, L),
    "double-slash": (L, F, L, L),
    "hidden-git": (L, NA, L, L),  # no-lexical: a hidden name inside, served
    "symlink-final": (F, F, OS, F),
    "symlink-final-absolute": (F, F, OS, F),
    "symlink-final-deep": (F, F, OS, F),
    "symlink-final-inside-then-out": (F, F, OS, F),
    "symlink-final-inside": (F, F, NA, F),  # no-filesystem: the link stays inside
    "symlink-dir": (F, F, OS, F),
    "symlink-dir-delete": (F, F, OS, F),
    "symlink-dir-absolute": (F, F, OS, F),
    "symlink-dir-dotdot-target": (F, F, OS, F),
    "symlink-dir-inside-then-out": (F, F, OS, F),
    "dangling-symlink-create": (F, F, OS, F),
    "symlink-dir-dangling": (F, F, NA, F),
    "symlink-chain": (F, F, OS, F),
    "symlink-loop": (F, F, NA, F),
    "symlink-loop-dir": (F, F, NA, F),
    "swap-check-use": (F, F, OS, F),
    "parent-renamed": (F, F, OS, F),
    "magic-link-fd": (F, F, OS, F),
    "magic-link-root": (F, F, OS, F),
    "magic-link-stdin": (F, F, NA, F),  # no-filesystem: not run (the naive root would block)
    "magic-link-self-exe": (F, F, X, F),
    "magic-link-cwd": (F, F, NA, F),  # no-filesystem: not run (where it leads depends on the host)
    "mount-point-read": (F, F, X, F),
    "mount-point-delete": (F, F, X, F),
    "hardlink": (F, F, X, F),
    "hardlink-in-folder": (F, F, X, F),
    "fifo-note": (F, F, X, F),
    "socket-note": (F, F, NA, F),
    "device-note": (F, F, OS, F),  # no-filesystem: the private view mounts nodev
    "folder-named-md": (F, F, NA, F),
    "long-name": (L, F, L, L),
    "deep-path": (L, F, L, L),
    "long-component": (L, F, L, L),
    "unicode-lookalike": (NA, NA, NA, NA),
    "unicode-nfd": (NA, NA, NA, NA),
    "case-variant": (L, NA, L, L),
    "nfd-note": (NA, NA, NA, NA),
    "fullwidth-solidus": (L, NA, L, L),
    "newline-forges-line": (R, R, R, R),
    "bidi-hides-extension": (R, R, R, R),
    "nfd-twin-in-form": (R, R, R, R),
    "zero-width-twin": (R, R, R, R),
    "replaced-note": (F, F, OS, F),  # no-filesystem: the link leads out of the view
    "replaced-parent": (F, F, OS, F),
    "workspace-replaced": (F, F, OS, F),
    "fd-leak-worker": (F, F, OS, F),
    "client-roots": (P, P, P, P),
    # notes_move (added 2026-12-01). no-filesystem: the naive root renames the joined strings
    # in the self-confined server, whose Landlock grants REFER beneath the workspace only.
    "move-target-dotdot": (L, F, L, L),
    "move-target-absolute": (L, F, L, L),
    "move-target-folder-symlink": (F, F, OS, F),
    "move-source-folder-symlink": (F, F, OS, F),
    "move-hardlinked-source": (F, F, X, F),  # no-filesystem: the outside inode's ctime moves
    # no-filesystem: the link report's naive listing reads outside/ through the mount (as
    # mount-point-read does); the moves themselves get the kernel's own EXDEV (two mounts)
    "move-across-mount": (F, F, X, F),
    "move-onto-existing": (F, F, X, F),  # no-filesystem: rename(2) replaces the note
    "move-race-target-folder": (F, F, OS, F),
    "move-race-source-folder": (F, F, OS, F),
}
# Attacker code in the server or a worker after confinement: the OS layer alone stands (Landlock
# for paths, the system-call filter for metadata, links, nodes, ptrace, the private view for what
# exists outside, Landlock's scoping and hidepid for other processes); without it, it escapes.
_COMPROMISED_OPS = (
    "chmod", "chown", "utime", "setxattr", "link", "mknod", "unlink", "read", "stat", "environ",
    "rename-out", "rename-in", "connect-unix", "mptcp", "kill", "prlimit", "memfd-exec",
    "sysv-shm", "tiocsti",
)  # fmt: skip
EXPECTED.update(
    {
        f"compromised-{where}-{op}": (OS, OS, OS, X)
        for where in ("server", "delete", "write")
        for op in (*_COMPROMISED_OPS, "ptrace")
    }
)


#: Names served as the literal names they are (issue 11): with any layer there is nothing to
#: refuse (the read serves the inside file of that exact name, or finds none); the runner still
#: checks every outside file, so a server that decoded or normalized the name would escape here.
#: The controls of the escape-case table (cases.py: expect "ok") are such names too.
LITERAL_NAMES = frozenset(
    {"double-encoded-uri", "unicode-lookalike", "unicode-nfd"}
    | {case.name for case in CASES if case.expect == "ok"}
)
#: Refused before any layer by the tools' argument check: an id of one character or more, and
#: (issue 25) Unicode text in every string argument, so no lone surrogate reaches a tool.
SCHEMA_REFUSED = frozenset({"empty-id", "unencodable"})
#: The rows where nothing reaches a layer to refuse: n/a in every column.
NOTHING_TO_REFUSE = LITERAL_NAMES | SCHEMA_REFUSED


def result_code(code: str) -> str:
    """The JSON result value for a table code: "blocked:os", "escaped" or "n/a"."""
    if code == X:
        return "escaped"
    if code == NA:
        return "n/a"
    return f"blocked:{code}"


def expected_results(name: str) -> dict[str, str]:
    """The documented row (the table's host: DOCUMENTED)."""
    return dict(zip(COLUMNS, (result_code(c) for c in EXPECTED[name]), strict=True))


@dataclass(frozen=True)
class HostCondition:
    """On a host where `holds(facts)` gives a reason, the cells of `attacks` in `columns` are
    expected to be `code` (a table code), for that reason."""

    name: str
    attacks: frozenset[str]
    columns: tuple[str, ...]
    code: str
    when: str  # the condition in words (docs/design.md's table)
    holds: Callable[[HostFacts], str | None]


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _big_interpreter(f: HostFacts) -> str | None:
    if f.interpreter_bytes <= f.read_limit:
        return None
    return (
        f"the interpreter ({f.interpreter}, {_mib(f.interpreter_bytes)}) is over this "
        f"workspace's read limit ({_mib(f.read_limit)}): the naive root refuses to read it whole, "
        "so nothing is served (a smaller interpreter is served: ESCAPED)"
    )


def _no_bind_mount(f: HostFacts) -> str | None:
    if f.root or not f.mount:
        return None
    return (
        "not run: a regular user cannot make the bind mount this attack is built on "
        f"(the harness needs CAP_SYS_ADMIN; {f.mount})"
    )


def _no_view(f: HostFacts) -> str | None:
    if f.root or not f.view:
        return None
    return (
        "not run: a regular user's server has no private view here (this kernel refuses it a "
        "user namespace), and only the view refuses this attack in some column; without it, "
        "`stat` of an outside path tells that it exists"
    )


def _no_mknod(f: HostFacts) -> str | None:
    if f.root:
        return None
    return "not run: a regular user cannot make the device node this attack is built on (CAP_MKNOD)"


def _yama(f: HostFacts) -> str | None:
    if f.ptrace_scope >= 3 or (f.ptrace_scope >= 1 and not f.root):
        return (
            f"blocked by the kernel itself: Yama's ptrace_scope is {f.ptrace_scope}, so a process "
            "may not attach to one it did not start (the OS layer is knocked out here)"
        )
    return None


def _no_legacy_tiocsti(f: HostFacts) -> str | None:
    if f.legacy_tiocsti or f.root:
        return None
    return (
        "blocked by the kernel itself: dev.tty.legacy_tiocsti is 0, so TIOCSTI needs "
        "CAP_SYS_ADMIN even on a process's own terminal (the OS layer is knocked out here)"
    )


_COMPROMISED = ("server", "delete", "write")
HOST_CONDITIONS: tuple[HostCondition, ...] = (
    HostCondition(
        "big-interpreter",
        frozenset({"magic-link-self-exe"}),
        ("no-filesystem",),
        NA,
        "the interpreter is over the workspace's read limit (4 MiB; Debian's python3.11: 6.5 MiB)",
        _big_interpreter,
    ),
    HostCondition(
        "no-bind-mount",
        frozenset({"mount-point-read", "mount-point-delete", "move-across-mount"}),
        COLUMNS,
        NA,
        "not root, and the harness cannot make a private bind mount",
        _no_bind_mount,
    ),
    HostCondition(
        "no-private-view",
        frozenset(
            {"device-note", "replaced-note"} | {f"compromised-{w}-stat" for w in _COMPROMISED}
        ),
        COLUMNS,
        NA,
        "not root, and the kernel refuses a user namespace, so the server gets no private view",
        _no_view,
    ),
    HostCondition(
        "no-device-node",
        frozenset({"device-note"}),
        COLUMNS,
        NA,
        "not root, so the harness cannot make a device node",
        _no_mknod,
    ),
    HostCondition(
        "yama-ptrace-scope",
        frozenset(f"compromised-{w}-ptrace" for w in _COMPROMISED),
        ("no-os",),
        OS,
        "kernel.yama.ptrace_scope is 1 or 2 and not root, or it is 3",
        _yama,
    ),
    HostCondition(
        "no-legacy-tiocsti",
        frozenset(f"compromised-{w}-tiocsti" for w in _COMPROMISED),
        ("no-os",),
        OS,
        "dev.tty.legacy_tiocsti is 0 and not root",
        _no_legacy_tiocsti,
    ),
)


def expected_on(name: str, facts: HostFacts = DOCUMENTED) -> dict[str, tuple[str, str | None]]:
    """Per column: the result expected on a host with `facts`, and the host condition's reason
    when one decided it (None: the documented cell)."""
    row: dict[str, tuple[str, str | None]] = {
        c: (r, None) for c, r in expected_results(name).items()
    }
    for condition in HOST_CONDITIONS:
        if name not in condition.attacks:
            continue
        why = condition.holds(facts)
        if why is None:
            continue
        for column in condition.columns:
            row[column] = (result_code(condition.code), f"{condition.name}: {why}")
    return row
