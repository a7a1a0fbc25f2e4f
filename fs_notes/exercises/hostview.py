"""The host's filesystem as a server without a private view would see it (exercises only).

The knock-out target enters the private view (sandbox/view.py) like `serve`; then a path outside
its workspaces does not exist for it, and a refusal by the view looks like ENOENT. To credit the
right layer, the judge asks what the host has there: `HostLookup` holds the host's "/" and every
mount point beneath it (but under /proc) as O_PATH fds from before the view, and walks a path
beneath them one component at a time with lstat and readlink (which neither Landlock nor the
system-call filter checks), links followed, /proc/self/root and /proc/<pid>/root taken as that
"/". Each mount is held apart because the view detaches the old root: a detached tree no longer
crosses into the mounts beneath it (a "/" that bubblewrap built from binds, a /tmp that is a
tmpfs), while a held fd still reaches its own mount.

Guarantees: it changes nothing and opens nothing but O_PATH fds' magic links. Does not: exist in
`serve`; resolve exactly as the kernel does (mount points under "/proc" are taken as plain
folders; at most `MAX_HOPS` components and links).
"""

from __future__ import annotations

import os
import stat

from fs_notes.statefolder import mount_table

MAX_HOPS = 256


def _mount_points() -> list[str]:
    """This process's mount points but "/" and those under /proc, outermost first."""
    points = {p for p in mount_table() if p != "/" and p != "/proc" and not p.startswith("/proc/")}
    return sorted(points, key=lambda p: p.count("/"))


class HostLookup:
    def __init__(self) -> None:
        self._root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._host = f"/proc/self/fd/{self._root}"
        self._mounts: dict[str, str] = {}  # mount point -> its held fd's magic link
        for point in _mount_points():
            try:
                fd = os.open(point, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue  # a file mount, or gone: reached through its parent, as before
            self._mounts[point] = f"/proc/self/fd/{fd}"

    def _at(self, path: str) -> str:
        """Where the host's absolute `path` is reached from here: beneath the held fd of the
        deepest mount point on its way (the mount point itself as "fd/.": the folder, not the
        magic link)."""
        parts = [c for c in path.split("/") if c]
        for n in range(len(parts), 0, -1):
            held = self._mounts.get("/" + "/".join(parts[:n]))
            if held is not None:
                return "/".join([held, *(parts[n:] or ["."])])
        return "/".join([self._host, *parts])

    def _resolve(self, path: str) -> tuple[str, bool] | None:
        """(the resolved host path, whether its last name is missing), or None if a folder on
        the way is missing."""
        pending = [c for c in path.split("/") if c]
        here: list[str] = []
        for _ in range(MAX_HOPS):
            if not pending:
                return "/" + "/".join(here), False
            name = pending.pop(0)
            if name in (".", ".."):
                here = here[:-1] if name == ".." else here
                continue
            full = self._at("/".join(["", *here, name]))
            try:
                st = os.lstat(full)
            except OSError:
                return ("/" + "/".join([*here, name]), True) if not pending else None
            if not stat.S_ISLNK(st.st_mode):
                here.append(name)
                continue
            target = os.readlink(full)
            parts = [c for c in target.split("/") if c]
            if target.startswith("/"):
                here = []
                if len(parts) >= 3 and parts[0] == "proc" and parts[2] == "root":
                    parts = parts[3:]  # /proc/<pid>/root/...: that process's "/"
            pending = parts + pending
        return None

    def stat(self, path: str) -> os.stat_result | None:
        """The host's stat of what `path` names (links followed), or None."""
        found = self._resolve(path)
        if found is None or found[1]:
            return None
        try:
            return os.lstat(self._at(found[0]))
        except OSError:
            return None

    def hidden(self, path: str) -> bool:
        """Whether `path` names, on the host, something the private view does not show at the
        same place: a file or folder, or a missing name in a folder (what a create would make)."""
        found = self._resolve(path)
        if found is None:
            return False
        where = found[0] if not found[1] else os.path.dirname(found[0])
        try:
            host = os.lstat(self._at(where))
        except OSError:
            return False
        try:
            seen = os.lstat(where)
        except OSError:
            return True
        return (seen.st_dev, seen.st_ino) != (host.st_dev, host.st_ino)
