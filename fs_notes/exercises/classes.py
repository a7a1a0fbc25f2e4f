"""The attack classes of issue 6, in the issue's words (and the controls), in matrix order.

Every escape case (`cases.py`) and every attack of the catalogue (`catalogue.py`) names one of
these; the matrix run shows every class at least once. `STARTUP` is the one class outside the
matrix: its cases (`startup_cases.py`) start the real `serve`, with nothing knocked out, and are
judged apart (`startup.py`). Guarantees nothing by itself: it is the vocabulary the tables share.
"""

from __future__ import annotations

CONTROL = "ordinary notes (controls: served, nothing to refuse)"
PREFIX = "prefix sibling folder"
DOTDOT = "'..' in URI or id"
ENCODED = "%2e%2e and double encoding"
SEPARATORS = "encoded separators %2F %5C"
NUL = "NUL"
UTF8 = "invalid UTF-8"
HOST = "a URI host part"
ODD_URI = "relative and odd URI forms"
ABSOLUTE = "an absolute path as id"
ODD_ID = "ids '.', '..', empty, trailing '/'"
FINAL_LINK = "symlink as the final component"
DIR_LINK = "symlinked intermediate folder"
DANGLING = "dangling symlink at create"
CHAINS = "symlink chains and loops"
SWAP = "a symlink swapped in between check and use"
RENAMED = "a parent folder renamed during resolution"
MAGIC = "magic links"
MOUNT = "a mount point inside the workspace"
HARDLINK = "a hardlink to an outside file"
SPECIAL = "a FIFO, a socket and a device node as notes"
DIR_MD = "a folder named x.md"
LONG = "very long names and deep paths"
LOOKALIKE = "case and Unicode look-alike names"
RENDERING = "names that forge a line, hide a character or look alike when shown"
REPLACED = "the note replaced between elicitation and confirmation"
WS_REPLACED = "the workspace folder itself replaced after start-up"
FD_LEAK = "an fd leaked into the worker"
ROOTS = "client roots trying to widen the scope"
COMPROMISED = "a compromised server or worker: attacker code after confinement"
MOVE = "a note moved out, in, across a mount or over another (notes_move)"
STARTUP = "a hostile layout refused at start-up, before anything is served"

CLASSES = (
    CONTROL, PREFIX, DOTDOT, ENCODED, SEPARATORS, NUL, UTF8, HOST, ODD_URI, ABSOLUTE, ODD_ID,
    FINAL_LINK, DIR_LINK, DANGLING, CHAINS, SWAP, RENAMED, MAGIC, MOUNT, HARDLINK, SPECIAL,
    DIR_MD, LONG, LOOKALIKE, RENDERING, REPLACED, WS_REPLACED, FD_LEAK, ROOTS, MOVE,
    COMPROMISED,
)  # fmt: skip
