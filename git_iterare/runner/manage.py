"""Acting on runs after launch: stop, diff, merge, cleanup."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import ui
from git_iterare.errors import IterareError, OperationFailed
from git_iterare.git.repo import Repo, common_git, reflog_identity, rev
from git_iterare.runner.ownership import ran_elsewhere
from git_iterare.runner.paths import state_dir

if TYPE_CHECKING:
    from git_iterare.git.hostexec import FileChange, HostExecChange
    from git_iterare.git.merge import MergeResult
    from git_iterare.runs.record import RunRecord
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox.spec import ContainerInfo


def _store(repo: Repo) -> RunStore:
    from git_iterare.runs.store import RunStore

    return RunStore(repo)


def settle(repo: Repo, record: RunRecord, *, tolerant: bool = False) -> RunRecord:
    """The run's record after finishing it if its sandbox ended unobserved (else with
    where it is now: :func:`~git_iterare.runner.finish.observe`).

    Args:
        tolerant: when the Docker engine cannot be asked, warn and return the record as
            stored instead of failing (for commands that only show records).
    """
    from git_iterare.runs.status import ACTIVE

    if record.status not in ACTIVE:
        return record
    from git_iterare.runner.finish import observe

    try:
        return observe(repo, record.id)
    except IterareError as exc:
        if not tolerant:
            raise
        ui.warn(f"run {record.id} may have ended; its status could not be checked: "
                f"{exc.render()}")
        return record


def running(repo: Repo) -> list[RunRecord]:
    """The runs started here (this machine, this repository) that are still active, newest
    first, after those whose sandbox ended unobserved are finished.

    Raises:
        OperationFailed: the Docker engine of an active run cannot be reached.
    """
    from git_iterare.runner.finish import reconcile
    from git_iterare.runner.ownership import is_local
    from git_iterare.runs.status import ACTIVE

    reconcile(repo)
    return [r for r in _store(repo).list(statuses=ACTIVE) if is_local(repo, r)]


def stop(repo: Repo, run_id: str, grace_seconds: float = 10,
         progress: Callable[[str], None] = lambda line: None) -> RunRecord:
    """Stop a running run; its work is committed and its status becomes ``stopped``.

    Args:
        repo: the repository.
        run_id: the run's id.
        grace_seconds: seconds between SIGTERM and SIGKILL.
        progress: called with a line saying the run is being stopped, before its sandbox
            is signalled (an agent that ignores SIGTERM makes that take the whole grace).

    Raises:
        OperationFailed: the run is not active.
    """
    from git_iterare import sandbox
    from git_iterare.runner.finish import finish
    from git_iterare.runs.status import ACTIVE, STOPPED

    store = _store(repo)
    record = settle(repo, store.get(run_id))
    if record.status not in ACTIVE:
        raise _not_running(record)
    from git_iterare.runner.finish import LIVE_STATES
    from git_iterare.runner.ownership import container_of, engine_of, is_local
    from git_iterare.sandbox.engine import using

    if not is_local(repo, record):
        raise OperationFailed(f"run {run_id} runs on another machine or repository",
                              hint="stop it where it was started")
    from git_iterare.runner.driver import left_to_driver

    info = container_of(repo, record)
    if left_to_driver(repo, record):
        return _stop_loop(repo, store, record, info, grace_seconds, progress)
    if info is not None and info.state not in LIVE_STATES:
        # It ended by itself since settle looked: finished by whoever is first (its
        # watcher, maybe, whose warnings this user does not see), it was not stopped.
        raise _not_running(finish(repo, run_id, wait=True))
    if info is not None:
        store.update(run_id, lambda r: r.with_extra(stop_requested=True),
                     "stop requested")
        progress(f"stopping run {run_id} (SIGKILL after {grace_seconds:g} s if it has not "
                 "ended)")
        with using(engine_of(record)):
            sandbox.stop(info.id, grace_seconds)
        return finish(repo, run_id, wait=True)
    if record.container:
        return finish(repo, run_id)  # its sandbox is gone: finished as lost
    from git_iterare.runner.finish import launch_pending

    if launch_pending(repo, record):
        raise OperationFailed(f"run {run_id} is still being launched",
                              hint="try again in a moment")
    return store.transition(run_id, STOPPED, error="stopped before its sandbox started")


def _stop_loop(repo: Repo, store: RunStore, record: RunRecord, info: ContainerInfo | None,
               grace_seconds: float, progress: Callable[[str], None]) -> RunRecord:
    """Stop a loop that its driver (another process) runs: the stop is asked for, the
    round's agent or its check is signalled, and its driver, which ends the loop as
    ``stopped`` with the work of every round kept, is waited for."""
    from git_iterare import sandbox
    from git_iterare.runner.finish import finish
    from git_iterare.runner.ownership import engine_of
    from git_iterare.runner.rounds import check_name
    from git_iterare.runs.loops import current_round
    from git_iterare.sandbox.engine import using

    store.update(record.id, lambda r: r.with_extra(stop_requested=True), "stop requested")
    progress(f"stopping run {record.id}, a loop in round {current_round(record)} (SIGKILL "
             f"after {grace_seconds:g} s if it has not ended)")
    with using(engine_of(record)):
        for container in (info.id if info is not None else None,
                          check_name(record.id, current_round(record))):
            found = sandbox.inspect(container) if container else None
            if found is not None and found.state == "running":
                sandbox.stop(found.id, grace_seconds)
    return finish(repo, record.id, wait=True)


def _not_running(record: RunRecord) -> OperationFailed:
    """The refusal to stop a run that has ended: its status, and its error if it has one
    (the process that finished it may have been its watcher, whose warnings went to the
    run's ``watch.log``)."""
    from git_iterare.ui import sanitize_line

    error = f": {sanitize_line(record.error)}" if record.error else ""
    return OperationFailed(f"run {record.id} is not running (status {record.status}{error})",
                           hint=f"see `git iterare show {record.id}`")


def _base_commit(record: RunRecord, what: str) -> str:
    """The run's base commit; imported runs may not know it."""
    if not record.base_commit:
        branch = record.branch or record.head or "its branch"
        raise OperationFailed(f"run {record.id} has no known base commit (it was imported "
                              f"from iterare and its branch's start was not found)",
                              hint=f"{what} its branch yourself: git {what} {branch}")
    return str(record.base_commit)


def _result_commit(record: RunRecord) -> str:
    if not record.head:
        if (record.extra or {}).get("unfinished"):
            raise OperationFailed(f"run {record.id} has no result: its work could not be "
                                  "committed and is kept in its worktree",
                                  hint=f"commit it with `git iterare finish {record.id}`")
        raise OperationFailed(f"run {record.id} has no result to use (status {record.status})",
                              hint=f"see `git iterare show {record.id}`")
    return str(record.head)


def diff(repo: Repo, record: RunRecord, git_args: list[str]) -> int:
    """``git diff <base> <result>`` of a finished run, with the user's diff options.

    Returns:
        git's exit status.

    Raises:
        OperationFailed: the run is still active or has no result.
    """
    from git_iterare.git.merge import diff_run
    from git_iterare.runs.status import ACTIVE

    record = settle(repo, record)
    if record.status in ACTIVE and record.container:
        from git_iterare.runner.ownership import is_local
        from git_iterare.runner.placement import placement_of

        # The agent's work so far, where its placement can show it.
        live = placement_of(record).live_tree(repo, record) if is_local(repo, record) else None
        if live is not None:
            return diff_run(repo, _base_commit(record, "diff"), live, git_args)
    if record.status in ACTIVE:
        raise OperationFailed(f"run {record.id} is still {record.status}",
                              hint=f"its diff is ready when it ends: `git iterare log -f "
                                   f"{record.id}`")
    base = _base_commit(record, "diff")
    return diff_run(repo, base, _result_commit(record), git_args)


def diff_between(repo: Repo, first: RunRecord, second: RunRecord, git_args: list[str]) -> int:
    """``git diff <first's result> <second's result>``, with the user's diff options: how
    two runs (two attempts of a group, say) differ.

    Returns:
        git's exit status.

    Raises:
        OperationFailed: either run is still active or has no result.
    """
    from git_iterare.git.merge import diff_run
    from git_iterare.runs.status import ACTIVE

    heads = []
    for record in (settle(repo, first), settle(repo, second)):
        if record.status in ACTIVE:
            raise OperationFailed(f"run {record.id} is still {record.status}",
                                  hint=f"wait for it: `git iterare log -f {record.id}`")
        heads.append(_result_commit(record))
    return diff_run(repo, heads[0], heads[1], git_args)


def diffstat(repo: Repo, record: RunRecord) -> str | None:
    """``git diff --stat`` from the run's base to its result, for ``show``; None when the
    run has no result yet, a note when its commits are not in this repository.

    Raises:
        ExternalError: git cannot be started.
    """
    if not (record.base_commit and record.head):
        return None
    result = common_git(repo, "diff", "--stat", f"{record.base_commit}..{record.head}",
                        check=False)
    if result.returncode != 0:
        return "(commits not available in this repository)"
    return str(result.stdout)


def patch(repo: Repo, record: RunRecord) -> bytes | None:
    """``git diff`` (a patch, no colors, no external diff driver) from the run's base to
    its result, for ``show -p``; None when the run has no result yet or its commits are
    not in this repository.

    Raises:
        ExternalError: git cannot be started.
    """
    if not (record.base_commit and record.head):
        return None
    result = common_git(repo, "diff", "--no-color", "--no-ext-diff",
                        f"{record.base_commit}..{record.head}", check=False, text=False)
    return bytes(result.stdout) if result.returncode == 0 else None


def files_if_known(repo: Repo, record: RunRecord) -> list[FileChange] | None:
    """:func:`changed_files`, or None when the run has no result yet, no known base, or
    its commits are not in this repository (``show`` then says less, it does not fail)."""
    from git_iterare.errors import ExternalError

    if not (record.base_commit and record.head):
        return None
    try:
        return changed_files(repo, record)
    except (ExternalError, OperationFailed):
        return None


@dataclass(frozen=True)
class MergeOutcome:
    """What ``merge`` did: the record after it and git's view of the merge."""

    record: RunRecord
    result: MergeResult


@dataclass(frozen=True)
class MergeReview:
    """What ``merge`` shows before merging, and asks about.

    Attributes:
        changes: every changed file (``reason`` set on those that would execute on the
            host).
        warnings: the record's warnings about how the agent's commits came back (it
            rewrote history, say), one line each (:func:`runs.render.recorded_warnings`).
        deletions: one line (without the run's name) when the run deletes files under
            ``.iterare/`` or many of its base's (:mod:`git_iterare.git.deletions`), else
            None.
    """

    changes: list[FileChange]
    warnings: tuple[str, ...] = ()
    deletions: str | None = None

    @property
    def host_executables(self) -> int:
        """How many changed files would execute on the host."""
        return sum(1 for change in self.changes if change.reason)


def host_executable_changes(repo: Repo, record: RunRecord) -> list[HostExecChange]:
    """Files changed by a run that would execute on the host (hooks, build scripts, ...)."""
    from git_iterare.git.hostexec import host_executable_changes as changes

    return changes(repo, _base_commit(record, "merge"), _result_commit(record))


def changed_files(repo: Repo, record: RunRecord) -> list[FileChange]:
    """Every file a run changed (:class:`git_iterare.git.hostexec.FileChange`), with the reason
    when it would execute on the host."""
    from git_iterare.git.hostexec import changed_files as changes

    return changes(repo, _base_commit(record, "merge"), _result_commit(record))


def merge(repo: Repo, record: RunRecord, *, squash: bool, no_ff: bool,
          confirm: Callable[[MergeReview], bool],
          confirm_detached: Callable[[str], bool] = lambda head: True,
          round_number: int | None = None) -> MergeOutcome:
    """Merge a finished run's result into the current branch of the worktree the command
    runs in.

    The run may have run elsewhere (its record fetched from a teammate): then its branch
    is not here and its result commit, which the record keeps reachable, is merged.

    Args:
        repo: the repository.
        record: the run.
        squash, no_ff: as ``git merge``.
        confirm: called with the :class:`MergeReview` (every changed file, the record's
            warnings, the deletions worth a question); returns whether to go on.
        confirm_detached: called with HEAD's commit (hex) when HEAD is detached, before
            anything else is shown; returns whether to merge into it.
        round_number: of a loop, merge the state after this round (its head commit)
            rather than the result.

    Raises:
        UserError: ``round_number`` names no round of the run with a commit.
        OperationFailed: still active, no result, a merge, rebase, cherry-pick, revert
            or bisect in progress in the worktree, refused, or a conflict (the user's tree
            and index are left as they were; the conflicting files are named).
    """
    from git_iterare.git.merge import detached_head, merge_run, refuse_in_progress
    from git_iterare.runs.status import ACTIVE, MERGED

    record = settle(repo, record)
    if record.status in ACTIVE:
        raise OperationFailed(f"run {record.id} is still {record.status}",
                              hint=f"wait for it (`git iterare log -f {record.id}`) or stop it")
    if record.status == "cleaned":
        raise OperationFailed(f"run {record.id} was cleaned up; merge its commit "
                              f"{record.head} with git merge if you still want it")
    head = _result_commit(record)
    if round_number is not None:
        record = _at_round(record, round_number)
        head = str(record.head)
    refuse_in_progress(repo)  # before asking about the detached HEAD a stopped rebase has
    detached = detached_head(repo)
    if detached is not None and not confirm_detached(detached):
        raise OperationFailed(f"HEAD is detached at {detached[:12]}: the merge would move "
                              "it and no branch would hold the result; not merging",
                              hint="switch to a branch first (git switch NAME), or rerun "
                                   "with --yes")
    from git_iterare.git.deletions import deletions
    from git_iterare.runs.render import recorded_warnings

    changes = changed_files(repo, record)
    review = MergeReview(changes, tuple(recorded_warnings(record)),
                         deletions(repo, _base_commit(record, "merge"), changes).warning())
    if not confirm(review):
        what = ["changes files that run on your machine"] if review.host_executables else []
        what += [review.deletions] if review.deletions else []
        raise OperationFailed(f"merge cancelled: the run {' and '.join(what)}",
                              hint="review them, then rerun with --yes")
    message = f"Merge run {record.id} ({record.prompt_name or record.name})"
    result = merge_run(repo, _merge_ref(repo, record, head), squash=squash, no_ff=no_ff,
                       message=message)
    store = _store(repo)
    if record.status != MERGED:
        record = store.transition(record.id, MERGED)
    if result.head_after:
        # What holds the merge (HEAD after it, or the HEAD that already held the run):
        # cleanup checks a branch still holds it (a merge undone with git reset leaves
        # the status "merged", and the run's work only here).
        from git_iterare.runner.ownership import machine_id
        from git_iterare.runs.extra import MergedAs

        where = MergedAs(commit=result.head_after, host=machine_id(),
                         repo=str(repo.main_work_tree))
        record = store.update(record.id, lambda r: r.with_extra(merged_as=where),
                              f"{record.id} merged as")
    return MergeOutcome(record=record, result=result)


def merge_holds(repo: Repo, record: RunRecord) -> bool:
    """Whether ``record``'s status ``merged`` still stands: when it was merged here, the
    commit that holds its merge (``extra.merged_as``) is on a local branch outside
    ``iterare/``. A record merged elsewhere (a teammate's, come with fetch) or by an older
    version is taken at its word."""
    from git_iterare.runner.ownership import machine_id

    if record.status != "merged":
        return False
    merged_as = (record.extra or {}).get("merged_as")
    if not isinstance(merged_as, dict) or (merged_as.get("host"), merged_as.get("repo")) != (
            machine_id(), str(repo.main_work_tree)):
        return True
    commit = merged_as.get("commit")
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40,64}", commit):
        return True
    return _reachable_elsewhere(repo, commit)


