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

import pyseccomp

LANDLOCK_SYSCALLS = ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
MARKER = "FS_NOTES_TEST_LANDLOCK_HIDDEN"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    flt = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    for name in LANDLOCK_SYSCALLS:
        flt.add_rule(pyseccomp.ERRNO(errno.ENOSYS), name)
    # Without no_new_privs where the kernel allows it (CAP_SYS_ADMIN, as CI's root has): the
    # tests check that the product sets it itself.
    flt.set_attr(pyseccomp.Attr.CTL_NNP, 0)
    try:
        flt.load()
    except OSError:
        flt.set_attr(pyseccomp.Attr.CTL_NNP, 1)
        flt.load()
    os.environ[MARKER] = "1"
    os.execvp(argv[0], argv)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
