"""The attack catalogue: every escape class of issue 6, as data (layout + steps + what to protect).

Each attack gets its own root folder holding ``ws/`` (the workspace, served by the target),
``outside/`` (``outside/secret.md`` holds the run's secret marker) and whatever its layout adds
(notation: `layout.py`). `protected` paths (relative to the root) must stay unread, unchanged
and, if absent, absent; `keep` paths must still be there, unchanged, at the end (reads allowed:
deletion attacks).

Every escape case (`cases.py`) is an attack here, by its own name (a test checks it): the ones
written out below with `from_case` (some with more steps than a read of the case's id), the rest
added after them, one `from_case` each, so a case added to the table joins the matrix by itself.
Attacks run in the order of their classes (`classes.py`). This table lives in the package so
that `fs-notes exercises` works from an installed copy without tests/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .cases import BY_NAME, CASES
from .classes import (
    CLASSES,
    COMPROMISED,
    DIR_LINK,
    DOTDOT,
    ENCODED,
    FD_LEAK,
    HOST,
    LONG,
    LOOKALIKE,
    MAGIC,
    MOUNT,
    MOVE,
    NUL,
    ODD_ID,
    ODD_URI,
    PREFIX,
    RENAMED,
    RENDERING,
    REPLACED,
    ROOTS,
    SEPARATORS,
    SPECIAL,
    SWAP,
    UTF8,
    WS_REPLACED,
)
from .compromised import OPS as COMPROMISED_OPS
from .steps import (
    Compromised,
    Delete,
    Mutate,
    Race,
    Request,
    Step,
    create,
    listing,
    move,
    read,
    rename,
    resource,
    symlink,
    tool,
    update,
)

OUTSIDE_NOTE = "outside/secret.md"


@dataclass(frozen=True)
class Attack:
    name: str
    kind: str  # one of CLASSES
    layout: tuple[str, ...]
    steps: tuple[Step, ...]
    why: str
    protected: tuple[str, ...] = (OUTSIDE_NOTE,)
    keep: tuple[str, ...] = ()
    operations: tuple[str, ...] = ("read",)
    leak: str | None = None  # a folder (relative to the root) the target holds open as {leakfd}
    needs_mount: bool = False
    # Blocked in some column only by the server's private view (sandbox/view.py), which needs
    # root: n/a (this host) without it.
    needs_view: bool = False
    # Rendering attacks: the exact id that must be served as it is, and lines it must not forge
    # in anything shown (see shown.py); judged from the responses, not from the disk.
    served: str | None = None
    forged: tuple[str, ...] = ()
    # Configurations this attack cannot be run in, and why (the cell is then n/a, saying so).
    not_run: Mapping[str, str] = field(default_factory=dict)


def from_case(
    name: str,
    *steps: Step,
    also_protected: tuple[str, ...] = (),
    operations: tuple[str, ...] = ("read",),
    not_run: Mapping[str, str] | None = None,
) -> Attack:
    """The attack of the escape case ``name``: its layout, and ``steps`` (by default a read of
    its id). It protects the case's paths outside the workspace; those inside (a hidden file, a
    note a symlink leads to) are the lexical layer's and the symlink policy's, checked by the
    unit tests of those layers: an escape here is out of the workspace."""
    case = BY_NAME[name]
    outside = tuple(p for p in case.protected if not p.startswith("ws/"))
    return Attack(
        case.name,
        case.kind,
        case.layout,
        steps or (read(case.note_id),),
        case.why,
        protected=outside + also_protected,
        operations=operations,
        not_run=not_run or {},
    )


_RW = ("read", "write")
_NOTE = ("ws/note.md: # Note",)
_ROOTS_CAPS: dict[str, object] = {"roots": {}}


ATTACKS: tuple[Attack, ...] = (
    Attack(
        "prefix-sibling",
        PREFIX,
        (*_NOTE, "ws-evil/secret.md: # {secret}"),
        (
            tool("notes_read", workspaceUri="{root_uri}/ws-evil", id="secret.md"),
            resource("{root_uri}/ws-evil/secret.md"),
        ),
        "ws-evil starts with the workspace's path as a string",
        protected=("ws-evil/secret.md",),
    ),
    from_case("dotdot-id"),
    Attack(
        "dotdot-uri", DOTDOT, _NOTE, (resource("{ws}/../outside/secret.md"),), "'..' in a note URI"
    ),
    Attack(
        "encoded-dotdot-uri",
        ENCODED,
        _NOTE,
        (resource("{ws}/%2e%2e/outside/secret.md"),),
        "'..' percent-encoded in a URI",
    ),
    Attack(
        "double-encoded-uri",
        ENCODED,
        (*_NOTE, "ws/%2e%2e/outside/secret.md: # literal name inside"),
        (resource("{ws}/%252e%252e/outside/secret.md"),),
        "'..' encoded twice: decoded once it is '%2e%2e', a folder's literal name inside (a "
        "second decoder would make it '..')",
    ),
    from_case("encoded-dotdot-id"),
    Attack(
        "encoded-slash-uri",
        SEPARATORS,
        _NOTE,
        (resource("{ws}/..%2Foutside%2Fsecret.md"),),
        "%2F turns one name into a path",
    ),
    Attack(
        "encoded-backslash-uri",
        SEPARATORS,
        _NOTE,
        (resource("{ws}/..%5Coutside%5Csecret.md"),),
        "%5C is a separator on Windows",
    ),
    from_case("backslash-id"),
    from_case("nul-id"),
    Attack("nul-uri", NUL, _NOTE, (resource("{ws}/..%00/outside/secret.md"),), "%00 in a URI"),
    Attack(
        "invalid-utf8-uri",
        UTF8,
        _NOTE,
        (resource("{ws}/%C0%AE%C0%AE/outside/secret.md"),),
        "an overlong UTF-8 encoding of '..'",
    ),
    Attack(
        "uri-host",
        HOST,
        _NOTE,
        (resource("file://evil{rootq}/outside/secret.md"),),
        "a host part (file://evil/...)",
    ),
    Attack(
        "uri-unc",
        HOST,
        _NOTE,
        (resource("file:///{rootq}/outside/secret.md"),),
        "the UNC form file:////...",
    ),
    Attack(
        "uri-relative",
        ODD_URI,
        _NOTE,
        (resource("file:outside/secret.md"),),
        "a relative file: URI (against the server's current folder)",
    ),
    Attack(
        "uri-query",
        ODD_URI,
        _NOTE,
        (resource("{ws}/note.md?/../../outside/secret.md"),),
        "a query smuggling a path",
    ),
    Attack(
        "uri-fragment",
        ODD_URI,
        _NOTE,
        (resource("{ws}/note.md#/../../outside/secret.md"),),
        "a fragment smuggling a path",
    ),
    from_case("absolute-id"),
    from_case("id-dot"),
    from_case("id-dotdot"),
    Attack(
        "id-empty", ODD_ID, _NOTE, (resource("{ws}/"),), "an empty id (the workspace's own URI)"
    ),
    from_case("id-trailing-slash"),
    from_case("symlink-final", read("l.md"), update("l.md"), operations=_RW),
    from_case("symlink-final-absolute"),
    from_case(
        "symlink-dir",
        read("d/secret.md"),
        listing("d"),
        create("d/new.md"),
        also_protected=("outside/new.md",),
        operations=_RW,
    ),
    Attack(
        "symlink-dir-delete",
        DIR_LINK,
        ("ws/d => ../outside", "outside/victim.md: # Victim"),
        (Delete("Victim", "d/victim.md"),),
        "deleting through a folder symlink to outside",
        protected=(),
        keep=("outside/victim.md",),
        operations=("read", "delete"),
    ),
    from_case("dangling-symlink-create", create("new.md"), operations=_RW),
    from_case("symlink-chain"),
    from_case("symlink-loop"),
    Attack(
        "swap-check-use",
        SWAP,
        ("ws/n.md: # Inside", "ws/evil.md => ../outside/secret.md"),
        (Race(("ws/n.md", "ws/evil.md"), read("n.md")),),
        "the note and a symlink to outside are exchanged while it is read",
    ),
    Attack(
        "parent-renamed",
        RENAMED,
        (
            "ws/p/q/note.md: # Inside",
            "ws/p-evil => ../outside/p",
            "outside/p/q/note.md: # {secret}",
        ),
        (Race(("ws/p", "ws/p-evil"), read("p/q/note.md")),),
        "a parent folder is renamed away (and a symlink put in its place) during resolution",
        protected=(OUTSIDE_NOTE, "outside/p/q/note.md"),
    ),
    Attack(
        "magic-link-fd",
        MAGIC,
        ("ws/fd => /proc/self/fd/{leakfd}",),
        (read("fd/secret.md"),),
        "/proc/self/fd/N of an outside folder the server holds open",
        leak="outside",
    ),
    from_case("magic-link-root"),
    from_case(
        "magic-link-stdin",
        not_run={
            "no-filesystem": "following it, the naive root would read the server's own stdin "
            "(the protocol pipe) and block: a hang, not an escape"
        },
    ),
    # Serving it at all is the escape: the server's executable is outside the workspace, and
    # the OS layer must let the server read what it runs.
    from_case("magic-link-self-exe", read("exe.md", harm_if_ok=True)),
    from_case(
        "magic-link-cwd",
        not_run={
            "no-filesystem": "followed, it leads to the server's current folder, the private "
            "view's root, where no secret lies; whether the host has something there depends on "
            "how the target was started (with bind mounts or not), not on a layer"
        },
    ),
    Attack(
        "mount-point-read",
        MOUNT,
        ("ws/mnt |bind outside",),
        (read("mnt/secret.md"),),
        "outside/ bind-mounted inside the workspace",
        needs_mount=True,
    ),
    Attack(
        "mount-point-delete",
        MOUNT,
        ("ws/mnt |bind outside", "outside/victim.md: # Victim"),
        (Delete("Victim", "mnt/victim.md"),),
        "deleting through a bind mount of outside/",
        protected=(),
        keep=("outside/victim.md",),
        operations=("read", "delete"),
        needs_mount=True,
    ),
    from_case("hardlink", read("h.md"), update("h.md"), operations=_RW),
    from_case("fifo-note", read("f.md", feed_fifo="ws/f.md")),  # fed by an outside process
    from_case("socket-note"),
    Attack(
        "device-note",
        SPECIAL,
        ("ws/d.md |nulldev",),
        (read("d.md", harm_if_ok=True),),
        "a device node named like a note (serving it at all is the escape)",
        needs_view=True,  # no-filesystem: the view's binds are nodev
    ),
    from_case("folder-named-md", read("x.md"), update("x.md"), operations=_RW),
    Attack("long-name", LONG, _NOTE, (read("a" * 300 + ".md"),), "a 303-byte name (NAME_MAX 255)"),
    from_case("deep-path"),
    Attack(
        "unicode-lookalike",
        LOOKALIKE,
        (*_NOTE, "ws/a\uff0f..\uff0f..\uff0foutside\uff0fsecret.md: # literal name inside"),
        (read("a\uff0f..\uff0f..\uff0foutside\uff0fsecret.md"),),
        "FULLWIDTH SOLIDUS ('/' after NFKC) is a letter: one literal name inside",
    ),
    Attack(
        "unicode-nfd",
        LOOKALIKE,
        ("ws/caf\u00e9.md: # Cafe",),
        (read("cafe\u0301.md"),),
        "the NFD twin of an NFC name is another name, not an alias",
    ),
    Attack(
        "case-variant",
        LOOKALIKE,
        _NOTE,
        (read("NOTE.MD"),),
        "another case of a note's name and suffix",
    ),
    Attack(
        "newline-forges-line",
        RENDERING,
        ("ws/zz\n- passwords.md: # Bank passwords (verified)", "ws/zz.md: # zz"),
        (listing(""), tool("notes_search", query="passwords")),
        "a name with a newline reads, in the listing's text, as a note that does not exist",
        served="zz\n- passwords.md",
        forged=("- passwords.md: Bank passwords (verified)",),
    ),
    Attack(
        "bidi-hides-extension",
        RENDERING,
        ("ws/photo\u202egpj.md: # Holiday photo",),
        (listing(""), Delete("Holiday photo", "photo\u202egpj.md")),
        "RIGHT-TO-LEFT OVERRIDE makes 'photo<RLO>gpj.md' read as 'photodm.jpg'",
        operations=("read", "delete"),
        served="photo\u202egpj.md",
    ),
    Attack(
        "nfd-twin-in-form",
        RENDERING,
        ("ws/caf\u00e9.md: # Cafe", "ws/cafe\u0301.md: # Cafe"),
        (listing(""), Delete("Cafe", "cafe\u0301.md")),
        "an NFC and an NFD name with one title: two options that look identical in the form",
        operations=("read", "delete"),
        served="cafe\u0301.md",
    ),
    Attack(
        "zero-width-twin",
        RENDERING,
        ("ws/plan.md: # Plan", "ws/plan\u200b.md: # Plan"),
        (listing(""), Delete("Plan", "plan\u200b.md")),
        "a ZERO WIDTH SPACE hides in a name that then looks like another note's",
        operations=("read", "delete"),
        served="plan\u200b.md",
    ),
    Attack(
        "replaced-note",
        REPLACED,
        ("ws/victim.md: # Victim",),
        (
            Delete(
                "Victim",
                "victim.md",
                between=(
                    rename("ws/victim.md", "outside/was-victim.md"),
                    symlink("ws/victim.md", "../outside/secret.md"),
                ),
            ),
        ),
        "between the form and the answer the note becomes a symlink to outside",
        keep=("outside/was-victim.md",),
        needs_view=True,  # no-filesystem: the link leads out of the private view
        operations=("read", "delete"),
    ),
    Attack(
        "replaced-parent",
        REPLACED,
        ("ws/d/victim.md: # Victim",),
        (
            Delete(
                "Victim",
                "d/victim.md",
                between=(rename("ws/d", "outside/d"), symlink("ws/d", "../outside/d")),
            ),
        ),
        "between the form and the answer its folder moves outside (identity kept) and a "
        "symlink takes its place",
        protected=(),
        keep=("outside/d/victim.md",),
        operations=("read", "delete"),
    ),
    Attack(
        "workspace-replaced",
        WS_REPLACED,
        _NOTE,
        (
            Mutate((rename("ws", "ws-orig"), symlink("ws", "outside"))),
            read("secret.md"),
            listing(""),
        ),
        "after start-up the workspace folder is moved and a symlink to outside takes its place",
    ),
    Attack(
        "fd-leak-worker",
        FD_LEAK,
        ("ws/d/victim.md: # Victim",),
        (
            Delete(
                "Victim",
                "d/victim.md",
                between=(rename("ws/d", "outside/d"), symlink("ws/d", "/proc/self/fd/{leakfd}")),
            ),
        ),
        "the server holds the note's folder open (fd leaked to the worker); the folder moves "
        "outside and /proc/self/fd/N takes its place",
        protected=(),
        keep=("outside/d/victim.md",),
        operations=("read", "delete"),
        leak="ws/d",
    ),
    Attack(
        "client-roots",
        ROOTS,
        _NOTE,
        (
            Request(
                "tools/call",
                {
                    "name": "notes_list",
                    "arguments": {"workspaceUri": "{root_uri}/outside"},
                    "inputResponses": {"roots": {"roots": [{"uri": "{root_uri}/outside"}]}},
                },
                capabilities=_ROOTS_CAPS,
            ),
            Request(
                "tools/call",
                {
                    "name": "notes_read",
                    "arguments": {"workspaceUri": "{root_uri}/outside", "id": "secret.md"},
                },
                capabilities=_ROOTS_CAPS,
            ),
        ),
        "a client that declares roots and names a folder it was not granted",
    ),
)

# Moves (notes_move, added 2026-12-01): the static cases, then a mount, an existing target and
# the races (a source or target folder swapped for a symlink to outside while moves are sent).
ATTACKS += (
    from_case("move-target-dotdot", move("note.md", "../outside/moved.md"), operations=_RW),
    from_case(
        "move-target-absolute", move("note.md", "{root}/outside/moved.md"), operations=_RW
    ),
    from_case("move-target-folder-symlink", move("note.md", "d/moved.md"), operations=_RW),
    from_case("move-source-folder-symlink", move("d/secret.md", "stolen.md"), operations=_RW),
    from_case("move-hardlinked-source", move("h.md", "moved.md"), operations=_RW),
    Attack(
        "move-across-mount",
        MOVE,
        (*_NOTE, "ws/mnt |bind outside"),
        (move("note.md", "mnt/moved.md"), move("mnt/secret.md", "stolen.md")),
        "a move into, and one out of, outside/ bind-mounted inside the workspace",
        protected=(OUTSIDE_NOTE, "outside/moved.md"),
        operations=_RW,
        needs_mount=True,
    ),
    Attack(
        "move-onto-existing",
        MOVE,
        (*_NOTE, "ws/existing.md: # Existing"),
        (move("note.md", "existing.md"),),
        "a move onto an existing note would destroy it",
        keep=("ws/existing.md",),
        operations=_RW,
    ),
    Attack(
        "move-race-target-folder",
        MOVE,
        (*_NOTE, "ws/d/", "ws/d-evil => ../outside"),
        (Race(("ws/d", "ws/d-evil"), move("note.md", "d/moved.md")),),
        "the target folder and a symlink to outside are exchanged while the move runs",
        protected=(OUTSIDE_NOTE, "outside/moved.md"),
        operations=_RW,
    ),
    Attack(
        "move-race-source-folder",
        MOVE,
        ("ws/d/n.md: # Inside", "ws/d-evil => ../outside", "outside/n.md: # {secret}"),
        (Race(("ws/d", "ws/d-evil"), move("d/n.md", "stolen.md")),),
        "the source folder and a symlink to outside are exchanged while the move runs: the "
        "outside file of the same name would be moved in",
        protected=(OUTSIDE_NOTE, "outside/n.md"),
        operations=_RW,
    ),
)

_WHERE = {"server": "the server", "delete": "a delete worker", "write": "a write worker"}
_DOES = {
    "chmod": "makes outside/secret.md setuid and world-writable",
    "chown": "gives outside/secret.md to nobody (a regular user: to itself, the one chown the "
    "kernel allows it)",
    "utime": "resets outside/secret.md's times",
    "setxattr": "sets an extended attribute on outside/secret.md",
    "link": "hard-links outside/secret.md as outside/planted",
    "mknod": "plants a node at outside/planted",
    "unlink": "removes outside/secret.md",
    "read": "reads outside/secret.md",
    "stat": "learns whether outside/secret.md exists",
    "environ": "reads another process's environment (/proc/<pid>/environ)",
    "ptrace": "attaches to another process with ptrace",
    "rename-out": "moves the workspace's note.md out, to outside/planted",
    "rename-in": "moves outside/secret.md into the workspace",
    "connect-unix": "connects to a named UNIX socket listening outside (a session bus, an agent)",
    "mptcp": "connects with MPTCP to a TCP port listening on 127.0.0.1",
    "kill": "kills another process (SIGKILL)",
    "prlimit": "changes another process's open-file limit (prlimit64)",
    "memfd-exec": "runs a program it wrote to a memfd",
    "sysv-shm": "attaches and reads a SysV shared-memory segment an outside process keeps",
    "tiocsti": "types a command into the terminal the server was started from (TIOCSTI)",
}
ATTACKS += tuple(
    Attack(
        f"compromised-{where}-{op}",
        COMPROMISED,
        _NOTE,
        (Compromised(where, op),),
        f"code running in {_WHERE[where]} after its confinement {_DOES[op]}",
        protected=(OUTSIDE_NOTE, "outside/planted"),
        # a worker runs where the policy grants its kind (a root server's monitor starts no
        # other: sandbox/monitor.py)
        operations={"server": ("read",), "delete": ("read", "delete"), "write": _RW}[where],
        needs_view=op == "stat",
    )
    for where in ("server", "delete", "write")
    for op in COMPROMISED_OPS
)
# Every other escape case, then everything in the order of its class.
_WRITTEN = {a.name for a in ATTACKS}
ATTACKS += tuple(from_case(c.name) for c in CASES if c.name not in _WRITTEN)
ATTACKS = tuple(sorted(ATTACKS, key=lambda a: CLASSES.index(a.kind)))
