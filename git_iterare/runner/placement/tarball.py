"""Archives from an engine, unpacked without trusting them.

What comes back from a remote run's sandbox (``get_archive`` of its worktree and gitdir,
the sidecar's output) was written by the agent: :func:`extract` unpacks such a tar into
an empty folder of the user's with no path leaving it, no link followed, no special file
made, no set-uid bit kept, no nested repository live, no file larger than the caller
takes, and within :data:`~git_iterare.limits.MAX_FETCH_BYTES` and
:data:`~git_iterare.limits.MAX_FETCH_ENTRIES`.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from git_iterare import boundedfs
from git_iterare.errors import OperationFailed
from git_iterare.git.safegit import DISABLED_GIT
from git_iterare.limits import MAX_FETCH_BYTES, MAX_FETCH_ENTRIES

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer


class FetchTooLarge(OperationFailed):
    """An archive from the engine is over :data:`~git_iterare.limits.MAX_FETCH_BYTES` or
    :data:`~git_iterare.limits.MAX_FETCH_ENTRIES`."""


@dataclass(frozen=True)
class Unpacked:
    """What :func:`extract` did besides unpacking.

    Attributes:
        notes: for the user (special files left out), at most 100.
        left_out: ``(path, size in bytes)`` of the regular files not written for being
            larger than the caller takes (relative, ``/``-separated), in archive order.
    """

    notes: list[str] = field(default_factory=list)
    left_out: list[tuple[str, int]] = field(default_factory=list)

#: Largest file of the sidecar's output fetched (status, DNS log, report).
MAX_OUT_FILE_BYTES = 64 * 1024**2


class _ChunkReader(io.RawIOBase):
    """A readable stream over an iterator of byte chunks (for ``tarfile`` ``r|``)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks: Iterator[bytes] = iter(chunks)
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        while not self.pending:
            try:
                self.pending = next(self.chunks)
            except StopIteration:
                return 0
        view = memoryview(buffer).cast("B")
        size = min(len(view), len(self.pending))
        view[:size] = self.pending[:size]
        self.pending = self.pending[size:]
        return size


def members(chunks: Iterable[bytes]) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
    """The members of a streamed tar (none for an empty stream: a path that did not
    exist), each with the archive to read it from.

    Raises:
        OperationFailed: it is not a tar.
    """
    raw = _ChunkReader(chunks)
    reader = io.BufferedReader(raw, 1 << 16)
    if not reader.peek(1):
        return
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for member in tar:
                yield member, tar
    except tarfile.TarError as exc:
        raise OperationFailed(f"the files from the Docker engine are not a valid archive: "
                              f"{exc}") from None
    # Read the padding after the archive's end too: a response read to its end gives its
    # connection back (an ssh channel on an ssh:// engine, of which there are few).
    for _ in raw.chunks:
        pass


