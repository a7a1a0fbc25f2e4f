"""Errors of the filesystem layer, and the one place that turns an errno into one of them.

Guarantees: ``str(error)`` is a short fixed sentence per class; it never contains a path (absolute
or relative), an errno string or anything read from disk, so it can go to a client as is. The
precise cause stays on ``__cause__`` (the original ``OSError``) for logs.
Does not: decide what a client is told about *which* check failed; callers may still want to
collapse several classes into one message.
"""

from __future__ import annotations

import errno

__all__ = [
    "Busy",
    "DeviceError",
    "Escape",
    "FsError",
    "Hardlinked",
    "IdentityChanged",
    "InvalidPath",
    "NoSpace",
    "NotRegular",
    "NoteExists",
    "NoteNotFound",
    "OsRefused",
    "OutOfFiles",
    "QuotaExceeded",
    "ReadOnlyFilesystem",
    "ResourceError",
    "SymlinkRefused",
    "TooLarge",
    "error_for_errno",
]


class FsError(Exception):
    """Base class; also raised as is for failures without a more precise class."""

    message = "filesystem error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.message)


class NoteNotFound(FsError):
    message = "note not found"


class Escape(FsError):
    """Would leave the workspace: '..', absolute path, another mount, a magic link."""

    message = "path leaves the workspace"


class SymlinkRefused(FsError):
    """A symlink where the policy forbids one (any component, including the last)."""

    message = "symbolic link refused"


class NotRegular(FsError):
    """A FIFO, socket, device or directory where a note is expected."""

    message = "not a regular file"


class NoteExists(FsError):
    message = "note already exists"


class Hardlinked(FsError):
    """The file has more than one name (st_nlink > 1)."""

    message = "file has several hard links"


class IdentityChanged(FsError):
    """The file is not the one the caller expected (another inode, size or time stamps)."""

    message = "note changed"


class TooLarge(FsError):
    message = "note too large"


class InvalidPath(FsError):
    """Empty, NUL byte, '.' or empty component, component or path too long."""

    message = "invalid path"


class OsRefused(FsError):
    """The OS refused (EACCES/EPERM), e.g. a Landlock rule of layer 3 (not the policy's
    refusal, which is `fs_notes.policy.AccessDenied`). Not in the fixed API."""

    message = "access denied"


_BY_ERRNO: dict[int, type[FsError]] = {
    errno.ENOENT: NoteNotFound,
    errno.ENOTDIR: NoteNotFound,
    errno.EXDEV: Escape,
    errno.ELOOP: SymlinkRefused,
    errno.EISDIR: NotRegular,
    errno.ENXIO: NotRegular,
    errno.ENODEV: NotRegular,
    errno.EEXIST: NoteExists,
    errno.ENOTEMPTY: NoteExists,
    errno.ENAMETOOLONG: InvalidPath,
    errno.EILSEQ: InvalidPath,
    errno.EFBIG: TooLarge,
    errno.EACCES: OsRefused,
    errno.EPERM: OsRefused,
}



class ResourceError(FsError):
    """The machine, not the request: the disk or a quota ran out, the filesystem is read-only, a
    device failed. Its message is safe to show (it says nothing about any path)."""


class NoSpace(ResourceError):
    message = "no space left on the disk"


class QuotaExceeded(ResourceError):
    message = "disk quota exceeded"


class ReadOnlyFilesystem(ResourceError):
    message = "the filesystem is read-only"


class DeviceError(ResourceError):
    message = "input/output error"


class OutOfFiles(ResourceError):
    message = "too many open files"


class Busy(ResourceError):
    message = "busy, try again"


_RESOURCE: dict[int, type[ResourceError]] = {
    errno.ENOSPC: NoSpace,
    errno.EDQUOT: QuotaExceeded,
    errno.EROFS: ReadOnlyFilesystem,
    errno.EIO: DeviceError,
    errno.EMFILE: OutOfFiles,
    errno.ENFILE: OutOfFiles,
    errno.EAGAIN: Busy,
    errno.EBUSY: Busy,
}
#: Errors a worker reports by errno that are passed on as the ResourceError they are.
RESOURCE_ERRNOS = frozenset(_RESOURCE)


def error_for_errno(code: int | None) -> FsError:
    """The FsError for an errno (an unknown or missing errno gives a plain FsError)."""
    if code is None:
        return FsError()
    cls = _BY_ERRNO.get(code)
    if cls is not None:
        return cls()
    resource = _RESOURCE.get(code)
    if resource is not None:
        return resource()
    return FsError()
