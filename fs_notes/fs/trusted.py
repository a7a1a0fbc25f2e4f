"""Opening a folder whose path no one but its owner (and root) could have redirected.

Guarantees: `open_trusted(path)` returns an fd of the folder `path` names only if, on the
way there, every folder looked in and every symbolic link followed belongs to root or to the
folder's owner (with `owner=`, to that uid), and no folder looked in can be written by anyone
else: not by others, not by its group unless every group of that gid is its owner's alone (a
user private group: no member but the owner, nobody else's primary group), except where the
folder is sticky (like /tmp: there no one may rename or remove another's entry). These are
ssh's StrictModes rules, with the sticky bit and private groups that `fs-notes init` allows
too. What is on a FUSE file system counts as its mounter's (`user_id=` of the mount), whatever
owner the file system reports: its daemon says what it likes. The walk opens each component
O_PATH|O_NOFOLLOW beneath the one before and follows symbolic links itself (at most 40), so what
is checked is what is opened: the fd is the folder that was checked, however the path is
changed meanwhile. A workspace's last component must not be a symbolic link itself
(`last_link=False`, as WorkspaceRoot.open). It also gives the folders above the one opened, by
(device, inode), for the nesting check.

Does not guarantee: anything beneath the folder (the filesystem layer's job); that root or the
owner did not redirect it (they may: it is theirs to point); ACLs (a folder whose ACL lets
another user write in it passes); groups an NSS source cannot enumerate (LDAP, sssd: a member
only they know is not seen); owners on a file system a user mounted other than by FUSE (a
`user` entry of fstab, a loop mount by udisks: the kernel does not record who mounted it, and
such an image may claim any owner); a bind mount, which only root makes: one of the same
folder shows as the same (device, inode) twice (compose.open_roots refuses that), one of a
folder inside another workspace is not seen as nesting. In a user namespace other than the
first (`unshare -r`, Flatpak, a rootless container), root's folders show as the overflow uid
(65534), as does every other user's outside the namespace: there that uid counts as root's
(`Trusted.unmapped` says the way relied on it, and serve logs it at INFO), so a folder or link
of another user outside passes as root's would (its mode is still checked).
"""

from __future__ import annotations

import contextlib
import functools
import grp
import os
import pwd
import stat
from collections import deque
from dataclasses import dataclass

__all__ = ["Trusted", "UntrustedFolder", "open_trusted"]

MAX_LINKS = 40  # as the kernel's own limit on symbolic links followed in one lookup
_PATH = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UntrustedFolder(Exception):
    """`where` (a component of the path, as walked) is why the folder is refused: `why`."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where
        self.why = why


@dataclass(frozen=True)
class Trusted:
    fd: int  # O_RDONLY|O_DIRECTORY|O_CLOEXEC, the caller's to close
    owner: int
    above: frozenset[tuple[int, int]]  # the folders above it, (st_dev, st_ino)
    unmapped: bool = False  # the overflow uid of a user namespace was taken as root's


@dataclass(frozen=True)
class _Seen:
    where: str
    st: os.stat_result
    link: bool
    uid: int  # whose it is: the owner, or the mounter of the FUSE file system it is on


def open_trusted(
    path: str, *, owner: int | None = None, private: bool = False, last_link: bool = False
) -> Trusted:
    """The folder at absolute `path`, walked and checked as the module says; UntrustedFolder
    naming the component otherwise, OSError if a component cannot be looked up or opened.
    `owner` None: the folder's own owner is whose the way must be (a workspace), and the
    folder itself is not checked. `owner` a uid (the server's user): the folder too must be
    root's or `owner`'s and writable by no one else, sticky or not (the folder of a state
    file); `private`: `owner`'s, not root's (a state folder)."""
    if not os.path.isabs(path):
        raise UntrustedFolder(path, "not an absolute path")
    todo = deque(c for c in path.split("/") if c)
    stack: list[tuple[str, int]] = [("/", os.open("/", _PATH))]
    seen: list[_Seen] = []
    links = 0
    mounts = _Mounts()
    try:
        while todo:
            name = todo.popleft()
            if name == ".":
                continue
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop()[1])
                continue
            where_in, dir_fd = stack[-1]
            where = os.path.join(where_in, name)
            here = os.fstat(dir_fd)
            seen.append(_Seen(where_in, here, link=False, uid=mounts.owner(here)))
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                if all(c == "." for c in todo) and not last_link:
                    why = "is a symbolic link (serve the folder it points to)"
                    raise UntrustedFolder(where, why)
                links += 1
                if links > MAX_LINKS:
                    raise UntrustedFolder(where, f"more than {MAX_LINKS} symbolic links on the way")
                seen.append(_Seen(where, st, link=True, uid=mounts.owner(st)))
                target = os.readlink(name, dir_fd=dir_fd)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop()[1])
                todo.extendleft(reversed([c for c in target.split("/") if c]))
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise UntrustedFolder(where, "is not a folder")
            fd = os.open(name, _PATH, dir_fd=dir_fd)  # ENOTDIR/ELOOP if it changed meanwhile
            stack.append((where, fd))
        where, leaf_fd = stack[-1]
        leaf_st = os.fstat(leaf_fd)
        leaf = _Seen(where, leaf_st, link=False, uid=mounts.owner(leaf_st))
        uid = leaf.uid if owner is None else owner
        whose = "the folder's owner" if owner is None else "the server's user"
        if private and leaf.uid != uid:
            raise UntrustedFolder(where, f"belongs to {_user(leaf.uid)}, not to {_user(uid)}")
        if owner is not None:
            _check_folder(leaf, uid, whose, strict=True)
        for item in seen:
            if item.link:
                _check_owner(item, uid, whose)
            else:
                _check_folder(item, uid, whose, strict=False)
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=leaf_fd)
        above = frozenset((s.st_dev, s.st_ino) for s in map(os.fstat, (f for _, f in stack[:-1])))
        unmapped = any(i.uid in _unmapped() and uid not in _unmapped() for i in [*seen, leaf])
        return Trusted(fd, uid, above, unmapped)
    finally:
        for _, fd in stack:
            os.close(fd)


class _Mounts:
    """Whose a file is, by the file system it is on: a FUSE file system's (fuse, fuse.*,
    fuseblk) is its mounter's (`user_id=`), whatever it reports; any other's, its owner's."""

    def __init__(self) -> None:
        self._fuse: dict[int, int] | None = None

    def owner(self, st: os.stat_result) -> int:
        if self._fuse is None:
            self._fuse = _fuse_mounters()
        return self._fuse.get(st.st_dev, st.st_uid)


