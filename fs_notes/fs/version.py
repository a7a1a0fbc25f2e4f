"""A note's version: the opaque string a writer passes back to say "only if it is still this".

Guarantees: ``note_version(ident, data)`` is ``"v1:"`` and 32 lowercase hex digits, the first 128
bits of SHA-256 over a fixed label, the file's inode number and its bytes; two notes (or two
states of one note) of a workspace have the same version only if they are the same file (inode)
with the same bytes, up to a SHA-256 collision. The device number is left out: every note is on
its workspace's own filesystem (the root handle refuses any other, fs/root.py), and the number
is each host's name for it, so instances sharing the workspace storage (each NFS mount has its
own st_dev) give one note one version (docs/deploy.md). It does not depend on time stamps, mode or
owner, so touching a note or changing its mode keeps its version; replacing it (a new inode, as
every atomic save makes, including ours) or changing one byte changes it. ``is_version`` accepts
exactly the strings ``note_version`` makes.

Does not: compare anything by itself. The compare-and-write is two checks (tools/versions.py):
the server reads the note's bytes under one stable identity (``WorkspaceRoot.read_note``) and
compares their version with the caller's; the writer (the confined write worker, which has no
right to read files) then replaces the note only if its identity is still the one read
(``WorkspaceRoot.update_note(expected=...)``, checked again right before the rename). A content
change that keeps all five identity fields (see identity.py) slips between the two checks. Not
secret and not authenticated: it names content, it grants nothing.
"""

from __future__ import annotations

import hashlib
import re
import struct

from .identity import Identity

__all__ = ["VERSION_PREFIX", "is_version", "note_version"]

VERSION_PREFIX = "v1:"
_LABEL = b"fs-notes note version 1, inode\0"
_INO = struct.Struct(">Q")
_SHAPE = re.compile(r"v1:[0-9a-f]{32}")


def note_version(ident: Identity, data: bytes) -> str:
    """The version of a note that is the file ``ident`` names and holds ``data``."""
    digest = hashlib.sha256(_LABEL + _INO.pack(ident.ino))
    digest.update(data)
    return VERSION_PREFIX + digest.hexdigest()[:32]


def is_version(text: object) -> bool:
    """Whether ``text`` has the shape of a version (it may still name no note)."""
    return isinstance(text, str) and _SHAPE.fullmatch(text) is not None
