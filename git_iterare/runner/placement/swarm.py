"""The ``swarm`` placement: runs on any node of a Docker Swarm whose manager the engine is.

The client talks to the manager's Engine API alone, so the run's trees live in the
manager's volumes exactly as a remote engine keeps them (:mod:`.remote`: shipped in
through the API with the repository's object cache there, so a second run ships about
its change; fetched back as its change, imported as a local run's). The agent's task,
wherever the swarm places it, gets them from the run's tree server and gives them back
to it (:mod:`git_iterare.sandbox.swarm_backend`), so nothing node-local is assumed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from git_iterare.errors import OperationFailed, UserError
from git_iterare.git.repo import Repo
from git_iterare.runner.placement.base import PlacementKind, RunTrees
from git_iterare.runner.placement.remote import Remote

if TYPE_CHECKING:
    from git_iterare.runner.workspace import RunWorkspace
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox.spec import Mount


def swarm_start_command() -> tuple[str, ...]:
    """The argv of ``container/swarm-start`` before the agent's command, as ``sh -c``'s
    text (an image needs nothing of git-iterare's)."""
    from git_iterare.sandbox.accounts import container_file

    return ("/bin/sh", "-c", container_file("swarm-start").decode("utf-8"), "swarm-start")


class Swarm(Remote):
    """Trees in the manager's volumes, handed to a task on any node through a tree
    server."""

    @property
    def kind(self) -> PlacementKind:
        return "swarm"

    def check(self, repo: Repo, base: str, mounts: Sequence[Mount]) -> None:
        """Refuse what :meth:`Remote.check` refuses, and an engine that is no swarm's
        manager.

        Raises:
            UserError: naming the mount, submodule, or the engine.
            OperationFailed: the engine cannot be reached.
        """
        super().check(repo, base, mounts)
        from git_iterare.sandbox.swarm_backend import manager_problem

        problem = manager_problem()
        if problem is not None:
            raise UserError(f"swarm.enabled is on but {problem[0]}", hint=problem[1])

    def make(self, repo: Repo, record: RunRecord, files: dict[str, bytes]) -> RunTrees:
        """As :meth:`Remote.make`; the agent's task gets its trees through
        ``container/swarm-start`` (the tree server checks the base out).

        Raises:
            as :meth:`Remote.make`.
        """
        trees = super().make(repo, record, files)
        trees.facts["swarm"] = {}  # the node, once the swarm gave the task one
        return dataclasses.replace(trees, wrapper=swarm_start_command())

    def note_where(self, repo: Repo, record: RunRecord) -> None:
        """Record where the run's task is (``extra.swarm``): the node the swarm gave it
        (``node``, ``node_id``), or while it waits for one the swarm's reason
        (``waiting``); a task the swarm refused (an image the node cannot pull) keeps its
        reason as ``error``. Nothing is written when that is what the record says.

        Raises:
            OperationFailed: the manager cannot be reached.
        """
        from git_iterare.runs.extra import SwarmNode
        from git_iterare.runs.store import RunStore
        from git_iterare.sandbox.spec import sandbox_name
        from git_iterare.sandbox.swarm_backend import WAITING, SwarmBackend

        place = SwarmBackend().task_place(record.container or sandbox_name(record.id))
        noted: SwarmNode = {}
        if place.node_id:
            noted = {"node": place.node, "node_id": place.node_id}
        elif place.state in WAITING and place.error:
            noted = {"waiting": place.error}
        if place.state in ("rejected", "failed") and place.error:
            noted["error"] = place.error
        if noted and noted != record.extra.get("swarm"):
            RunStore(repo).update(record.id, lambda r: r.with_extra(swarm=noted),
                                  f"{record.id} on the swarm: {place.state}")

    def fetch(self, repo: Repo, record: RunRecord, workspace: RunWorkspace) -> list[str]:
        """As :meth:`Remote.fetch` (the tree server gave the task's trees back to the
        manager's volumes), after recording the node the task ran on
        (:meth:`note_where`).

        Raises:
            as :meth:`Remote.fetch`.
        """
        self.note_where(repo, record)
        return super().fetch(repo, record, workspace)

    def give_again(self, repo: Repo, record: RunRecord, workspace: RunWorkspace,
                   sandbox: str, head: str | None) -> None:
        """Refused: a loop's later rounds do not run on a swarm yet.

        Raises:
            OperationFailed: always.
        """
        raise OperationFailed("runs with --until do not run on a swarm yet",
                              hint="run the loop on a Docker engine (swarm.enabled = false)")

    def ended_by_engine(self, record: RunRecord) -> bool:
        """Whether the swarm lost the run: its service is gone, or the node its task was
        given to is down (the swarm still says such a task runs)."""
        from git_iterare.sandbox.spec import sandbox_name
        from git_iterare.sandbox.swarm_backend import SwarmBackend

        backend = SwarmBackend()
        name = record.container or sandbox_name(record.id)
        return backend.inspect(name) is None or backend.node_down(name)
