"""Reading and walking files the agent wrote: bounded, iterative, never blocking.

* :func:`read_regular` reads a file only when it is a regular file (opened without
  following a symlink and without blocking on a FIFO), and only up to a limit.
* :func:`walk` is an iterative :func:`os.walk` (Python 3.11's recurses, and a tree 1,000
  directories deep raises RecursionError); it never follows symlinks.
* :func:`remove_tree` is an iterative :func:`shutil.rmtree`; :func:`make_removable`
  gives the caller's own directories below a path back the permissions removal needs.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

from git_iterare.errors import OperationFailed


class TooLarge(OperationFailed):
    """A file the agent wrote is larger than the limit for it."""


def read_regular(path: Path | str, limit: int, what: str = "", limit_name: str = "") -> bytes:
    """The content of the regular file ``path``, at most ``limit`` bytes.

    Opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat`` after opening, so
    neither a symlink nor a FIFO swapped in is read.

    Args:
        path: the file.
        limit: most bytes accepted.
        what: what the file is, for messages (default: its path).
        limit_name: the limit's name in :mod:`git_iterare.limits`, for messages.

    Returns:
        The bytes.

    Raises:
        FileNotFoundError, NotADirectoryError: it does not exist.
        OperationFailed: it is a symlink or not a regular file.
        TooLarge: it holds more than ``limit`` bytes.
    """
    name = what or str(path)
    named = f" ({limit_name})" if limit_name else ""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OperationFailed(f"{name} is a symlink; refusing to read it") from None
        if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
            raise
        raise OperationFailed(f"cannot read {name}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OperationFailed(f"{name} is not a regular file; refusing to read it")
        if info.st_size > limit:
            raise TooLarge(f"{name} is {info.st_size} bytes, more than the limit of "
                           f"{limit}{named}")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise TooLarge(f"{name} is more than the limit of {limit} bytes{named}")
        return data
    finally:
        os.close(fd)


def walk(top: Path | str) -> Iterator[tuple[str, list[str], list[str]]]:
    """Like ``os.walk(top, followlinks=False)`` (top-down), without recursion.

    Yields ``(dirpath, dirnames, filenames)``; the caller may prune ``dirnames`` in place.
    Symlinks to directories are listed in ``filenames``; a directory that cannot be read
    is skipped.
    """
    stack = [os.fspath(top)]
    while stack:
        here = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError:
            continue
        yield here, dirs, files
        stack.extend(os.path.join(here, d) for d in reversed(dirs))


def remove_tree(path: Path | str) -> None:
    """Remove ``path`` and everything below it, without recursion; symlinks are removed,
    never followed. A missing ``path`` is not an error.

    Raises:
        OSError: an entry could not be removed.
    """
    top = os.fspath(path)
    if not os.path.lexists(top):
        return
    if os.path.islink(top) or not os.path.isdir(top):
        os.unlink(top)
        return
    stack: list[tuple[str, bool]] = [(top, False)]
    try:
        while stack:
            here, emptied = stack.pop()
            if emptied:
                os.rmdir(here)
                continue
            stack.append((here, True))
            with os.scandir(here) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, False))
                    else:
                        os.unlink(entry.path)
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        # Deeper than a path can name: rm walks by file descriptor, without a depth limit.
        subprocess.run(["rm", "-rf", "--", top], check=True, capture_output=True)


def _add_owner_rwx(path: str) -> None:
    """``chmod u+rwx`` the directory ``path`` when the caller owns it and it lacks any of
    those bits; a symlink (or anything not a directory) is left alone, never followed.

    Raises:
        OSError: ``path`` cannot be looked at or changed.
    """
    flag = getattr(os, "O_PATH", None)
    if flag is not None and os.path.isdir("/proc/self/fd"):
        # Opened without following a symlink, then changed through that very inode.
        try:
            fd = os.open(path, flag | os.O_NOFOLLOW | os.O_DIRECTORY)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                return
            raise
        try:
            info = os.fstat(fd)
            if info.st_uid == os.geteuid() and info.st_mode & 0o700 != 0o700:
                os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(info.st_mode) | 0o700)
        finally:
            os.close(fd)
        return
    info = os.lstat(path)
    if (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
            and info.st_mode & 0o700 != 0o700):
        os.chmod(path, stat.S_IMODE(info.st_mode) | 0o700)


def make_removable(path: Path | str) -> None:
    """Give every directory at and below ``path`` that the caller owns ``u+rwx`` (what
    listing and removing its entries needs), without following symlinks and without
    recursion. Directories of other owners, and entries that cannot be looked at, are
    left as they are: :func:`remove_tree` then names what it cannot remove. A missing
    ``path`` is not an error.
    """
    stack = [os.fspath(path)]
    while stack:
        here = stack.pop()
        try:
            _add_owner_rwx(here)
            with os.scandir(here) as entries:
                stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
