"""Bringing a run's work back into the user's repository.

:func:`finish_run` does three things, in this order, and is idempotent:

1. *Import*: read ``refs/heads/iterare/<id>`` from the run gitdir (a plain file or
   ``packed-refs`` line, no symlinks, no symbolic refs), then copy every object reachable
   from it that the main repository lacks, reading the run gitdir's *own* object dir with
   dulwich (its ``info/alternates`` is ignored: the agent could point it anywhere), checking
   each object's id against its content and its type against where it was referenced.
   The git CLI never runs inside the run gitdir.
2. *Autocommit*: stage the worktree with :mod:`git_iterare.git.safegit` (no hooks, filters or
   config from the agent) on top of the imported head, and when the tree differs write a
   commit (``git commit-tree``, author and committer the agent) with trailers.
3. *Move the branch*: ``refs/heads/iterare/<id>`` in the main repository, with dulwich
   compare-and-swap and a reflog message; then the host worktree's index is replaced by
   the one just built, so ``git status`` in the run worktree on the host is clean.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import boundedfs, proc
from git_iterare import limits as lim
from git_iterare.errors import OperationFailed, UserError
from git_iterare.git import checkout, safegit
from git_iterare.git.objectcopy import copy_objects
from git_iterare.git.repo import (
    Repo,
    common_git,
    is_ancestor,
    reflog_identity,
    rev,
    rev_list,
    tree_of,
)
from git_iterare.git.runrefs import HEX40, read_run_ref
from git_iterare.runner.workspace import (
    AGENT_EMAIL,
    AGENT_NAME,
    RunWorkspace,
    checkout_map_path,
    chown_tree,
    not_fetched,
    objects_view_path,
    untouched_path,
    worktree_admin_dir,
    worktree_on_engine,
)
from git_iterare.timings import phase

if TYPE_CHECKING:
    pass

#: Why a nested repository's files are not committed (:attr:`FinishResult.skipped`).
NESTED_REASON = "a nested git repository: its new files are not committed"

TRAILER_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")


@dataclass(frozen=True)
class Changes:
    """Size of a run's work, base to head (``git diff --numstat``, renames off).

    Attributes:
        files: files changed.
        insertions: lines added (binary files count 0).
        deletions: lines removed.
        binary: files changed that git counts no lines of (binary).
    """

    files: int
    insertions: int
    deletions: int
    binary: int = 0


@dataclass(frozen=True)
class FinishResult:
    """Result of :func:`finish_run`.

    Attributes:
        head: hex id ``iterare/<id>`` points at now.
        commits: the run's commits, base (excluded) to head, oldest first.
        autocommitted: this call wrote a commit of uncommitted work.
        imported_objects: objects copied from the run gitdir by this call.
        changes: base..head size.
        nested_repos: nested repositories in the worktree that were not committed.
        skipped: paths of the worktree not committed (FIFOs, sockets, devices, files and
            directories over a limit, and the nested repositories again, with
            :data:`NESTED_REASON`; see :class:`~git_iterare.git.safegit.Skipped`).
        rejected_head: why the run gitdir's branch was not imported (a symlinked or
            symbolic ref, a corrupt object, history not descending from the base or
            diverged, a commit holding a path git refuses), or None. The worktree is
            committed all the same, so its files are not lost; the rejected commits stay
            in the run gitdir until cleanup (which then needs ``force``).
        notes: one-line warnings about what was imported in an unusual way (the agent
            committed on another branch or a detached HEAD: those commits were imported
            onto ``iterare/<id>``, or could not be and their files were committed).
    """

    head: str
    commits: tuple[str, ...]
    autocommitted: bool
    imported_objects: int
    changes: Changes
    nested_repos: tuple[str, ...]
    rejected_head: str | None = None
    skipped: tuple[safegit.Skipped, ...] = ()
    notes: tuple[str, ...] = ()


def commit_message(message: str, trailers: dict[str, str]) -> str:
    """``message`` followed by a trailer block (``Key: value`` lines).

    Raises:
        UserError: a trailer key is not ``[A-Za-z0-9-]+`` or a value spans lines.
    """
    lines = []
    for key, value in trailers.items():
        if not TRAILER_KEY.fullmatch(key) or "\n" in value or "\r" in value:
            raise UserError(f"invalid commit trailer {key!r}: {value!r}")
        lines.append(f"{key}: {value}\n")
    body = message.strip() or "iterare: work left uncommitted by the agent"
    return f"{body}\n\n{''.join(lines)}" if lines else f"{body}\n"


def _changes(repo: Repo, base: str, head: str) -> Changes:
    out = common_git(repo, "diff", "--numstat", "-z", "--no-renames", "--no-ext-diff",
                     "--no-textconv", base, head).stdout
    files = ins = dels = binary = 0
    for record in filter(None, out.split("\0")):
        added, removed, _ = record.split("\t", 2)
        files += 1
        ins += int(added) if added.isdigit() else 0
        dels += int(removed) if removed.isdigit() else 0
        binary += added == "-"
    return Changes(files=files, insertions=ins, deletions=dels, binary=binary)


def _return_ownership(repo: Repo, worktree: Path) -> None:
    """As root, give the run worktree back to the main worktree's owner.

    The sandbox gave it back to this process's uid and gid; when the main worktree's owner
    is another (root working in a user's repository), the user must be able to use git in
    it (git refuses a worktree owned by someone else: ``safe.directory``). When the owner
    is this uid and gid, it is theirs already: no walk.
    """
    if os.geteuid() != 0 or repo.main_work_tree is None:
        return
    owner = os.stat(repo.main_work_tree)
    top = os.lstat(worktree)
    if (owner.st_uid, owner.st_gid) == (os.getuid(), os.getgid()) == (top.st_uid, top.st_gid):
        return  # the sandbox gave all of it back to this uid and gid, or this process wrote it
    chown_tree(worktree, owner.st_uid, owner.st_gid)


def _move_branch(repo: Repo, ws: RunWorkspace, old: str, new: str, reason: str) -> None:
    """Compare-and-swap ``ws.ref`` from ``old`` to ``new`` with a reflog message."""
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref
    from dulwich.repo import Repo as DulwichRepo

    with DulwichRepo(str(repo.common_dir)) as main:
        if not main.refs.set_if_equals(
                Ref(ws.ref.encode()), ObjectID(old.encode()), ObjectID(new.encode()),
                message=f"iterare: finish run {ws.run_id}: {reason}".encode(),
                committer=reflog_identity(repo)):
            raise OperationFailed(f"{ws.branch} moved while finishing the run; "
                                  "finish it again")


_SIDE_BRANCH = re.compile(r"refs/heads/[A-Za-z0-9._/+-]{1,200}")


def _moved_head(ws: RunWorkspace) -> tuple[str | None, str]:
    """The commit the run gitdir's HEAD is on when the agent moved it off ``ws.ref``.

    Read like :func:`~git_iterare.git.runrefs.read_run_ref`: a regular file, no
    symlinks; a symbolic HEAD must name a plain ``refs/heads/...`` branch.

    Returns:
        (hex id or None when HEAD is still on ``ws.ref`` or unreadable, a description
        such as ``branch sidework`` or ``a detached HEAD`` for messages).

    Raises:
        OperationFailed: HEAD or the branch it names is odd (a symlink, not a hex id...).
    """
    head_file = ws.gitdir / "HEAD"
    try:
        value = boundedfs.read_regular(head_file, lim.MAX_REF_FILE_BYTES,
                                       limit_name="MAX_REF_FILE_BYTES").decode(
            "utf-8", "replace").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None, ""
    if value.startswith("ref:"):
        name = value[4:].strip()
        if name == ws.ref:
            return None, ""
        parts = name.split("/")
        if not _SIDE_BRANCH.fullmatch(name) or any(p in ("", ".", "..") for p in parts) \
                or name.endswith(".lock"):
            raise OperationFailed(f"the run's HEAD names an odd branch {name[:60]!r}")
        return read_run_ref(ws.gitdir, name), "branch " + name.removeprefix("refs/heads/")
    if HEX40.fullmatch(value):
        return value, "a detached HEAD"
    raise OperationFailed(f"the run's HEAD does not hold a commit id (got {value[:60]!r})")


def _check_paths(repo: Repo, head: str) -> None:
    """Refuse ``head`` when a commit of it that no ref of the repository reaches (the
    agent's) holds a path git refuses to record (``..``, any case of ``.git`` and its
    other aliases: :mod:`git_iterare.git.pathnames`): git cannot check it out, and a
    remote checking what it receives refuses it.

    Raises:
        OperationFailed: naming the commit and the path, or there are more commits than
            :data:`~git_iterare.limits.MAX_IMPORT_COMMITS` to check.
    """
    from git_iterare.git import pathnames

    listed = common_git(repo, "rev-list", f"--max-count={lim.MAX_IMPORT_COMMITS + 1}",
                        head, "--not", "--all").stdout.split()
    if len(listed) > lim.MAX_IMPORT_COMMITS:
        raise OperationFailed(f"the run's head has more than {lim.MAX_IMPORT_COMMITS} new "
                              "commits (MAX_IMPORT_COMMITS); refusing to import")
    try:
        found = pathnames.first_refused(repo.common_dir / "objects", listed)
    except KeyError as exc:
        raise OperationFailed(f"object {exc} of the run's commits is missing") from None
    if found:
        commit, path, reason = found
        raise OperationFailed(f"its commit {commit[:12]} holds a path git refuses: "
                              f"{pathnames.shown(path)} ({reason})")


def _given(repo: Repo, ws: RunWorkspace, current: str) -> Callable[[str, int], bool]:
    """Whether the run's agent was given an object (hex id, type number) of the main
    repository: a commit of its base's history or of its branch (``current``: earlier
    rounds, automatic commits); a tree or blob of its objects view (a local run's:
    :func:`~git_iterare.runner.workspace.objects_view_path`) or of its branch since the
    base, any when it has no view (a remote run's, whose engine holds its view)."""
    from dulwich.object_store import DiskObjectStore
    from dulwich.objects import Commit, ObjectID

    view = objects_view_path(repo, ws.run_id)
    store = DiskObjectStore(str(view)) if (view / "pack").is_dir() else None
    branch: set[str] = set()
    history: set[str] = set()  # one walk, however many commits an agent's merge names

    def given(sha: str, type_num: int) -> bool:
        if type_num == Commit.type_num:
            if sha in (ws.base_commit, current):
                return True
            if not history:
                history.update(rev_list(repo, ws.base_commit, current))
            return sha in history
        if store is None or ObjectID(sha.encode()) in store:
            return True
        if not branch and current != ws.base_commit:
            branch.update(rev_list(repo, "--objects", "--no-object-names", current, "--not",
                                ws.base_commit))
        return sha in branch

    return given


def _import_moved(repo: Repo, ws: RunWorkspace, tip: str) -> tuple[int, str, str | None]:
    """Import the commits of a HEAD the agent moved off ``ws.ref`` when they descend from ``tip``.

    Returns:
        (objects copied, commit to build on, a warning line or None).
    """
    try:
        moved, where = _moved_head(ws)
        if moved is None or moved == tip:
            return 0, tip, None
        imported = copy_objects(ws.gitdir, moved, repo.common_dir, _given(repo, ws, tip))
        _check_paths(repo, moved)
    except OperationFailed as exc:
        return 0, tip, (f"the agent moved its HEAD off {ws.branch}; its commits there were "
                        f"not imported ({exc.message}); its files were committed instead")
    if is_ancestor(repo, moved, tip):
        return imported, tip, None
    if not is_ancestor(repo, tip, moved) or not is_ancestor(repo, ws.base_commit, moved):
        return imported, tip, (
            f"the agent committed on {where} ({moved[:12]}), which does not descend from "
            f"{ws.branch}; those commits were not imported, their files were committed "
            "instead")
    count = len(common_git(repo, "rev-list", f"{tip}..{moved}").stdout.split())
    return imported, moved, (f"the agent committed on {where}: its {count} commit(s) "
                             f"there were imported onto {ws.branch}")


def _import_head(repo: Repo, ws: RunWorkspace, current: str
                 ) -> tuple[int, str, str | None]:
    """Import the run gitdir's branch; return (objects copied, commit to build on, note).

    When the agent moved HEAD to another branch or detached it, the commits there that
    descend from the run's branch are imported too (the note says so).

    Raises:
        OperationFailed: the ref or an object is odd, the head does not descend from the
            base, it diverged from ``current``, or a commit holds a path git refuses.
    """
    if not ws.gitdir.is_dir():
        return 0, current, None
    run_head = read_run_ref(ws.gitdir, ws.ref)
    imported, tip = 0, current
    if run_head and run_head != current:
        imported = copy_objects(ws.gitdir, run_head, repo.common_dir,
                                _given(repo, ws, current))
        if not is_ancestor(repo, ws.base_commit, run_head):
            raise OperationFailed(f"the run's head {run_head[:12]} does not descend from "
                                  f"its base {ws.base_commit[:12]}; not importing it")
        _check_paths(repo, run_head)
        if is_ancestor(repo, current, run_head):
            tip = run_head
        elif not is_ancestor(repo, run_head, current):
            raise OperationFailed(f"the run's head {run_head[:12]} and {ws.branch} "
                                  f"({current[:12]}) have diverged; not importing it")
    more, tip, note = _import_moved(repo, ws, tip)
    return imported + more, tip, note


def finish_run(repo: Repo, ws: RunWorkspace, trailers: dict[str, str], message: str
               ) -> FinishResult:
    """Import the agent's commits, commit what it left uncommitted, move ``iterare/<id>``.

    Safe to call again: a second call imports nothing and commits nothing.

    Args:
        repo: the user's repository.
        ws: the run's workspace.
        trailers: e.g. ``{"Iterare-Run": id, "Iterare-Agent": "claude", "Iterare-Prompt":
            "prompts/x.md"}``, appended to the automatic commit's message.
        message: first line(s) of the automatic commit's message.

    Returns:
        The result.

    Raises:
        OperationFailed: the branch is missing, or it moved concurrently. (A run gitdir
            branch that cannot be imported is reported in ``rejected_head`` instead.)
        UserError: a bad trailer.
    """
    current = rev(repo, ws.ref)
    if current is None:
        raise OperationFailed(f"branch {ws.branch} does not exist; the run cannot be finished")
    imported, tip, rejected, note = 0, current, None, None
    try:
        with phase("finish.import"):
            imported, tip, note = _import_head(repo, ws, current)
    except OperationFailed as exc:  # keep going: the worktree still gets committed
        rejected = exc.message
    autocommitted = False
    new = tip
    nested: tuple[str, ...] = ()
    skipped: tuple[safegit.Skipped, ...] = ()
    admin = worktree_admin_dir(repo, ws.worktree)
    # A remote run's host worktree that was never filled holds none of its files: only
    # its commits are imported (committing it would delete everything).
    if ws.worktree.is_dir() and not ws.worktree.is_symlink() and not worktree_on_engine(ws):
        _return_ownership(repo, ws.worktree)
        text = commit_message(message, trailers)
        plan = checkout.plan_snapshot(
            repo.common_dir, ws.worktree, ws.base_commit, checkout_map_path(ws), ws.ref,
            commit=True, message=text,
            env={"GIT_AUTHOR_NAME": AGENT_NAME, "GIT_AUTHOR_EMAIL": AGENT_EMAIL,
                 "GIT_COMMITTER_NAME": AGENT_NAME, "GIT_COMMITTER_EMAIL": AGENT_EMAIL},
            untouched=untouched_path(ws))
        with safegit.safe_git(repo.common_dir, ws.worktree, attributes=plan.attributes,
                              filters=plan.filter_text, skipped=not_fetched(ws),
                              scan=plan.scan) as view:
            with phase("finish.add"):
                tree = view.snapshot(tip, drop=ws.included, drop_blobs=ws.included_blobs,
                                     unchanged=plan.unchanged, gitlinks=plan.gitlinks)
            nested = tuple(n for n in view.nested_repos if n not in plan.submodule_paths)
            # Named as not committed (a warning; cleanup keeps them): skipped paths, but
            # not a tracked file still as checked out (a large file the base has), and
            # repositories the agent made, whose new files no commit here takes.
            as_checked_out = {path for _, _, path in plan.unchanged}
            skipped = tuple(sorted((*(s for s in view.skipped if s.path not in as_checked_out),
                                    *plan.skipped, *(safegit.Skipped(n, NESTED_REASON, True)
                                                     for n in nested)),
                                   key=lambda s: s.path))
            if tree != tree_of(repo, tip):
                # The agent's identity for author and committer: the commit never depends
                # on the user's (user.useConfigOnly without an email would refuse it).
                env = {"GIT_AUTHOR_NAME": AGENT_NAME, "GIT_AUTHOR_EMAIL": AGENT_EMAIL,
                       "GIT_COMMITTER_NAME": AGENT_NAME, "GIT_COMMITTER_EMAIL": AGENT_EMAIL}
                new = proc.git("commit-tree", tree, "-p", tip, "-F", "-",
                               cwd=view.scratch, env={**view.env(), **env},
                               scrub_git_env=True,
                               input=text).stdout.strip()
                autocommitted = True
            if new != current:
                reason = "commit uncommitted work" if autocommitted else "import commits"
                _move_branch(repo, ws, current, new, reason)
            if admin is not None:  # host view of the run worktree: clean after finish
                tmp = admin / "index.iterare-tmp"
                shutil.copyfile(view.index_file, tmp)
                os.replace(tmp, admin / "index")
    elif new != current:
        _move_branch(repo, ws, current, new, "import commits")
    with phase("finish.changes"):
        commits = common_git(repo, "rev-list", "--reverse", f"{ws.base_commit}..{new}"
                             ).stdout.split()
        changes = _changes(repo, ws.base_commit, new)
    return FinishResult(head=new, commits=tuple(commits), autocommitted=autocommitted,
                        imported_objects=imported, changes=changes, nested_repos=nested,
                        rejected_head=rejected, skipped=skipped,
                        notes=(note,) if note else ())


def hand_round(repo: Repo, ws: RunWorkspace, head: str) -> list[str]:
    """Give a loop's run gitdir the ``head`` its round's finish made (:func:`finish_run`),
    so that the agent's next round builds on it (its commits then descend from it): the
    objects of the run's commits since its base in one pack (the agent's view of the
    objects holds the base's history only), its branch and ``HEAD`` naming ``head``, and
    the worktree's index, clean against it
    (:func:`git_iterare.runner.livetree.hand_head`). Call with the trees given back.
    Returns the files written, relative to the run gitdir.

    Raises:
        ExternalError: git failed to pack.
        OperationFailed: the worktree is not registered, or the gitdir could not be
            written.
    """
    import tempfile

    from git_iterare.runner.livetree import hand_head
    from git_iterare.runner.placement.packs import pack_reachable

    admin = worktree_admin_dir(repo, ws.worktree)
    if admin is None:
        raise OperationFailed(f"{ws.worktree} is not a registered worktree any more")
    root = repo.common_dir / "iterare" / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{ws.run_id}.round-", dir=root))
    try:
        pack = pack_reachable(repo, head, [ws.base_commit], scratch)
        hand_head(ws.gitdir, ws.ref, head, [pack.pack, pack.index], admin / "index")
        return [f"objects/pack/{pack.pack.name}", f"objects/pack/{pack.index.name}", ws.ref,
                "HEAD", "index"]
    except OSError as exc:
        raise OperationFailed(f"cannot give the run's gitdir its round's head: "
                              f"{exc.strerror or exc}") from None
    finally:
        boundedfs.remove_tree(scratch)
