"""Which runs and containers belong to this machine and repository.

Run records travel with ``git iterare push``/``fetch``, so a record may describe a run on
someone else's machine, or be crafted to name any container. Runs are only finished here
when they were started here (same machine and repository), and a container is only
touched when its labels name the run and this repository.
"""

from __future__ import annotations

import functools
import socket
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare.git.repo import Repo

if TYPE_CHECKING:
    from git_iterare.runs.extra import RunExtra
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox.engine import Engine
    from git_iterare.sandbox.spec import ContainerInfo


@functools.lru_cache(maxsize=1)
def machine_id() -> str:
    """This machine's identity: systemd's ``/etc/machine-id``, else the host name (read
    once a process: ``fetch`` asks it of every record)."""
    try:
        value = Path("/etc/machine-id").read_text().strip()
    except OSError:
        value = ""
    return value or socket.gethostname()


def origin(repo: Repo) -> RunExtra:
    """What a new record stores to say where its run executes: ``{"host", "repo",
    "engine"}``, the engine as ``{"name", "url"}`` (its docker context and endpoint, no
    secrets; see :meth:`git_iterare.sandbox.engine.Engine.describe`).

    Raises:
        UserError: the engine settings name a context that does not exist.
    """
    from git_iterare.sandbox.engine import current

    described = current().describe()
    return {"host": machine_id(), "repo": str(repo.main_work_tree),
            "engine": {"name": described["name"], "url": described["url"]}}


def engine_of(record: RunRecord) -> Engine:
    """The :class:`~git_iterare.sandbox.engine.Engine` the run's sandbox is on (see
    :func:`git_iterare.sandbox.engine.engine_for`), with its ``swarm`` as the run's
    placement says: wrap calls about the run in ``with engine.using(engine_of(record)):``.

    Raises:
        OperationFailed: the user's settings no longer name that engine.
    """
    import dataclasses

    from git_iterare.sandbox.engine import SwarmTarget, engine_for

    engine = engine_for((record.extra or {}).get("engine"))
    # A swarm run is the manager's services whatever [swarm] says now; a local or remote
    # run is the engine's containers even while new runs go to its swarm. (Records from
    # before placements were kept are never swarm runs.)
    if record.placement != "swarm":
        return dataclasses.replace(engine, swarm=None) if engine.swarm else engine
    return engine if engine.swarm else dataclasses.replace(engine, swarm=SwarmTarget(""))


def is_local(repo: Repo, record: RunRecord) -> bool:
    """Whether ``record``'s run was started on this machine, in this repository."""
    extra = record.extra or {}
    return extra.get("host") == machine_id() and extra.get("repo") == str(repo.main_work_tree)


def container_of(repo: Repo, record: RunRecord) -> ContainerInfo | None:
    """The run's sandbox (:class:`git_iterare.sandbox.ContainerInfo`), or None when the
    record names none, it is gone, or it is not this run's (labels differ).

    Raises:
        OperationFailed: the Docker engine cannot be reached.
    """
    from git_iterare import sandbox
    from git_iterare.sandbox.spec import LABEL_REPO, LABEL_RUN

    if not record.container or not is_local(repo, record):
        return None
    from git_iterare.sandbox.engine import using

    with using(engine_of(record)):
        info = sandbox.inspect(record.container)
    if info is None:
        return None
    labels = info.labels or {}
    if labels.get(LABEL_RUN) != record.id or labels.get(LABEL_REPO) != str(repo.main_work_tree):
        return None
    return info


def ran_elsewhere(repo: Repo, record: RunRecord) -> bool:
    """Whether the run was started on another machine or in another repository (its
    record came with ``git iterare fetch``); records without an origin (imported from
    iterare) count as local."""
    return bool((record.extra or {}).get("host")) and not is_local(repo, record)
