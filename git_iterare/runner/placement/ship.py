"""A run's code onto an engine that sees none of the client's files, in one archive.

* **Objects** go into the repository's object cache on the engine, once: the cache lists
  the commits it holds (``have/<commit>``), and a run ships a pack of the objects
  reachable from its base and not from any of those (``git pack-objects --revs``), so a
  run's start costs in proportion to what changed since the last one. The cache is keyed
  by a random id of this repository (:func:`cache_key`), so no other repository's runs
  see its objects. Once it holds more packs than ``gc.autoPackLimit``, the run being
  shipped repacks it, unless another run reads it (:mod:`.repack`).
* **The run gitdir** (HEAD, branch, config, exclude; alternates naming the cache) and the
  ``.iterare/include`` files go into the run's volumes. The base is checked out there
  from the cache, so the worktree's content never crosses the wire: by a porter from
  git-iterare's own image, as the agent's uid, with no capabilities and no network,
  started as soon as the files are in, so the checkout goes on while the sandbox starts;
  the agent's container waits for it, and does it itself when it failed
  (``container/engine-checkout``, :func:`checkout_command`).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import secrets
import shutil
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from git_iterare.git.repo import Repo
from git_iterare.runner.placement.packs import local_commits, pack_reachable
from git_iterare.runner.placement.repack import CacheLock, due, reading
from git_iterare.runs import extra
from git_iterare.sandbox.meter import Metered, transfer_line
from git_iterare.sandbox.spec import CACHE_PATH, GITDIR_PATH, SHIPPED, WORK_PATH, VolumeTrees

#: The marker files of ``container/engine-checkout`` in the run gitdir: while PENDING is
#: there a porter checks the base out; GO, the last file :func:`ship` puts, starts it;
#: DONE once the base is checked out. NEXT holds the run gitdir's files while the run
#: takes a spare worktree over; SPARE_MAKING is there while a spare's maker checks out
#: (touched every second: older than SPARE_STALE seconds means its maker died), and
#: SPARE_READY once its checkout is complete (the commit).
PENDING = "iterare-checkout"
GO = "iterare-checkout-go"
DONE = "iterare-checked-out"
NEXT = "iterare-next"
SPARE_MAKING = "iterare-spare-making"
SPARE_READY = "iterare-spare-ready"
SPARE_STALE = 10
#: The run gitdir's list of the initialized submodules engine-checkout checks out.
SUBMODULES = "iterare-submodules"
#: The run gitdir's folder of the files the host converted (filters, line endings), and
#: their list (NUL-separated paths): engine-checkout writes them over its checkout.
CONVERTED = "iterare-converted"
CONVERTED_LIST = "iterare-converted-list"
#: The run gitdir's folder of the files the host converted in submodules: copied over.
CONVERTED_SUBMODULES = "iterare-converted-submodules"

if TYPE_CHECKING:
    from git_iterare.git.checkout import Entry
    from git_iterare.sandbox.volumes import Porter

#: Most commits named as already in the cache when packing (the most recent ones).
MAX_HAVES = 256
_KEY = re.compile(r"^[0-9a-f]{16}$")


def cache_key(repo: Repo) -> str:
    """This repository's object cache key (16 hex digits), made on first use and kept in
    ``<common dir>/iterare/cache-id``."""
    known = known_cache_key(repo)
    if known is not None:
        return known
    path = repo.common_dir / "iterare" / "cache-id"
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


def known_cache_key(repo: Repo) -> str | None:
    """This repository's object cache key when it has one (:func:`cache_key` made it),
    else None."""
    try:
        key = (repo.common_dir / "iterare" / "cache-id").read_text().strip()
    except OSError:
        return None
    return key if _KEY.fullmatch(key) else None


def checkout_command(mode: str, *command: str) -> list[str]:
    """The argv of ``container/engine-checkout`` in ``mode`` (``agent`` with the agent's
    ``command``, ``porter``, ``spare``): the script is passed as ``sh -c``'s text, so an
    image needs nothing of git-iterare's."""
    from git_iterare.sandbox.accounts import container_file

    script = container_file("engine-checkout").decode("utf-8")
    return ["/bin/sh", "-c", script, "engine-checkout", mode, *command]


