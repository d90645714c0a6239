"""The host's object cache of a repository: what a local run's sandbox sees of its objects.

A run's agent gets the objects of its base's history and nothing else of the user's
object store: not their stashes (live or dropped), dangling objects, commits only a
reflog holds, other branches or tags. Its run gitdir's alternates name ``/git/objects``,
where a *view* of this cache is mounted read-only: a folder of hard links to the packs
that hold the base's history (:func:`give`). Packs are only ever added, and a view's
links keep their packs whatever happens to the cache afterwards.

Layout, in ``<common dir>/iterare/object-cache/`` (mode 0700, the user's, never mounted):

* ``packs/pack-<hash>.pack`` and ``.idx`` (mode 0444): each holds the objects reachable
  from one commit (its *tip*) and from none of the tips before it that are its
  ancestors (:func:`~git_iterare.runner.placement.packs.pack_reachable`);
* ``tips/<commit>``: the names of the packs that together hold that commit's complete
  history (its *chain*), one a line, written once they are all in ``packs/``; its mtime
  says when a run last used it;
* ``lock``: held (``flock``) while the cache is read or changed, so that concurrent runs
  never see a pack half-written and the second of two runs from one base packs nothing.

A base the cache has no tip for is packed against the tips that are its ancestors, so a
run costs in proportion to what changed since one before it; its first-parent ancestors
at depths 15, 31, 63, ... not cached yet become tips too, so that a later run from a
branch that forked off that history finds most of it there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from git_iterare import marks
from git_iterare.errors import OperationFailed
from git_iterare.git.repo import Repo, rev_list
from git_iterare.runner.placement.packs import Pack, pack_reachable
from git_iterare.runs import extra

#: Most tips kept (the most recently used); packs no kept tip needs are removed.
MAX_TIPS = 256
#: Most packs in a view: a base whose ancestors' chains hold more is packed afresh.
MAX_CHAIN = 64
#: First-parent depths of the first layer tip (2**k - 1 from here on).
FIRST_LAYER = 4

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_PACK = re.compile(r"^pack-[0-9a-f]{40,64}$")


@dataclass(frozen=True)
class Cached:
    """What :func:`give` did for a run.

    Attributes:
        pack_bytes: bytes of the packs it added to the cache (packs and indexes); 0 when
            the cache held the base's history already.
        objects: objects in those packs.
        packs: packs in the run's view.
    """

    pack_bytes: int
    objects: int
    packs: int

    def to_json(self) -> extra.Cached:
        """As the record keeps it (``extra.cached``)."""
        return {"pack_bytes": self.pack_bytes, "objects": self.objects, "packs": self.packs}


def cache_dir(repo: Repo) -> Path:
    """``<common dir>/iterare/object-cache``."""
    return repo.common_dir / "iterare" / "object-cache"


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the cache's lock, its folders made; a lock taken on a cache that
    :func:`remove` removed meanwhile is let go and taken again on a new one."""
    while True:
        for folder in (root, root / "packs", root / "tips"):
            folder.mkdir(parents=True, exist_ok=True)
        root.chmod(0o700)
        fd = marks.hold(root / "lock")
        try:
            same = os.fstat(fd).st_ino == os.stat(root / "lock").st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)


def give(repo: Repo, base: str, view: Path) -> Cached:
    """Put the complete history of ``base`` into the cache (what it lacks), then fill
    ``view`` with hard links to the packs that hold it and nothing else.

    Args:
        repo: the user's repository.
        base: hex id of the run's base commit.
        view: an empty folder, on the cache's filesystem (else its packs are copied);
            it gets ``pack/`` (modes 0755, packs 0444), what the run's sandbox mounts.

    Returns:
        What was added, and the view's size in packs.

    Raises:
        ExternalError: git failed.
        OperationFailed: the cache or the view cannot be written (a full disk).
    """
    root = cache_dir(repo)
    try:
        with _locked(root):
            chain = _tip(root, base)  # the usual case: one file read, not every tip's
            tips: dict[str, list[str]] = {}
            added = []
            if chain is None:
                tips = _tips(root)
                added = _add(repo, root, base, tips)
                chain = tips[base]
            os.utime(root / "tips" / base)  # used now: kept longest
            _link(root, chain, view)
            if added:
                _prune(root, tips)
    except OSError as exc:
        raise OperationFailed(f"cannot give the run the objects of its base: "
                              f"{exc.filename or root}: {exc.strerror or exc}",
                              hint="make room on that disk, or `git iterare cleanup --cache`"
                              ) from None
    return Cached(pack_bytes=sum(size for size, _ in added),
                  objects=sum(count for _, count in added), packs=len(chain))


def remove(repo: Repo) -> bool:
    """``git iterare cleanup --cache``: remove the cache (once no run is filling it);
    whether there was one. Live runs keep their views (hard links); the next run packs
    its base's history again.

    Raises:
        OperationFailed: it cannot be removed.
    """
    root = cache_dir(repo)
    if not root.is_dir():
        return False
    try:
        with _locked(root):
            shutil.rmtree(root)
    except OSError as exc:
        raise OperationFailed(f"cannot remove {exc.filename or root}: "
                              f"{exc.strerror or exc}") from None
    return True


