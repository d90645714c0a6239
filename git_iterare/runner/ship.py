"""Runs on an engine that shares no filesystem with the client (``ssh://``, ``tcp://``).

The run's branch, worktree and gitdir are made on the host as for a local run (the user's
view of the run, and what :mod:`git_iterare.importer` imports from), but the worktree stays
empty until the run ends (no checkout on the host: see
:func:`git_iterare.runner.workspace.prepare_run`); the engine gets what it needs, in volumes
(:mod:`git_iterare.sandbox.remote`), through the Engine API only, in one archive:

* **Objects** go into the repository's object cache on the engine, once: the cache lists
  the commits it holds (``have/<commit>``), and a run ships a pack of the objects
  reachable from its base and not from any of those (``git pack-objects --revs``), so a
  run's start costs in proportion to what changed since the last one. The cache is keyed
  by a random id of this repository (``<common dir>/iterare/cache-id``), so no other
  repository's runs see its objects. ``git iterare cleanup --cache`` removes it.
* **The run gitdir** (HEAD, branch, config, exclude; alternates naming the cache) and the
  ``.iterare/include`` files go into the run's volumes, the agent's. The base is checked
  out there from the cache, so the worktree's content never crosses the wire: by a
  porter from git-iterare's own image, as the agent's uid, with no capabilities and no
  network, started as soon as the files are in (:data:`PORTER_CHECKOUT`), so the
  checkout goes on while the sandbox is launched; the agent's container waits for it
  before the agent's command, and does it itself when it failed (:data:`CHECKOUT`).
* **The prompt** is a file put into the agent's container before it starts.

Results come out when the run ends (:func:`fetch_results`, by whichever command notices
first): the worktree and the run gitdir as archives (``get_archive``), unpacked into the
host's (so far empty) worktree and run gitdir by :func:`extract` (no path leaves its
folder, no link is followed, special files and set-uid bits are dropped), and then
imported and committed by the same code as a local run's. ``git iterare diff RUN`` of a
live run unpacks the worktree into a scratch folder and diffs a snapshot of it
(:func:`live_tree`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from git_iterare import boundedfs
from git_iterare.errors import OperationFailed, UserError
from git_iterare.git.repo import Repo

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

    from git_iterare.runner.workspace import RunWorkspace
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox.remote import ContainerHandle, Porter, RemoteTrees
    from git_iterare.sandbox.spec import Mount

#: While this file is in the run gitdir a porter checks the base out (:data:`PORTER_CHECKOUT`);
#: the agent's container waits for it to go (:data:`CHECKOUT`).
PENDING = "iterare-checkout"
#: The last file of the archive :func:`ship` puts: the porter, started meanwhile, begins.
GO = "iterare-checkout-go"
#: Made in the run gitdir once the base is checked out (the agent's container then skips it).
DONE = "iterare-checked-out"
#: Where the run gitdir's files wait when the run took a spare worktree over (its maker may
#: still be using the gitdir): they are moved in once the spare is ready.
NEXT = "iterare-next"
#: In a spare's gitdir: there while its maker checks out (touched every second: a file
#: older than :data:`SPARE_STALE` seconds means the maker died), then gone.
SPARE_MAKING = "iterare-spare-making"
#: In a spare's gitdir once its checkout is complete: the commit checked out.
SPARE_READY = "iterare-spare-ready"
SPARE_STALE = 10

# Without the image's system and global git config: the agent's container (whose image may
# set core.autocrlf or filters there) writes files in the same form as the porters, which
# run without them, so a spare taken over matches a fresh checkout.
_GIT = ("GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git -c core.hooksPath=/dev/null "
        "-c advice.detachedHead=false -c checkout.workers=0")

_CHECKOUT_BODY = f"""\
if [ ! -e /git/run/{DONE} ]; then
    old='' spare=''
    if [ -d /git/run/{NEXT} ]; then
        spare=1 i=0
        while [ ! -e /git/run/{SPARE_READY} ] && [ -e /git/run/{SPARE_MAKING} ] \\
                && [ $i -lt 36000 ]; do
            age=$(( $(date +%s) - $(stat -c %Y /git/run/{SPARE_MAKING} 2>/dev/null || echo 0) ))
            [ "$age" -lt {SPARE_STALE} ] || break
            sleep 0.05 2>/dev/null || sleep 1
            i=$((i + 1))
        done
        [ ! -e /git/run/{SPARE_READY} ] || old=$(cat /git/run/{SPARE_READY})
        rm -f /git/run/{SPARE_READY} /git/run/{SPARE_MAKING}
        cp -R -p /git/run/{NEXT}/. /git/run/
        rm -rf /git/run/{NEXT}
    fi
    # Files the spare holds unchanged keep the spare's form: when an attributes file
    # differs (eol, ident, working-tree-encoding, filters) all of them are written again.
    if [ -z "$old" ] \\
            || ! {_GIT} diff --quiet --no-ext-diff "$old" HEAD \\
                -- ':(glob)**/.gitattributes' 2>/dev/null \\
            || ! {_GIT} read-tree -m -u "$old" HEAD 2>/dev/null; then
        if [ -n "$spare" ]; then
            find /workspace -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {{}} +
            rm -f /git/run/index
        fi
        {_GIT} reset -q --hard HEAD \\
            || {{ echo "iterare-sandbox: error: cannot check the run's base out (is git in \\
the image?)" >&2; exit 125; }}
    fi
    if [ -d /git/run/iterare-include ]; then
        cp -R -p /git/run/iterare-include/. /workspace/ && rm -rf /git/run/iterare-include
    fi
    : > /git/run/{DONE}
fi
"""

#: Runs before the agent's command in its container on a remote engine (as the agent):
#: it waits while a porter checks the base out (:data:`PORTER_CHECKOUT`, at most 30 min),
#: then, when the checkout is not done (the porter failed), does it itself: from a spare
#: worktree when the run took one over (once its maker is done: only the files that differ
#: between the spare's commit and the base are written, ``git read-tree -m -u``), else
#: from the object cache; the ``.iterare/include`` files put aside in the gitdir are
#: copied over it.
CHECKOUT = f"""\
set -e
i=0
while [ -e /git/run/{PENDING} ] && [ $i -lt 36000 ]; do
    sleep 0.05 2>/dev/null || sleep 1
    i=$((i + 1))
done
{_CHECKOUT_BODY}exec "$@"
"""

#: Runs in the porter from git-iterare's own image, as the agent's uid, with no
#: capabilities and no network: once the run's files are all there (:data:`GO`; at most an
#: hour), the checkout of :data:`CHECKOUT`, ahead of the agent's container, while the
#: sandbox is launched; :data:`PENDING` goes when it ends.
PORTER_CHECKOUT = f"""\
set -e
trap 'rm -f /git/run/{PENDING} /git/run/{GO}' EXIT
i=0
until [ -e /git/run/{GO} ]; do
    [ $i -lt 72000 ] || exit 1
    sleep 0.05
    i=$((i + 1))
done
cd /workspace
{_CHECKOUT_BODY}"""

#: Runs in the porter that makes a spare worktree (git-iterare's own image, as the agent's
#: uid, no capabilities, no network): checks the commit in the spare gitdir's HEAD out
#: into an empty worktree (and writes its index again once no entry is racily clean),
#: touching :data:`SPARE_MAKING` every second meanwhile; on success writes
#: :data:`SPARE_READY`, then removes :data:`SPARE_MAKING`.
SPARE_CHECKOUT = f"""\
( while [ -e /git/run/{SPARE_MAKING} ]; do
      touch -c /git/run/{SPARE_MAKING} 2>/dev/null; sleep 1
  done ) &
cd /workspace || exit 1
# The index is written again a second later: entries no older than their index are
# "racily clean" (git's racy-git check, whole seconds), and the run that takes the spare
# over would hash all of their files when it writes its own.
if {_GIT} read-tree --reset -u HEAD && sleep 1 \\
        && {_GIT} update-index -q --force-write-index; then
    {_GIT} rev-parse --verify HEAD > /git/run/{SPARE_READY}.tmp \\
        && mv /git/run/{SPARE_READY}.tmp /git/run/{SPARE_READY}
fi
rm -f /git/run/{SPARE_MAKING}
"""

#: Largest archive unpacked from the engine (bytes of file content) and most entries.
MAX_FETCH_BYTES = 32 * 1024**3
MAX_FETCH_ENTRIES = 2_000_000

#: Largest file of the sidecar's output fetched (status, DNS log, report).
MAX_OUT_FILE_BYTES = 64 * 1024**2

#: Most commits named as already in the cache when packing (the most recent ones).
MAX_HAVES = 256

_KEY = re.compile(r"^[0-9a-f]{16}$")


def is_remote(record: RunRecord) -> bool:
    """Whether ``record``'s run is on an engine that shares no filesystem with this
    machine (from the engine its record names; see
    :func:`git_iterare.sandbox.remote.shares_filesystem`)."""
    engine = (record.extra or {}).get("engine")
    url = engine.get("url") if isinstance(engine, dict) else None
    return isinstance(url, str) and not url.startswith("unix://")


def check_request(repo: Repo, base: str, mounts: Iterable[Mount]) -> None:
    """Refuse what a run on a remote engine cannot do yet: mounts of host paths
    (``[mounts] volumes``, :class:`git_iterare.sandbox.Mount` values), and a base with
    initialized submodules (their objects are not shipped, so their files would be missing
    there and their deletion committed at the end).

    Raises:
        UserError: naming the first mount or submodule.
    """
    for mount in mounts:
        raise UserError(f"the mount of {mount.host_path} cannot be used: the Docker engine is "
                        "remote and sees none of this machine's files",
                        hint="drop it from [mounts] volumes, or use a local Docker engine")
    from git_iterare.git.checkout import submodules

    for sub in submodules(repo.common_dir, base):
        if sub.gitdir is not None:
            raise UserError(f"submodule {sub.path} is initialized here, and runs on a remote "
                            "Docker engine cannot have submodules yet",
                            hint="use a local Docker engine for this repository")


def cache_key(repo: Repo) -> str:
    """This repository's object cache key (16 hex digits), made on first use and kept in
    ``<common dir>/iterare/cache-id``."""
    path = repo.common_dir / "iterare" / "cache-id"
    with contextlib.suppress(OSError):
        key = path.read_text().strip()
        if _KEY.fullmatch(key):
            return key
    key = secrets.token_hex(8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"cache-id.{os.getpid()}.tmp")
    tmp.write_text(key + "\n")
    try:
        os.link(tmp, path)  # first writer wins
    except FileExistsError:
        tmp.unlink()
        return cache_key(repo)
    tmp.unlink()
    return key


def remote_trees(repo: Repo, record: RunRecord, files: Mapping[str, bytes]) -> RemoteTrees:
    """The :class:`~git_iterare.sandbox.remote.RemoteTrees` of a new run: the spare
    worktree its record says it took over (:func:`claim_spare`), else new volumes."""
    from git_iterare.sandbox.remote import RemoteTrees, cache_volume

    work, git = record_volumes(record)
    return RemoteTrees(work=work, git=git, cache=cache_volume(cache_key(repo)), files=files,
                       spare=_recorded_spare(record) is not None)


def record_volumes(record: RunRecord) -> tuple[str, str]:
    """The names of a remote run's worktree and gitdir volumes: those of the spare its
    record names, else ``iterare-<id>-work`` and ``-git``."""
    from git_iterare.sandbox.remote import run_volumes

    spare = _recorded_spare(record)
    return (spare.work, spare.git) if spare is not None else run_volumes(record.id)


def _recorded_spare(record: RunRecord) -> Spare | None:
    data = (record.extra or {}).get("spare")
    return _spare_from(data) if isinstance(data, dict) else None


def make_volumes(repo: Repo, trees: RemoteTrees, labels: Mapping[str, str]) -> None:
    """Make a new run's volumes (and the repository's object cache when it has none)
    before any container names them (the engine would make them unlabelled); a spare's
    exist already.

    Raises:
        OperationFailed: the engine refused or cannot be reached.
    """
    from git_iterare.sandbox import remote

    remote.ensure_volume(trees.cache, {remote.LABEL_VOLUME: "cache",
                                       remote.LABEL_CACHE: cache_key(repo),
                                       "dev.iterare.repo": str(repo.main_work_tree)})
    if not trees.spare:
        remote.ensure_volume(trees.work, {**labels, remote.LABEL_VOLUME: "work"})
        remote.ensure_volume(trees.git, {**labels, remote.LABEL_VOLUME: "git"})


# --- spare worktrees ---------------------------------------------------------------------
#
# Checking a large base out on the engine takes seconds, and it is the same checkout run
# after run. So after a run starts, a porter checks its base out into a *spare* pair of
# volumes (:func:`make_spare`); the repository's next run on that engine takes the pair
# over as its own (:func:`claim_spare`) and writes only the files that differ between the
# spare's commit and its base (:data:`CHECKOUT`). A spare is named in a file of the
# client's (one per engine); taking it over renames that file away, which only one
# process can do, so no two runs ever share one, and no agent ever saw its volumes before.


@dataclass(frozen=True)
class Spare:
    """A spare worktree on an engine.

    Attributes:
        work: its worktree's volume.
        git: its gitdir's volume.
        base: hex id of the commit checked out there.
    """

    work: str
    git: str
    base: str

    def to_json(self) -> dict[str, str]:
        return {"work": self.work, "git": self.git, "base": self.base}


def _spare_from(data: Mapping[str, object]) -> Spare | None:
    """The :class:`Spare` ``data`` names, when its names are a spare's volumes."""
    from git_iterare.runner.workspace import HEX40
    from git_iterare.sandbox.remote import SPARE_VOLUME

    work, git, base = (data.get(k) for k in ("work", "git", "base"))
    if not (isinstance(work, str) and isinstance(git, str) and isinstance(base, str)):
        return None
    if not (SPARE_VOLUME.fullmatch(work) and work.endswith("-work")
            and git == work[:-len("work")] + "git" and HEX40.fullmatch(base)):
        return None
    return Spare(work, git, base)


