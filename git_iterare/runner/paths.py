"""Per-run host state kept next to the repository's metadata, never in the worktree."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from git_iterare.git.repo import Repo


def state_dir(repo: Repo, run_id: str) -> Path:
    """``<common dir>/iterare/state/<run id>``: the prompt file, the sandbox's output
    directory (``out/``: status, DNS log) and its secrets directory (``secrets/``, 0700).
    Never mounted writable into the sandbox except ``out/``."""
    return repo.common_dir / "iterare" / "state" / run_id


@contextlib.contextmanager
def run_lock(repo: Repo, run_id: str) -> Iterator[None]:
    """Hold an exclusive lock on the run (``flock`` on ``state/<id>.lock``).

    Finishing a run happens in whichever process sees its end first; the lock makes the
    second one wait and then find the run already finished.
    """
    folder = repo.common_dir / "iterare" / "state"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{run_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