def _fuse_mounters() -> dict[int, int]:
    """st_dev -> the uid that mounted it, for every FUSE file system in /proc/self/mountinfo
    (none if it cannot be read: a chroot without /proc; the module says what that leaves)."""
    out: dict[int, int] = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 4 or len(fields) < 3:
            continue
        fstype, options = fields[dash + 1], fields[dash + 3]
        if not (fstype in ("fuse", "fuseblk") or fstype.startswith("fuse.")):
            continue
        major, _, minor = fields[2].partition(":")
        try:
            dev = os.makedev(int(major), int(minor))
        except ValueError:
            continue
        for option in options.split(","):
            if option.startswith("user_id="):
                with contextlib.suppress(ValueError):
                    out[dev] = int(option.removeprefix("user_id="))
    return out


def _check_owner(item: _Seen, owner: int, whose: str) -> None:
    if item.uid not in (0, owner, *_unmapped()):
        what = "a symbolic link" if item.link else "a folder"
        mounted = " (on a file system it mounted)" if item.uid != item.st.st_uid else ""
        allowed = f"root, {whose}" if owner == 0 else f"root or of {_user(owner)}, {whose}"
        raise UntrustedFolder(
            item.where,
            f"is {what} of {_user(item.uid)}{mounted}, not of {allowed}: its owner could make "
            "the path lead to another folder",
        )


def _check_folder(item: _Seen, owner: int, whose: str, *, strict: bool) -> None:
    _check_owner(item, owner, whose)
    mode = item.st.st_mode
    if mode & stat.S_ISVTX and not strict:
        return  # like /tmp: no one but an entry's owner may rename or remove it
    fix = f"chmod {'go-w' if mode & stat.S_IWOTH else 'g-w'}"
    if mode & stat.S_IWOTH:
        raise UntrustedFolder(
            item.where,
            f"can be written by others (mode {stat.S_IMODE(mode):04o}; {fix} fixes it)",
        )
    if mode & stat.S_IWGRP and not _private_group(item.st.st_gid, item.uid):
        raise UntrustedFolder(
            item.where,
            f"can be written by its group {_group(item.st.st_gid)} (mode "
            f"{stat.S_IMODE(mode):04o}; {fix} fixes it)",
        )


@functools.cache
def _unmapped() -> tuple[int, ...]:
    """The overflow uid, if this process is in a user namespace other than the first (where
    it stands for every uid not mapped into it, root's among them); else nothing."""
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            first = f.read().split() == ["0", "0", "4294967295"]
        with open("/proc/sys/kernel/overflowuid", encoding="ascii") as f:
            overflow = int(f.read())
    except (OSError, ValueError):
        return ()  # no /proc (a chroot): owners as they are
    return () if first else (overflow,)


def _private_group(gid: int, uid: int) -> bool:
    """A user private group: `uid`'s primary group, and every group of that gid (a second
    entry may reuse it) without a member but the owner."""
    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        return False
    groups = [g for g in grp.getgrall() if g.gr_gid == gid]
    if user.pw_gid != gid or not groups:
        return False
    if any(set(g.gr_mem) - {user.pw_name} for g in groups):
        return False
    return not any(p.pw_gid == gid and p.pw_uid != uid for p in pwd.getpwall())


def _user(uid: int) -> str:
    with contextlib.suppress(KeyError):
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    return f"uid {uid}"


def _group(gid: int) -> str:
    with contextlib.suppress(KeyError):
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    return f"gid {gid}"