def _read_spare_file(path: Path) -> tuple[Spare | None, dict[str, object]]:
    """The spare a registry file names (None when it names none validly) and the file's
    whole content (``{}`` when unreadable or not a JSON object)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, {}
    if not isinstance(data, dict):
        return None, {}
    return _spare_from(data), data


def _spare_file(repo: Repo) -> Path:
    """The file naming this repository's spare worktree on the current engine."""
    import hashlib

    from git_iterare.sandbox.engine import current

    digest = hashlib.sha256(current().url.encode()).hexdigest()[:16]
    return repo.common_dir / "iterare" / "spares" / f"{digest}.json"


def _config_text(repo: Repo) -> str:
    """The run gitdir's ``config`` (line endings from the repository's config)."""
    from git_iterare.git import safegit
    from git_iterare.runner.workspace import RUN_GITDIR_CONFIG

    return RUN_GITDIR_CONFIG + safegit.line_ending_config(repo.common_dir)


def claim_spare(repo: Repo) -> Spare | None:
    """Take over this repository's spare worktree on the current engine, if it has one:
    it is the caller's alone from then on (record it in the run's record as ``spare``).
    Asks the engine nothing, so the spare may still be being checked out, or be gone
    (:data:`CHECKOUT` copes with both).

    Returns:
        The spare, or None when there is none, or it was checked out with other
        line-ending settings than the repository has now (its volumes are then removed).
    """
    path = _spare_file(repo)
    claimed = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.rename(path, claimed)  # only one process succeeds
    except OSError:
        return None
    try:
        spare, data = _read_spare_file(claimed)
    finally:
        claimed.unlink(missing_ok=True)
    if spare is None or not spare.work.startswith(f"iterare-spare-{cache_key(repo)}-"):
        return None
    if data.get("config") != _config_text(repo):
        drop_spare(spare)
        return None
    return spare