def _at_round(record: RunRecord, number: int) -> RunRecord:
    """``record`` as if its result were the state after round ``number`` of its loop
    (its ``head`` that round's; its status and rounds as they are).

    Raises:
        UserError: the run is no loop, or has no such round with a result.
    """
    from git_iterare.errors import UserError
    from git_iterare.runs.loops import loop_of, rounds_of

    rounds = rounds_of(record)
    if loop_of(record) is None or not rounds:
        raise UserError(f"--round {number}: run {record.id} has no rounds (it ran no loop)",
                        hint="drop --round")
    heads = {r.get("round"): r.get("head") for r in rounds}
    head = heads.get(number)
    if not isinstance(head, str) or not head:
        raise UserError(f"--round {number}: run {record.id} has rounds 1 to {len(rounds)}"
                        + (f"; round {number} left no commit" if number in heads else ""),
                        hint="see its rounds with `git iterare show`")
    return record.replace(head=head)


def _merge_ref(repo: Repo, record: RunRecord, head: str) -> str:
    """The run's branch when it still points at the recorded result, else the commit."""
    branch = record.branch or ""
    found = rev(repo, f"refs/heads/{branch}^{{commit}}") if branch else None
    return branch if found == head else head


def _left_uncommitted(record: RunRecord, worktree: Path) -> list[str]:
    """The paths the automatic commit skipped (``extra.skipped``: over the limits, special
    files) that are still in the run's worktree."""
    skipped = (record.extra or {}).get("skipped")
    items = skipped.get("paths") if isinstance(skipped, dict) else None
    paths = [item.get("path") for item in items if isinstance(item, dict)] \
        if isinstance(items, list) else []
    return [p for p in paths if isinstance(p, str) and p and not p.startswith("/")
            and ".." not in p.split("/") and os.path.lexists(worktree / p)]


