"""Per-run host state kept next to the repository's metadata, never in the worktree."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from git_iterare import marks
from git_iterare.errors import OperationFailed
from git_iterare.git.repo import Repo


def state_root(repo: Repo) -> Path:
    """The folder of the runs' state folders (and of spare sidecars' folders:
    :mod:`git_iterare.sandbox.warm.spare`)."""
    return repo.common_dir / "iterare" / "state"


def state_dir(repo: Repo, run_id: str) -> Path:
    """``<common dir>/iterare/state/<run id>``: the prompt file, the sandbox's output
    directory (``out/``: status, DNS log) and its secrets directory (``secrets/``, 0700).
    Never mounted writable into the sandbox except ``out/``."""
    return state_root(repo) / run_id


@contextlib.contextmanager
def run_lock(repo: Repo, run_id: str) -> Iterator[None]:
    """Hold an exclusive lock on the run (``flock`` on ``state/<id>.lock``).

    Finishing a run happens in whichever process sees its end first; the lock makes the
    second one wait and then find the run already finished.

    Raises:
        OperationFailed: the lock file is not this user's to open (another user's
            repository, reached through ``GIT_DIR`` or ``GIT_COMMON_DIR``).
    """
    folder = repo.common_dir / "iterare" / "state"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = marks.hold(folder / f"{run_id}.lock")
    except PermissionError as exc:
        raise OperationFailed(f"cannot lock run {run_id}: {exc.filename or folder}: "
                              "permission denied",
                              hint="run it as the user whose repository this is") from None
    try:
        yield
    finally:
        os.close(fd)  # closing lets go of the lock


def _launch_mark(repo: Repo, run_id: str) -> Path:
    return state_root(repo) / f"{run_id}.launch"


@contextlib.contextmanager
def launching(repo: Repo, run_id: str) -> Iterator[None]:
    """Mark ``run_id`` as being launched by this process while the block runs: an
    exclusive ``flock`` on ``state/<id>.launch``, which the kernel releases when the
    process dies (kill -9 included), so others can tell a launch going on from one whose
    process is gone (:func:`launch_in_progress`). The file goes at the end."""
    path = _launch_mark(repo, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = marks.hold(path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)


def launch_in_progress(repo: Repo, run_id: str) -> bool | None:
    """Whether a process of this machine is launching ``run_id`` (:func:`launching`).

    Returns:
        True while it is; False when the mark is there but no process holds it (the one
        that launched died, or has just finished: read the record again); None when there
        is no mark (launched elsewhere, ended, or never marked).
    """
    return marks.held(_launch_mark(repo, run_id))
