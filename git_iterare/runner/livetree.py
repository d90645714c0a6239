"""A local run's worktree while its agent may write it: out of the user's checkout, and
back in once it is the user's again and inert.

git's ownership check (``safe.directory``) is all that keeps a user's git out of a
repository the agent wrote, and a common global setting (``safe.directory = *``) switches
it off. Then git, run by the user's shell prompt, editor or repository scanner in a nested
repository the agent made (or in the folder of a submodule of the base that it made one,
which the user's own ``git status`` in the worktree looks into), runs what that
repository's config names (``core.fsmonitor``, ``core.pager``...). No ownership, mode or
file of ours stops git from reading a repository someone points it at, so while its agent
runs a local run's worktree is where the user's tools do not look:
``<common dir>/iterare/live/<id>``, inside ``.git`` (which editors and repository scanners
leave alone), in a folder only root can list (:data:`LIVE_ROOT_MODE`). git has it
registered at ``.iterare/worktrees/<id>``, where it comes when the run ends, and locked
there meanwhile (``git worktree list`` says so, ``git worktree prune`` keeps it).

When the agent has ended and the sandbox gave the trees back (the user's, set-uid bits and
special files gone), :func:`land` disables the nested repositories, makes the run gitdir
one git on the host can only read (:func:`inert_gitdir`), and moves the worktree to
``.iterare/worktrees/<id>``.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from git_iterare import boundedfs
from git_iterare.errors import OperationFailed
from git_iterare.git import safegit

#: Mode of the folders holding live trees and run gitdirs: the user may make, enter and
#: remove what they name, nobody (but root) may list them, so nothing that walks the disk
#: looking for repositories finds the agent's.
LIVE_ROOT_MODE = 0o300

#: What ``<common dir>/worktrees/<name>/locked`` says while the run is live (git's
#: "locked" file: gitrepository-layout(5)); only a lock saying this is ours to remove.
LOCK_REASON = "git iterare: the run is live; its worktree comes here when the run ends"

#: Files of a gitdir that send git elsewhere for its config: gitrepository-layout(5).
ELSEWHERE = ("commondir", "config.worktree")


def register_at(admin: Path, worktree: Path) -> None:
    """Make git's registration ``admin`` (``<common dir>/worktrees/<name>``) of a worktree
    made elsewhere name ``worktree`` as its place (its ``gitdir`` file, as ``git worktree
    move`` writes it), and lock it there until :func:`unlock`."""
    (admin / "gitdir").write_text(f"{worktree / '.git'}\n")
    (admin / "locked").write_text(LOCK_REASON + "\n")


def unlock(admin: Path | None) -> None:
    """Remove the lock :func:`register_at` put on ``admin`` (another lock is the user's)."""
    if admin is None:
        return
    try:
        ours = (admin / "locked").read_text().strip() == LOCK_REASON
    except OSError:
        return
    if ours:
        (admin / "locked").unlink(missing_ok=True)


def inert_gitdir(gitdir: Path, config: str) -> None:
    """Make a run gitdir one that git on the host can only read, whatever its agent wrote:
    its config is ``config`` again (git-iterare's own: no hooks, no programs), and the
    files that would make git read another config are gone. A run gitdir holds the shape
    of a repository (HEAD, objects, refs), so git run in it or below it takes it as one.

    Raises:
        OSError: it could not be written.
    """
    if gitdir.is_symlink() or not gitdir.is_dir():
        return
    for name in ("config", *ELSEWHERE):
        boundedfs.remove_tree(gitdir / name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(gitdir / "config", flags, 0o644), "w") as out:
        out.write(config)


def land(live: Path, worktree: Path, gitdir: Path, admin: Path | None, config: str) -> None:
    """Bring a run's trees back into the user's view once its agent ended and the sandbox
    gave them back: nested repositories in the ``live`` worktree disabled
    (:func:`git_iterare.git.safegit.disable_nested_repos`), the run ``gitdir`` inert
    (:func:`inert_gitdir` with ``config``), then the worktree moved to ``worktree`` (its
    registered place) and its registration ``admin`` unlocked. Safe to call again, and
    when there is no live worktree (a run that landed, or whose worktree never left).

    Raises:
        OperationFailed: something else is at ``worktree``, or the move failed (the
            worktree is still at ``live``: ``git iterare finish`` tries again).
    """
    inert_gitdir(gitdir, config)
    if os.path.lexists(live):
        safegit.disable_nested_repos(live, safegit.find_nested_repos(live))
        try:
            _move(live, worktree, admin)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "strerror", None) or str(exc)
            raise OperationFailed(f"cannot move the run's worktree from {live} to "
                                  f"{worktree}: {detail}",
                                  hint="make room there, then run `git iterare finish "
                                       f"{worktree.name}`") from None
    unlock(admin)


