"""Reading the refs of a run gitdir, which the agent wrote, without trusting them.

Refs are read as plain files (loose, then ``packed-refs``), never through git: no path
component may be a symlink, a value must be a 40-hex id (no ``ref:``), and every file is
bounded (:data:`~git_iterare.limits.MAX_REF_FILE_BYTES`,
:data:`~git_iterare.limits.MAX_PACKED_REFS_BYTES`).
"""

from __future__ import annotations

import re
from pathlib import Path

from git_iterare import boundedfs
from git_iterare import limits as lim
from git_iterare.errors import OperationFailed

HEX40 = re.compile(r"^[0-9a-f]{40}$")
#: Most branches (and stash) of a run gitdir compared with its branch before cleanup.
_MAX_RUN_REFS = 50
#: The refs of a run gitdir that hold work: branches and the stash (tags and notes only
#: name commits).
_WORK_REFS = ("refs/heads/", "refs/stash")


def work_refs(gitdir: Path, own: str) -> list[tuple[str, str]] | None:
    """The ``(name, hex id)`` of the branches and stash of a run gitdir other than its
    own branch ``own`` (loose files, then ``packed-refs`` lines), read as plain files,
    never through git; a symbolic ref is passed over (it names another). None when they
    cannot all be told: more than :data:`_MAX_RUN_REFS`, or one of them, or
    ``packed-refs``, cannot be read (a symlink, too large, not a regular file)."""
    found: dict[str, str] = {}
    try:
        for prefix in _WORK_REFS:
            for top, _, files in boundedfs.walk(gitdir / prefix.rstrip("/")):
                for name in files:
                    path = Path(top) / name
                    value = boundedfs.read_regular(path, lim.MAX_REF_FILE_BYTES).decode(
                        "ascii", "replace").strip()
                    if HEX40.fullmatch(value):
                        found.setdefault(path.relative_to(gitdir).as_posix(), value)
            if (gitdir / prefix).is_file():  # refs/stash itself
                value = boundedfs.read_regular(gitdir / prefix, lim.MAX_REF_FILE_BYTES
                                               ).decode("ascii", "replace").strip()
                if HEX40.fullmatch(value):
                    found.setdefault(prefix, value)
        packed = _packed_refs(gitdir)
    except (OSError, OperationFailed):
        return None
    for value, name in packed:
        if HEX40.fullmatch(value) and name.startswith(_WORK_REFS):
            found.setdefault(name, value)
    found.pop(own, None)
    return list(found.items()) if len(found) <= _MAX_RUN_REFS else None


def _packed_refs(gitdir: Path) -> list[tuple[str, str]]:
    """``(id, name)`` of each line of a run gitdir's ``packed-refs`` (none without one),
    as written, unchecked.

    Raises:
        OperationFailed: it is a symlink, not a regular file, or larger than
            :data:`~git_iterare.limits.MAX_PACKED_REFS_BYTES`.
    """
    try:
        data = boundedfs.read_regular(gitdir / "packed-refs", lim.MAX_PACKED_REFS_BYTES,
                                      limit_name="MAX_PACKED_REFS_BYTES")
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [(sha, name) for sha, _, name in (
        line.partition(" ") for line in data.decode("utf-8", "replace").splitlines())]


def read_run_ref(gitdir: Path, ref: str) -> str | None:
    """Read ``ref`` from a run gitdir without following anything the agent could plant.

    Looks at the loose ref file, then ``packed-refs``. Every path component must be a
    plain directory/file (no symlinks), and the value a 40-hex id (no ``ref:``).

    Args:
        gitdir: the run gitdir.
        ref: full ref name, ``refs/heads/iterare/<id>``.

    Returns:
        The hex id, or None when the ref does not exist.

    Raises:
        OperationFailed: the ref is a symlink, symbolic, not a hex id, not a regular file,
            or larger than :data:`~git_iterare.limits.MAX_REF_FILE_BYTES`
            (``packed-refs``: :data:`~git_iterare.limits.MAX_PACKED_REFS_BYTES`).
    """
    path = gitdir
    for part in ref.split("/"):
        path = path / part
        if path.is_symlink():
            raise OperationFailed(f"{path} is a symlink; refusing to read the run's ref")
    try:
        value = boundedfs.read_regular(path, lim.MAX_REF_FILE_BYTES,
                                       limit_name="MAX_REF_FILE_BYTES").decode(
            "utf-8", "replace").strip()
    except (FileNotFoundError, NotADirectoryError):
        pass
    else:
        if not HEX40.fullmatch(value):
            raise OperationFailed(f"{path} does not hold a commit id (got {value[:60]!r})")
        return value
    for sha, name in _packed_refs(gitdir):
        if name == ref:
            if not HEX40.fullmatch(sha):
                raise OperationFailed(f"{gitdir / 'packed-refs'}: bad id for {ref}")
            return sha
    return None