@dataclass(frozen=True)
class Shipped:
    """What :func:`ship` sent.

    Attributes:
        pack_bytes: bytes of objects sent to the cache (pack and index); 0 when the cache
            had the base already.
        objects: objects in that pack.
        file_bytes: bytes of the other files (gitdir, includes, converted files) sent.
        repacked: whether the cache was repacked before the checkout (:mod:`.repack`).
        submodules: ``(commit, path)`` of the initialized submodules checked out there
            (their objects are in the cache).
        converted: the files the host's filters or line endings convert (their ``raw``:
            the bytes written there), sent as the host writes them
            (:func:`git_iterare.git.checkout.converted`).
    """

    pack_bytes: int
    objects: int
    file_bytes: int
    repacked: bool = False
    submodules: tuple[tuple[str, str], ...] = ()
    converted: tuple[Entry, ...] = ()

    def to_json(self) -> extra.Shipped:
        """As the record keeps it (``extra.shipped``)."""
        shipped: extra.Shipped = {"pack_bytes": self.pack_bytes, "objects": self.objects,
                                  "file_bytes": self.file_bytes}
        if self.submodules:
            shipped["submodules"] = [list(sub) for sub in self.submodules]
        return shipped


def _cache_haves(porter: Porter, cache: str = "/cache") -> tuple[list[str], int | None]:
    """The commits the cache (at ``cache`` in the porter) holds (names of ``have/*``),
    newest first; and how many it held when it was last repacked (``have/.repacked``,
    :mod:`.repack`), None when never."""
    from git_iterare.git.runrefs import HEX40
    from git_iterare.runner.placement.repack import REPACKED
    from git_iterare.runner.placement.tarball import members

    found: list[tuple[float, str]] = []
    repacked = None
    for member, tar in members(porter.get(f"{cache}/have")):
        name = member.name.rsplit("/", 1)[-1]
        if member.isfile() and HEX40.fullmatch(name):
            found.append((member.mtime, name))
        elif member.isfile() and name == REPACKED and member.size < 32:
            handle = tar.extractfile(member)
            text = handle.read().decode("ascii", "replace").strip() if handle else ""
            repacked = int(text) if text.isdigit() else None
    return [name for _, name in sorted(found, reverse=True)], repacked