def _tip(root: Path, commit: str) -> list[str] | None:
    """The chain of tip ``commit``, or None when it is no tip: its file is missing or odd,
    or names a pack that is not complete in ``packs/``."""
    path, packs = root / "tips" / commit, root / "packs"
    if not (_HEX40.fullmatch(commit) and path.is_file() and not path.is_symlink()):
        return None
    with open(path, encoding="ascii", errors="replace") as handle:
        chain = handle.read(1 << 16).split()
    if chain and all(_PACK.fullmatch(name) and (packs / f"{name}.idx").is_file()
                     and (packs / f"{name}.pack").is_file() for name in chain):
        return chain
    return None


def _tips(root: Path) -> dict[str, list[str]]:
    """The cache's tips and their chains (:func:`_tip`; the odd ones left out, and
    :func:`_prune` drops them)."""
    return {entry.name: chain for entry in os.scandir(root / "tips")
            if (chain := _tip(root, entry.name)) is not None}


def _chain(packs: Iterable[str], tips: dict[str, list[str]], haves: Iterable[str]
           ) -> list[str]:
    """``packs`` then the chains of ``haves``, each pack once."""
    return list(dict.fromkeys([*packs, *(n for h in sorted(haves) for n in tips[h])]))


def _add(repo: Repo, root: Path, base: str, tips: dict[str, list[str]]
         ) -> list[tuple[int, int]]:
    """Make ``base`` a tip (and its layer points: see the module's docstring), packing
    what the tips that are its ancestors do not hold; update ``tips``. Return the packs
    added, as (bytes, objects)."""
    known = set(rev_list(repo, base)) & tips.keys() if tips else set()
    if len(_chain((), tips, known)) >= MAX_CHAIN:
        known = set()  # one view of many small packs: this base's history afresh
    line = rev_list(repo, "--first-parent", base, "--not", *known)
    depths = [2 ** k - 1 for k in range(FIRST_LAYER, 64) if 2 ** k - 1 < len(line)]
    points = [line[d] for d in reversed(depths)] + [base]
    below: set[str] = set()  # known tips that are ancestors of the point being packed
    made: list[str] = []
    added: list[tuple[int, int]] = []
    scratch = Path(tempfile.mkdtemp(prefix="tmp-", dir=root))
    try:
        for point in points:
            if known - below:
                # The layer points made so far and the tips found are its ancestors (the
                # first parent's line); which other known tips are, this walk tells.
                below |= known & set(rev_list(repo, point, "--not", *made, *below))
            haves = below | set(made)
            pack = pack_reachable(repo, point, sorted(haves), scratch)
            added.append((pack.size, pack.objects))
            _install(root, pack)
            tips[point] = _chain([pack.name], tips, haves)
            _write_tip(root, point, tips[point])
            made.append(point)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return added


def _install(root: Path, pack: Pack) -> None:
    """Move ``pack`` into ``packs/``, read-only: the pack before its index, as git finds
    packs by their index. A pack of the same name there already is the same pack."""
    packs = root / "packs"
    if (packs / pack.index.name).exists():
        return
    for path in (pack.pack, pack.index):
        path.chmod(0o444)
        os.replace(path, packs / path.name)


def _write_tip(root: Path, commit: str, chain: list[str]) -> None:
    """Write ``tips/<commit>`` whole or not at all."""
    tmp = root / "tips" / f".{commit}.tmp"
    tmp.write_text("".join(f"{name}\n" for name in chain), encoding="ascii")
    os.replace(tmp, root / "tips" / commit)


def _link(root: Path, chain: list[str], view: Path) -> None:
    """Fill ``view/pack`` with the packs of ``chain``: hard links, or copies when the
    view is on another filesystem."""
    folder = view / "pack"
    folder.mkdir(exist_ok=True)
    for path in (view, folder):
        path.chmod(0o755)
    for name in chain:
        for suffix in (".pack", ".idx"):  # the index last, as in the cache
            source, target = root / "packs" / f"{name}{suffix}", folder / f"{name}{suffix}"
            try:
                os.link(source, target)
            except FileExistsError:
                if not os.path.samefile(source, target):
                    raise
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM):
                    raise
                shutil.copyfile(source, target)
                target.chmod(0o444)


def _prune(root: Path, tips: dict[str, list[str]]) -> None:
    """Keep the :data:`MAX_TIPS` most recently used of ``tips`` (the cache's, as
    :func:`_tips` read them and :func:`_add` updated them, under the lock) and the packs
    they name; remove the rest (and what a process that died while packing left)."""
    by_use = sorted(tips, key=lambda t: os.stat(root / "tips" / t).st_mtime, reverse=True)
    keep = set(by_use[:MAX_TIPS])
    for entry in os.scandir(root / "tips"):
        if entry.name not in keep:
            os.unlink(entry.path)
    needed = {name for tip in keep for name in tips[tip]}
    for entry in os.scandir(root / "packs"):
        if entry.name.rsplit(".", 1)[0] not in needed:
            os.unlink(entry.path)
    for entry in os.scandir(root):
        if entry.name.startswith("tmp-") and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