class Counted:
    """An archive's chunks (an iterable of bytes), counted as they pass (``size``:
    bytes so far), for the record of what a run brought back."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks = chunks
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.size += len(chunk)
            yield chunk


def extract(chunks: Iterable[bytes], dest: Path, *, skip_top: tuple[str, ...] = (),
            max_file: int | None = None) -> Unpacked:
    """Unpack a tar from the engine (``get_archive`` of a folder) into the empty folder
    ``dest``, without trusting it.

    The archive's first path component (the folder's own name) is dropped. Entries whose
    path is absolute, holds ``..``, or passes through a symlink or file unpacked earlier
    are skipped; so are the top-level names in ``skip_top`` (the worktree's ``.git``).
    Regular files get mode 0644 or 0755 (no set-uid bits, no other owner), folders 0755;
    symlinks are made as they are (never followed); a hard link becomes a copy of its
    target (counted as such towards :data:`~git_iterare.limits.MAX_FETCH_BYTES`); FIFOs,
    sockets and devices are left out. A ``.git`` below the top (a nested
    repository the agent made) is unpacked as
    :data:`~git_iterare.git.safegit.DISABLED_GIT`, as finishing a local run renames it, so
    no git of the user's ever takes it for a repository. Regular files larger than
    ``max_file`` bytes are not written (:attr:`Unpacked.left_out`); their bytes count
    towards :data:`~git_iterare.limits.MAX_FETCH_BYTES` all the same (they were read).
    Every entry is made relative to a descriptor of ``dest``, so one whose path is as
    long as the engine's own limit (``PATH_MAX``) is kept however long ``dest``'s path
    is: what the automatic commit then leaves out for its length it keeps as the base has
    it, as in a local run.

    Args:
        chunks: the archive's bytes.
        dest: an empty folder of the user's.
        skip_top: top-level names to leave out.
        max_file: largest regular file written (bytes), or None for any.

    Returns:
        Notes for the user and the files left out.

    Raises:
        OperationFailed: the archive is not a tar.
        FetchTooLarge: it holds more than :data:`~git_iterare.limits.MAX_FETCH_BYTES` of
            files or :data:`~git_iterare.limits.MAX_FETCH_ENTRIES` entries (what was
            unpacked stays in ``dest``).
    """
    done = Unpacked()
    blocked: set[tuple[str, ...]] = set()  # symlinks and files: nothing goes below them
    files: set[tuple[str, ...]] = set()
    left: dict[tuple[str, ...], int] = {}  # files not written, with their sizes
    folders: set[tuple[str, ...]] = set()
    total = entries = 0
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
    try:
        for member, tar in members(chunks):
            entries += 1
            if entries > MAX_FETCH_ENTRIES:
                raise FetchTooLarge(f"the run's files hold more than {MAX_FETCH_ENTRIES} "
                                    "entries (MAX_FETCH_ENTRIES)")
            if member.isfile():  # read, whether it is then written or not
                total = _counted(total, member.size)
            parts = tuple(p for p in member.name.split("/")[1:] if p not in ("", "."))
            if not parts or ".." in parts or member.name.startswith("/"):
                continue
            if parts[0] in skip_top:
                continue
            parts = _disabled(parts)
            if any(parts[:n] in blocked for n in range(1, len(parts) + 1)):
                continue
            rel = "/".join(parts)
            if len(os.fsencode(rel)) > _MAX_REL_PATH or any(
                    len(os.fsencode(p)) > _MAX_NAME for p in parts):
                continue  # no system could have named it
            _make_folders(root, parts[:-1], folders)
            if member.isdir():
                if not _lexists(root, rel):
                    _make_folders(root, parts, folders)
                continue
            if _lexists(root, rel):  # a later entry of the same name wins
                if parts in folders:
                    continue
                os.unlink(rel, dir_fd=root)
            if member.issym():
                os.symlink(member.linkname, rel, dir_fd=root)
                blocked.add(parts)
            elif member.isfile() and max_file is not None and member.size > max_file:
                left[parts] = member.size
                blocked.add(parts)
            elif member.isfile():
                write_new(rel, tar.extractfile(member), member.mode, dir_fd=root)
                files.add(parts)
                blocked.add(parts)
            elif member.islnk():
                target = _disabled(tuple(p for p in member.linkname.split("/")[1:]
                                         if p not in ("", ".")))
                if target in files:  # a copy: as much again on the user's disk
                    fd = os.open("/".join(target), os.O_RDONLY | os.O_NOFOLLOW, dir_fd=root)
                    with os.fdopen(fd, "rb") as source:
                        info = os.fstat(fd)
                        total = _counted(total, info.st_size)
                        write_new(rel, source, info.st_mode, dir_fd=root)
                    files.add(parts)
                    blocked.add(parts)
                elif target in left:  # counted as the file it stands for: few of them
                    total = _counted(total, left[target])
                    left[parts] = left[target]
                    blocked.add(parts)
            elif len(done.notes) < 100:
                done.notes.append(f"removed special file: {rel}")
    finally:
        os.close(root)
    done.left_out.extend(("/".join(parts), size) for parts, size in left.items())
    return done


def _counted(total: int, size: int) -> int:
    """``total`` plus ``size`` bytes of files.

    Raises:
        FetchTooLarge: that is over :data:`~git_iterare.limits.MAX_FETCH_BYTES`.
    """
    total += size
    if total > MAX_FETCH_BYTES:
        raise FetchTooLarge(f"the run's files hold more than {MAX_FETCH_BYTES} bytes "
                            "(MAX_FETCH_BYTES)")
    return total


def _disabled(parts: tuple[str, ...]) -> tuple[str, ...]:
    """``parts`` with each ``.git`` below the top renamed to
    :data:`~git_iterare.git.safegit.DISABLED_GIT`."""
    return parts[:1] + tuple(DISABLED_GIT if p == ".git" else p for p in parts[1:])


#: Longest relative path a system call takes (``PATH_MAX`` less its NUL), and longest
#: name in one folder (``NAME_MAX``): Linux's limits.
_MAX_REL_PATH = 4095
_MAX_NAME = 255


def _lexists(root: int, rel: str) -> bool:
    try:
        os.stat(rel, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _make_folders(root: int, parts: tuple[str, ...], made: set[tuple[str, ...]]) -> None:
    """Make the folder ``parts`` and its parents below the descriptor ``root`` (0755), as
    far as they are not in ``made``, which they are added to. Only folders can be in the
    way: :func:`extract` takes nothing below a file or symlink it made."""
    for n in range(1, len(parts) + 1):
        if parts[:n] not in made:
            with contextlib.suppress(FileExistsError):
                os.mkdir("/".join(parts[:n]), 0o755, dir_fd=root)
            made.add(parts[:n])


def write_new(path: Path | str, source: IO[bytes] | None, mode: int, *,
           dir_fd: int | None = None) -> None:
    """Create the new file ``path`` (relative to ``dir_fd`` when given) with ``source``'s
    bytes, mode 0755 when ``mode`` has an execute bit, else 0644; never through a
    symlink, never over an existing file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o755 if mode & 0o111 else 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as handle:
        if source is not None:
            shutil.copyfileobj(source, handle, 1 << 20)


def replace_contents(target: Path, new: Path, keep: tuple[str, ...] = ()) -> None:
    """Make ``target``'s contents ``new``'s (moved in), keeping ``target``'s ``keep``
    entries; ``new`` is removed."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(target):
        if entry.name in keep:
            continue
        if entry.is_dir(follow_symlinks=False):
            boundedfs.remove_tree(Path(entry.path))
        else:
            os.unlink(entry.path)
    for entry in os.scandir(new):
        if entry.name not in keep:
            os.rename(entry.path, target / entry.name)
    boundedfs.remove_tree(new)


