"""Reviewing and merging a run's branch into the user's current branch.

Merging is something the user expects git itself to do, so it is ``git merge`` in the
user's worktree, with three guarantees on top:

* It refuses to start when tracked files have uncommitted changes (staged or not), even
  ones the merge would not touch. ``git merge --abort`` cannot always give back changes
  that were uncommitted before a conflicted merge (git-merge(1) warns about this), and
  "the tree exactly as before" is the promise; untracked files are fine, since git refuses
  to overwrite them before changing anything.
* On conflict (or any failure) it restores the previous state exactly: ``git merge
  --abort`` when a merge is in progress, then ``git reset --hard`` to the previous HEAD
  (safe because tracked files were clean), and raises :class:`OperationFailed` naming
  the conflicting files.
* Ctrl-C cannot cut it half-way: git runs in a session of its own (out of reach of the
  terminal's SIGINT, which would kill it in the middle of its checkout and leave some of
  the run's files in the user's tree), Ctrl-C is noted meanwhile, and the merge is then
  undone like a failed one; the command ends with one line saying so (exit 130).

Hooks are switched off for the merge and the commit (``core.hooksPath=/dev/null``): the
merged content is the agent's, and a hook directory inside the tree (``core.hooksPath =
.githooks``) would otherwise run what the agent wrote there at once. Run
:func:`git_iterare.git.hostexec.host_executable_changes` first to show such files.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_iterare import proc
from git_iterare.errors import ExitCode, ExternalError, OperationFailed, UserError
from git_iterare.git.repo import Repo

NO_HOOKS = ("-c", "core.hooksPath=/dev/null")
#: Most file names an error line names; the rest are counted.
_PATHS_NAMED = 5
_HEX40 = re.compile(r"[0-9a-f]{40}\Z")


@dataclass(frozen=True)
class MergeResult:
    """Result of :func:`merge_run`.

    Attributes:
        branch: what was merged.
        head_before: HEAD before, hex.
        head_after: HEAD after, hex (equal to ``head_before`` when up to date).
        fast_forward: HEAD simply moved to the branch head.
        squashed: the work was squashed into one commit.
        up_to_date: the branch was already merged; nothing happened.
        detached: HEAD was detached (no branch records the merge).
    """

    branch: str
    head_before: str
    head_after: str
    fast_forward: bool
    squashed: bool
    up_to_date: bool
    detached: bool = False


def _top(repo: Repo) -> Path:
    if repo.work_tree is None:
        raise UserError("this is a bare repository; run `git iterare merge` in a worktree")
    return repo.work_tree


def diff_run(repo: Repo, base: str, head: str, git_args: Sequence[str] = ()) -> int:
    """Run ``git diff [OPTIONS] BASE HEAD -- [PATHS]`` and show its output, through the
    pager git would use on a terminal (:func:`git_iterare.ui.page`).

    What the agent wrote is untrusted: every character of the diff a terminal would act
    on is made visible (:func:`git_iterare.ui.sanitize`), but for the colors git itself
    adds (on a terminal, as ``git diff`` colors there, unless the options say otherwise).

    Args:
        repo: the user's repository.
        base: commit-ish (the run's base).
        head: commit-ish (the run's branch).
        git_args: the user's diff options (``--stat``, ``-w``...), then optionally ``--``
            and paths.

    Returns:
        git's exit status (0, or 1 with ``--exit-code`` when there are differences).

    Raises:
        ExternalError: git could not be started.
    """
    args = list(git_args)
    paths: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, paths = args[:cut], args[cut + 1:]
    from git_iterare import ui

    colors = [] if any(a.startswith(("--color", "--no-color")) for a in args) else [
        "--color=always" if ui.color_enabled(sys.stdout) else "--no-color"]
    result = proc.git("diff", *colors, *args, base, head, "--", *paths, cwd=_top(repo),
                      check=False, text=False)
    if result.returncode not in (0, 1):  # git's own error: as git says it
        sys.stderr.write(bytes(result.stderr).decode("utf-8", "replace"))
        return int(result.returncode)
    text = bytes(result.stdout).decode("utf-8", "surrogateescape")
    # split() with a group: the odd parts are the escapes matched.
    ui.page("".join(part if n % 2 else ui.sanitize(part)
                    for n, part in enumerate(_SGR_SPLIT.split(text))), "diff", cwd=_top(repo))
    return int(result.returncode)


#: The color escapes git writes (``ESC [ ... m``), which are kept; everything else a
#: terminal acts on is made visible.
_SGR_SPLIT = re.compile(r"(\x1b\[[0-9;]*m)")


def _git(top: Path, *args: str, check: bool = True, own_group: bool = False
         ) -> subprocess.CompletedProcess[Any]:
    return proc.git(*NO_HOOKS, *args, cwd=top, check=check, own_group=own_group)


def _rev(top: Path, rev: str) -> str | None:
    result = _git(top, "rev-parse", "--verify", "--quiet", rev, check=False)
    return str(result.stdout.strip()) if result.returncode == 0 else None


def _restore(top: Path, head_before: str) -> None:
    """Put HEAD, index and tracked files back to ``head_before`` (tracked were clean)."""
    if _rev(top, "MERGE_HEAD") is not None:
        _git(top, "merge", "--abort", check=False, own_group=True)
    _git(top, "reset", "-q", "--hard", head_before, own_group=True)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[list[int]]:
    """Within the block, Ctrl-C (SIGINT) is noted, not raised: the list it yields gets an
    item per signal, and the first one prints a line saying the checkout is being put
    back. Outside the main thread (where Python cannot take signals) the list stays
    empty."""
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        if not noted:
            os.write(2, b"\ninterrupted: putting the checkout back as it was...\n")
        noted.append(signum)

    try:
        previous = signal.signal(signal.SIGINT, note)
    except ValueError:  # not the main thread
        yield noted
        return
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


#: What git can be in the middle of in a worktree, found as git status finds it
#: (wt-status.c ``wt_status_get_state``), in that order: (file in the worktree's gitdir,
#: what is in progress, how to go on or end it). A cherry-pick or revert of several commits
#: keeps ``sequencer/`` between two of them; its todo list says which of the two it is.
_IN_PROGRESS = (
    ("MERGE_HEAD", "a merge", "conclude it with `git commit` or abort it with "
                              "`git merge --abort`"),
    ("rebase-apply/applying", "`git am`", "finish it with `git am --continue` or abort it "
                                          "with `git am --abort`"),
    ("rebase-apply", "a rebase", "finish it with `git rebase --continue` or abort it with "
                                 "`git rebase --abort`"),
    ("rebase-merge", "a rebase", "finish it with `git rebase --continue` or abort it with "
                                 "`git rebase --abort`"),
    ("CHERRY_PICK_HEAD", "a cherry-pick", "finish it with `git cherry-pick --continue` or "
                                          "abort it with `git cherry-pick --abort`"),
    ("REVERT_HEAD", "a revert", "finish it with `git revert --continue` or abort it with "
                                "`git revert --abort`"),
    ("sequencer/todo", "a cherry-pick", "finish it with `git cherry-pick --continue` or "
                                        "abort it with `git cherry-pick --abort`"),
    ("BISECT_LOG", "a bisect", "end it with `git bisect reset`"),
)


def refuse_in_progress(repo: Repo) -> None:
    """Refuse to merge while git is in the middle of a merge, rebase, ``git am``,
    cherry-pick, revert or bisect in the current worktree, as git's own commands refuse:
    a merge then commits into what that operation is building (a stopped ``git rebase
    -i`` has a detached HEAD the merge would move).

    Raises:
        OperationFailed: one is in progress; the line names it and how to finish or abort
            it.
    """
    for name, what, how in _IN_PROGRESS:
        path = repo.git_dir / name
        if not os.path.lexists(path):
            continue
        if name == "sequencer/todo" and _sequencer_reverts(path):
            what, how = "a revert", how.replace("cherry-pick", "revert")
        raise OperationFailed(f"{what} is in progress in this worktree; not merging",
                              hint=how)


def _sequencer_reverts(todo: Path) -> bool:
    """Whether the sequencer's todo list (``sequencer/todo``) is of ``git revert``: its
    first command is ``revert`` (or ``r``) rather than ``pick``."""
    try:
        with open(todo, "rb") as file:
            first = file.read(64).split(None, 1)
    except OSError:
        return False
    return bool(first) and first[0] in (b"revert", b"r")


def detached_head(repo: Repo) -> str | None:
    """The commit HEAD is at when the current worktree's HEAD is detached, else None
    (a branch is checked out, or no commit is).

    Raises:
        UserError: bare repository.
    """
    top = _top(repo)
    if _git(top, "symbolic-ref", "--quiet", "HEAD", check=False).returncode == 0:
        return None
    return _rev(top, "HEAD")


def _named(paths: list[str]) -> str:
    """The first :data:`_PATHS_NAMED` of ``paths``, then how many more."""
    more = len(paths) - _PATHS_NAMED
    return ", ".join(paths[:_PATHS_NAMED]) + (f" and {more} more" if more > 0 else "")


def _reason(stderr: str) -> str:
    """git's explanation from its stderr: the ``error:``/``fatal:`` lines, joined."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    picked = [ln for ln in lines if ln.startswith(("error:", "fatal:"))]
    if picked and picked[-1].endswith(":"):  # "would be overwritten by merge:" + paths
        at = lines.index(picked[-1])
        paths = [ln for ln in lines[at + 1:] if not ln.startswith(("Please", "Aborting"))]
        picked[-1] += " " + _named(paths)
    return "; ".join(picked) or (lines[-1] if lines else "unknown error")


def _changed_assume_unchanged(top: Path) -> list[str]:
    """Tracked files marked assume-unchanged (``git ls-files -v``: a lowercase tag) whose
    content differs from the index: git status hides them, and undoing a failed merge
    (``reset --hard``) would overwrite them."""
    marked = [line[2:] for line in _git(top, "ls-files", "-v", "-z").stdout.split("\0")
              if line[:1].islower()]
    if not marked:
        return []
    staged = {}
    for entry in _git(top, "ls-files", "-s", "-z").stdout.split("\0"):
        info, _, path = entry.partition("\t")
        if path:
            staged[path] = info.split(" ")[1]
    present = [p for p in marked if os.path.isfile(top / p) and not os.path.islink(top / p)]
    changed = []
    for start in range(0, len(present), 500):  # a command line holds only so many
        batch = present[start:start + 500]
        # As checked out (the index may hold CRLF that the clean filter would convert)
        # or as git would add it now: either equal to the index means unchanged.
        raw = _git(top, "hash-object", "--no-filters", "--", *batch).stdout.split()
        clean = _git(top, "hash-object", "--", *batch).stdout.split()
        changed += [p for p, r, c in zip(batch, raw, clean, strict=True)
                    if staged.get(p) not in (r, c)]
    return sorted(changed + [p for p in marked if not os.path.lexists(top / p)])


def _written_by_merge(top: Path, head: str, target: str) -> list[str]:
    """The paths merging ``target`` into ``head`` writes: those whose content differs
    between HEAD and the merge's result, and the conflicted ones, as ``git merge-tree
    --write-tree`` (git 2.38) works them out, with the user's merge settings (renames of
    folders move the run's new files too). With an older git: what the run changed since
    the merge base."""
    merged = _git(top, "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z",
                  head, target, check=False)
    if merged.returncode in (0, 1) and merged.stdout:
        tree, *rest = merged.stdout.split("\0")
        conflicted = list(itertools.takewhile(bool, rest))
        changed = _git(top, "diff", "--name-only", "-z", "--no-renames", head,
                       tree.strip()).stdout.split("\0")
        return [p for p in dict.fromkeys((*changed, *conflicted)) if p]
    base = _git(top, "merge-base", head, target, check=False).stdout.strip()
    if not base:
        return []
    return [p for p in _git(top, "diff", "--name-only", "-z", "--no-renames",
                            "--diff-filter=ACMRT", base, target).stdout.split("\0") if p]


def _untracked_in_the_way(top: Path, head: str, target: str) -> list[str]:
    """The paths the merge writes (:func:`_written_by_merge`) that HEAD does not track but
    the worktree has, as a file, link or folder, or under a parent that is an untracked
    file or link. git refuses to overwrite untracked files, but overwrites or deletes
    ignored ones (a local ``.env``, a folder of keys): neither may happen."""
    written = _written_by_merge(top, head, target)
    tracked = set(_git(top, "ls-files", "-z").stdout.split("\0"))
    found = []
    for path in written:
        if path in tracked:
            continue
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            here = top / prefix
            if prefix in tracked or not os.path.lexists(here):
                continue
            if os.path.islink(here) or not here.is_dir():
                found.append(prefix)
                break
            if depth == len(parts) and _holds_untracked(top, prefix, tracked):
                found.append(prefix)  # a folder git removes holds what it does not track
                break
    return sorted(set(found))


def _holds_untracked(top: Path, folder: str, tracked: set[str]) -> bool:
    """Whether the folder ``folder`` holds a file or link git does not track (a folder of
    tracked files alone is the merge's to replace)."""
    from git_iterare import boundedfs

    for here, _, files in boundedfs.walk(top / folder):
        rel = os.path.relpath(here, top)
        if any(f"{rel}/{name}" not in tracked for name in files):
            return True
    return False


def merge_run(repo: Repo, branch: str, *, squash: bool = False, no_ff: bool = False,
              message: str = "") -> MergeResult:
    """Merge ``branch`` into the current branch of the user's worktree (or its detached
    HEAD: callers ask first, see :func:`detached_head`).

    Args:
        repo: the user's repository; its current worktree receives the merge.
        branch: the run's branch, ``iterare/<id>``; or the run's result commit (40 hex)
            when that branch is not here (a run fetched from a teammate).
        squash: make one commit of the run's work instead of a merge.
        no_ff: always make a merge commit.
        message: commit message; git's default when empty.

    Returns:
        What happened.

    Raises:
        UserError: bare repository, no commit checked out, unknown branch, or merging a
            branch into itself; ``squash`` with ``no_ff``.
        OperationFailed: a merge, rebase, cherry-pick, revert or bisect is in progress
            (:func:`refuse_in_progress`); tracked files have uncommitted changes, or
            files git does not track (ignored ones too) are where the run writes; or the
            merge conflicted or failed (the tree, index and HEAD are as they were; the
            message names the conflicting files).
    """
    if squash and no_ff:
        raise UserError("--squash and --no-ff cannot be used together")
    top = _top(repo)
    refuse_in_progress(repo)
    head_before = _rev(top, "HEAD")
    if head_before is None:
        raise UserError("no commit is checked out here; commit something first")
    if _HEX40.fullmatch(branch):
        target = _rev(top, f"{branch}^{{commit}}")
        if target is None:
            raise UserError(f"commit {branch} is not in this repository",
                            hint="fetch the run's records first (`git iterare fetch`)")
    else:
        target = _rev(top, f"refs/heads/{branch}^{{commit}}")
        if target is None:
            raise UserError(f"no branch {branch}")
    current = _git(top, "symbolic-ref", "--quiet", "HEAD", check=False).stdout.strip()
    if current == f"refs/heads/{branch}":
        raise UserError(f"{branch} is checked out here; switch to the branch to merge into")
    dirty = _git(top, "status", "--porcelain", "-z", "--untracked-files=no").stdout
    if dirty:
        raise OperationFailed("tracked files have uncommitted changes; not merging",
                              hint="commit or stash them first (git stash)")
    hidden = _changed_assume_unchanged(top)
    if hidden:
        raise OperationFailed(f"{_named(hidden)} changed, though marked assume-unchanged "
                              "(git status does not show it); not merging",
                              hint="commit or stash it first (git update-index "
                                   "--no-assume-unchanged PATH)")
    if _git(top, "merge-base", "--is-ancestor", target, head_before,
            check=False).returncode == 0:
        return MergeResult(branch, head_before, head_before, fast_forward=False,
                           squashed=squash, up_to_date=True, detached=not current)
    in_the_way = _untracked_in_the_way(top, head_before, target)
    if in_the_way:
        raise OperationFailed(f"the run writes {_named(in_the_way)}, which this worktree has "
                              "as files git does not track (ignored ones too); not merging",
                              hint="move them away first: the merge would overwrite or "
                                   "delete them")
    msg = ["-m", message] if message else ["--no-edit"]
    if squash:
        steps = [["merge", "--squash", branch], ["commit", "-q", "--no-verify", *msg]]
    else:
        steps = [["merge", "--no-ff" if no_ff else "--ff", *msg, branch]]
    # git runs out of the terminal's reach and Ctrl-C is only noted meanwhile, so a step is
    # never cut half-way (git killed in its checkout leaves some of the run's files
    # behind); after an interruption the merge is undone like a failed one.
    failure: ExternalError | None = None
    with _interrupts_deferred() as interrupted:
        for step in steps:
            try:
                _git(top, *step, own_group=True)
            except ExternalError as exc:
                failure = exc
                break
            if interrupted:
                break
        if failure is not None or interrupted:
            conflicts = _git(top, "diff", "--name-only", "-z", "--diff-filter=U",
                             check=False).stdout.split("\0") if failure else []
            try:
                _restore(top, head_before)
            except ExternalError as exc:
                what = "interrupted" if interrupted else "failed"
                raise OperationFailed(
                    f"merging {branch} {what} and the checkout could not be put back: "
                    f"{_reason(exc.stderr)}", hint=f"put it back with `git merge --abort`, "
                    f"then `git reset --hard {head_before[:12]}`",
                    exit_code=ExitCode.INTERRUPTED if interrupted else None) from None
    if interrupted:
        raise OperationFailed(f"merging {branch} interrupted; nothing was changed (HEAD is "
                              f"at {head_before[:12]} as before)",
                              exit_code=ExitCode.INTERRUPTED)
    if failure is not None:
        files = [f for f in conflicts if f]
        if files:
            raise OperationFailed(f"merging {branch} conflicts in {_named(files)}; "
                                  "nothing was changed",
                                  hint=f"merge it yourself with `git merge {branch}`")
        raise OperationFailed(f"merging {branch} failed: {_reason(failure.stderr)}; "
                              "nothing was changed")
    head_after = _rev(top, "HEAD") or head_before
    return MergeResult(branch, head_before, head_after,
                       fast_forward=not squash and head_after == target,
                       squashed=squash, up_to_date=False, detached=not current)