def cleanup(repo: Repo, record: RunRecord, *, force: bool) -> RunRecord:
    """Remove a run's worktree, branch and container; keep its record and commits.

    Raises:
        OperationFailed: the run is active (without ``force``), or has unmerged work and
            ``force`` is not given.
    """
    from git_iterare.runs.status import ACTIVE, CLEANED

    record = settle(repo, record)
    if record.status == CLEANED:
        return record
    if ran_elsewhere(repo, record):
        return _cleanup_elsewhere(repo, record, force=force)
    if record.extra.get("unfinished") and not force:
        raise OperationFailed(f"run {record.id} has work that would be lost: it could not "
                              "be committed and is kept in its worktree",
                              hint=f"`git iterare finish {record.id}` first, or "
                                   f"`git iterare cleanup --force {record.id}`")
    if record.status in ACTIVE:
        if not force:
            raise OperationFailed(f"run {record.id} is still {record.status}",
                                  hint=f"stop it first (`git iterare stop {record.id}`) or "
                                       f"use --force")
        record = stop(repo, record.id)
    from git_iterare.runner.paths import run_lock

    # Two cleanups of one run at once: the second waits, then finds it cleaned.
    with run_lock(repo, record.id):
        record = _store(repo).get(record.id)
        if record.status == CLEANED:
            _drop_lock(repo, record.id)  # made anew when the first had removed it
            return record
        return _remove_run(repo, record, force=force)