def make_spare(repo: Repo, base: str, image: str, agent: tuple[int, int]) -> None:
    """Start checking ``base`` out into a new spare worktree on the current engine for the
    repository's next run there, unless it has one; the checkout goes on after this
    returns (:data:`SPARE_CHECKOUT`). Call once the object cache holds ``base``.

    Args:
        repo: the repository.
        base: hex id of a commit in the object cache.
        image: git-iterare's own image on the engine.
        agent: the agent's uid and gid (the spare's files are theirs).

    Raises:
        OperationFailed: the engine refused or cannot be reached.
    """
    from git_iterare.sandbox import remote

    path = _spare_file(repo)
    if path.exists():
        return
    key = cache_key(repo)
    # Spares of processes killed while making one (kill -9) would pile up otherwise.
    drop_stray_spares(repo, key, STRAY_SPARE_AGE)
    spare = Spare(*remote.spare_volumes(key, secrets.token_hex(4)), base=base)
    labels = {remote.LABEL_SPARE: key, "dev.iterare.repo": str(repo.main_work_tree)}
    volumes = {remote.cache_volume(key): (remote.CACHE_PATH, True),
               spare.work: (remote.WORK_PATH, False), spare.git: (remote.GITDIR_PATH, False)}
    config = _config_text(repo)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        run = remote.GITDIR_PATH.strip("/")
        _add_dir(tar, run, owner=agent)
        _copy_members(tar, _gitdir_archive(repo, None, base, config), run, owner=agent)
        _add_file(tar, f"{run}/{SPARE_MAKING}", b"", owner=agent)
        _add_dir(tar, remote.WORK_PATH.strip("/"), owner=agent)
        _copy_members(tar, _worktree_archive(), remote.WORK_PATH.strip("/"), owner=agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:  # until it is registered, nothing else would ever remove it
        remote.ensure_volume(spare.work, {**labels, remote.LABEL_VOLUME: "work"})
        remote.ensure_volume(spare.git, {**labels, remote.LABEL_VOLUME: "git"})
        with remote.Porter(image, volumes, labels, user=f"{agent[0]}:{agent[1]}",
                           command=["/bin/sh", "-c", SPARE_CHECKOUT, "iterare-spare"]) as maker:
            maker.put("/", buffer.getvalue())
            maker.start()
        tmp.write_text(json.dumps({**spare.to_json(), "config": config}), encoding="utf-8")
        try:
            os.link(tmp, path)  # another run made one meanwhile: that one stays
        except FileExistsError:
            drop_spare(spare)
    except BaseException:
        drop_spare(spare)
        raise
    finally:
        tmp.unlink(missing_ok=True)


def drop_spare(spare: Spare) -> None:
    """Remove a spare's maker (when it still runs) and its volumes; errors are ignored."""
    from git_iterare.sandbox import remote

    with contextlib.suppress(Exception):
        remote.remove_volumes_and_users((spare.work, spare.git))


def wrap_command(command: list[str]) -> list[str]:
    """The agent's argv on a remote engine: :data:`CHECKOUT`, then ``command``."""
    return ["/bin/sh", "-c", CHECKOUT, "iterare-checkout", *command]


@dataclass(frozen=True)
class Shipped:
    """What :func:`ship` sent.

    Attributes:
        pack_bytes: bytes of objects sent to the cache (pack and index); 0 when the cache
            had the base already.
        objects: objects in that pack.
        file_bytes: bytes of the other files (gitdir, includes) sent.
    """

    pack_bytes: int
    objects: int
    file_bytes: int

    def to_json(self) -> dict[str, int]:
        return {"pack_bytes": self.pack_bytes, "objects": self.objects,
                "file_bytes": self.file_bytes}


def _local_commits(repo: Repo, ids: list[str]) -> list[str]:
    """Those of ``ids`` that are commits in this repository."""
    from git_iterare.git.repo import common_git

    if not ids:
        return []
    out = common_git(repo, "cat-file", "--batch-check=%(objectname) %(objecttype)",
                     input="".join(i + "\n" for i in ids)).stdout
    return [line.split()[0] for line in out.splitlines()
            if len(line.split()) == 2 and line.split()[1] == "commit"]


def _cache_haves(porter: Porter, cache: str = "/cache") -> list[str]:
    """The commits the cache (at ``cache`` in the porter) holds (names of ``have/*``),
    newest first."""
    from git_iterare.runner.workspace import HEX40

    found: list[tuple[float, str]] = []
    for member, _ in _members(porter.get(f"{cache}/have")):
        name = member.name.rsplit("/", 1)[-1]
        if member.isfile() and HEX40.fullmatch(name):
            found.append((member.mtime, name))
    return [name for _, name in sorted(found, reverse=True)]


def _pack(repo: Repo, base: str, haves: list[str], folder: Path) -> tuple[Path, Path, int]:
    """Write a pack (and its index) of the objects reachable from ``base`` and not from
    ``haves`` into ``folder``; return (pack, index, number of objects)."""
    from git_iterare.git.repo import common_git

    text = base + "\n" + "".join(f"^{h}\n" for h in haves)
    name = common_git(repo, "pack-objects", "--revs", "-q", str(folder / "pack"),
                      input=text).stdout.strip()
    pack, index = folder / f"pack-{name}.pack", folder / f"pack-{name}.idx"
    count = 0
    with index.open("rb") as handle:  # version 2 index: fan-out table's last entry
        head = handle.read(8 + 256 * 4)
        if head[:4] == b"\xfftOc" and len(head) == 1032:
            count = int.from_bytes(head[-4:], "big")
    return pack, index, count


def ship(repo: Repo, run_id: str, base: str, trees: RemoteTrees, image: str,
         labels: Mapping[str, str], agent: tuple[int, int]) -> Shipped:
    """Put what a new run needs on the engine: the objects of its base into the
    repository's cache (only those the cache lacks), the run gitdir and the
    ``.iterare/include`` files into its volumes, all in one archive; then start the
    checkout of the base there (:data:`PORTER_CHECKOUT`), which goes on while the sandbox
    is launched (the agent's container waits for it), unless the run took a spare
    worktree over (``trees.spare``: the agent's container brings it to the base itself,
    :data:`CHECKOUT`). Needs nothing of the run's host worktree.

    Args:
        repo: the repository.
        run_id: the run.
        base: hex id of its base commit.
        trees: the run's :class:`~git_iterare.sandbox.remote.RemoteTrees`.
        image: git-iterare's own image on the engine (for the porter container).
        labels: labels of the run's volumes (run and repository).
        agent: the agent's uid and gid (the run's trees are made its own).

    Returns:
        What was sent.

    Raises:
        OperationFailed: the engine refused or cannot be reached; git failed.
    """
    from git_iterare.sandbox import remote

    # The porter sees the trees where the agent's container does, so the run gitdir's
    # alternates and the worktree's .git file hold for both.
    volumes = {trees.cache: (remote.CACHE_PATH, False), trees.work: (remote.WORK_PATH, False),
               trees.git: (remote.GITDIR_PATH, False)}
    pack_bytes = objects = 0
    git_tar = _gitdir_archive(repo, run_id, base, _config_text(repo))
    work_tar = _worktree_archive()
    scratch = Path(tempfile.mkdtemp(prefix="ship-", dir=_tmp_root(repo)))
    # The checkout's porter reads the cache only (it runs as the agent's uid). A spare
    # needs none: the agent's container writes the few files that differ (CHECKOUT), which
    # costs less than starting one more container.
    reading = {**volumes, trees.cache: (remote.CACHE_PATH, True)}
    checkout = None if trees.spare else remote.Porter(
        image, reading, labels, user=f"{agent[0]}:{agent[1]}",
        command=["/bin/sh", "-c", PORTER_CHECKOUT, "iterare-checkout"])
    try:
        # The files go in through a porter that is never started (root's, for the cache);
        # the checkout's porter starts once they are all there (GO). (Starting it while
        # they go in, from another thread, needs one more ssh session at once than an
        # ssh:// engine's sshd allows by default.)
        with remote.Porter(image, volumes, labels) as porter, \
                checkout if checkout is not None else contextlib.nullcontext():
            archive = scratch / "ship.tar"
            # One archive into all three volumes: each put_archive costs the engine a mount
            # of the container's filesystem.
            cache = remote.CACHE_PATH.strip("/")
            with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
                haves = _cache_haves(porter, remote.CACHE_PATH)
                if base not in haves:
                    known = _local_commits(repo, haves[:MAX_HAVES])
                    pack, index, objects = _pack(repo, base, known, scratch)
                    pack_bytes = pack.stat().st_size + index.stat().st_size
                    for folder in ("objects", "objects/pack", "objects/info", "have"):
                        _add_dir(tar, f"{cache}/{folder}")
                    # The pack before its index: readers find packs by their index.
                    tar.add(pack, f"{cache}/objects/pack/{pack.name}")
                    tar.add(index, f"{cache}/objects/pack/{index.name}")
                    _add_file(tar, f"{cache}/have/{base}", b"")
                # The trees (their top folders too) are the agent's, for the checkout. A
                # spare's gitdir is still its maker's: the run's files wait beside it.
                run = remote.GITDIR_PATH.strip("/")
                for top, data in ((run, git_tar), (remote.WORK_PATH.strip("/"), work_tar)):
                    _add_dir(tar, top, owner=agent)
                    if top == run and trees.spare:
                        top = f"{run}/{NEXT}"
                        _add_dir(tar, top, owner=agent)
                    _copy_members(tar, data, top, owner=agent)
                if checkout is not None:
                    _add_file(tar, f"{run}/{PENDING}", b"", owner=agent)
                    _add_file(tar, f"{run}/{GO}", b"", owner=agent)
                _add_file(tar, f"{run}/{remote.SHIPPED}", b"")  # last: all is there
            with archive.open("rb") as handle:
                remote.put_archive(porter.container, "/", handle)
            if checkout is not None:
                checkout.start()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Shipped(pack_bytes=pack_bytes, objects=objects,
                   file_bytes=len(git_tar) + len(work_tar))


def _copy_members(tar: tarfile.TarFile, data: bytes, prefix: str,
                  owner: tuple[int, int] = (0, 0)) -> None:
    """Add the members of the tar ``data`` to ``tar`` below ``prefix``, owned by
    ``owner`` (uid, gid)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as source:
        for member in source.getmembers():
            content = source.extractfile(member) if member.isfile() else None
            member.name = f"{prefix}/{member.name}"
            member.uid, member.gid = owner
            tar.addfile(member, content)


def _tmp_root(repo: Repo) -> Path:
    root = repo.common_dir / "iterare" / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755,
             owner: tuple[int, int] = (0, 0)) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    info.uid, info.gid = owner
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644,
              owner: tuple[int, int] = (0, 0)) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    info.uid, info.gid = owner
    tar.addfile(info, io.BytesIO(data))


def _gitdir_archive(repo: Repo, run_id: str | None, base: str, config: str) -> bytes:
    """The run gitdir as the agent's container needs it (as
    :func:`git_iterare.workspace.prepare_run` makes it on the host): HEAD, branch,
    ``config`` and exclude; alternates naming the object cache; the ``.iterare/include``
    files of the main worktree put aside (copied over the checkout by :data:`CHECKOUT`).
    With no ``run_id``, a spare's: HEAD is ``base`` itself, and no include files."""
    from git_iterare.runner.workspace import include_paths, run_excludes
    from git_iterare.sandbox.remote import CACHE_PATH

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("objects", "objects/pack", "objects/info", "refs", "refs/heads",
                       "refs/heads/iterare", "refs/tags", "info"):
            _add_dir(tar, folder)
        if run_id is None:
            _add_file(tar, "HEAD", f"{base}\n".encode())
        else:
            ref = f"refs/heads/iterare/{run_id}"
            _add_file(tar, "HEAD", f"ref: {ref}\n".encode())
            _add_file(tar, ref, f"{base}\n".encode())
        _add_file(tar, "config", config.encode())
        _add_file(tar, "objects/info/alternates", f"{CACHE_PATH}/objects\n".encode())
        included = include_paths(repo, base) if run_id is not None else ()
        excludes = run_excludes(repo, included)
        if excludes:
            _add_file(tar, "info/exclude", excludes)
        if included:
            _add_dir(tar, "iterare-include")
            made = {"iterare-include"}
            for rel in included:
                parts = rel.split("/")
                for depth in range(1, len(parts)):
                    folder = "iterare-include/" + "/".join(parts[:depth])
                    if folder not in made:
                        made.add(folder)
                        _add_dir(tar, folder)
                source = Path(repo.main_work_tree or ".") / rel
                if source.is_file() and not source.is_symlink():
                    mode = 0o755 if os.stat(source).st_mode & 0o111 else 0o644
                    _add_file(tar, f"iterare-include/{rel}", source.read_bytes(), mode)
    return buffer.getvalue()


