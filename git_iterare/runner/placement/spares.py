"""Spare worktrees on a remote engine: a run's checkout done ahead of it.

Checking a large base out on the engine takes seconds, and it is the same checkout run
after run. So after a run starts, a porter checks its base out into a *spare* pair of
volumes (:func:`make_spare`); the repository's next run on that engine takes the pair
over as its own (:func:`claim_spare`) and writes only the files that differ between the
spare's commit and its base (``container/engine-checkout``). A spare is named in a file
of the client's (one per engine); taking it over renames that file away, which only one
process can do, so no two runs ever share one, and no agent ever saw its volumes before.

Start-sooner work: only :mod:`git_iterare.runner.warmup` makes and claims spares; the
remote placement reads which spare a run's record names (:func:`recorded_spare`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare.git.repo import Repo
from git_iterare.runner.placement.repack import reading
from git_iterare.runner.placement.ship import (
    SPARE_MAKING,
    add_dir,
    add_file,
    cache_key,
    checkout_command,
    copy_members,
    gitdir_archive,
    worktree_archive,
)
from git_iterare.runs import extra
from git_iterare.sandbox.spec import CACHE_PATH, GITDIR_PATH, WORK_PATH

if TYPE_CHECKING:
    from git_iterare.runs.record import RunRecord


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

    def to_json(self) -> extra.Spare:
        """As the record keeps it (``extra.spare``)."""
        return {"work": self.work, "git": self.git, "base": self.base}


def _spare_from(data: Mapping[str, object]) -> Spare | None:
    """The :class:`Spare` ``data`` names, when its names are a spare's volumes."""
    from git_iterare.git.runrefs import HEX40
    from git_iterare.sandbox.volumes import SPARE_VOLUME

    work, git, base = (data.get(k) for k in ("work", "git", "base"))
    if not (isinstance(work, str) and isinstance(git, str) and isinstance(base, str)):
        return None
    if not (SPARE_VOLUME.fullmatch(work) and work.endswith("-work")
            and git == work[:-len("work")] + "git" and HEX40.fullmatch(base)):
        return None
    return Spare(work, git, base)


def spare_in(extra: Mapping[str, object]) -> Spare | None:
    """The spare worktree a record's ``extra`` names (``spare``), or None."""
    data = extra.get("spare")
    return _spare_from(data) if isinstance(data, dict) else None


def recorded_spare(record: RunRecord) -> Spare | None:
    """The spare worktree ``record``'s run took over (its ``extra.spare``), or None."""
    return spare_in(record.extra or {})


def record_volumes(record: RunRecord) -> tuple[str, str]:
    """The names of a remote run's worktree and gitdir volumes: those of the spare its
    record names, else ``iterare-<id>-work`` and ``-git``."""
    from git_iterare.sandbox.volumes import run_volumes

    spare = recorded_spare(record)
    return (spare.work, spare.git) if spare is not None else run_volumes(record.id)


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


def claim_spare(repo: Repo) -> Spare | None:
    """Take over this repository's spare worktree on the current engine, if it has one:
    it is the caller's alone from then on (record it in the run's record as ``spare``).
    Asks the engine nothing, so the spare may still be being checked out, or be gone
    (:data:`CHECKOUT` copes with both).

    Returns:
        The spare, or None when there is none, or it was checked out with other
        line-ending settings than the repository has now (its volumes are then removed).
    """
    from git_iterare.runner.workspace import run_gitdir_config

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
    if data.get("config") != run_gitdir_config(repo):
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
    from git_iterare.runner.workspace import run_gitdir_config
    from git_iterare.sandbox import volumes as engine

    path = _spare_file(repo)
    if path.exists():
        return
    key = cache_key(repo)
    # Spares of processes killed while making one (kill -9) would pile up otherwise.
    drop_stray_spares(repo, key, STRAY_SPARE_AGE)
    spare = Spare(*engine.spare_volumes(key, secrets.token_hex(4)), base=base)
    labels = {engine.LABEL_SPARE: key, "dev.iterare.repo": str(repo.main_work_tree)}
    volumes = {engine.cache_volume(key): (CACHE_PATH, True),
               spare.work: (WORK_PATH, False), spare.git: (GITDIR_PATH, False)}
    config = run_gitdir_config(repo)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        run = GITDIR_PATH.strip("/")
        add_dir(tar, run, owner=agent)
        copy_members(tar, gitdir_archive(repo, None, base, config), run, owner=agent)
        add_file(tar, f"{run}/{SPARE_MAKING}", b"", owner=agent)
        add_dir(tar, WORK_PATH.strip("/"), owner=agent)
        copy_members(tar, worktree_archive(), WORK_PATH.strip("/"), owner=agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:  # until it is registered, nothing else would ever remove it
        engine.ensure_volume(spare.work, {**labels, engine.LABEL_VOLUME: "work"})
        engine.ensure_volume(spare.git, {**labels, engine.LABEL_VOLUME: "git"})
        with reading(repo), engine.Porter(image, volumes, labels,
                                          user=f"{agent[0]}:{agent[1]}",
                                          command=checkout_command("spare")) as maker:
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


def drop_all(repo: Repo, key: str) -> None:
    """Remove this repository's spare worktrees of cache key ``key`` on the current
    engine: the registered one (its maker first) and strays (:func:`drop_stray_spares`).
    A run's are its work: kept."""
    spare = claim_spare(repo)
    if spare is not None:
        drop_spare(spare)
    drop_stray_spares(repo, key)


def drop_spare(spare: Spare) -> None:
    """Remove a spare's maker (when it still runs) and its volumes; errors are ignored."""
    from git_iterare.sandbox import volumes as engine

    with contextlib.suppress(Exception):
        engine.remove_volumes_and_users((spare.work, spare.git))


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
    from git_iterare.sandbox import volumes as engine

    now = dt.datetime.now(dt.timezone.utc)
    old = []
    for name, made in engine.spare_volumes_made(key).items():
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