def _drop_lock(repo: Repo, run_id: str) -> None:
    """Remove the lock file of a cleaned run: it is never finished again."""
    (state_dir(repo, run_id).parent / f"{run_id}.lock").unlink(missing_ok=True)


def _remove_run(repo: Repo, record: RunRecord, *, force: bool) -> RunRecord:
    """:func:`cleanup` of a run that is no longer active, under its lock.

    Raises:
        OperationFailed: as :func:`cleanup`.
    """
    from git_iterare import sandbox
    from git_iterare.runner.finish import has_worktree
    from git_iterare.runner.teardown import cleanup_run
    from git_iterare.runner.workspace import open_run
    from git_iterare.runs import legacy
    from git_iterare.runs.status import CLEANED

    merged = merge_holds(repo, record)
    from git_iterare.runner.placement import placement_of

    placement = placement_of(record)
    if not legacy.is_legacy(record):
        # What a launch cut short left the agent's uid or root's (the sidecar's output),
        # with or without a worktree: unprivileged, the user could not remove it.
        placement.release(repo, record)
    if legacy.is_legacy(record):  # iterare's worktree (workspaces/<name>) and branch
        for note in legacy.cleanup(repo, record, force=force or merged):
            ui.warn(f"run {record.id}: {note}")
    elif record.base_commit and has_worktree(repo, record):
        ws = open_run(repo, record.id, record.base_commit)
        left = _left_uncommitted(record, ws.tree)
        if left and not force:
            raise OperationFailed(
                f"run {record.id} left files that could not be committed and would be "
                f"deleted: {', '.join(ui.elide_path(p) for p in left[:5])}"
                + (f" and {len(left) - 5} more" if len(left) > 5 else ""),
                hint=f"copy them out of {ws.tree}, or `git iterare cleanup --force "
                     f"{record.id}`")
        # A squash merge leaves the run's commits unreachable from the user's branches,
        # though their content is merged: the merged status is the proof.
        cleanup_run(repo, ws, force=force, merged=merged)
    from git_iterare.runner.finish import ENGINE_CLEARED
    from git_iterare.runner.ownership import engine_of
    from git_iterare.sandbox.engine import using

    if not legacy.is_legacy(record) and not (record.extra or {}).get(ENGINE_CLEARED):
        with using(engine_of(record)):
            if record.container or not record.started:  # or what a launch cut short left
                sandbox.remove(record.id, str(repo.main_work_tree))
            placement.clear(record)  # what its placement keeps there
    shutil.rmtree(state_dir(repo, record.id), ignore_errors=True)
    done = _store(repo).transition(record.id, CLEANED, worktree=None, container=None)
    _drop_lock(repo, record.id)  # last: a cleaned run is never finished again
    return done



