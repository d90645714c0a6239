"""Start-sooner work, behind one door and one switch (``docker.warm``).

When runs follow one another, part of the next run's launch can be done ahead, while the
user reads the last one's result:

* on a local engine, a *spare network sidecar* (:mod:`git_iterare.sandbox.warm.spare`):
  the run just started leaves a sidecar, locked, that the next run in the repository
  takes over instead of starting its own (a container start: about 0.2 s);
* on a remote engine, a *spare worktree* (:mod:`git_iterare.runner.placement.spares`):
  the base checked out ahead into volumes the next run takes over, writing only what
  differs (seconds, for a large repository).

The launch goes through :class:`Warmup` at four points (before its record, before its
trees, to start its sandbox, after it started); with ``docker.warm = false``, or for a
terminal session, each is the plain step (:class:`Plain`), and the launch reads and runs
as if none of this existed. Only this module reaches the warm package.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from git_iterare import ui
from git_iterare.config import Config
from git_iterare.errors import OperationFailed, UserError
from git_iterare.git.repo import Repo

if TYPE_CHECKING:
    from git_iterare.runner.placement import PlacementKind
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox.spec import SandboxSpec
    from git_iterare.sandbox.warm.spare import Taken


@dataclass(frozen=True)
class Started:
    """A started sandbox.

    Attributes:
        container: its agent container's id.
        sidecar: where its network sidecar came from (the record's ``extra.sidecar``):
            ``spare`` (taken over), or ``own``.
    """

    container: str
    sidecar: str = "own"


class Plain:
    """Every step as the launch does it with no start-sooner work."""

    def reserve(self, repo: Repo) -> dict[str, object]:
        """``extra`` keys for the new run's record (a spare worktree it takes over)."""
        return {}

    def unreserve(self, extra: dict[str, object]) -> None:
        """The record :meth:`reserve` was for was never made."""

    def take(self, template: SandboxSpec) -> Taken | None:
        """A spare sidecar for the run ``template`` describes, taken before its trees
        exist (its trees are the spare's from then on), or None."""
        return None

    def start(self, spec: SandboxSpec, fill: Callable[[], object], taken: Taken | None) -> Started:
        """Start the sandbox, in the ``taken`` spare when there is one.

        Raises:
            as :meth:`git_iterare.sandbox.backend.Backend.start`.
        """
        from git_iterare import sandbox

        return Started(sandbox.start(spec, fill))

    def drop(self, taken: Taken | None) -> None:
        """Remove a spare :meth:`take` gave a launch that did not get to start it."""

    def after(self, repo: Repo, record: RunRecord, spec: SandboxSpec, taken: bool) -> None:
        """Once the run started: leave for the next run what it can take over."""



class Warm(Plain):
    """Spare sidecars (local engines) and spare worktrees (remote engines); nothing for
    swarm runs.

    Args:
        kind: the run's placement.
        spare_seconds: ``docker.spare_seconds`` (checked).
    """

    def __init__(self, kind: PlacementKind, spare_seconds: int) -> None:
        self.kind = kind
        self.spare_seconds = spare_seconds

    def reserve(self, repo: Repo) -> dict[str, object]:
        """The repository's spare worktree on a remote engine, taken over (recorded
        first: nothing else would remove it)."""
        if self.kind != "remote":
            return {}
        from git_iterare.runner.placement.spares import claim_spare

        spare = claim_spare(repo)
        return {"spare": spare.to_json()} if spare is not None else {}

    def unreserve(self, extra: dict[str, object]) -> None:
        """Remove the spare worktree :meth:`reserve` took for a record never made."""
        from git_iterare.runner.placement.spares import drop_spare, spare_in

        spare = spare_in(extra)
        if spare is not None:
            drop_spare(spare)

    def take(self, template: SandboxSpec) -> Taken | None:
        """A spare sidecar waiting in the repository (local engines, Docker's bridge)."""
        if self.kind != "local" or self.spare_seconds <= 0:
            return None
        from git_iterare.sandbox.warm import spare

        return spare.take(template)

    def start(self, spec: SandboxSpec, fill: Callable[[], object], taken: Taken | None) -> Started:
        """Start the sandbox in the ``taken`` spare (given the run first), else as
        :class:`Plain` does.

        Raises:
            as :meth:`git_iterare.sandbox.backend.Backend.start`.
        """
        if taken is not None:
            from git_iterare.sandbox.warm import spare

            container = spare.start(spec, fill, taken)
            if container is not None:
                return Started(container, sidecar="spare")
        return super().start(spec, fill, None)

    def drop(self, taken: Taken | None) -> None:
        if taken is not None:
            from git_iterare.sandbox.warm import spare

            spare.drop(taken)

    def after(self, repo: Repo, record: RunRecord, spec: SandboxSpec, taken: bool) -> None:
        """Leave a spare sidecar for the next run (in a thread the process waits for at
        exit: ``execute`` returns, or follows the run, meanwhile), or on a remote engine
        check the run's base out into a spare worktree. Failing to is not the run's
        failure: the next run makes its own."""
        if self.kind == "remote":
            from git_iterare.runner.placement.spares import make_spare

            try:
                make_spare(repo, str(record.base_commit), spec.sidecar_image,
                           (spec.agent_uid, spec.agent_gid))
            except (OperationFailed, UserError, OSError) as exc:
                ui.warn(f"no worktree was prepared on the Docker engine for the next run: "
                        f"{exc}")
            return
        if self.kind != "local":  # a swarm's runs take nothing over yet
            return
        from git_iterare.sandbox.warm import spare

        if not spare.wanted(spec, self.spare_seconds, taken):
            return
        seconds = self.spare_seconds

        def make() -> None:
            with contextlib.suppress(Exception):
                spare.make(spec, seconds)

        threading.Thread(target=make, name="spare-sidecar").start()


def spare_seconds(config: Config) -> int:
    """``docker.spare_seconds``, checked (see :mod:`git_iterare.sandbox.warm.spare`).

    Raises:
        UserError: it is neither 0 nor 10 seconds to an hour.
    """
    from git_iterare.sandbox.warm.spare import MAX_SECONDS, MIN_SECONDS

    seconds = int(config["docker.spare_seconds"])
    if seconds != 0 and not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise UserError(f"docker.spare_seconds must be 0 (none) or {MIN_SECONDS} to "
                        f"{MAX_SECONDS} seconds, not {seconds}",
                        hint="fix it with `git iterare config`, or set 0")
    return seconds


def door(config: Config, kind: PlacementKind, *, tty: bool = False) -> Plain:
    """The start-sooner work for a run of placement ``kind``: :class:`Warm`, or
    :class:`Plain` with ``docker.warm = false`` and for a terminal session (which never
    takes a spare).

    Raises:
        UserError: ``docker.spare_seconds`` out of range.
    """
    seconds = spare_seconds(config)
    if tty or not config["docker.warm"]:
        return Plain()
    return Warm(kind, seconds)


def remove_spares(repo: Repo) -> int:
    """Remove the spare sidecars waiting for the repository's next run; return how many.
    Asks the engine only when a spare's folder exists."""
    from git_iterare.runner.paths import state_root
    from git_iterare.sandbox.warm.spare import remove_all

    return remove_all(state_root(repo), str(repo.main_work_tree))
