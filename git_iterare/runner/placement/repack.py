"""Repacking a repository's object cache on a remote engine, so it stays a few packs.

Every run from a base the cache lacks adds one pack to it (:mod:`.ship`), and git looks an
object up in one pack after another: a cache of hundreds of packs slows every checkout,
``git status`` and finish there. As ``git gc --auto`` does (``gc.autoPackLimit``,
git-gc(1)), once the cache holds more packs than :func:`pack_limit`, the run being
shipped merges them into one (``git repack -a -d``, every object kept: the cache has no
refs) in a porter from git-iterare's own image, before its own checkout starts.

It never runs while another run reads the cache. Every container that reads it (a run's
sandbox and porters, a spare's maker) is made by a process of this repository on this
machine (the cache's key lives in its common dir), and those processes hold the
repository's *cache lock* (``<common dir>/iterare/engine-cache.lock``) shared from
before they make such a container until it reads, or until it is done (:func:`reading`).
The repack takes that lock exclusively without waiting (another run is starting: the
next run repacks), and goes ahead only when no container but the shipping run's own
mounts the cache on the engine (:func:`alone_on`).

The cache's ``have/.repacked`` holds how many commits ``have/`` listed when it was last
repacked, so the client counts the packs from the listing it reads anyway: one pack per
commit listed since, beside the one the repack made.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING

from git_iterare.git.repo import Repo, common_git
from git_iterare.sandbox.spec import CACHE_PATH, LABEL_RUN

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Packs the cache may hold before a run repacks it, unless the user's
#: ``gc.autoPackLimit`` says otherwise (git's default too).
PACK_LIMIT = 50
#: The file of ``have/`` that says how many commits it listed at the last repack.
REPACKED = ".repacked"
#: Seconds a repack may take; past them it is stopped (the cache stays as it was).
REPACK_SECONDS = 1800

#: The repacking porter's script (POSIX sh, root, in the cache): the packs and loose
#: objects into one pack, every object kept, then the count of ``have/`` noted.
SCRIPT = f"""set -e
cd {CACHE_PATH}
n=$(find have -maxdepth 1 -type f | grep -c '/[0-9a-f]\\{{40\\}}$' || true)
git init -q --bare /tmp/repack
GIT_OBJECT_DIRECTORY={CACHE_PATH}/objects git --git-dir=/tmp/repack \\
    -c pack.packSizeLimit=0 -c repack.writeBitmaps=false -c gc.auto=0 \\
    repack -a -d -q --keep-unreachable
echo "$n" > have/{REPACKED}.tmp
mv have/{REPACKED}.tmp have/{REPACKED}
"""


def packs_held(haves: int, repacked: int | None) -> int:
    """The packs a cache holds whose ``have/`` lists ``haves`` commits and whose
    ``have/.repacked`` says ``repacked`` (None when it was never repacked)."""
    if repacked is None or not 0 <= repacked <= haves:
        return haves
    return 1 + haves - repacked


def pack_limit(repo: Repo) -> int:
    """The most packs the cache may hold: the user's ``gc.autoPackLimit`` (0 or less:
    never repack), else :data:`PACK_LIMIT`."""
    found = common_git(repo, "config", "--type=int", "--get", "gc.autoPackLimit",
                       check=False, text=True)
    try:
        return int(found.stdout.strip()) if found.returncode == 0 else PACK_LIMIT
    except ValueError:
        return PACK_LIMIT


def due(repo: Repo, haves: int, repacked: int | None) -> bool:
    """Whether a cache listing ``haves`` commits (``repacked`` at the last repack) holds
    more packs than :func:`pack_limit`."""
    held = packs_held(haves, repacked)
    if held <= 1:
        return False  # the usual case: no git started
    limit = pack_limit(repo)
    return 0 < limit < held


class CacheLock:
    """The repository's cache lock, held shared (:func:`reading`)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @contextlib.contextmanager
    def alone(self) -> Iterator[bool]:
        """Hold the lock exclusively while the block runs, when no other process holds
        it (never waiting); yield whether it does. It is held shared again afterwards
        (not atomically: whoever takes it exclusively meanwhile checks the engine's
        containers, which include this process's)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            got = True
        except BlockingIOError:
            got = False  # a failed conversion may have dropped the shared lock
        try:
            yield got
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_SH)


@contextlib.contextmanager
def reading(repo: Repo) -> Iterator[CacheLock]:
    """Hold the repository's cache lock shared: around making (and starting) containers
    that read its object cache on an engine, so no repack starts meanwhile.

    Raises:
        OSError: the lock file cannot be made or locked.
    """
    path = repo.common_dir / "iterare" / "engine-cache.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield CacheLock(fd)
    finally:
        os.close(fd)


def alone_on(cache: str, run_id: str, own: Collection[str] = ()) -> bool:
    """Whether no container but run ``run_id``'s (label) and those of ``own`` (ids)
    mounts the volume ``cache``.

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare.sandbox.volumes import containers_using

    return all(c.id in own or (c.labels or {}).get(LABEL_RUN) == run_id
               for c in containers_using(cache))


def repack(cache: str, image: str, labels: Mapping[str, str]) -> bool:
    """Repack the object cache in the volume ``cache`` (:data:`SCRIPT`) in a porter from
    git-iterare's own ``image`` (root's: the cache is root's; no network); wait for it.
    Call holding :meth:`CacheLock.alone`, with :func:`alone_on` true.

    Returns:
        Whether it succeeded (else the cache is as it was: git writes the new pack
        before removing the old ones).

    Raises:
        OperationFailed: the engine refused or cannot be reached.
    """
    from git_iterare.sandbox.volumes import Porter

    with Porter(image, {cache: (CACHE_PATH, False)}, labels,
                command=["/bin/sh", "-c", SCRIPT], keep=True) as porter:
        porter.start()
        return porter.wait(REPACK_SECONDS) == 0
