"""A run's worktree and gitdir: preparing them, finding them again, removing them.

Layout for a run ``<id>`` (``<name>-<8 hex>``) of the repository whose main worktree is
``TOP`` and common dir ``COMMON``:

* branch ``iterare/<id>``, created at the base commit;
* worktree ``TOP/.iterare/worktrees/<id>``, made by ``git worktree add`` (the user can cd
  into it and use git as usual once the run has ended; its admin dir is
  ``COMMON/worktrees/<id>``). While a local run's agent may write it, it is at
  ``COMMON/iterare/live/<id>`` instead, out of the user's checkout
  (:mod:`git_iterare.runner.livetree`);
* run gitdir ``COMMON/iterare/gitdirs/<id>``: the container's own gitdir. HEAD is
  ``ref: refs/heads/iterare/<id>``, its objects dir has an ``info/alternates`` naming the
  objects of the base's history as the container sees them (read-only), config is
  minimal (no hooks, agent identity), the index matches the worktree;
* objects view ``COMMON/iterare/gitdirs/<id>.objects``: hard links to the packs of the
  repository's object cache that hold the base's history and nothing else of the user's
  objects (:mod:`git_iterare.runner.placement.objectcache`), mounted read-only at
  :data:`CONTAINER_OBJECTS`;
* gitfile ``COMMON/iterare/gitdirs/<id>.gitfile`` (``gitdir: /git/run``), mounted
  read-only over the worktree's own ``.git`` file inside the container. Docker cannot
  bind-mount a directory over a file, and a worktree's ``.git`` is a file, so the gitdir
  itself is mounted at :data:`CONTAINER_GITDIR` and reached through this gitfile.

Container mounts (:attr:`RunWorkspace.mounts`): worktree -> ``/workspace`` (rw), gitfile ->
``/workspace/.git`` (ro), run gitdir -> ``/git/run`` (rw), objects view ->
``/git/objects`` (ro). The user's ``.git`` (config, hooks, refs, objects) is never mounted.

Everything the agent can write (worktree, run gitdir) is read back only through
:mod:`git_iterare.git.runrefs` (no symlinks, no symbolic refs),
:mod:`git_iterare.git.objectcopy` (dulwich, bounded) and :mod:`git_iterare.git.safegit`
(hardened git); :mod:`git_iterare.runner.teardown` tells whether a run's trees hold work not
yet on its branch and removes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import boundedfs, proc, ui
from git_iterare import limits as lim
from git_iterare.errors import ExternalError, OperationFailed, UserError
from git_iterare.git import checkout, safegit
from git_iterare.git.repo import (
    Repo,
    commit_of,
    common_git,
    reflog_identity,
)
from git_iterare.runner import livetree
from git_iterare.sandbox.spec import Mount

if TYPE_CHECKING:
    from git_iterare.runner.placement.objectcache import Cached

#: Where the container sees the worktree, the run gitdir, the gitfile and the objects.
CONTAINER_WORKTREE = "/workspace"
CONTAINER_GITDIR = "/git/run"
CONTAINER_GITFILE = "/workspace/.git"
CONTAINER_OBJECTS = "/git/objects"

AGENT_NAME = "git-iterare agent"
AGENT_EMAIL = "agent@git-iterare.invalid"

EXCLUDE_LINE = "/.iterare/worktrees/"

RUN_GITDIR_CONFIG = f"""\
[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
\thooksPath = /dev/null
\tcheckStat = minimal
\ttrustctime = false
[user]
\tname = {AGENT_NAME}
\temail = {AGENT_EMAIL}
"""


@dataclass(frozen=True)
class RunWorkspace:
    """Where a run's files are, and who owns them.

    Attributes:
        run_id: ``<name>-<8 hex>``.
        worktree: the run's linked worktree on the host, where git has it registered
            (and where it is once the run has ended).
        gitdir: the run gitdir (the container's ``.git``), agent-writable.
        gitfile: the file mounted over ``/workspace/.git`` in the container.
        branch: ``iterare/<id>`` (short name; the ref is ``refs/heads/<branch>``).
        base_commit: hex id of the commit the run started from.
        mounts: bind mounts the sandbox must set up, in mount order.
        agent_uid: uid the agent process runs as (never 0, no host account's).
        agent_gid: its gid.
        included: paths copied in from ``.iterare/include`` (relative, ``/``-separated);
            never committed unless the base tracked them.
        included_blobs: the blob ids of their content: a new file holding one of them
            (an included file the agent moved or copied) is not committed either.
        live: where the worktree is while the run's agent may write it
            (:func:`live_path`), or None when it is at ``worktree``.
    """

    run_id: str
    worktree: Path
    gitdir: Path
    gitfile: Path
    branch: str
    base_commit: str
    mounts: tuple[Mount, ...]
    agent_uid: int
    agent_gid: int
    included: tuple[str, ...] = ()
    included_blobs: tuple[str, ...] = ()
    live: Path | None = None

    @property
    def tree(self) -> Path:
        """Where the worktree's files are now: :attr:`live`, else :attr:`worktree`."""
        return self.live or self.worktree

    @property
    def ref(self) -> str:
        """The full ref name, ``refs/heads/iterare/<id>``."""
        return f"refs/heads/{self.branch}"


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` when it is ``<name>-<8 hex>`` by the run-name rule
    (:func:`git_iterare.runs.ids.validate_run_id`).

    Raises:
        UserError: it is not.
    """
    from git_iterare.runs.ids import validate_run_id as check

    return check(run_id)


def _top(repo: Repo) -> Path:
    top = repo.main_work_tree
    if top is None:
        raise UserError("this is a bare repository; run git iterare in a worktree")
    return top


def check_run_dirs(repo: Repo) -> None:
    """Refuse when ``.iterare`` or ``.iterare/worktrees`` is a symlink.

    They live in the user's tree, which merged agent work can change: a committed symlink
    there would make run worktrees (created, chowned, later deleted) land elsewhere.

    Raises:
        UserError: naming the symlink.
    """
    top = _top(repo)
    for path in (top / ".iterare", top / ".iterare" / "worktrees"):
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise UserError(f"{path} is a symlink or not a directory; git iterare keeps run "
                            "worktrees there (remove it and retry)")


def make_run_dirs(repo: Repo) -> tuple[Path, Path, Path]:
    """Create the folders that hold run worktrees (mode 0700: nobody else on the host
    reaches a run's trees), run gitdirs and live worktrees (:func:`live_path`; mode
    :data:`~git_iterare.runner.livetree.LIVE_ROOT_MODE`, which no one but root can list);
    return them.

    Raises:
        UserError: one of them is a symlink (see :func:`check_run_dirs`).
    """
    check_run_dirs(repo)
    folders = (_top(repo) / ".iterare" / "worktrees", repo.common_dir / "iterare" / "gitdirs",
               repo.common_dir / "iterare" / "live")
    for folder, mode in zip(folders, (0o700, livetree.LIVE_ROOT_MODE, livetree.LIVE_ROOT_MODE),
                            strict=True):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(mode)
    return folders


def worktree_path(repo: Repo, run_id: str) -> Path:
    """``<main worktree>/.iterare/worktrees/<id>``."""
    return _top(repo) / ".iterare" / "worktrees" / run_id


def gitdir_path(repo: Repo, run_id: str) -> Path:
    """``<common dir>/iterare/gitdirs/<id>``."""
    return repo.common_dir / "iterare" / "gitdirs" / run_id


def live_path(repo: Repo, run_id: str) -> Path:
    """``<common dir>/iterare/live/<id>``: a local run's worktree while its agent may write
    it (see :mod:`git_iterare.runner.livetree`)."""
    return repo.common_dir / "iterare" / "live" / run_id


def run_gitdir_config(repo: Repo) -> str:
    """The config of a run gitdir: :data:`RUN_GITDIR_CONFIG` and the user's line-ending
    settings."""
    return RUN_GITDIR_CONFIG + safegit.line_ending_config(repo.common_dir)


def objects_view_path(repo: Repo, run_id: str) -> Path:
    """``<common dir>/iterare/gitdirs/<id>.objects``: the objects of the run's base's
    history (:func:`git_iterare.runner.placement.objectcache.give`), mounted read-only at
    :data:`CONTAINER_OBJECTS`; host-only otherwise."""
    return repo.common_dir / "iterare" / "gitdirs" / f"{run_id}.objects"


def ensure_excluded(repo: Repo) -> None:
    """Make sure ``<common dir>/info/exclude`` hides run worktrees from ``git status``."""
    exclude = repo.common_dir / "info" / "exclude"
    text = exclude.read_text() if exclude.exists() else ""
    if EXCLUDE_LINE in text.splitlines():
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    sep = "" if not text or text.endswith("\n") else "\n"
    with exclude.open("a") as f:
        f.write(f"{sep}# git iterare run worktrees\n{EXCLUDE_LINE}\n")


def agent_ids(agent_uid: int | None) -> tuple[int, int]:
    """Choose the uid/gid the agent runs as: ``agent_uid`` when given, else a number no
    host account has and that is not the user's (see
    :func:`git_iterare.sandbox.spec.agent_ids`). The sandbox's sidecar gives the run's
    trees to it while the agent runs, and back to the user afterwards.

    Raises:
        UserError: ``agent_uid`` is 0.
    """
    from git_iterare.sandbox.spec import agent_ids as free_ids

    if agent_uid == 0:
        raise UserError("the agent must not run as root (uid 0); choose another uid")
    if agent_uid is not None:
        return agent_uid, agent_uid
    return free_ids()


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Chown ``path`` and everything below it, never following symlinks (iteratively;
    entries whose path is too long for the system to name are left as they are)."""
    os.lchown(path, uid, gid)
    for top, dirs, files in boundedfs.walk(path):
        for name in dirs + files:
            try:
                os.lchown(os.path.join(top, name), uid, gid)
            except OSError as exc:
                if exc.errno != errno.ENAMETOOLONG:
                    raise


def mounts_for(worktree: Path, gitdir: Path, gitfile: Path, objects: Path
               ) -> tuple[Mount, ...]:
    """The container mounts for a run, parents before children."""
    return (
        Mount(worktree, CONTAINER_WORKTREE, read_only=False),
        Mount(gitfile, CONTAINER_GITFILE, read_only=True),
        Mount(gitdir, CONTAINER_GITDIR, read_only=False),
        Mount(objects, CONTAINER_OBJECTS, read_only=True),
    )


def _project(repo: Repo) -> Path:
    """The worktree whose ``.iterare/include`` and the files it names a run copies in:
    the one the command runs in (:attr:`~git_iterare.git.repo.Repo.project_tree`), as
    for the config and prompts trust reviewed there."""
    top = repo.project_tree
    if top is None:
        raise UserError("this is a bare repository; run git iterare in a worktree")
    return top


def read_include(repo: Repo) -> list[str]:
    """Lines of ``.iterare/include``: comments and blanks dropped; empty without the file.

    Raises:
        UserError: it (or ``.iterare``) is a symlink, is larger than
            :data:`~git_iterare.limits.MAX_PROJECT_FILE_BYTES`, holds more than
            :data:`~git_iterare.limits.MAX_INCLUDE_PATTERNS` lines, or cannot be read.
    """
    data = boundedfs.read_repository_file(_project(repo) / ".iterare", "include")
    # The repository wrote it: any bytes (as trust shows them).
    text = (data or b"").decode("utf-8", "surrogateescape")
    lines = [ln.strip() for ln in text.splitlines()]
    patterns = [ln for ln in lines if ln and not ln.startswith("#")]
    if len(patterns) > lim.MAX_INCLUDE_PATTERNS:
        raise UserError(f".iterare/include has {len(patterns)} lines, more than "
                        f"{lim.MAX_INCLUDE_PATTERNS} (MAX_INCLUDE_PATTERNS)",
                        hint="name the files with fewer globs")
    return patterns


def include_paths(repo: Repo, base: str | None = None) -> tuple[str, ...]:
    """The files ``.iterare/include`` names (paths or globs, one a line), relative, sorted.

    Only regular files inside the worktree the command runs in count: symlinks, paths
    through a symlinked directory, and anything in ``.git`` or ``.iterare`` are skipped;
    so, given ``base`` (a commit), are the paths it tracks: the run's checkout has those
    as the base has them, and its commit records them like any other tracked file
    (copying the user's version in would commit the user's uncommitted edits as the
    agent's).

    Raises:
        UserError: a line is absolute, contains ``..``, or is no usable glob (``.``,
            ``x/***``); the file cannot be read.
    """
    top = _project(repo)
    patterns = read_include(repo)
    for pattern in patterns:
        if pattern.startswith("/") or ".." in Path(pattern).parts:
            raise UserError(f".iterare/include: {pattern!r} must be a relative path inside "
                            "the repository (no '..', no leading '/')")
        try:
            boundedfs.glob_parts(pattern)
        except ValueError:
            raise UserError(f".iterare/include: {pattern!r} is not a file name or glob "
                            "this can use", hint="fix or remove that line") from None
    # One walk for every line, entering only the directories a line can match below;
    # symlinks are neither followed nor taken.
    found = boundedfs.glob_files(top, patterns, skip=(".git", ".iterare"))
    if base is not None and found:
        listed = sorted(found)
        for start in range(0, len(listed), 1000):  # ls-tree takes its paths literally
            found.difference_update(common_git(
                repo, "--literal-pathspecs", "ls-tree", "-r", "-z", "--name-only", base,
                "--", *listed[start:start + 1000]).stdout.split("\0"))
    return tuple(sorted(found))


def copy_includes(repo: Repo, worktree: Path, paths: tuple[str, ...]) -> None:
    """Copy ``paths`` (from :func:`include_paths`) into ``worktree``, keeping their modes."""
    top = _project(repo)
    for rel in paths:
        dest = worktree / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(top / rel, dest)


def _write_run_gitdir(repo: Repo, ws: RunWorkspace, alternates: str) -> None:
    gitdir = ws.gitdir
    for sub in ("objects/pack", "objects/info", "refs/heads/iterare", "refs/tags", "info"):
        (gitdir / sub).mkdir(parents=True, exist_ok=True)
    (gitdir / "HEAD").write_text(f"ref: {ws.ref}\n")
    (gitdir / ws.ref).write_text(ws.base_commit + "\n")
    (gitdir / "config").write_text(run_gitdir_config(repo))
    (gitdir / "objects" / "info" / "alternates").write_text(alternates + "\n")
    (gitdir / "info" / "exclude").write_bytes(run_excludes(repo, ws.included))
    ws.gitfile.write_text(f"gitdir: {CONTAINER_GITDIR}\n")


def run_excludes(repo: Repo, included: Sequence[str]) -> bytes:
    """The run gitdir's ``info/exclude``: the user's (the same ignores inside as outside),
    then the files copied in from ``.iterare/include``, so that the agent's ``git add -A``
    leaves them out as the automatic commit does (the user's global excludes, which may
    name them, are not in the sandbox)."""
    user_exclude = repo.common_dir / "info" / "exclude"
    own = user_exclude.read_bytes() if user_exclude.is_file() else b""
    if own and not own.endswith(b"\n"):
        own += b"\n"
    lines = (safegit.exclude_line(p) for p in included)
    return own + b"".join(os.fsencode(line) + b"\n" for line in lines if line is not None)


def prepare_run(repo: Repo, run_id: str, base: str, agent_uid: int | None = None, *,
                alternates: str = CONTAINER_OBJECTS) -> RunWorkspace:
    """Create branch, worktree and run gitdir for a new run and check its base out
    (:func:`make_run`, then :func:`fill_run`).

    Raises:
        as :func:`make_run` and :func:`fill_run` (what was made is removed).
    """
    ws = make_run(repo, run_id, base, agent_uid, alternates=alternates)
    try:
        fill_run(repo, ws)
    except BaseException:
        with contextlib.suppress(Exception):
            remove_run_files(repo, ws)
            delete_branch(repo, ws, ws.base_commit)
        raise
    return ws


def make_run(repo: Repo, run_id: str, base: str, agent_uid: int | None = None, *,
             alternates: str = CONTAINER_OBJECTS, on_engine: bool = False,
             live: bool = False) -> RunWorkspace:
    """Create branch, worktree and run gitdir for a new run; the worktree stays empty
    until :func:`fill_run` (or, ``on_engine``, for good: the engine checks it out).

    The worktree and run gitdir may exist already as empty folders, and the gitfile as
    an empty file (made ahead for the run's sandbox, which mounts them).

    Args:
        repo: the user's repository (any of its worktrees).
        run_id: ``<name>-<8 hex>``.
        base: commit-ish the run starts from.
        agent_uid: uid for the agent; see :func:`agent_ids`.
        alternates: path of the objects of the base's history as git inside the run
            gitdir will see them: the container path of its objects view in production,
            the host's (the view, or the main object store) in tests.
        on_engine: a run on an engine that sees none of this machine's files, which
            checks the base out itself (:mod:`git_iterare.runner.placement.remote`): the
            worktree is marked so (:func:`on_engine_path`), with a checkout map of what
            the engine writes (:func:`git_iterare.git.checkout.engine_map`), until its
            files come back (:func:`fill_worktree` when they cannot).
        live: a run whose agent writes the host's worktree: it is made at
            :func:`live_path` (registered at :func:`worktree_path`, locked), out of the
            user's checkout until :func:`land` brings it there.

    Returns:
        The workspace.

    Raises:
        UserError: bad run id, base not a commit, bare repository, bad ``.iterare/include``.
        OperationFailed: the branch exists already, or the worktree, run gitdir or gitfile
            holds something.
        ExternalError: ``git worktree add`` failed.
    """
    validate_run_id(run_id)
    base_commit = commit_of(repo, base)
    uid, gid = agent_ids(agent_uid)
    branch = f"iterare/{run_id}"
    worktree, gitdir = worktree_path(repo, run_id), gitdir_path(repo, run_id)
    gitfile = gitdir.with_name(run_id + ".gitfile")
    away = live_path(repo, run_id) if live and not on_engine else None
    exists = common_git(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}",
                        check=False)
    if exists.returncode == 0:
        raise OperationFailed(f"branch {branch} exists already",
                              hint=f"choose another run id or `git iterare cleanup {run_id}`")
    view = objects_view_path(repo, run_id)
    for path in (worktree, *filter(None, [away]), gitdir, gitfile, view):
        if not _absent_or_empty(path):
            raise OperationFailed(f"{path} exists already",
                                  hint=f"remove it or `git iterare cleanup {run_id}`")
    check_run_dirs(repo)
    included = include_paths(repo, base_commit)
    included_blobs = tuple(b for b in _remember_includes(repo, run_id, included) if b != "-")
    ensure_excluded(repo)
    make_run_dirs(repo)
    # Hooks off: with --reuse the base is agent content, and a post-checkout hook of the
    # user's (npm install, direnv...) would run it on the host. No checkout: git would
    # copy the user's sparse-checkout patterns and take attributes from the base's tree;
    # the host checks out the full tree itself (git_iterare.git.checkout).
    common_git(repo, "-c", "core.hooksPath=/dev/null", "worktree", "add", "--quiet",
               "--no-checkout", "--no-track", "-b", branch, str(away or worktree),
               base_commit, cwd=_top(repo))
    ws = RunWorkspace(
        run_id=run_id, worktree=worktree, gitdir=gitdir, gitfile=gitfile, branch=branch,
        base_commit=base_commit,
        mounts=mounts_for(away or worktree, gitdir, gitfile, view),
        agent_uid=uid, agent_gid=gid, included=included, included_blobs=included_blobs,
        live=away)
    try:
        admin = worktree_admin_dir(repo, ws.tree)
        if admin is None:
            raise OperationFailed(f"git worktree add did not register {ws.tree}")
        if away is not None:  # registered where it lands when the run ends
            livetree.register_at(admin, worktree)
        _not_sparse(admin)
        _write_run_gitdir(repo, ws, alternates)
        if on_engine:
            on_engine_path(ws).write_text("the worktree's files are on the Docker engine\n")
            checkout.write_map(checkout_map_path(ws),
                               checkout.engine_map(repo.common_dir, base_commit))
        else:
            view.mkdir(exist_ok=True)  # mounted before fill_run fills it
            # Marked until the checkout is complete: a process killed meanwhile (its agent
            # never started) leaves a worktree that is not the base, which finishing must
            # not commit as the deletion of every file not checked out yet.
            on_engine_path(ws).write_text("the worktree's checkout did not complete\n")
    except BaseException:  # leave nothing half-made behind: a retry would be refused
        with contextlib.suppress(Exception):
            remove_run_files(repo, ws)
            delete_branch(repo, ws, base_commit)
        raise
    return ws


def fill_run(repo: Repo, ws: RunWorkspace) -> Cached:
    """Give a run :func:`make_run` made the objects of its base's history (its objects
    view, from the repository's object cache) and check its base out into its (empty)
    worktree.

    Returns:
        What the object cache did for it.

    Raises:
        OperationFailed: the worktree is not registered with git.
        ExternalError: git (or a filter of the user's) failed.
        OSError: the object cache or the view cannot be written.
    """
    from concurrent.futures import ThreadPoolExecutor

    from git_iterare.runner.placement import objectcache
    from git_iterare.timings import phase

    def give_objects() -> Cached:
        with phase("start.objects"):
            return objectcache.give(repo, ws.base_commit, objects_view_path(repo, ws.run_id))

    admin = worktree_admin_dir(repo, ws.worktree)
    if admin is None:
        raise OperationFailed(f"{ws.worktree} is not a registered worktree any more")
    # The history is packed (a first run's) while the base is checked out: both mostly
    # wait for the disk, and the agent waits for both.
    with ThreadPoolExecutor(1, thread_name_prefix="objects") as pool:
        cached = pool.submit(give_objects)
        _fill(repo, ws, admin)
        given = cached.result()
    on_engine_path(ws).unlink()
    return given


def _absent_or_empty(path: Path) -> bool:
    """Whether nothing is at ``path``, or an empty folder or empty regular file (not a
    symlink)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return True
    if stat.S_ISDIR(found.st_mode):
        return not any(os.scandir(path))
    return stat.S_ISREG(found.st_mode) and found.st_size == 0


def _fill(repo: Repo, ws: RunWorkspace, admin: Path) -> None:
    """Check the run's base out into its (empty) worktree, copy the include files, write
    the checkout map, and give the run gitdir the worktree's index."""
    from git_iterare.git import statcache
    from git_iterare.timings import phase

    warnings: list[str] = []
    checkout_map = checkout.populate(repo.common_dir, ws.tree, ws.base_commit,
                                     admin / "index", warnings)
    checkout.write_map(checkout_map_path(ws), checkout_map)
    for line in warnings:
        ui.warn(line)
    # Before the include files: one written over a checked-out file is no longer it.
    with phase("start.stat-cache"):
        statcache.record(ws.tree, (e.path for e in checkout_map.entries), stat_path(ws))
    copy_includes(repo, ws.tree, ws.included)
    # The stat data in the index is current, so git inside need not rehash every file
    # (the run gitdir's config tells it to ignore the owner and ctime changes the sandbox
    # makes, and filtered files are never rehashed without their filter).
    shutil.copyfile(admin / "index", ws.gitdir / "index")


def on_engine_path(ws: RunWorkspace) -> Path:
    """``<common dir>/iterare/gitdirs/<id>.on-engine``: present while the run's host
    worktree does not hold its files: a remote run's that was never filled (they are on
    the engine only), or one whose checkout a killed process cut short, before its agent
    could start (see :func:`prepare_run`). Host-only, never mounted or shipped."""
    return ws.gitdir.with_name(ws.run_id + ".on-engine")


def worktree_on_engine(ws: RunWorkspace) -> bool:
    """Whether the run's host worktree does not hold its files (:func:`on_engine_path`):
    finishing imports only its commits, and it holds no work of its own."""
    return on_engine_path(ws).exists()


def fill_worktree(repo: Repo, ws: RunWorkspace) -> None:
    """Give a remote run whose files on the engine are gone the worktree a local run
    would have had: its base checked out on the host (and the include files), so its
    finish commits no deletion of everything. Clears :func:`on_engine_path`.

    Raises:
        OperationFailed: the worktree is not registered with git.
        ExternalError: git (or a filter of the user's) failed.
    """
    admin = worktree_admin_dir(repo, ws.worktree)
    if admin is None:
        raise OperationFailed(f"{ws.worktree} is not a registered worktree any more",
                              hint=f"`git iterare cleanup --force {ws.run_id}`")
    for entry in os.scandir(ws.worktree):  # anything but its .git file is ours to replace
        if entry.name != ".git":
            boundedfs.remove_tree(Path(entry.path))
    _fill(repo, ws, admin)
    keep_not_fetched(ws, ())
    on_engine_path(ws).unlink(missing_ok=True)


def land(repo: Repo, ws: RunWorkspace) -> None:
    """Bring a local run's worktree from :func:`live_path` to ``.iterare/worktrees/<id>``
    once its agent ended and the sandbox gave its trees back, its nested repositories
    disabled and its run gitdir inert first (:func:`git_iterare.runner.livetree.land`).

    Raises:
        OperationFailed: it could not be moved (it stays where it is).
    """
    livetree.land(live_path(repo, ws.run_id), ws.worktree, ws.gitdir,
                  worktree_admin_dir(repo, ws.worktree), run_gitdir_config(repo))


def take_live(repo: Repo, ws: RunWorkspace) -> RunWorkspace:
    """Move a local run's landed worktree back to :func:`live_path` for its agent's next
    round (:func:`git_iterare.runner.livetree.take`); the workspace as it is then.

    Raises:
        OperationFailed: it could not be moved (it stays where it is).
    """
    live = live_path(repo, ws.run_id)
    livetree.take(ws.worktree, live, worktree_admin_dir(repo, ws.worktree))
    return dataclasses.replace(ws, live=live)


def not_fetched_path(ws: RunWorkspace) -> Path:
    """``<common dir>/iterare/gitdirs/<id>.not-fetched``: the files of a remote run's
    worktree not fetched for their size (:func:`not_fetched`); host-only."""
    return ws.gitdir.with_name(ws.run_id + ".not-fetched")


def keep_not_fetched(ws: RunWorkspace, left_out: Sequence[tuple[str, int]]) -> None:
    """Keep the ``(path, size)`` of the files of the run's worktree that were not fetched
    from its engine for being larger than
    :data:`~git_iterare.limits.MAX_OBJECT_BYTES` (none: forget them)."""
    path = not_fetched_path(ws)
    if not left_out:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(os.fsencode(rel) + b"\0" + str(size).encode() + b"\0"
                             for rel, size in left_out))
    os.replace(tmp, path)


def not_fetched(ws: RunWorkspace) -> tuple[safegit.Skipped, ...]:
    """What :func:`keep_not_fetched` kept, as :func:`not_fetched_skips`."""
    try:
        data = boundedfs.read_regular(not_fetched_path(ws), 64 << 20)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    fields = data.split(b"\0")[:-1]
    return not_fetched_skips([(os.fsdecode(rel), int(size)) for rel, size
                              in zip(fields[0::2], fields[1::2], strict=False)
                              if size.isdigit()])


def not_fetched_skips(left_out: Sequence[tuple[str, int]]) -> tuple[safegit.Skipped, ...]:
    """The files of a remote run's worktree not fetched for their size (``(path, size)``)
    as paths the automatic commit leaves out: the worktree does not hold them, and the
    commit does not delete the tracked ones (:func:`git_iterare.git.safegit.safe_git`)."""
    from git_iterare.limits import MAX_OBJECT_BYTES

    return tuple(safegit.Skipped(rel, f"larger than MAX_OBJECT_BYTES ({MAX_OBJECT_BYTES} "
                                      f"bytes): {size} bytes, not fetched from the Docker "
                                      "engine", False)
                 for rel, size in left_out)


def checkout_map_path(ws: RunWorkspace) -> Path:
    """``<common dir>/iterare/gitdirs/<id>.checkout``: what the host checked out for the
    run (:mod:`git_iterare.git.checkout`); host-only, never mounted."""
    return ws.gitdir.with_name(ws.run_id + ".checkout")


def stat_path(ws: RunWorkspace) -> Path:
    """``<common dir>/iterare/gitdirs/<id>.stat``: the stat data of the files checked out
    (:func:`git_iterare.git.statcache.record`); host-only, never mounted."""
    return ws.gitdir.with_name(ws.run_id + ".stat")


def untouched_path(ws: RunWorkspace) -> Path:
    """``<common dir>/iterare/gitdirs/<id>.untouched``: the files the agent did not touch
    (:func:`git_iterare.git.statcache.untouched`), written as its trees are given back and
    read by the finish's commit; host-only, never mounted."""
    return ws.gitdir.with_name(ws.run_id + ".untouched")


def _not_sparse(admin: Path) -> None:
    """Make a new run worktree a full checkout whatever the user's sparse settings.

    ``git worktree add`` copies the current worktree's sparse-checkout patterns and its
    ``core.sparseCheckout`` (per-worktree config) to the new one; the run worktree holds
    the whole tree, so the user's git in it must not treat it as sparse either.
    """
    patterns = admin / "info" / "sparse-checkout"
    if patterns.exists():
        patterns.unlink()
    config = admin / "config.worktree"
    if config.is_file():
        proc.git("config", "--file", str(config), "core.sparseCheckout", "false",
                 scrub_git_env=True)


def _includes_file(repo: Repo, run_id: str) -> Path:
    from git_iterare.runner.paths import state_dir

    return state_dir(repo, run_id) / "included"


def _remember_includes(repo: Repo, run_id: str, included: tuple[str, ...]) -> tuple[str, ...]:
    """Keep the paths ``prepare_run`` copies in, each with the blob id of its content
    (``PATH NUL BLOB NUL``), for whoever finishes the run: ``.iterare/include`` may change
    or break meanwhile (a merged run can edit it). Returns the blob ids."""
    top = _project(repo)
    for rel in included:  # one line, before git or the copy fails on it
        if not os.access(top / rel, os.R_OK):
            raise UserError(f".iterare/include names {rel}, which you cannot read",
                            hint="make it readable, or leave it out of .iterare/include")
    blobs: list[str] = []
    for start in range(0, len(included), 1000):  # file names, never pathspecs
        blobs += common_git(repo, "hash-object", "--no-filters", "--",
                            *included[start:start + 1000], cwd=top).stdout.split()
    # An empty file's blob is any empty file's: it names no copy of the user's.
    blobs = [b if (top / rel).stat().st_size else "-" for rel, b in zip(included, blobs,
                                                                      strict=True)]
    path = _includes_file(repo, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(os.fsencode(p) + b"\0" + b.encode() + b"\0"
                              for p, b in zip(included, blobs, strict=True)))
    return tuple(blobs)


def _remembered_includes(repo: Repo, run_id: str
                         ) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The paths and blob ids :func:`_remember_includes` kept, or None (a run prepared
    before it did)."""
    try:
        data = boundedfs.read_regular(_includes_file(repo, run_id), 16 << 20)
    except (FileNotFoundError, NotADirectoryError):
        return None
    fields = data.split(b"\0")[:-1]
    return (tuple(os.fsdecode(p) for p in fields[0::2]),
            tuple(b.decode("ascii", "replace") for b in fields[1::2] if b != b"-"))


def open_run(repo: Repo, run_id: str, base_commit: str, *,
             included: tuple[str, ...] = ()) -> RunWorkspace:
    """Describe an existing run's workspace again (after a restart, for finish/cleanup).

    Args:
        repo: the user's repository.
        run_id: the run.
        base_commit: the base recorded for the run (the run record keeps it).
        included: more paths to leave out of its commit (mount points below the
            worktree), besides those ``prepare_run`` copied in from ``.iterare/include``
            (as it kept them; recomputed for a run prepared before it did).

    Raises:
        UserError: bad run id; for an older run, a bad ``.iterare/include``.
    """
    validate_run_id(run_id)
    worktree, gitdir = worktree_path(repo, run_id), gitdir_path(repo, run_id)
    live = live_path(repo, run_id)
    uid, gid = agent_ids(None)
    kept = _remembered_includes(repo, run_id)
    copied, blobs = kept if kept is not None else (include_paths(repo), ())
    included = tuple(dict.fromkeys((*copied, *included)))
    gitfile = gitdir.with_name(run_id + ".gitfile")
    found = live if os.path.lexists(live) else None
    return RunWorkspace(
        run_id=run_id, worktree=worktree, gitdir=gitdir, gitfile=gitfile,
        branch=f"iterare/{run_id}", base_commit=base_commit,
        mounts=mounts_for(found or worktree, gitdir, gitfile, objects_view_path(repo, run_id)),
        agent_uid=uid, agent_gid=gid, included=included, included_blobs=blobs, live=found)


def worktree_admin_dir(repo: Repo, worktree: Path) -> Path | None:
    """The ``COMMON/worktrees/<name>`` dir whose ``gitdir`` file points at ``worktree``."""
    admin_root = repo.common_dir / "worktrees"
    if not admin_root.is_dir():
        return None
    target = str(worktree / ".git")
    for admin in admin_root.iterdir():
        try:
            if (admin / "gitdir").read_text().strip() == target:
                return admin
        except OSError:
            continue
    return None


def remove_run_files(repo: Repo, ws: RunWorkspace) -> tuple[bool, bool]:
    """Remove the run gitdir, the worktree, the gitfile, checkout map and objects view,
    then the worktree's registration, in that order: whichever step fails, the worktree
    (or its registration) is still there, so the run stays listed and cleanup can run
    again.

    Returns:
        (the worktree existed, the run gitdir existed).

    Raises:
        UserError: ``.iterare/worktrees`` is a symlink (see :func:`check_run_dirs`).
        OperationFailed: an entry could not be removed, even after giving the user's own
            directories ``u+rwx`` (one line naming it and what to do).
    """
    check_run_dirs(repo)
    live = ws.live or live_path(repo, ws.run_id)
    removed_worktree = os.path.lexists(ws.worktree) or os.path.lexists(live)
    removed_gitdir = os.path.lexists(ws.gitdir)
    _remove_run_tree(ws, ws.gitdir)
    # The files go first, by our own removal (symlinks never followed, directories the
    # agent locked opened up again): `git worktree remove` would unregister the worktree
    # even when it fails to remove its files.
    _remove_run_tree(ws, live)
    _remove_run_tree(ws, ws.worktree)
    for path in (ws.gitfile, checkout_map_path(ws), stat_path(ws), untouched_path(ws),
                 on_engine_path(ws), not_fetched_path(ws), objects_view_path(repo, ws.run_id)):
        _remove_run_tree(ws, path)
    admin = worktree_admin_dir(repo, ws.worktree) or worktree_admin_dir(repo, live)
    livetree.unlock(admin)
    if admin is not None:
        try:  # the worktree is gone: this only drops git's registration of it
            common_git(repo, "worktree", "remove", "--force", str(ws.worktree),
                       cwd=_top(repo))
        except ExternalError:
            shutil.rmtree(admin, ignore_errors=True)
    return removed_worktree, removed_gitdir


def _remove_run_tree(ws: RunWorkspace, path: Path) -> None:
    """Remove ``path`` (a tree or a file of the run); when that fails, give the user's own
    directories in it ``u+rwx`` (:func:`boundedfs.make_removable`) and try once more.

    Raises:
        OperationFailed: it still cannot be removed.
    """
    try:
        boundedfs.remove_tree(path)  # iterative: agent trees may be deep
        return
    except (OSError, subprocess.CalledProcessError):
        boundedfs.make_removable(path)
    try:
        boundedfs.remove_tree(path)
    except OSError as exc:
        where = exc.filename or path
        raise OperationFailed(
            f"cannot remove {where} of run {ws.run_id}: {exc.strerror or exc}",
            hint=f"make it yours and writable, e.g. `chmod -R u+rwX {path}` as its owner, "
                 f"then run `git iterare cleanup {ws.run_id}` again") from None
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise OperationFailed(
            f"cannot remove {path} of run {ws.run_id}: "
            f"{detail[-1] if detail else 'rm failed'}",
            hint=f"make it yours and writable, e.g. `chmod -R u+rwX {path}` as its owner, "
                 f"then run `git iterare cleanup {ws.run_id}` again") from None


def delete_branch(repo: Repo, ws: RunWorkspace, head: str) -> None:
    """Delete ``ws.ref`` if it still points at ``head`` (compare-and-swap, reflog reason).

    Raises:
        OperationFailed: it moved meanwhile.
    """
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref
    from dulwich.repo import Repo as DulwichRepo

    with DulwichRepo(str(repo.common_dir)) as main:
        if not main.refs.remove_if_equals(
                Ref(ws.ref.encode()), ObjectID(head.encode()),
                message=f"iterare: remove run {ws.run_id}".encode(),
                committer=reflog_identity(repo)):
            raise OperationFailed(f"{ws.branch} moved while removing the run; run cleanup again")


