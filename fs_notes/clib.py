"""The C library functions fs-notes calls through ctypes, resolved without searching for them.

Why this module exists (issue 25): `ctypes.util.find_library` runs programs (ldconfig, gcc, ld)
and creates temporary files, which a confined process may not do (Landlock refuses the exec and
any write outside its grants). Depending on the Python, it then returns None or raises: Debian's
/usr/bin/python3 raised out of the folder watch's lookup after self-confinement, so every search
walked the whole workspace. So no confined fs-notes process calls find_library:
- `libc()` is this process's C library as dlopen(NULL) sees it: the global scope of what is
  already mapped (the interpreter links the C library), so no file is searched, opened or run,
  before confinement or after.
- `inotify()` looks the inotify functions up once and keeps them (with their argument types);
  `prepare()` does that (and anything else a confined server looks up later) before the server
  confines itself (sandbox/selfconfine.py), so a failure is known, and logged, at start-up.
- `mapped_libraries()` names the files this process has mapped for given sonames, for a child
  that must load them without find_library (the worker's libseccomp binding: sandbox/supervisor.py
  hands the table to the worker's bootstrap).

Guarantees: nothing here runs a program or writes a file; a function that is missing is
reported as None with the reason (the caller decides what that means; the folder watch falls
back to walking, and says so). Does not: find a library that is not mapped already, or work on a
Python linked statically against a C library without the symbols (then inotify() is None).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library (dlopen(NULL): what is mapped), errno kept for ctypes.get_errno()."""
    return ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Inotify:
    init1: Callable[..., int]
    add_watch: Callable[..., int]


@functools.cache
def _inotify() -> Inotify | str:
    try:
        lib = libc()
        init1, add_watch = lib.inotify_init1, lib.inotify_add_watch
    except (OSError, AttributeError) as exc:
        return f"no inotify in the C library ({exc})"
    init1.argtypes = [ctypes.c_int]
    init1.restype = ctypes.c_int
    add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    add_watch.restype = ctypes.c_int
    return Inotify(init1, add_watch)


def inotify() -> Inotify | None:
    """inotify_init1 and inotify_add_watch, or None (`inotify_missing()` says why)."""
    found = _inotify()
    return found if isinstance(found, Inotify) else None


def inotify_missing() -> str | None:
    """Why `inotify()` is None, or None when it is not."""
    found = _inotify()
    return found if isinstance(found, str) else None


def prepare() -> None:
    """Look up now what a confined process calls later (before confinement: one thread, every
    file still reachable)."""
    libc()
    _inotify()


def mapped_libraries(sonames: Mapping[str, str]) -> dict[str, str]:
    """For each name -> soname given ({"c": "libc.so.6"}), the soname in the folder this
    process has that library mapped from (a package update replaces the file behind the
    mapping; the soname link stays); names not mapped are left out."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
            name = os.path.basename(path)
            for lib, soname in sonames.items():
                if name.startswith(soname.split(".so")[0] + ".so") and lib not in found:
                    found[lib] = os.path.join(os.path.dirname(path), soname)
    return found
