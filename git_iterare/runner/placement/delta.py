"""A remote run's worktree back from its engine as its change, not as the whole tree.

On the engine a porter from git-iterare's own image (the agent's uid, no capabilities,
no network; the run's volumes and the object cache read-only) lists what differs between
the worktree and the run's base: git's own comparison (``read-tree`` of the base into a
fresh index, ``update-index --refresh``, ``diff-files``, and ``ls-files --others
--exclude-standard`` for new files; the files of initialized submodules against their
commits'), run with a git directory of its own, so that
nothing of the run's (its config: filters, fsmonitor, hooks) is run. It copies the
changed and new paths into its own file system; the host fetches that copy and the list
of deleted paths, checks the base out into the run's host worktree
(:func:`~git_iterare.runner.workspace.fill_worktree`: what a local run starts from) and
applies the change there (:func:`apply`). Files the agent's ``.gitignore`` ignores stay on
the engine: they are never committed.

Nothing the porter says is trusted: what it copied is unpacked as any archive of the
engine's (:func:`~.tarball.extract`), and the paths it names are applied without following
a symlink. A porter the agent fooled (its run objects are the agent's) can only leave the
agent's own work out, which the agent could do anyway.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import boundedfs
from git_iterare.runner.placement.tarball import Counted, extract, members
from git_iterare.sandbox.spec import CACHE_PATH, GITDIR_PATH, WORK_PATH

if TYPE_CHECKING:
    from git_iterare.git.checkout import Entry
    from git_iterare.sandbox.volumes import Porter

#: Where the porter puts the change, in its own file system.
OUT = "/tmp/iterare-delta"
#: Where :func:`put_converted` puts the index entries of the files the host converted.
CONVERTED = "/tmp/iterare-converted"

#: The porter's program (POSIX sh and GNU find; ``$1``: the base commit, ``$2``: the
#: largest file sent, in bytes: larger ones are only listed with their sizes, in ``big``).
#: ``set -e``: it writes ``done`` only when every step worked (a file the agent made
#: unreadable stops it).
SCRIPT = f"""set -eu
out={OUT}
rm -rf "$out"; mkdir -p "$out/files"
g=$(mktemp -d)
git init -q "$g/repo"
export GIT_DIR="$g/repo/.git" GIT_INDEX_FILE="$g/index" GIT_WORK_TREE={WORK_PATH} \\
    GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_OPTIONAL_LOCKS=0