def forget(repo: Repo, run_id: str, *, force: bool = False) -> RunRecord:
    """Delete the record of a cleaned-up run (``refs/iterare/runs/<id>``, with
    ``git update-ref -d`` against the record commit just read, so a concurrent update
    wins): its prompt, log and results go; its commits stay wherever a branch, tag or
    other ref holds them. Notes on those commits (``refs/notes/iterare``) are kept, as
    is a copy fetched from a remote (``refs/iterare-remote/``).

    Returns:
        The record as it was.

    Raises:
        OperationFailed: no such run; :func:`forget_refusal` refuses it; or the record
            changed meanwhile.
    """
    from git_iterare.runs.ids import run_ref

    snap = _store(repo).snapshot(run_id)
    problem = forget_refusal(repo, snap.record, force=force)
    if problem is not None:
        raise problem
    result = common_git(repo, "update-ref", "-m", f"iterare: forget {run_id}", "-d",
                        run_ref(run_id), snap.commit.decode(), check=False)
    if result.returncode != 0:
        raise OperationFailed(f"the record of run {run_id} changed while forgetting it",
                              hint="run forget again")
    return snap.record


def forget_refusal(repo: Repo, record: RunRecord, *, force: bool = False
                   ) -> OperationFailed | None:
    """Why :func:`forget` refuses ``record``, or None: it is not cleaned up, or (without
    ``force``) :func:`only_record_holds` its work, which ``git gc`` would then delete."""
    from git_iterare.runs.status import CLEANED

    run_id = record.id
    if record.status != CLEANED:
        return OperationFailed(f"run {run_id} is {record.status}, not cleaned up; its record "
                               "is kept", hint=f"`git iterare cleanup {run_id}` first")
    if not force and only_record_holds(repo, record):
        head = str(record.head)[:12]
        return OperationFailed(f"run {run_id}: its work ({head}) is on no branch; without "
                               "its record `git gc` would delete it",
                               hint=f"keep it on a branch (`git branch NAME {head}`), or "
                                    f"`git iterare forget --force {run_id}`")
    return None


