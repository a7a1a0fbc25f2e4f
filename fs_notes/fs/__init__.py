"""Layer 2 of fs-notes: filesystem containment beneath one workspace directory fd.

See ``root.py`` for what it guarantees and what it does not.
"""

from .errors import (
    Escape,
    FsError,
    Hardlinked,
    IdentityChanged,
    InvalidPath,
    NoteExists,
    NoteNotFound,
    NotRegular,
    OsRefused,
    SymlinkRefused,
    TooLarge,
)
from .identity import Identity
from .openat2 import available as openat2_available
from .root import WorkspaceRoot

__all__ = [
    "Escape",
    "FsError",
    "Hardlinked",
    "Identity",
    "IdentityChanged",
    "InvalidPath",
    "NotRegular",
    "NoteExists",
    "NoteNotFound",
    "OsRefused",
    "SymlinkRefused",
    "TooLarge",
    "WorkspaceRoot",
    "openat2_available",
]
