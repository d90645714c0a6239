"""The ``local`` placement: the engine runs on this machine and bind-mounts the run's trees.

The worktree, run gitdir and gitfile (:mod:`git_iterare.runner.workspace`) are the
sandbox's trees as they are: the sidecar gives them to the agent's uid before it starts
and back to the user after (:func:`reclaim`, set-uid bits and special files stripped);
files the agent reads (the prompt) and the objects of the base's history (the run's view
of the repository's object cache, :mod:`.objectcache`) are host files, mounted read-only
and never the agent's. While the agent runs, the worktree is out of the user's checkout,
and it comes to ``.iterare/worktrees/<id>`` when it is given back
(:mod:`git_iterare.runner.livetree`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import ui
from git_iterare.errors import OperationFailed
from git_iterare.git.repo import Repo
from git_iterare.runner.paths import state_dir
from git_iterare.runner.placement.base import PlacementKind, RunTrees
from git_iterare.runs.extra import RunExtra

if TYPE_CHECKING:
    from git_iterare.runner.workspace import RunWorkspace
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox.spec import Mount


def trees_of(workspace: RunWorkspace) -> tuple[Path, Path, Path]:
    """The host trees the agent owns while it runs: worktree, run gitdir, gitfile."""
    return workspace.tree, workspace.gitdir, workspace.gitfile


def reclaim(record: RunRecord, sandbox: str | None, trees: Sequence[Path],
            out_dir: Path | None = None) -> None:
    """Give the run's ``trees`` (and the sidecar's ``out_dir``) back to the user, set-uid
    bits and special files stripped: in the sandbox's sidecar while it is up (``sandbox``
    names its agent container), else in a container of its own; warn about what was
    removed.

    Raises:
        OperationFailed: the engine refused, or the trees could not be given back.
    """
    from git_iterare import sandbox as engine
    from git_iterare.sandbox.spec import sandbox_name
    from git_iterare.ui import sanitize_line as sanitize

    image = record.extra.get("sidecar_image") or ""
    notes = engine.reclaim(sandbox or f"{sandbox_name(record.id)}-gone", trees, os.getuid(),
                           os.getgid(), image, out_dir)
    for note in notes:
        ui.warn(f"run {record.id}: {sanitize(note)}")


def reclaim_if_foreign(record: RunRecord, trees: Sequence[Path], out_dir: Path,
                       sandbox: str | None = None) -> None:
    """:func:`reclaim` when one of ``trees`` or ``out_dir`` is not the user's: an
    interrupted launch, or a process killed meanwhile, can leave the trees with the
    agent's uid, which the sidecar gives them before the agent starts, and ``out_dir``
    with root. Unprivileged, the user could then neither commit nor remove them.

    Raises:
        OperationFailed: a tree's folder is not the user's to look into (another user's
            repository, reached through a copy of its ``.git`` or ``GIT_WORK_TREE``): its
            trees are never given to this user.
    """
    for path in (*trees, out_dir):
        try:
            if os.lstat(path).st_uid != os.getuid():
                reclaim(record, sandbox, trees, out_dir)
                return
        except FileNotFoundError:
            continue
        except PermissionError:
            raise OperationFailed(f"cannot look at {path} of run {record.id}: permission "
                                  "denied", hint="run it as the user whose repository "
                                                 "this is") from None


class Local:
    """Trees as host folders, bind-mounted into the sandbox."""

    @property
    def kind(self) -> PlacementKind:
        return "local"

    def check(self, repo: Repo, base: str, mounts: Sequence[Mount]) -> None:
        """Nothing a local engine cannot do."""

    def check_host_folder(self, what: str) -> None:
        """A local engine sees this machine's folders."""

    def make(self, repo: Repo, record: RunRecord, files: dict[str, bytes]) -> RunTrees:
        """The run's worktree, run gitdir, gitfile and objects view (empty until
        :attr:`RunTrees.fill` gives the view the base's history from the repository's
        object cache and checks the base out: its ``facts`` then hold ``cached``, what the
        cache added), and ``files`` written into its state folder; their bind mounts.

        Raises:
            as :func:`git_iterare.runner.workspace.make_run`.
        """
        from git_iterare.runner import workspace as wsp
        from git_iterare.sandbox.spec import Mount

        state = state_dir(repo, record.id)
        state.mkdir(parents=True, exist_ok=True)
        mounts = []
        for path, content in sorted(files.items()):
            host = state / Path(path).name
            host.write_bytes(content)
            os.chmod(host, 0o644)
            mounts.append(Mount(host, path, True))
        workspace = wsp.make_run(repo, record.id, str(record.base_commit), live=True)
        facts = RunExtra()

        def fill() -> None:
            facts["cached"] = wsp.fill_run(repo, workspace).to_json()

        return RunTrees(workspace=workspace, fill=fill, mounts=(*workspace.mounts, *mounts),
                        owned=trees_of(workspace), facts=facts)

    def release(self, repo: Repo, record: RunRecord) -> None:
        """The trees (and the sidecar's output folder) back to the user when one is not
        theirs (see :func:`reclaim_if_foreign`)."""
        from git_iterare.runner.workspace import gitdir_path, live_path, worktree_path

        gitdir, live = gitdir_path(repo, record.id), live_path(repo, record.id)
        worktree = live if os.path.lexists(live) else worktree_path(repo, record.id)
        reclaim_if_foreign(record, (worktree, gitdir, gitdir.with_name(record.id + ".gitfile")),
                           state_dir(repo, record.id) / "out")

    def fetch(self, repo: Repo, record: RunRecord, workspace: RunWorkspace) -> list[str]:
        """Nothing to fetch: the sandbox worked on the host's trees."""
        return []

    def give_back(self, repo: Repo, record: RunRecord, workspace: RunWorkspace,
                  sandbox: str | None = None) -> None:
        """The trees and the sidecar's output folder back to the user, inert (see
        :func:`reclaim`), and the worktree into the user's checkout (see
        :func:`git_iterare.runner.workspace.land`). First, while their ctimes still
        tell, the files the agent did not touch are noted for the commit
        (:func:`git_iterare.git.statcache.untouched`)."""
        from git_iterare.git import statcache
        from git_iterare.runner.workspace import land, stat_path, untouched_path
        from git_iterare.timings import phase

        with phase("finish.untouched"):
            statcache.untouched(workspace.tree, stat_path(workspace),
                                state_dir(repo, record.id) / "out" / statcache.STAMP,
                                untouched_path(workspace))
        with phase("finish.give-back"):
            reclaim(record, sandbox, (*trees_of(workspace), state_dir(repo, record.id) / "out"))
        with phase("finish.land"):
            land(repo, workspace)

    def give_again(self, repo: Repo, record: RunRecord, workspace: RunWorkspace,
                   sandbox: str, head: str | None) -> None:
        """The run gitdir at ``head`` (:func:`~git_iterare.runner.importer.hand_round`),
        the worktree out of the user's checkout again
        (:func:`git_iterare.runner.workspace.take_live`), and the trees given to the
        agent's uid by the sandbox's sidecar."""
        from git_iterare import sandbox as engine
        from git_iterare.runner.importer import hand_round
        from git_iterare.runner.workspace import take_live

        if head:
            hand_round(repo, workspace, head)
        live = take_live(repo, workspace)
        engine.reclaim(sandbox, trees_of(live), live.agent_uid, live.agent_gid,
                       record.extra.get("sidecar_image") or "")

    def ended_by_engine(self, record: RunRecord) -> bool:
        """A local sandbox's end is its agent's."""
        return False

    def clear(self, record: RunRecord) -> bool:
        """Nothing of a local run stays on the engine but its containers."""
        return False

    def note_where(self, repo: Repo, record: RunRecord) -> None:
        """Nothing: the run's engine is all there is to know, recorded at its start."""

    def live_tree(self, repo: Repo, record: RunRecord) -> str | None:
        """None: a live local run's diff waits for its end (its worktree is the agent's)."""
        return None