def ship(repo: Repo, run_id: str, base: str, trees: VolumeTrees, image: str,
         labels: Mapping[str, str], agent: tuple[int, int], *, spare: bool = False
         ) -> Shipped:
    """Put what a new run needs on the engine: the objects of its base into the
    repository's cache (only those the cache lacks), the run gitdir and the
    ``.iterare/include`` files into its volumes, all in one archive; then start the
    checkout of the base there (``engine-checkout porter``), which goes on while the
    sandbox starts (the agent's container waits for it), unless the run took a spare
    worktree over (``spare``: the agent's container brings it to the base itself,
    ``engine-checkout agent``). Needs nothing of the run's host worktree.

    Args:
        repo: the repository.
        run_id: the run.
        base: hex id of its base commit.
        trees: the run's volumes.
        image: git-iterare's own image on the engine (for the porter container).
        labels: labels of the run's volumes (run and repository).
        agent: the agent's uid and gid (the run's trees are made its own).
        spare: ``trees`` are a spare worktree the run took over.

    Returns:
        What was sent.

    Raises:
        OperationFailed: the engine refused or cannot be reached; git failed.
    """
    from git_iterare.git.checkout import converted as converted_files
    from git_iterare.git.checkout import submodules
    from git_iterare.runner.workspace import run_gitdir_config
    from git_iterare.sandbox import volumes as engine

    # The porter sees the trees where the agent's container does, so the run gitdir's
    # alternates and the worktree's .git file hold for both.
    volumes = {trees.cache: (CACHE_PATH, False), trees.work: (WORK_PATH, False),
               trees.git: (GITDIR_PATH, False)}
    pack_bytes = objects = 0
    merged = False
    subs = [sub for sub in submodules(repo.common_dir, base) if sub.gitdir is not None]
    checked_out = [(sub.commit, sub.path) for sub in subs]
    git_tar = gitdir_archive(repo, run_id, base, run_gitdir_config(repo), checked_out)
    work_tar = worktree_archive()
    scratch = Path(tempfile.mkdtemp(prefix="ship-", dir=tmp_root(repo)))
    smudged = scratch / "converted"
    try:
        # What the user's filters and line endings make of files on the host, which the
        # engine's git cannot do: written there over its checkout (engine-checkout).
        smudged.mkdir()
        converted = converted_files(repo.common_dir, base, smudged)
        for sub in subs:  # theirs are written over the submodules' checkouts as they are
            (smudged / sub.path).mkdir(parents=True, exist_ok=True)
            converted += converted_files(repo.common_dir, base, smudged / sub.path, sub)
        converted_bytes = sum((smudged / e.path).stat().st_size for e in converted)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    # The checkout's porter reads the cache only (it runs as the agent's uid). A spare
    # needs none: the agent's container writes the few files that differ (engine-checkout), which
    # costs less than starting one more container.
    read_only = {**volumes, trees.cache: (CACHE_PATH, True)}
    checkout = None if spare else engine.Porter(
        image, read_only, labels, user=f"{agent[0]}:{agent[1]}",
        command=checkout_command("porter"))
    try:
        # The files go in through a porter that is never started (root's, for the cache);
        # the checkout's porter starts once they are all there (GO). (Starting it while
        # they go in, from another thread, needs one more ssh session at once than an
        # ssh:// engine's sshd allows by default.) The agent's container, made before,
        # reads the cache once it starts, after this: no repack starts meanwhile.
        with reading(repo) as lock, engine.Porter(image, volumes, labels) as porter, \
                checkout if checkout is not None else contextlib.nullcontext():
            archive = scratch / "ship.tar"
            # One archive into all three volumes: each put_archive costs the engine a mount
            # of the container's filesystem.
            cache = CACHE_PATH.strip("/")
            with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
                haves, repacked = _cache_haves(porter, CACHE_PATH)
                # The base's history, and the commits of its initialized submodules.
                wanted = [(repo, base), *((_sub_repo(sub.gitdir), sub.commit)
                                          for sub in subs if sub.gitdir is not None)]
                packed = 0
                for source, commit in wanted:
                    if commit in haves:
                        continue
                    made = pack_reachable(source, commit,
                                          local_commits(source, haves[:MAX_HAVES]), scratch)
                    objects, pack_bytes = objects + made.objects, pack_bytes + made.size
                    if not packed:
                        for folder in ("objects", "objects/pack", "objects/info", "have"):
                            add_dir(tar, f"{cache}/{folder}")
                    # The pack before its index: readers find packs by their index.
                    tar.add(made.pack, f"{cache}/objects/pack/{made.pack.name}")
                    tar.add(made.index, f"{cache}/objects/pack/{made.index.name}")
                    add_file(tar, f"{cache}/have/{commit}", b"")
                    haves.append(commit)
                    packed += 1
                # The trees (their top folders too) are the agent's, for the checkout. A
                # spare's gitdir is still its maker's: the run's files wait beside it.
                run = GITDIR_PATH.strip("/")
                for top, data in ((run, git_tar), (WORK_PATH.strip("/"), work_tar)):
                    add_dir(tar, top, owner=agent)
                    if top == run and spare:
                        top = f"{run}/{NEXT}"
                        add_dir(tar, top, owner=agent)
                    copy_members(tar, data, top, owner=agent)
                    if top != WORK_PATH.strip("/"):
                        _add_converted(tar, top, smudged, converted, agent,
                                       [sub.path for sub in subs])
                if checkout is not None:
                    add_file(tar, f"{run}/{PENDING}", b"", owner=agent)
                    add_file(tar, f"{run}/{GO}", b"", owner=agent)
                add_file(tar, f"{run}/{SHIPPED}", b"")  # last: all is there
            with archive.open("rb") as handle:
                porter.put("/", metered(handle, archive.stat().st_size))
            if due(repo, len(haves), repacked):
                own = {porter.made.id} | ({checkout.made.id} if checkout is not None else set())
                merged = _repack(lock, trees.cache, image, labels, run_id, own)
            if checkout is not None:
                checkout.start()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Shipped(pack_bytes=pack_bytes, objects=objects,
                   file_bytes=len(git_tar) + len(work_tar) + converted_bytes, repacked=merged,
                   submodules=tuple(checked_out), converted=tuple(converted))


def _add_converted(tar: tarfile.TarFile, top: str, folder: Path,
                   converted: Sequence[Entry], owner: tuple[int, int],
                   submodule_paths: Sequence[str]) -> None:
    """Add the ``converted`` files (written below ``folder``) to the run gitdir at
    ``top`` in ``tar``: those of the run's index in :data:`CONVERTED` with their list
    :data:`CONVERTED_LIST` (their entries are refreshed), those of the submodules at
    ``submodule_paths`` in :data:`CONVERTED_SUBMODULES` (copied over as they are)."""
    if not converted:
        return
    inside = tuple(f"{sub}/" for sub in submodule_paths)
    made = set()
    for entry in converted:
        where = CONVERTED_SUBMODULES if entry.path.startswith(inside) else CONVERTED
        parts = [where, *entry.path.split("/")]
        for depth in range(1, len(parts)):
            sub = "/".join(parts[:depth])
            if sub not in made:
                made.add(sub)
                add_dir(tar, f"{top}/{sub}", owner=owner)
        info = tar.gettarinfo(str(folder / entry.path), f"{top}/{where}/{entry.path}")
        info.uid, info.gid = owner
        info.mode = 0o755 if entry.mode == "100755" else 0o644
        with open(folder / entry.path, "rb") as handle:
            tar.addfile(info, handle)
    listing = b"".join(os.fsencode(entry.path) + b"\0" for entry in converted
                       if not entry.path.startswith(inside))
    add_file(tar, f"{top}/{CONVERTED_LIST}", listing, owner=owner)


