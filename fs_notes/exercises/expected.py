"""The documented knock-out matrix: what each attack must give in each configuration.

This is the matrix docs/design.md shows (a test keeps the two equal), on a host like CI's: root,
Landlock enforced (or chroot), openat2. `fs-notes exercises` exits 1 on any difference, and on
any escape with every layer on. Codes: a layer name is "blocked:<layer>", ESCAPED is "escaped",
n/a is "n/a" (nothing there for a layer to refuse; the run says why).

Read a row as: which layer refused first with everything on ("all"), and whether the others
still held when one layer was knocked out. A row with ESCAPED is an attack only one layer stops.
"""

from __future__ import annotations

from .cases import CASES

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
    "rename-out", "rename-in",
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
    return dict(zip(COLUMNS, (result_code(c) for c in EXPECTED[name]), strict=True))
