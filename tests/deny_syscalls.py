"""Run a command with some system calls failing with EPERM, for it and everything it starts.

    python tests/deny_syscalls.py SYSCALL [SYSCALL ...] -- COMMAND [ARG ...]

A seccomp filter (libseccomp, through the pyseccomp binding the product uses) answers EPERM to
the named calls, then COMMAND is exec'ed: that is how a test makes a host without a kernel
feature (inotify, say) from outside, with no switch in the product.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable

import pyseccomp


def load(names: Iterable[str], code: int) -> None:
    """Make every call in `names` fail with errno `code`, in this process and all it starts.
    Without no_new_privs where the kernel allows it (CAP_SYS_ADMIN, as CI's root has): the tests
    check that the product sets it itself."""
    flt = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
    for name in names:
        flt.add_rule(pyseccomp.ERRNO(code), name)
    flt.set_attr(pyseccomp.Attr.CTL_NNP, 0)
    try:
        flt.load()
    except OSError:
        flt.set_attr(pyseccomp.Attr.CTL_NNP, 1)
        flt.load()


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") in (0, len(argv) - 1):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    cut = argv.index("--")
    load(argv[:cut], errno.EPERM)
    os.execvp(argv[cut + 1], argv[cut + 1 :])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
