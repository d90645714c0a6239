"""Packs of a base's history that an object cache lacks, for the caches of both placements.

A cache holds the complete history of some commits (its *haves*); a run from ``base``
adds one pack of the objects reachable from ``base`` and from none of those
(``git pack-objects --revs``, gitrevisions(7)), written from the user's repository with
git's own delta and compression choices. The remote cache sends it to the engine
(:mod:`.ship`), the host's cache keeps it (:mod:`.objectcache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from git_iterare.git.repo import Repo, common_git


@dataclass(frozen=True)
class Pack:
    """A pack :func:`pack_reachable` wrote.

    Attributes:
        pack: the ``pack-<hash>.pack`` file.
        index: its ``.idx`` (version 2, gitformat-pack(5)).
        objects: how many objects it holds.
    """

    pack: Path
    index: Path
    objects: int

    @property
    def name(self) -> str:
        """``pack-<hash>``, the name both files share."""
        return self.pack.stem

    @property
    def size(self) -> int:
        """Bytes of the pack and its index."""
        return self.pack.stat().st_size + self.index.stat().st_size


def local_commits(repo: Repo, ids: Sequence[str]) -> list[str]:
    """Those of ``ids`` (hex ids) that are commits in this repository, in their order."""
    if not ids:
        return []
    out = common_git(repo, "cat-file", "--batch-check=%(objectname) %(objecttype)",
                     input="".join(i + "\n" for i in ids)).stdout
    return [line.split()[0] for line in out.splitlines()
            if len(line.split()) == 2 and line.split()[1] == "commit"]


def index_count(index: Path) -> int:
    """The number of objects a version 2 pack index lists (its fan-out table's last
    entry, gitformat-pack(5)); 0 for another version."""
    with index.open("rb") as handle:
        head = handle.read(8 + 256 * 4)
    if head[:4] == b"\xfftOc" and len(head) == 1032:
        return int.from_bytes(head[-4:], "big")
    return 0


def pack_reachable(repo: Repo, base: str, haves: Sequence[str], folder: Path) -> Pack:
    """Write one pack (and its index) of the objects reachable from ``base`` and from none
    of ``haves`` into ``folder``.

    Args:
        repo: the repository whose objects are packed.
        base: hex id of a commit.
        haves: hex ids of commits of this repository whose history the cache holds.
        folder: an existing folder, best on the filesystem the pack will live on.

    Returns:
        The pack written (no tags, no reflogs: only what the commits reach).

    Raises:
        ExternalError: git failed (a have that is no commit here, for one).
    """
    text = base + "\n" + "".join(f"^{h}\n" for h in haves)
    # One pack whatever the user's pack.packSizeLimit, so its name is the one line read.
    # In a partial clone, what the promisor remote still holds stays there (the view has
    # what this repository has): else the first run fetches the whole history's blobs.
    name = common_git(repo, "-c", "pack.packSizeLimit=0", "pack-objects", "--revs", "-q",
                      "--missing=allow-promisor", str(folder / "pack"),
                      input=text).stdout.strip()
    index = folder / f"pack-{name}.idx"
    return Pack(folder / f"pack-{name}.pack", index, index_count(index))