def _worktree_archive() -> bytes:
    """The worktree's start on the engine: its ``.git`` file naming the run gitdir."""
    from git_iterare.sandbox.remote import GITDIR_PATH

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_file(tar, ".git", f"gitdir: {GITDIR_PATH}\n".encode())
    return buffer.getvalue()


# --- results -------------------------------------------------------------------------

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


def _members(chunks: Iterable[bytes]) -> Iterator[tuple[tarfile.TarInfo, tarfile.TarFile]]:
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


def extract(chunks: Iterable[bytes], dest: Path, *, skip_top: tuple[str, ...] = ()
            ) -> list[str]:
    """Unpack a tar from the engine (``get_archive`` of a folder) into the empty folder
    ``dest``, without trusting it.

    The archive's first path component (the folder's own name) is dropped. Entries whose
    path is absolute, holds ``..``, or passes through a symlink or file unpacked earlier
    are skipped; so are the top-level names in ``skip_top`` (the worktree's ``.git``).
    Regular files get mode 0644 or 0755 (no set-uid bits, no other owner), folders 0755;
    symlinks are made as they are (never followed); a hard link becomes a copy of its
    target; FIFOs, sockets and devices are left out. Every entry is made relative to a
    descriptor of ``dest``, so one whose path is as long as the engine's own limit
    (``PATH_MAX``) is kept however long ``dest``'s path is: what the automatic commit
    then leaves out for its length it keeps as the base has it, as in a local run.

    Args:
        chunks: the archive's bytes.
        dest: an empty folder of the user's.
        skip_top: top-level names to leave out.

    Returns:
        Notes for the user (special files left out), at most 100.

    Raises:
        OperationFailed: the archive is not a tar, or exceeds :data:`MAX_FETCH_BYTES` or
            :data:`MAX_FETCH_ENTRIES`.
    """
    notes: list[str] = []
    blocked: set[tuple[str, ...]] = set()  # symlinks and files: nothing goes below them
    files: set[tuple[str, ...]] = set()
    folders: set[tuple[str, ...]] = set()
    total = entries = 0
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
    try:
        for member, tar in _members(chunks):
            entries += 1
            if entries > MAX_FETCH_ENTRIES:
                raise OperationFailed(f"the run's files hold more than {MAX_FETCH_ENTRIES} "
                                      "entries; refusing to fetch them")
            parts = tuple(p for p in member.name.split("/")[1:] if p not in ("", "."))
            if not parts or ".." in parts or member.name.startswith("/"):
                continue
            if parts[0] in skip_top or any(parts[:n] in blocked
                                           for n in range(1, len(parts) + 1)):
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
            elif member.isfile():
                total += member.size
                if total > MAX_FETCH_BYTES:
                    raise OperationFailed(f"the run's files exceed {MAX_FETCH_BYTES} "
                                          "bytes; refusing to fetch them")
                _write(rel, tar.extractfile(member), member.mode, dir_fd=root)
                files.add(parts)
                blocked.add(parts)
            elif member.islnk():
                target = tuple(p for p in member.linkname.split("/")[1:]
                               if p not in ("", "."))
                if target in files:
                    fd = os.open("/".join(target), os.O_RDONLY | os.O_NOFOLLOW, dir_fd=root)
                    with os.fdopen(fd, "rb") as source:
                        _write(rel, source, os.fstat(fd).st_mode, dir_fd=root)
                    files.add(parts)
                    blocked.add(parts)
            elif len(notes) < 100:
                notes.append(f"removed special file: {rel}")
    finally:
        os.close(root)
    return notes


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