echo {GITDIR_PATH}/objects > "$GIT_DIR/objects/info/alternates"
git read-tree "$1"
max=$2
shift 2
cd {WORK_PATH}
while [ $# -ge 2 ]; do  # an initialized submodule's files, against its commit's
    git update-index -q --force-remove -- "$2"
    git read-tree --prefix="$2/" "$1"
    shift 2
done
# The files the host's filters convert: against the bytes the engine was sent.
[ ! -f {CONVERTED} ] || git update-index -z --index-info < {CONVERTED}
git update-index -q --refresh --ignore-submodules >/dev/null 2>&1 || :
git diff-files -z --name-only --ignore-submodules --diff-filter=D > "$out/deleted"
{{ git diff-files -z --name-only --ignore-submodules --diff-filter=d
   git ls-files -z --others --exclude-standard --directory --no-empty-directory
}} > "$out/changed"
xargs -0 -r cp -P -R --parents --preserve=mode -t "$out/files" -- < "$out/changed"
cd "$out/files"
find . -type f -size +"$max"c -printf '%s %P\\0' > "$out/big"
find . -type f -size +"$max"c -delete
: > "$out/done"
"""

#: Most bytes of each list the porter writes (paths deleted, changed, too large to send)
#: read back; a longer one: the whole tree is fetched instead.
MAX_LIST_BYTES = 64 << 20

#: Seconds the porter may take (it reads the whole worktree once, on the engine).
WAIT_SECONDS = 1800.0


class NoChange(Exception):
    """The change could not be had from the engine (the porter failed); the caller
    fetches the whole worktree instead."""


@dataclass
class Change:
    """What :func:`collect` brought back: the ``changed`` and new paths (how many the
    engine named) unpacked into ``staged`` (a folder of the user's), the deleted ones,
    notes for the user, the files left out for their size (``(path, size)``), and the
    bytes read from the engine."""

    staged: Path
    changed: int = 0
    deleted: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    left_out: list[tuple[str, int]] = field(default_factory=list)
    fetched_bytes: int = 0


def porter_volumes(work: str, git: str, cache: str) -> dict[str, tuple[str, bool]]:
    """The porter's mounts (volume name -> (path, read-only)): as the agent's container
    has them, every one read-only."""
    return {work: (WORK_PATH, True), git: (GITDIR_PATH, True), cache: (CACHE_PATH, True)}


def command(base: str, max_file: int, submodules: Sequence[tuple[str, str]] = ()
            ) -> list[str]:
    """The porter's command: :data:`SCRIPT` for the run's ``base`` commit (hex), sending
    no regular file larger than ``max_file`` bytes; the files of the ``submodules``
    checked out there (``(commit, path)``) are compared with their commits' (what
    the host's checkout of the base writes there)."""
    return ["sh", "-c", SCRIPT, "delta", base, str(max_file),
            *(arg for sub in submodules for arg in sub)]


def put_converted(porter: Porter, converted: Sequence[Entry]) -> None:
    """Give ``porter`` (not started) the files the host's filters convert, as index
    entries of the bytes the engine was sent (their ``raw``), so the ones the agent left
    as they are count as unchanged and are not fetched.

    Raises:
        OperationFailed: the engine refused.
    """
    import io
    import tarfile

    from git_iterare.runner.placement.ship import add_file

    if not converted:
        return
    data = b"".join(f"{e.mode} {e.raw}\t".encode() + os.fsencode(e.path) + b"\0"
                    for e in converted)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add_file(tar, CONVERTED.rsplit("/", 1)[1], data)
    porter.put(CONVERTED.rsplit("/", 1)[0], buffer.getvalue())


def collect(porter: Porter, scratch_parent: Path) -> Change:
    """Run ``porter`` (made with ``command`` :func:`command` and ``keep``), wait for it,
    and unpack what it found into a new folder below ``scratch_parent``.

    Args:
        porter: the porter, inside its ``with`` block, not started yet.
        scratch_parent: where the folder of the unpacked change is made (beside the
            worktree, so it moves in by rename).

    Returns:
        The change (its ``staged`` folder is the caller's to remove).

    Raises:
        NoChange: the porter failed or took too long, or its list is too long.
        FetchTooLarge: the change itself is over the fetch limits.
        OperationFailed: the engine refused or cannot be reached; a bad archive.
    """
    porter.start()
    if porter.wait(WAIT_SECONDS) != 0 or not _exists(porter, f"{OUT}/done"):
        raise NoChange("the engine could not list the run's change")
    lists = [_read(porter, f"{OUT}/{name}", MAX_LIST_BYTES)
             for name in ("deleted", "changed", "big")]
    if None in lists:
        raise NoChange("the run changed too many files to list")
    deleted, changed, big = (b"" if data is None else data for data in lists)
    staged = Path(tempfile.mkdtemp(prefix=".delta-", dir=scratch_parent))
    counted = Counted(porter.get(f"{OUT}/files"))
    try:
        got = extract(counted, staged, skip_top=(".git",))
    except BaseException:
        boundedfs.remove_tree(staged)
        raise
    return Change(staged=staged, changed=changed.count(b"\0"), deleted=_names(deleted),
                  notes=got.notes, left_out=_sizes(big),
                  fetched_bytes=counted.size + sum(map(len, (deleted, changed, big))))


def _names(data: bytes) -> list[str]:
    """The paths of a NUL-separated list."""
    return [os.fsdecode(p) for p in data.split(b"\0") if p]


def _sizes(data: bytes) -> list[tuple[str, int]]:
    """The ``(path, size)`` of the porter's ``big`` list (``SIZE PATH``, NUL-separated);
    entries that are not so are left out."""
    out = []
    for entry in _names(data):
        size, _, path = entry.partition(" ")
        if size.isdigit() and path and _parts(path) is not None:
            out.append((path, int(size)))
    return out


def _exists(porter: Porter, path: str) -> bool:
    return any(True for _ in members(porter.get(path)))


def _read(porter: Porter, path: str, limit: int) -> bytes | None:
    """The regular file ``path`` of the porter (b"" when missing), None when over
    ``limit`` bytes."""
    for member, tar in members(porter.get(path)):
        if not member.isfile():
            return b""
        if member.size > limit:
            return None
        handle = tar.extractfile(member)
        return handle.read() if handle else b""
    return b""


def apply(worktree: Path, change: Change) -> None:
    """Apply ``change`` to ``worktree`` (the run's host worktree, holding its base): the
    deleted paths removed, the staged ones moved in (``change.staged`` is emptied). A path
    is only ever reached through real folders of ``worktree``: a symlink or file in the
    way of a new path is replaced, and one in the way of a deleted path means there is
    nothing to delete. The top-level ``.git`` is never touched."""
    for rel in change.deleted:
        parts = _parts(rel)
        if parts is not None and _folders(worktree, parts[:-1]):
            boundedfs.remove_tree(worktree.joinpath(*parts))
    _move_in(change.staged, worktree, top=True)


def _parts(rel: str) -> tuple[str, ...] | None:
    """``rel`` (a path the porter named) as its components, None when it is not a plain
    relative path below the worktree or names its ``.git``."""
    parts = tuple(rel.rstrip("/").split("/"))
    if not parts or any(p in ("", ".", "..") for p in parts) or parts[0] == ".git":
        return None
    return parts


def _folders(root: Path, parts: Sequence[str]) -> bool:
    """Whether every prefix of ``parts`` below ``root`` is a real folder (no symlink)."""
    path = root
    for part in parts:
        path = path / part
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False
        except OSError:
            return False
    return True


def _move_in(staged: Path, target: Path, *, top: bool = False) -> None:
    """Move ``staged``'s entries into the real folder ``target``: into a real folder of
    the same name, else in its place."""
    for entry in os.scandir(staged):
        if top and entry.name == ".git":
            continue
        into = target / entry.name
        if entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISDIR(os.lstat(into).st_mode):
                    _move_in(Path(entry.path), into)
                    os.rmdir(entry.path)
                    continue
        boundedfs.remove_tree(into)
        os.rename(entry.path, into)
