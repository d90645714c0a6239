"""Ending a run's trees: whether they hold work not on its branch, and removing them
(worktree, run gitdir, branch) only when nothing would be lost, or with ``force``.

Commits are never deleted from the object store (the run record keeps them reachable);
what the agent wrote is read with :mod:`git_iterare.git.runrefs` and
:mod:`git_iterare.git.safegit`.
"""

from __future__ import annotations

from dataclasses import dataclass

from git_iterare.errors import OperationFailed
from git_iterare.git import checkout, safegit
from git_iterare.git.repo import Repo, common_git, is_ancestor, rev, tree_of
from git_iterare.git.runrefs import read_run_ref, work_refs
from git_iterare.runner.workspace import (
    CONTAINER_OBJECTS,
    RunWorkspace,
    checkout_map_path,
    delete_branch,
    not_fetched,
    prepare_run,
    remove_run_files,
    worktree_on_engine,
)


def unfinished_work(repo: Repo, ws: RunWorkspace, head: str | None) -> str | None:
    """Describe work of a run not yet on its branch, or None when there is none.

    Looks for commits in the run gitdir not imported, and for changes in the worktree not
    committed (compared with the branch head ``head``).
    """
    problems = []
    if ws.gitdir.is_dir():
        try:
            run_head = read_run_ref(ws.gitdir, ws.ref)
        except OperationFailed as exc:
            run_head, problems = None, [exc.message]
        if run_head and (head is None or not is_ancestor(repo, run_head, head)):
            problems.append("the run gitdir has commits that were not imported")
        elif not problems:
            refs = work_refs(ws.gitdir, ws.ref)
            stray = [name for name, value in refs or ()
                     if head is None or not is_ancestor(repo, value, head)]
            if refs is None:
                problems.append("the run gitdir has branches or a stash that could not "
                                "all be checked")
            elif stray:
                problems.append("the run gitdir has commits that were not imported ("
                                + ", ".join(stray[:3]) + (" and more" if stray[3:] else "")
                                + ": git stash, or other branches)")
    if head is not None and ws.tree.is_dir() and not ws.tree.is_symlink() \
            and not worktree_on_engine(ws):  # an empty host copy holds no work
        plan = checkout.plan_snapshot(repo.common_dir, ws.tree, ws.base_commit,
                                      checkout_map_path(ws), ws.ref, commit=False)
        problems.extend(plan.pending)
        with safegit.safe_git(repo.common_dir, ws.tree, attributes=plan.attributes,
                              filters=plan.filter_text, skipped=not_fetched(ws),
                              scan=plan.scan) as view:
            tree = view.snapshot(head, drop=ws.included, drop_blobs=ws.included_blobs,
                                 unchanged=plan.unchanged,
                                 gitlinks=plan.gitlinks)
        if tree != tree_of(repo, head):
            problems.append("the worktree has uncommitted changes")
    return "; ".join(problems) or None


def reuse_run(repo: Repo, previous: RunWorkspace, run_id: str,
              agent_uid: int | None = None, *, alternates: str = CONTAINER_OBJECTS
              ) -> RunWorkspace:
    """Start a new run from where ``previous`` ended (``--reuse RUN``).

    The new run gets its own branch, created at the head of ``previous.branch`` in the
    main repository, and its own worktree; the previous run is left as it is (its
    worktree and branch stay until cleanup). The previous run must be finished: work the
    agent left uncommitted, or commits not yet imported, would silently be missing from
    the new run's base.

    Raises:
        OperationFailed: the previous run's branch is missing, or it has unfinished work;
            and whatever :func:`prepare_run` raises.
    """
    head = rev(repo, previous.ref)
    if head is None:
        raise OperationFailed(f"run {previous.run_id} has no branch {previous.branch}")
    pending = unfinished_work(repo, previous, head)
    if pending:
        raise OperationFailed(f"run {previous.run_id} has unfinished work ({pending})",
                              hint="finish that run first so its work is committed")
    return prepare_run(repo, run_id, head, agent_uid, alternates=alternates)


@dataclass(frozen=True)
class CleanupResult:
    """What :func:`cleanup_run` removed.

    Attributes:
        run_id: the run.
        removed_worktree: the worktree existed and was removed.
        removed_gitdir: the run gitdir (and gitfile) existed and were removed.
        deleted_branch: hex id the deleted branch pointed at, None when it did not exist.
    """

    run_id: str
    removed_worktree: bool
    removed_gitdir: bool
    deleted_branch: str | None


def cleanup_run(repo: Repo, ws: RunWorkspace, *, force: bool = False,
                merged: bool = False) -> CleanupResult:
    """Remove a run's worktree, run gitdir and branch.

    Refuses, unless ``force``, when that would drop work: the branch head is not reachable
    from any local branch outside ``iterare/*`` (not merged), the run gitdir has commits
    not imported, or the worktree has changes not committed (run not finished). Commits
    are never deleted from the object store (the run record keeps them reachable).

    Args:
        merged: the run's result is known to be merged (``git iterare merge --squash``
            leaves its head unreachable from any branch): skip only the reachability
            check; changes made in the worktree since are still protected.

    Raises:
        OperationFailed: unmerged or unfinished work and not ``force`` (hint names the
            command to use).
        ExternalError: git failed.
    """
    head = rev(repo, ws.ref)
    if not force:
        problems = []
        if head is not None and not merged and not _merged(repo, head):
            problems.append(f"{ws.branch} is not merged into any local branch")
        pending = unfinished_work(repo, ws, head)
        if pending:
            problems.append(pending)
        if problems:
            raise OperationFailed(
                f"run {ws.run_id} has work that would be lost: {'; '.join(problems)}",
                hint=f"`git iterare merge {ws.run_id}` first, or "
                     f"`git iterare cleanup --force {ws.run_id}`")
    removed_worktree, removed_gitdir = remove_run_files(repo, ws)
    if head is not None:
        delete_branch(repo, ws, head)
    return CleanupResult(run_id=ws.run_id, removed_worktree=removed_worktree,
                         removed_gitdir=removed_gitdir, deleted_branch=head)


def _merged(repo: Repo, head: str) -> bool:
    """True when ``head`` is reachable from a local branch outside ``iterare/``."""
    out = common_git(repo, "for-each-ref", f"--contains={head}", "--format=%(refname)",
                     "refs/heads/").stdout.split()
    return any(not ref.startswith("refs/heads/iterare/") for ref in out)