def _write(path: Path | str, source: IO[bytes] | None, mode: int, *,
           dir_fd: int | None = None) -> None:
    """Create the new file ``path`` (relative to ``dir_fd`` when given) with ``source``'s
    bytes, mode 0755 when ``mode`` has an execute bit, else 0644; never through a
    symlink, never over an existing file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o755 if mode & 0o111 else 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as handle:
        if source is not None:
            shutil.copyfileobj(source, handle, 1 << 20)


def _replace_contents(target: Path, new: Path, keep: tuple[str, ...] = ()) -> None:
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


def _agent_container(record: RunRecord) -> ContainerHandle | None:
    """The run's agent container on its engine when it is this run's (labels), or None."""
    from git_iterare.sandbox import remote
    from git_iterare.sandbox.spec import LABEL_RUN

    for name in filter(None, (record.container, f"iterare-{record.id}")):
        found: ContainerHandle | None = remote.find_container(name)
        if found is not None and (found.labels or {}).get(LABEL_RUN) == record.id:
            return found
    return None


@contextlib.contextmanager
def _source(record: RunRecord) -> Iterator[tuple[ContainerHandle, str, str] | None]:
    """Where the run's trees can be read: (container, worktree path, gitdir path) -- the
    agent's container, else a porter over the run's volumes; None when both are gone."""
    from git_iterare.sandbox import remote

    agent = _agent_container(record)
    if agent is not None:
        yield agent, remote.WORK_PATH, remote.GITDIR_PATH
        return
    work, git = record_volumes(record)
    if not (remote.volume_exists(work) and remote.volume_exists(git)):
        yield None
        return
    image = (record.extra or {}).get("sidecar_image") or ""
    with remote.Porter(image, {work: ("/work", True), git: ("/git", True)},
                       {"dev.iterare.run": record.id}) as porter:
        yield porter.container, "/work", "/git"


def fetch_out(repo: Repo, record: RunRecord) -> None:
    """The sidecar's output (status, DNS log, refused connections) into the run's state
    folder, after asking a running sidecar for its report."""
    from git_iterare.runner.paths import state_dir
    from git_iterare.sandbox import remote
    from git_iterare.sandbox.spec import OUT_PATH, SIDECAR

    sidecar = remote.find_container(f"iterare-{record.id}-net")
    if sidecar is None or (sidecar.labels or {}).get("dev.iterare.run") != record.id:
        return
    if sidecar.status == "running":
        remote.exec_in(sidecar, [SIDECAR, "report"])
    out = state_dir(repo, record.id) / "out"
    out.mkdir(parents=True, exist_ok=True)
    for member, tar in _members(remote.get_archive(sidecar, OUT_PATH)):
        name = member.name.rsplit("/", 1)[-1]
        if (member.isfile() and member.size <= MAX_OUT_FILE_BYTES
                and re.fullmatch(r"[a-z]+\.(json|log)", name)):
            target = out / name
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            _write(target, tar.extractfile(member), 0o644)


def fetch_results(repo: Repo, record: RunRecord, ws: RunWorkspace) -> list[str]:
    """Bring a remote run's trees back: its worktree and gitdir on the engine replace the
    host's copies (see :func:`extract`), and the sidecar's output lands in the run's state
    folder. Call with the run's lock held, on the run's engine.

    Returns:
        Notes for the user (special files left out; trees that are gone).

    Raises:
        OperationFailed: the engine cannot be reached or refused; a bad archive.
    """
    from git_iterare.runner.workspace import fill_worktree, on_engine_path, worktree_on_engine

    fetch_out(repo, record)
    from git_iterare.sandbox.remote import never_started

    agent = _agent_container(record)
    if agent is not None and never_started(agent):
        # Its trees on the engine may be empty (the checkout runs beside the launch): the
        # base is the run's result, checked out here if it was not.
        if worktree_on_engine(ws):
            fill_worktree(repo, ws)
        return ["its agent never started; its base is kept"]
    with _source(record) as source:
        if source is None:
            if worktree_on_engine(ws):  # the host's copy was never filled: the base
                fill_worktree(repo, ws)
            return ["its files on the Docker engine are gone; what the host has is kept"]
        container, work_path, git_path = source
        from git_iterare.sandbox import remote

        notes = []
        for host, path, skip in ((Path(ws.worktree), work_path, (".git",)),
                                 (Path(ws.gitdir), git_path, ())):
            scratch = Path(tempfile.mkdtemp(prefix=f".{record.id}.fetch-", dir=host.parent))
            try:
                notes += extract(remote.get_archive(container, path), scratch, skip_top=skip)
                _replace_contents(host, scratch, keep=skip)
            finally:
                if scratch.exists():
                    boundedfs.remove_tree(scratch)
        on_engine_path(ws).unlink(missing_ok=True)
    return notes[:100]


def sandbox_died(record: RunRecord) -> bool:
    """Whether the engine ended the run's sandbox itself (it restarted, or the sandbox was
    killed there): its network sidecar, which only git-iterare removes, is not running."""
    from git_iterare.sandbox import remote

    sidecar = remote.find_container(f"iterare-{record.id}-net")
    return sidecar is None or sidecar.status != "running"


def drop_volumes(record: RunRecord) -> None:
    """Remove a finished remote run's volumes (its trees are on the host now), and
    whatever still mounts them (porters or a sidecar a cut-short launch left).

    Raises:
        OperationFailed: the engine refused or cannot be reached.
    """
    from git_iterare.sandbox import remote

    remote.remove_volumes_and_users(record_volumes(record))


def live_tree(repo: Repo, record: RunRecord) -> str:
    """The tree of a live remote run's worktree as it is now: fetched into a scratch
    folder and snapshot as its end would commit it (the host's copy is left as it is).

    Returns:
        The hex id of the tree (written to the repository's object store).

    Raises:
        OperationFailed: the run's files are gone, or the engine cannot be reached.
    """
    from git_iterare.git import checkout, safegit
    from git_iterare.runner.ownership import engine_of
    from git_iterare.runner.workspace import checkout_map_path, open_run
    from git_iterare.sandbox.engine import using

    ws = open_run(repo, record.id, str(record.base_commit))
    scratch = Path(tempfile.mkdtemp(prefix=f"live-{record.id}-", dir=_tmp_root(repo)))
    try:
        with using(engine_of(record)), _source(record) as source:
            if source is None:
                raise OperationFailed(f"run {record.id}'s files on the Docker engine are gone")
            from git_iterare.sandbox import remote

            extract(remote.get_archive(source[0], source[1]), scratch, skip_top=(".git",))
        plan = checkout.plan_snapshot(repo.common_dir, scratch, ws.base_commit,
                                      checkout_map_path(ws), ws.ref, commit=False)
        with safegit.safe_git(repo.common_dir, scratch, attributes=plan.attributes,
                              filters=plan.filter_text) as view:
            return str(view.snapshot(ws.base_commit, drop=ws.included,
                                     drop_blobs=ws.included_blobs,
                                     unchanged=plan.unchanged, gitlinks=plan.gitlinks))
    finally:
        boundedfs.remove_tree(scratch)


def remove_cache(repo: Repo) -> list[str]:
    """``git iterare cleanup --cache``: remove this repository's object cache on the
    current engine, and its spare worktree there. Runs still using the cache keep it (the
    engine refuses), which is an error.

    Returns:
        The names of the volumes removed (none when there was no cache).

    Raises:
        OperationFailed: the engine refused (a run uses it) or cannot be reached.
    """
    from git_iterare.sandbox import remote

    path = repo.common_dir / "iterare" / "cache-id"
    try:
        key = path.read_text().strip()
    except OSError:
        return []
    if not _KEY.fullmatch(key):
        return []
    spare = claim_spare(repo)  # its maker reads the cache
    if spare is not None:
        drop_spare(spare)
    drop_stray_spares(repo, key)
    return remote.remove_volumes(remote.cache_volumes(key))


#: Seconds after which a spare that is neither registered nor named by a run is taken as
#: left by a process that died while making it (making one takes seconds).
STRAY_SPARE_AGE = 600


def drop_stray_spares(repo: Repo, key: str, min_age: float = 0) -> None:
    """Remove the spare worktrees of cache key ``key`` on the current engine that no run
    of ``repo`` names and that are not its registered spare: made over another URL of
    this engine, or left by a process killed while making one. Only those at least
    ``min_age`` seconds old (another process may be making one now). A run's are its
    work: kept.

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    import datetime as dt

    from git_iterare.runs.status import parse_iso
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox import remote

    now = dt.datetime.now(dt.timezone.utc)
    old = []
    for name, made in remote.spare_volumes_made(key).items():
        when = parse_iso(made)  # Docker's "…Z" (fromisoformat takes it from 3.11 only)
        if ((now - when).total_seconds() if when is not None else 0.0) >= min_age:
            old.append(name)
    if not old:  # the usual case: no need to read the records
        return
    named = {name for record in RunStore(repo).list() for name in record_volumes(record)}
    registered, _ = _read_spare_file(_spare_file(repo))
    if registered is not None:
        named.update((registered.work, registered.git))
    for stem in sorted({name.rsplit("-", 1)[0] for name in old if name not in named}):
        drop_spare(Spare(f"{stem}-work", f"{stem}-git", ""))