def only_record_holds(repo: Repo, record: RunRecord) -> bool:
    """Whether ``record``'s result commit is in this repository and reachable from no ref
    but the record's own, and no merge of it is on a local branch (a squash merge
    leaves the run's commits unreachable though their content is merged): then deleting
    the record leaves the work to ``git gc``."""
    from git_iterare.runs.ids import run_ref

    head = record.head or ""
    if not re.fullmatch(r"[0-9a-f]{40,64}", head):
        return False
    if common_git(repo, "cat-file", "-e", f"{head}^{{commit}}", check=False).returncode != 0:
        return False  # its commits are not here: nothing here to lose
    merged_as = (record.extra or {}).get("merged_as")
    commit = merged_as.get("commit") if isinstance(merged_as, dict) else None
    if isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40,64}", commit) and \
            _reachable_elsewhere(repo, commit):
        return False
    holders = common_git(repo, "for-each-ref", f"--contains={head}",
                         "--format=%(refname)").stdout.split()
    return all(ref == run_ref(str(record.id)) for ref in holders)


def _cleanup_elsewhere(repo: Repo, record: RunRecord, *, force: bool) -> RunRecord:
    """Clean up what exists here of a run that ran elsewhere: a local branch
    ``iterare/<id>`` someone made from its result. The shared record is left as it is:
    the run's worktree, branch and container are on the machine that ran it, and marking
    the record ``cleaned`` would make that machine's cleanup skip them once pushed.

    Raises:
        OperationFailed: the local branch is not merged (without ``force``), or moved
            while being deleted.
    """
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref
    from dulwich.repo import Repo as DulwichRepo


    branch = record.branch or f"iterare/{record.id}"
    ref = f"refs/heads/{branch}"
    head = rev(repo, f"{ref}^{{commit}}")
    if head:
        # A merge claimed elsewhere covers the commit the record names, not commits made
        # here on top of it (the record may come from whoever can push to the remote).
        merged = merge_holds(repo, record) and head == record.head
        if not force and not merged and not _reachable_elsewhere(repo, head):
            raise OperationFailed(f"run {record.id}: {branch} is not merged into any local "
                                  "branch", hint=f"`git iterare merge {record.id}` first, "
                                                 f"or `git iterare cleanup --force {record.id}`")
        with DulwichRepo(str(repo.common_dir)) as main:
            if not main.refs.remove_if_equals(
                    Ref(ref.encode()), ObjectID(head.encode()),
                    message=f"iterare: remove local branch of run {record.id}".encode(),
                    committer=reflog_identity(repo)):
                raise OperationFailed(f"{branch} moved while removing it; run cleanup again")
    shutil.rmtree(state_dir(repo, record.id), ignore_errors=True)
    return record


def _reachable_elsewhere(repo: Repo, head: str) -> bool:
    """True when ``head`` is reachable from a local branch outside ``iterare/``."""
    from git_iterare import proc

    out = proc.git("--git-dir", str(repo.common_dir), "for-each-ref", f"--contains={head}",
                   "--format=%(refname)", "refs/heads/", scrub_git_env=True).stdout.split()
    return any(not ref.startswith("refs/heads/iterare/") for ref in out)
