"""The contract of a placement (see :mod:`git_iterare.runner.placement`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from git_iterare.runs.extra import RunExtra

if TYPE_CHECKING:
    from git_iterare.git.repo import Repo
    from git_iterare.runner.workspace import RunWorkspace
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox.spec import Mount, VolumeTrees

#: The placements a record can name (its ``placement`` field).
PlacementKind = Literal["local", "remote", "swarm"]
KINDS: tuple[PlacementKind, ...] = ("local", "remote", "swarm")


@dataclass(frozen=True)
class RunTrees:
    """A new run's trees, made by :meth:`Placement.make`, as its sandbox gets them.

    Attributes:
        workspace: the run's worktree and gitdir on the host.
        fill: puts the trees' content in (the base's checkout, the files shipped to the
            engine); the sandbox's start calls it while its sidecar starts.
        mounts: bind mounts of the agent's container (host trees), parents first.
        owned: host trees the agent owns while it runs (given to its uid and back).
        volumes: the trees in engine volumes, or None when they are host folders.
        wrapper: argv that runs before the agent's command in its container (and then
            ``exec``s it), or empty.
        facts: what ``fill`` learnt that the record keeps (``extra`` keys), filled by it.
    """

    workspace: RunWorkspace
    fill: Callable[[], object]
    mounts: tuple[Mount, ...] = ()
    owned: tuple[Path, ...] = ()
    volumes: VolumeTrees | None = None
    wrapper: tuple[str, ...] = ()
    facts: RunExtra = field(default_factory=lambda: RunExtra())


class Placement(Protocol):
    """Where a run's trees live (every method may raise OperationFailed when the engine
    cannot be reached; a UserError names what the user must change)."""

    @property
    def kind(self) -> PlacementKind:
        """What the record keeps (``local``, ``remote``, ``swarm``)."""
        ...

    def check(self, repo: Repo, base: str, mounts: Sequence[Mount]) -> None:
        """Refuse, before anything exists, what runs of this placement cannot do with
        ``base`` (hex commit) and the approved ``mounts``.

        Raises:
            UserError: naming what cannot be done and what to do instead.
        """
        ...

    def check_host_folder(self, what: str) -> None:
        """Refuse a sandbox that would mount a folder of this machine (a session on the
        user's checkout, a login writing into the credentials folder); ``what`` names it
        for the message.

        Raises:
            UserError: the engine cannot see this machine's files.
        """
        ...

    def make(self, repo: Repo, record: RunRecord, files: dict[str, bytes]) -> RunTrees:
        """Make the run's trees (branch, worktree and gitdir; on an engine, its
        volumes) for the sandbox of the just-created ``record``, empty until
        :attr:`RunTrees.fill`; ``files`` (absolute path in the agent's container ->
        content: the prompt) are given to the agent read-only.

        Raises:
            UserError, OperationFailed, ExternalError: a tree exists, git failed, the
                engine refused (what was made is removed).
        """
        ...

    def release(self, repo: Repo, record: RunRecord) -> None:
        """Give the run's host trees back to the user when its sandbox may have given them
        to the agent and none gave them back (a launch cut short, a process killed), so
        the user can commit or remove them.

        Raises:
            OperationFailed: the trees could not be given back.
        """
        ...

    def fetch(self, repo: Repo, record: RunRecord, workspace: RunWorkspace) -> list[str]:
        """After the agent ended: bring the run's trees into the host's copies (where the
        sandbox did not work on those); return notes for the user. Call with the run's
        lock held, on the run's engine.

        Raises:
            OperationFailed: the engine cannot be reached or refused: the work is still
                only there, so the run stays active and a later command fetches it.
        """
        ...

    def give_back(self, repo: Repo, record: RunRecord, workspace: RunWorkspace,
                  sandbox: str | None = None) -> None:
        """Make the run's host trees the user's again and inert (set-uid bits and special
        files stripped), after its agent ended: through its sandbox ``sandbox`` while
        that exists.

        Raises:
            OperationFailed: the trees could not be given back (the work is on disk:
                ``git iterare finish`` tries again).
        """
        ...

    def give_again(self, repo: Repo, record: RunRecord, workspace: RunWorkspace,
                   sandbox: str, head: str | None) -> None:
        """After a round of a loop ended and its work was committed (the trees brought
        back and given back first, :meth:`fetch`, :meth:`give_back`): make the trees the
        agent's again for its next round, through the sandbox ``sandbox`` (its agent's
        container), which still runs, their gitdir at the round's ``head`` (hex; the
        agent's next commits build on it: :func:`~git_iterare.runner.importer.hand_round`),
        None to leave it as it is.

        Raises:
            OperationFailed: the trees could not be handed over (the work is committed).
            ExternalError: git failed to pack the round's objects.
        """
        ...

    def ended_by_engine(self, record: RunRecord) -> bool:
        """Whether the engine ended the run's sandbox itself (it restarted, or the
        sandbox was killed there), so its exit says nothing of the agent."""
        ...

    def clear(self, record: RunRecord) -> bool:
        """Remove what this placement keeps of the run on its engine (a finished run's
        trees are on the host by then; a launch that failed needs none of it); whether it
        keeps anything there at all (then a finish records it as cleared, and ``cleanup``
        need not reach that engine again).

        Raises:
            OperationFailed: the engine refused or cannot be reached.
        """
        ...

    def note_where(self, repo: Repo, record: RunRecord) -> None:
        """Record where a live run's sandbox is now when the placement learns it only
        after the start (a swarm's task gets a node once the swarm has room for it), so
        ``list`` and ``show`` can say; nothing when there is nothing new.

        Raises:
            OperationFailed: the engine cannot be reached.
        """
        ...

    def live_tree(self, repo: Repo, record: RunRecord) -> str | None:
        """The tree (hex id, written to the object store) of a live run's worktree as it
        is now, for ``diff``; None when this placement cannot show one while it runs.

        Raises:
            OperationFailed: its trees are gone, or the engine cannot be reached.
        """
        ...
