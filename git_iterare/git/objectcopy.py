"""Copying a run's commits out of an object store the agent wrote, without trusting it.

The run gitdir's own ``objects`` dir (its ``info/alternates`` ignored: the agent could
point it anywhere) is read with dulwich, never with the git CLI. Everything is bounded
(:mod:`git_iterare.limits`): each object's declared size is checked before it is inflated
and inflating stops at it, delta chains are bounded, and so are the number of objects and
commits, their total size, and tree sizes and depth; every object's id is checked against
its content and its type against where it was referenced. A tree holding symlinks, FIFOs
or devices is refused before anything is read.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import boundedfs
from git_iterare import limits as lim
from git_iterare.errors import OperationFailed

if TYPE_CHECKING:
    from dulwich.object_store import BaseObjectStore, DiskObjectStore

#: Pack and loose object type numbers (git's ``OBJ_*``, gitformat-pack(5)).
_TYPE_NAMES = {b"commit": 1, b"tree": 2, b"blob": 3, b"tag": 4}
_OFS_DELTA, _REF_DELTA = 6, 7

def _own_object_store(path: Path) -> DiskObjectStore:
    """A dulwich store over a run gitdir's object dir that never consults its alternates.

    The agent writes ``info/alternates``: following it would read (and import) objects
    from wherever it points.
    """
    from dulwich.object_store import DiskObjectStore

    class OwnObjectStore(DiskObjectStore):
        @property
        def alternates(self) -> list[BaseObjectStore]:
            return []

    return OwnObjectStore(str(path))


def _holds(store: DiskObjectStore, sha: str) -> bool:
    """Whether the run gitdir's own ``store`` has object ``sha`` (False when its packs are
    too odd to tell: the agent wrote them)."""
    from dulwich.objects import ObjectID

    try:
        return ObjectID(sha.encode()) in store
    except Exception:  # dulwich raises various errors on a corrupt pack
        return False


def _check_plain_tree(root: Path) -> None:
    """Refuse a tree holding symlinks, FIFOs or devices (reading one could hang or leak).

    Raises:
        OperationFailed: naming the odd entry.
    """
    if root.is_symlink() or not root.is_dir():
        raise OperationFailed(f"{root} is not a plain directory; refusing to import from it")
    for top, dirs, files in boundedfs.walk(root):
        for name in dirs + files:
            mode = os.lstat(os.path.join(top, name)).st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise OperationFailed(
                    f"{os.path.join(top, name)} is not a regular file or directory; "
                    "refusing to import from this run gitdir")


def _raw_id(type_name: bytes, raw: bytes) -> str:
    return hashlib.sha1(b"%s %d\0" % (type_name, len(raw)) + raw).hexdigest()


def _inflate_bounded(fd: int, first: bytes, limit: int, what: str) -> tuple[bytes, bool]:
    """Inflate the zlib stream read from ``fd`` (after ``first``), at most ``limit`` bytes.

    Returns:
        (the bytes, True when the stream ended within ``limit``).
    """
    inflater = zlib.decompressobj()
    out = bytearray()
    data = first
    while True:
        if not data:
            data = os.read(fd, 1 << 16)
            if not data:
                return bytes(out), inflater.eof
        try:
            out += inflater.decompress(data, limit - len(out) + 1)
        except zlib.error as exc:
            raise OperationFailed(f"{what} is corrupt ({exc})") from None
        if len(out) > limit:
            return bytes(out[:limit]), False
        if inflater.eof:
            return bytes(out), True
        data = inflater.unconsumed_tail


def _read_loose(objects_dir: Path, sha: str) -> tuple[int, bytes] | None:
    """A loose object's (type number, content), inflated with its declared size checked
    before and while inflating; None when there is no such loose object.

    Raises:
        OperationFailed: it is not a regular file, corrupt, or larger than
            :data:`~git_iterare.limits.MAX_OBJECT_BYTES`.
    """
    path = objects_dir / sha[:2] / sha[2:]
    what = f"object {sha} in the run gitdir"
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise OperationFailed(f"cannot read {what}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OperationFailed(f"{what} is not a regular file; refusing to import")
        head, _ = _inflate_bounded(fd, b"", 32, what)  # "<type> <size>\0": at most 32
        match = re.match(rb"^(commit|tree|blob|tag) (\d{1,20})\0", head)
        if not match:
            raise OperationFailed(f"{what} has no valid header; refusing to import")
        size = int(match[2])
        if size > lim.MAX_OBJECT_BYTES:
            raise OperationFailed(f"{what} is {size} bytes, more than the limit of "
                                  f"{lim.MAX_OBJECT_BYTES} (MAX_OBJECT_BYTES)")
        # Inflate again from the start, now bounded by the declared size.
        os.lseek(fd, 0, os.SEEK_SET)
        full, ended = _inflate_bounded(fd, b"", match.end() + size, what)
        if not ended or len(full) != match.end() + size:
            raise OperationFailed(f"{what} does not match its declared size; refusing "
                                  "to import")
        return _TYPE_NAMES[match[1]], full[match.end():]
    finally:
        os.close(fd)


def _pack_entry_size(pack: Path, offset: int, what: str) -> tuple[int, int | None, bytes | None]:
    """The size an entry of ``pack`` declares at ``offset`` (for a delta: its result's).

    Returns:
        (size, base offset of an offset delta or None, base id of a ref delta or None).
    """
    with open(pack, "rb") as f:
        f.seek(offset)
        header = f.read(64)
        if not header:
            raise OperationFailed(f"{what}: pack entry beyond the end of {pack.name}")
        byte = header[0]
        kind, size, shift, pos = (byte >> 4) & 7, byte & 15, 4, 1
        while byte & 0x80:
            if pos >= len(header):
                raise OperationFailed(f"{what}: bad pack entry header in {pack.name}")
            byte = header[pos]
            size |= (byte & 0x7F) << shift
            shift, pos = shift + 7, pos + 1
        if kind not in (_OFS_DELTA, _REF_DELTA):
            return size, None, None
        base_offset: int | None = None
        base_id: bytes | None = None
        if kind == _OFS_DELTA:
            byte = header[pos]
            rel, pos = byte & 0x7F, pos + 1
            while byte & 0x80:
                if pos >= len(header):
                    raise OperationFailed(f"{what}: bad delta offset in {pack.name}")
                byte = header[pos]
                rel, pos = ((rel + 1) << 7) | (byte & 0x7F), pos + 1
            base_offset = offset - rel
        else:
            base_id, pos = header[pos:pos + 20], pos + 20
        f.seek(offset + pos)
        delta, _ = _inflate_bounded(f.fileno(), b"", 24, what)
    # The delta starts with two sizes (7 bits a byte): its base's, then its result's.
    sizes, value, shift = [], 0, 0
    for byte in delta:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            sizes.append(value)
            value, shift = 0, 0
            if len(sizes) == 2:
                return sizes[1], base_offset, base_id
    raise OperationFailed(f"{what}: bad delta header in {pack.name}")


def _check_pack_sizes(objects_dir: Path, sha: str) -> None:
    """Check the sizes a pack entry for ``sha`` declares (and those along its delta chain)
    before dulwich inflates it.

    Raises:
        OperationFailed: a declared size is over :data:`~git_iterare.limits.MAX_OBJECT_BYTES`,
            the delta chain is longer than :data:`~git_iterare.limits.MAX_DELTA_CHAIN`, or
            an entry is malformed.
    """
    from dulwich.object_format import SHA1
    from dulwich.objects import RawObjectID
    from dulwich.pack import load_pack_index

    what = f"object {sha} in the run gitdir"
    pack_dir = objects_dir / "pack"
    if not pack_dir.is_dir():
        return
    indexes = sorted(pack_dir.glob("pack-*.idx"))
    for idx_path in indexes:
        index = load_pack_index(str(idx_path), SHA1)
        try:
            try:
                offset: int | None = index.object_offset(RawObjectID(bytes.fromhex(sha)))
            except KeyError:
                continue
            pack = idx_path.with_suffix(".pack")
            for _ in range(lim.MAX_DELTA_CHAIN + 1):
                assert offset is not None
                size, base_offset, base_id = _pack_entry_size(pack, offset, what)
                if size > lim.MAX_OBJECT_BYTES:
                    raise OperationFailed(f"{what} is {size} bytes, more than the limit of "
                                          f"{lim.MAX_OBJECT_BYTES} (MAX_OBJECT_BYTES)")
                if base_offset is None and base_id is None:
                    return
                if base_id is not None:
                    try:
                        base_offset = index.object_offset(RawObjectID(base_id))
                    except KeyError:
                        raise OperationFailed(f"{what} is a delta on an object outside its "
                                              "pack; refusing to import") from None
                offset = base_offset
            raise OperationFailed(f"{what} has a delta chain longer than "
                                  f"{lim.MAX_DELTA_CHAIN} (MAX_DELTA_CHAIN)")
        finally:
            index.close()


def copy_objects(gitdir: Path, head: str, common_dir: Path,
                 given: Callable[[str, int], bool] | None = None) -> int:
    """Copy the objects reachable from ``head`` that ``common_dir`` lacks from the run gitdir.

    Everything is bounded (see :mod:`git_iterare.limits`): each object's declared size is
    checked before it is inflated, and inflating stops at it; the number of objects and
    commits, their total size, tree sizes and depth. Objects are written to the main
    repository in batches, so memory holds at most one batch.

    An object the run gitdir lacks but the main repository has must be one the run was
    given (``given``): else an agent that knows the id of a commit or blob it was not given
    (a private branch's, a stash's) makes it part of the run's history, and so of the
    user's once merged, and of the next run's view and of what ``git push`` sends.

    Args:
        gitdir: the run gitdir (its ``objects`` dir is read; alternates ignored).
        head: hex commit id.
        common_dir: the main repository's common dir (a pack is written to its objects).
        given: whether the run's agent was given an object (hex id, type number), asked
            of each one the run gitdir lacks and the main repository has; None: any.

    Returns:
        Number of objects copied.

    Raises:
        OperationFailed: an object is missing, corrupt, of the wrong type, over a limit,
            or one the run was not given.
    """
    from dulwich.object_store import DiskObjectStore
    from dulwich.objects import Blob, Commit, ObjectID, ShaFile, Tree

    objects_dir = gitdir / "objects"
    _check_plain_tree(objects_dir)
    own = _own_object_store(objects_dir)
    main = DiskObjectStore(str(common_dir / "objects"))
    wanted = {Commit.type_num: Commit, Tree.type_num: Tree, Blob.type_num: Blob}
    # (id, expected type, tree depth: the root tree is 0)
    todo: list[tuple[str, int, int]] = [(head, Commit.type_num, 0)]
    seen: set[str] = set()
    batch: list[ShaFile] = []
    batch_bytes = total_bytes = copied = commits = 0
    while todo:
        sha, want, depth = todo.pop()
        if sha in seen:
            continue
        if ObjectID(sha.encode()) in main:
            if not (given is None or given(sha, want) or _holds(own, sha)):
                raise OperationFailed(f"object {sha} is neither in the run gitdir nor in "
                                      "what the run was given; refusing to import")
            continue
        seen.add(sha)
        if copied >= lim.MAX_IMPORT_OBJECTS:
            raise OperationFailed(f"the run gitdir holds more than {lim.MAX_IMPORT_OBJECTS} "
                                  "new objects (MAX_IMPORT_OBJECTS); refusing to import")
        try:
            loose = _read_loose(objects_dir, sha)
            if loose is None:
                _check_pack_sizes(objects_dir, sha)
                loose = own.get_raw(ObjectID(sha.encode()))
            type_num, raw = loose
        except KeyError:
            raise OperationFailed(f"object {sha} is missing from the run gitdir") from None
        except OperationFailed:
            raise
        except Exception as exc:  # a corrupt pack or loose object: dulwich raises various
            raise OperationFailed(f"cannot read object {sha} from the run gitdir: {exc}"
                                  ) from exc
        cls = wanted.get(type_num)
        if cls is None or type_num != want or _raw_id(cls.type_name, raw) != sha:
            raise OperationFailed(f"object {sha} in the run gitdir is corrupt or of the "
                                  "wrong type; refusing to import")
        total_bytes += len(raw)
        if total_bytes > lim.MAX_IMPORT_BYTES:
            raise OperationFailed(f"the run's new objects exceed {lim.MAX_IMPORT_BYTES} bytes "
                                  "(MAX_IMPORT_BYTES); refusing to import")
        try:
            obj = ShaFile.from_raw_string(type_num, raw, sha=ObjectID(sha.encode()))
            if isinstance(obj, Commit):
                commits += 1
                if commits > lim.MAX_IMPORT_COMMITS:
                    raise OperationFailed(f"the run gitdir holds more than "
                                          f"{lim.MAX_IMPORT_COMMITS} new commits "
                                          "(MAX_IMPORT_COMMITS); refusing to import")
                todo.append((obj.tree.decode(), Tree.type_num, 0))
                todo.extend((p.decode(), Commit.type_num, 0) for p in obj.parents)
            elif isinstance(obj, Tree):
                if depth > lim.MAX_TREE_DEPTH:
                    raise OperationFailed(f"a tree in the run gitdir is nested deeper than "
                                          f"{lim.MAX_TREE_DEPTH} (MAX_TREE_DEPTH); refusing "
                                          "to import")
                if len(obj) > lim.MAX_TREE_ENTRIES:
                    raise OperationFailed(f"tree {sha} in the run gitdir has more than "
                                          f"{lim.MAX_TREE_ENTRIES} entries "
                                          "(MAX_TREE_ENTRIES); refusing to import")
                for entry in obj.iteritems():
                    if stat.S_ISDIR(entry.mode):
                        todo.append((entry.sha.decode(), Tree.type_num, depth + 1))
                    elif stat.S_ISREG(entry.mode) or stat.S_ISLNK(entry.mode):
                        todo.append((entry.sha.decode(), Blob.type_num, depth + 1))
                    # gitlinks (submodule commits) live in other repositories
        except OperationFailed:
            raise
        except Exception as exc:
            raise OperationFailed(f"object {sha} in the run gitdir does not parse: {exc}"
                                  ) from exc
        batch.append(obj)
        copied += 1
        batch_bytes += len(raw)
        if batch_bytes >= lim.IMPORT_BATCH_BYTES:
            main.add_objects([(o, None) for o in batch])
            batch, batch_bytes = [], 0
    if batch:
        main.add_objects([(o, None) for o in batch])
    return copied