def take(worktree: Path, live: Path, admin: Path | None) -> None:
    """Move a landed run's worktree from ``worktree`` back to ``live`` for another round
    of its agent (a loop), registered at ``worktree`` and locked there again
    (:func:`register_at`).

    Raises:
        OperationFailed: it is not at ``worktree``, something is at ``live``, or git has
            no registration ``admin`` of it.
    """
    if admin is None:
        raise OperationFailed(f"{worktree} is not a registered worktree any more")
    try:
        os.rename(worktree, live)  # the same file system: land renamed it here
    except OSError as exc:
        raise OperationFailed(f"cannot move the run's worktree from {worktree} to {live} "
                              f"for its next round: {exc.strerror or exc}") from None
    register_at(admin, worktree)


def _move(live: Path, worktree: Path, admin: Path | None) -> None:
    """Move the folder ``live`` to ``worktree`` (absent or an empty folder): renamed, or
    on another file system copied (``cp -a``: no depth limit, sparse files kept) to a
    sibling first and renamed into place, so ``worktree`` is whole whenever it exists.

    Raises:
        OSError: ``worktree`` holds something else, or a step failed.
        subprocess.CalledProcessError: the copy failed.
    """
    if _holds(worktree, admin):  # a copy that landed before a process was killed
        boundedfs.remove_tree(live)
        return
    worktree.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(live, worktree)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    staging = worktree.with_name(f".{worktree.name}.landing")
    boundedfs.remove_tree(staging)
    subprocess.run(["cp", "-a", "--", str(live), str(staging)], check=True,
                   capture_output=True)
    os.rename(staging, worktree)  # over an empty folder too
    boundedfs.remove_tree(live)


def _holds(worktree: Path, admin: Path | None) -> bool:
    """Whether ``worktree`` already holds the run's worktree: its ``.git`` file names the
    run's registration ``admin``."""
    if admin is None:
        return False
    try:
        text = boundedfs.read_regular(worktree / ".git", 4096).decode("utf-8", "replace")
    except (OSError, OperationFailed):
        return False
    return text.strip() == f"gitdir: {admin}"


def hand_head(gitdir: Path, ref: str, head: str, packs: Sequence[Path], index: Path) -> None:
    """Give a run ``gitdir`` (the user's again: its agent ended) a head made on the host
    for its agent's next round (a loop): the ``packs`` files (a pack and its index)
    moved into its ``objects/pack``, its branch ``ref`` (``refs/heads/...``) and its
    ``HEAD`` naming ``head`` (hex), and ``index`` copied as its index. Every folder on
    the way is made a real folder first and every file is written new, so nothing the
    agent left there (a symlink) is followed.

    Raises:
        OSError: ``gitdir`` is a symlink or no folder, or a step failed.
    """
    if gitdir.is_symlink() or not gitdir.is_dir():
        raise OSError(errno.ENOTDIR, "not a run gitdir", str(gitdir))
    folder = _real_folder(gitdir, ("objects", "pack"))
    for path in packs:
        boundedfs.remove_tree(folder / path.name)
        os.rename(path, folder / path.name)
    parts = ref.split("/")
    _write_new(_real_folder(gitdir, parts[:-1]) / parts[-1], f"{head}\n".encode())
    _write_new(gitdir / "HEAD", f"ref: {ref}\n".encode())
    _write_new(gitdir / "index", index.read_bytes())


def _real_folder(root: Path, parts: Sequence[str]) -> Path:
    """``root/parts...`` with each step a real folder: made where missing, and what else
    is in the way (a symlink, a file) removed first."""
    path = root
    for part in parts:
        path = path / part
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                continue
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.mkdir(path, 0o755)
    return path


def _write_new(path: Path, data: bytes) -> None:
    """``path`` made a new file (0644) holding ``data``, whatever was there."""
    boundedfs.remove_tree(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(path, flags, 0o644), "wb") as out:
        out.write(data)
