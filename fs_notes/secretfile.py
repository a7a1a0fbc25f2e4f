"""Reading a file the server trusts: a secret (a bearer token, a state key ring), the way ssh
reads a key, or the policy, which decides who may do what where.

Guarantees: the file is opened once, without following a FIFO into a hang (O_NONBLOCK) or
taking a terminal (O_NOCTTY), and is read only if it is a regular file owned by this user or by
root, that neither the group nor others can write; a secret also must not be readable (or
executable) by the group or others: 0600 or stricter (`read_secret_file`), while a policy, which
holds only token hashes, may be (`read_trusted_file`); at most `limit` bytes are read. Every
refusal is a `SecretFileError` whose message says what is wrong and, for a mode that is too
open, how to fix it (`chmod 600 FILE`, the name shell-quoted); the caller puts the option and
the file's name in front.

Does not: keep the secret out of memory, lock the file, or check the folders above it (a
folder others can write in lets them replace the file; that is the operator's to keep).
"""

from __future__ import annotations

import os
import shlex
import stat

#: A secret is as private as ssh wants a key: no bit for the group or others (issue 27 item 4;
#: until then a group-readable 0640 was accepted).
OPEN_TO_OTHERS = stat.S_IRWXG | stat.S_IRWXO
WRITABLE_BY_OTHERS = stat.S_IWOTH | stat.S_IWGRP


class SecretFileError(Exception):
    """A secret file that cannot or must not be read; the message says why and what to do."""


def read_secret_file(path: str, *, limit: int) -> bytes:
    what = "readable or writable by the group or others"
    return _read_checked(path, limit, OPEN_TO_OTHERS, what, "600")


def read_trusted_file(path: str, *, limit: int) -> bytes:
    return _read_checked(path, limit, WRITABLE_BY_OTHERS, "writable by others", "go-w")


def _read_checked(path: str, limit: int, refused: int, what: str, fix: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise SecretFileError("does not exist") from None
    except OSError as exc:
        raise SecretFileError(f"cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SecretFileError("not a regular file")
        if st.st_uid not in (os.geteuid(), 0):
            raise SecretFileError(f"owned by another user (uid {st.st_uid})")
        if st.st_mode & refused:
            mode = stat.S_IMODE(st.st_mode)
            raise SecretFileError(
                f"{what} (mode {mode:04o}); fix it with: chmod {fix} {shlex.quote(path)}"
            )
        data = os.read(fd, limit + 1)
    except OSError as exc:
        raise SecretFileError(f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise SecretFileError(f"too large (more than {limit} bytes)")
    return data
