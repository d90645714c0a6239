"""Where a run's trees live, and how they get in and out: one :class:`Placement` a run.

A run's worktree and gitdir exist on the host (the user's view of the run, and what the
importer reads back); the sandbox needs them too. How it gets them depends on where its
engine is, and is answered once, when the run is planned (:func:`placement_for`), and
kept in its record (``placement``), so every later command asks the same placement
(:func:`placement_of`):

* ``local`` (:mod:`.local`): the engine runs on this machine and bind-mounts the trees;
* ``remote`` (:mod:`.remote`): the engine sees none of this machine's files; the trees
  live in its volumes, code goes in through the Engine API and the results come back
  as objects and files;
* ``swarm`` (:mod:`.swarm`): the engine is a Docker Swarm's manager; the trees live in
  its volumes as for ``remote``, and the agent, on any node, gets them from and gives
  them back to a tree server beside them.

The runner calls the placement's methods and never asks which placement it has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from git_iterare.runner.placement.base import KINDS, Placement, PlacementKind, RunTrees

if TYPE_CHECKING:
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox.engine import Engine

__all__ = ["KINDS", "Placement", "PlacementKind", "RunTrees", "get_placement", "kind_of",
           "placement_for", "placement_of"]


def placement_for(engine: Engine) -> Placement:
    """The placement of new runs on ``engine``: ``swarm`` when runs go to its swarm
    (:attr:`~git_iterare.sandbox.engine.Engine.swarm`), ``local`` when it runs on this
    machine (:attr:`~git_iterare.sandbox.engine.Engine.on_this_host`), else ``remote``."""
    if engine.swarm is not None:
        return get_placement("swarm")
    return get_placement("local" if engine.on_this_host else "remote")


def get_placement(kind: PlacementKind) -> Placement:
    """The :class:`Placement` named ``kind``."""
    if kind == "local":
        from git_iterare.runner.placement.local import Local

        return Local()
    if kind == "swarm":
        from git_iterare.runner.placement.swarm import Swarm

        return Swarm()
    from git_iterare.runner.placement.remote import Remote

    return Remote()


def kind_of(record: RunRecord) -> PlacementKind:
    """The placement ``record``'s run has: its ``placement`` field, or for records made
    before it existed, ``remote`` when the engine it names is not a ``unix://`` socket."""
    for kind in KINDS:
        if record.placement == kind:
            return kind
    engine = (record.extra or {}).get("engine")
    url = engine.get("url") if isinstance(engine, dict) else None
    return "remote" if isinstance(url, str) and not url.startswith("unix://") else "local"


def placement_of(record: RunRecord) -> Placement:
    """The :class:`Placement` of ``record``'s run (see :func:`kind_of`)."""
    return get_placement(kind_of(record))
