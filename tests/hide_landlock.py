"""Run a command with Landlock hidden from it and from everything it starts.

    python tests/hide_landlock.py COMMAND [ARG ...]

Loads a seccomp filter (libseccomp, through the same pyseccomp binding the product uses) that
answers ENOSYS to the three Landlock system calls, then execs COMMAND: to the command, to the
servers and workers it starts (filters are inherited and cannot be removed) and to fs-notes,
this is a kernel without Landlock. That is how CI proves the chroot fallback and the fail-closed
rule, from outside, as libpathrs' CI hides openat2 (contrib/fake-enosys): the product has no
switch for it. `FS_NOTES_TEST_LANDLOCK_HIDDEN=1` is set for the tests' own helpers (layers.py),
which must then see Landlock missing; nothing under fs_notes/ or sandbox/ reads it.
"""

from __future__ import annotations

import errno
import os
import sys

from deny_syscalls import load

LANDLOCK_SYSCALLS = ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
MARKER = "FS_NOTES_TEST_LANDLOCK_HIDDEN"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    load(LANDLOCK_SYSCALLS, errno.ENOSYS)
    os.environ[MARKER] = "1"
    os.execvp(argv[0], argv)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
