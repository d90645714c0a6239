"""Which files of a run's worktree the agent cannot have touched, told without reading them.

Right after the host checks a run's base out, before any sandbox has the tree,
:func:`record` stores each checked-out file's ``(device, inode, size, mtime ns, mode)``
in a host-only file (never mounted). The sidecar gives the trees to the agent's uid, then
writes a *stamp* in its output folder (:data:`STAMP`, which the agent never sees) and lets
the agent start only once that filesystem's clock has moved past the stamp's time.

The kernel sets an inode's ctime to the current time on every change of its content,
mode, owner, links or name, and nothing without CAP_SYS_TIME can set it back (``touch
-d`` sets mtime only). So once the agent ended, a path whose inode is the one recorded,
with the recorded size, mtime and mode, and whose ctime is not newer than the stamp (the
racy-git rule: a change in the stamp's own tick would not be newer, so the agent starts
after that tick), holds the bytes the host checked out; :func:`untouched` lists those
paths. A replaced file (new inode, also an inode number reused), a hard link, a rename,
a chmod or a write whose mtime was set back all move the inode's ctime past the stamp;
every such path is hashed as before.

Giving the trees back to the user (chown) moves every ctime, so :func:`untouched` runs
before that, once the agent's container has ended (nothing of the agent's runs any more:
its processes end with the container). What comes after is git-iterare's own (the
give-back strips set-uid bits, removes special files and chowns; the worktree is renamed
into the user's checkout): no file's bytes change, so the keys :func:`untouched` kept are trusted
as they are, without looking at those files again. Without a record, a stamp, or with
the stamp on another filesystem than the worktree (another clock granularity), nothing
counts as untouched.
A system clock stepped back while the agent runs would defeat the rule, as it defeats
git's own racy check.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

#: The stamp's name in the sidecar's output folder (``container/sidecar``, step 5).
STAMP = "trees-given"

_HEAD = b"iterare-stat-v1\0"
_KEY = struct.Struct("<QQQqI")

#: What :func:`untouched` compares: ``(device, inode, size, mtime ns, mode)``.
Key = tuple[int, int, int, int, int]


def key_of(st: os.stat_result) -> Key:
    """The fields of ``st`` a file keeps while nothing changes it (ctime aside)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)


def _write(dest: Path, keys: Mapping[str, Key]) -> None:
    out = [_HEAD]
    for path, key in keys.items():
        out.append(os.fsencode(path) + b"\0" + _KEY.pack(*key))
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.write_bytes(b"".join(out))
    os.replace(tmp, dest)


def load(path: Path) -> dict[str, Key]:
    """The keys :func:`record` or :func:`untouched` stored at ``path``, by relative path;
    empty when there is none or it does not parse."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if not data.startswith(_HEAD):
        return {}
    found: dict[str, Key] = {}
    at, size = len(_HEAD), _KEY.size
    while at < len(data):
        end = data.find(b"\0", at)
        if end < 0 or end + 1 + size > len(data):
            return {}
        found[os.fsdecode(data[at:end])] = _KEY.unpack_from(data, end + 1)
        at = end + 1 + size
    return found


def record(worktree: Path, paths: Iterable[str], dest: Path) -> None:
    """Store the key of every regular file or symlink at ``paths`` (relative,
    ``/``-separated) in ``worktree`` at ``dest`` (written atomically). Call it once the
    host wrote the tree and before any sandbox has it."""
    keys: dict[str, Key] = {}
    top = os.fspath(worktree)
    for path in paths:
        try:
            st = os.lstat(f"{top}/{path}")
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            keys[path] = key_of(st)
    _write(dest, keys)


def _stamp_ns(worktree: Path, stamp: Path) -> int | None:
    """The stamp's time, when the sidecar (root) made it on the worktree's filesystem."""
    try:
        given, tree = os.lstat(stamp), os.lstat(worktree)
    except OSError:
        return None
    if not stat.S_ISREG(given.st_mode) or given.st_dev != tree.st_dev:
        return None
    return given.st_mtime_ns


def untouched(worktree: Path, recorded: Path, stamp: Path, dest: Path) -> int:
    """Store at ``dest`` the keys of the recorded paths of ``worktree`` that nothing
    changed since the stamp (see the module docstring): call it once the agent ended,
    before the trees are given back. Paths that cannot be looked at (a folder the agent
    closed) are left out. Returns how many were kept.

    Raises:
        OSError: ``dest`` cannot be written.
    """
    keys: dict[str, Key] = {}
    since = _stamp_ns(worktree, stamp)
    if since is not None:
        top = os.fspath(worktree)
        for path, key in load(recorded).items():
            try:
                st = os.lstat(f"{top}/{path}")
            except OSError:
                continue
            if st.st_ctime_ns <= since and key_of(st) == key:
                keys[path] = key
    _write(dest, keys)
    return len(keys)