def _sub_repo(gitdir: Path) -> Repo:
    """A submodule's repository (``<common dir>/modules/<name>``), to pack from."""
    return Repo(git_dir=gitdir, common_dir=gitdir, work_tree=None)


def _repack(lock: CacheLock, cache: str, image: str, labels: Mapping[str, str],
            run_id: str, own: set[str]) -> bool:
    """Repack the object cache ``cache`` when no other process is starting a run and no
    container but run ``run_id``'s (or those of ``own``, ids) reads it (:mod:`.repack`);
    whether it did."""
    from git_iterare.runner.placement import repack

    with lock.alone() as alone:
        return (alone and repack.alone_on(cache, run_id, own)
                and repack.repack(cache, image, labels))


def metered(handle: IO[bytes], size: int) -> Metered:
    """``handle`` (``size`` bytes) as it is sent to the engine, with a progress line on a
    terminal for a big one (:mod:`git_iterare.sandbox.meter`)."""
    from git_iterare import ui

    def shown(sent: int, total: int) -> None:
        ui.progress.meter(transfer_line("sending the run's files to the Docker engine", sent,
                                        total))
        if sent >= total:
            ui.progress.clear()

    return Metered(handle, size, shown)


def copy_members(tar: tarfile.TarFile, data: bytes, prefix: str,
                  owner: tuple[int, int] = (0, 0)) -> None:
    """Add the members of the tar ``data`` to ``tar`` below ``prefix``, owned by
    ``owner`` (uid, gid)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as source:
        for member in source.getmembers():
            content = source.extractfile(member) if member.isfile() else None
            member.name = f"{prefix}/{member.name}"
            member.uid, member.gid = owner
            tar.addfile(member, content)


def tmp_root(repo: Repo) -> Path:
    """``<common dir>/iterare/tmp``, made: scratch space on the repository's disk."""
    root = repo.common_dir / "iterare" / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    return root


def add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755,
             owner: tuple[int, int] = (0, 0)) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    info.uid, info.gid = owner
    tar.addfile(info)


def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644,
              owner: tuple[int, int] = (0, 0)) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    info.uid, info.gid = owner
    tar.addfile(info, io.BytesIO(data))


def gitdir_archive(repo: Repo, run_id: str | None, base: str, config: str,
                   submodules: Sequence[tuple[str, str]] = ()) -> bytes:
    """The run gitdir as the agent's container needs it (as
    :func:`git_iterare.workspace.prepare_run` makes it on the host): HEAD, branch,
    ``config`` and exclude; alternates naming the object cache; the ``.iterare/include``
    files of the worktree the command runs in put aside (copied over the checkout by
    ``engine-checkout``); the ``submodules`` it checks out into their folders
    (``(commit, path)``: :data:`SUBMODULES`, a ``commit<TAB>path`` line each).
    With no ``run_id``, a spare's: HEAD is ``base`` itself, and no include files."""
    from git_iterare.runner.workspace import include_paths, run_excludes

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("objects", "objects/pack", "objects/info", "refs", "refs/heads",
                       "refs/heads/iterare", "refs/tags", "info"):
            add_dir(tar, folder)
        if run_id is None:
            add_file(tar, "HEAD", f"{base}\n".encode())
        else:
            ref = f"refs/heads/iterare/{run_id}"
            add_file(tar, "HEAD", f"ref: {ref}\n".encode())
            add_file(tar, ref, f"{base}\n".encode())
        add_file(tar, "config", config.encode())
        add_file(tar, "objects/info/alternates", f"{CACHE_PATH}/objects\n".encode())
        if submodules:
            add_file(tar, SUBMODULES, "".join(f"{commit}\t{path}\n"
                                              for commit, path in submodules).encode())
        included = include_paths(repo, base) if run_id is not None else ()
        excludes = run_excludes(repo, included)
        if excludes:
            add_file(tar, "info/exclude", excludes)
        if included:
            add_dir(tar, "iterare-include")
            made = {"iterare-include"}
            for rel in included:
                parts = rel.split("/")
                for depth in range(1, len(parts)):
                    folder = "iterare-include/" + "/".join(parts[:depth])
                    if folder not in made:
                        made.add(folder)
                        add_dir(tar, folder)
                source = Path(repo.project_tree or ".") / rel
                if source.is_file() and not source.is_symlink():
                    mode = 0o755 if os.stat(source).st_mode & 0o111 else 0o644
                    add_file(tar, f"iterare-include/{rel}", source.read_bytes(), mode)
    return buffer.getvalue()


def worktree_archive() -> bytes:
    """The worktree's start on the engine: its ``.git`` file naming the run gitdir."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add_file(tar, ".git", f"gitdir: {GITDIR_PATH}\n".encode())
    return buffer.getvalue()


