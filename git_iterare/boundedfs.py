"""Reading and walking files the agent or the repository wrote: bounded, iterative, never
blocking.

* :func:`read_regular` reads a file only when it is a regular file (opened without
  following a symlink and without blocking on a FIFO), and only up to a limit.
* :func:`read_repository_file` reads a file of a folder the repository keeps
  (``.iterare/config.toml``, its ``Dockerfile``, ``include``) the same way, neither the
  folder nor the file being a symlink: a repository could point them at any file the user
  can read, which ``git iterare trust --show`` would print.
* :func:`walk` is an iterative :func:`os.walk` (Python 3.11's recurses, and a tree 1,000
  directories deep raises RecursionError); it never follows symlinks.
* :func:`glob_files` finds the regular files matching any of several glob patterns in one
  walk, entering only directories a pattern can still match below (``Path.glob`` walks
  the tree again for every pattern and every ``**`` in it: a few lines of
  ``**/**/**/*`` took minutes).
* :func:`remove_tree` is an iterative :func:`shutil.rmtree`; :func:`make_removable`
  gives the caller's own directories below a path back the permissions removal needs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from git_iterare.errors import OperationFailed, UserError
from git_iterare.limits import MAX_PROJECT_FILE_BYTES

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class TooLarge(OperationFailed):
    """A file the agent wrote is larger than the limit for it."""


def read_regular(path: Path | str, limit: int, what: str = "", limit_name: str = "", *,
                 dir_fd: int | None = None, cut: bool = False) -> bytes:
    """The content of the regular file ``path``, at most ``limit`` bytes.

    Opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat`` after opening, so
    neither a symlink nor a FIFO swapped in is read.

    Args:
        path: the file.
        limit: most bytes accepted.
        what: what the file is, for messages (default: its path).
        limit_name: the limit's name in :mod:`git_iterare.limits`, for messages.
        dir_fd: a directory's descriptor ``path`` is relative to (:func:`os.open`).
        cut: return the first ``limit`` bytes of a longer file instead of raising.

    Returns:
        The bytes.

    Raises:
        FileNotFoundError, NotADirectoryError: it does not exist.
        OperationFailed: it is a symlink or not a regular file.
        TooLarge: it holds more than ``limit`` bytes (and not ``cut``).
    """
    name = what or str(path)
    named = f" ({limit_name})" if limit_name else ""
    try:
        fd = os.open(path, _READ_FLAGS, dir_fd=dir_fd)
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
        if info.st_size > limit and not cut:
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
            if cut:
                return data[:limit]
            raise TooLarge(f"{name} is more than the limit of {limit} bytes{named}")
        return data
    finally:
        os.close(fd)


def read_repository_file(folder: Path, name: str, limit: int = MAX_PROJECT_FILE_BYTES,
                         limit_name: str = "MAX_PROJECT_FILE_BYTES") -> bytes | None:
    """The file ``name`` of the repository's folder ``folder`` (``.iterare``), at most
    ``limit`` bytes; None when the folder or the file does not exist.

    The folder is opened with ``O_NOFOLLOW | O_DIRECTORY`` and the file relative to it
    (see :func:`read_regular`), so neither can be a symlink, however the path is swapped.

    Args:
        folder: the folder, in the repository's main worktree.
        name: a file name in it (no ``/``).
        limit: most bytes accepted.
        limit_name: the limit's name in :mod:`git_iterare.limits`, for messages.

    Raises:
        UserError: the folder or the file is a symlink, the file is not a regular file or
            is larger than ``limit``, or either cannot be read (one line naming the file).
    """
    path = folder / name
    hint = "replace it with the file it points to, if you trust that file"
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                         | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(folder):
            raise UserError(f"{folder} is a symlink; git iterare reads {folder.name}/ only "
                            "as a folder of the repository", hint=hint) from None
        raise UserError(f"cannot read {folder}: {exc.strerror}") from None
    try:
        return read_regular(name, limit, str(path), limit_name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except TooLarge:
        raise UserError(f"{path} is larger than {limit // 1024} KiB ({limit_name})",
                        hint="keep it small") from None
    except OperationFailed as exc:
        if os.path.islink(path):
            raise UserError(f"{path} is a symlink; git iterare reads the files of "
                            f"{folder.name}/ only as regular files", hint=hint) from None
        raise UserError(exc.message) from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


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


def glob_parts(pattern: str) -> tuple[str, ...]:
    """The components of a glob ``pattern`` (``./`` and empty ones dropped).

    Raises:
        ValueError: it names nothing (``.``, empty), or holds ``**`` within a component
            (``x/***``), which ``Path.glob`` refuses too.
    """
    parts = tuple(p for p in pattern.split("/") if p not in ("", "."))
    if not parts:
        raise ValueError(f"{pattern!r} names no file")
    for part in parts:
        if "**" in part and part != "**":
            raise ValueError(f"{pattern!r}: '**' can only be a whole component")
    return parts


def _matcher(part: str) -> Callable[[str], object]:
    """A test of one name against the glob component ``part`` (compiled once)."""
    if not any(c in part for c in "*?["):
        return part.__eq__
    import fnmatch
    import re

    return re.compile(fnmatch.translate(part)).match


def glob_files(top: Path | str, patterns: list[str], skip: tuple[str, ...] = ()) -> set[str]:
    """Regular files below ``top`` matching any of ``patterns``, relative (``/``-separated).

    A pattern is ``/``-separated components: ``**`` matches any number of directories
    (none included), any other component one name by :func:`fnmatch.fnmatchcase`
    (``*``, ``?``, ``[...]``; names starting with ``.`` match too), as ``Path.glob``
    reads it. The tree is walked once, without recursion and without following symlinks;
    a directory is entered only while a pattern can match below it, and never one named in
    ``skip`` at the top. Symlinks are never returned.

    Args:
        top: the directory.
        patterns: the glob patterns (relative, without ``..``).
        skip: names of directories at the top not to enter (``.git``).

    Raises:
        ValueError: a pattern is no usable glob (see :func:`glob_parts`).
    """
    compiled = [glob_parts(p) for p in dict.fromkeys(patterns)]
    tests = [[_matcher(part) for part in parts] for parts in compiled]

    def closure(states: set[tuple[int, int]]) -> set[tuple[int, int]]:
        # A ``**`` may match no directory: the component after it applies here too.
        out, todo = set(states), list(states)
        while todo:
            index, at = todo.pop()
            if at < len(compiled[index]) and compiled[index][at] == "**":
                nxt = (index, at + 1)
                if nxt not in out:
                    out.add(nxt)
                    todo.append(nxt)
        return out

    found: set[str] = set()
    stack = [("", closure({(i, 0) for i in range(len(compiled))}))]
    root = os.fspath(top)
    while stack:
        rel, states = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as entries:
                listed = [(e.name, e.is_dir(follow_symlinks=False),
                           e.is_file(follow_symlinks=False)) for e in entries]
        except OSError:
            continue
        for name, is_dir, is_file in listed:
            if not rel and name in skip:
                continue
            below: set[tuple[int, int]] = set()
            matched = False
            for index, at in states:
                parts = compiled[index]
                if at >= len(parts):
                    continue
                if parts[at] == "**":
                    if is_dir:
                        below.add((index, at))
                elif tests[index][at](name):
                    if at + 1 == len(parts):
                        matched = True
                    else:
                        below.add((index, at + 1))
            path = f"{rel}/{name}" if rel else name
            if matched and is_file:
                found.add(path)
            if is_dir and below:
                stack.append((path, closure(below)))
    return found


def remove_tree(path: Path | str) -> None:
    """Remove ``path`` and everything below it, without recursion; symlinks are removed,
    never followed. A missing ``path`` is not an error, nor is an entry that another
    process removes meanwhile (two cleanups of one run: both end with it gone).

    Raises:
        OSError: an entry could not be removed.
    """
    top = os.fspath(path)
    if not os.path.lexists(top):
        return
    stack: list[tuple[str, bool]] = [(top, False)]
    try:
        if os.path.islink(top) or not os.path.isdir(top):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(top)
            return
        while stack:
            here, emptied = stack.pop()
            with contextlib.suppress(FileNotFoundError):  # removed by another meanwhile
                if emptied:
                    os.rmdir(here)
                    continue
                stack.append((here, True))
                with os.scandir(here) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((entry.path, False))
                        else:
                            with contextlib.suppress(FileNotFoundError):
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
