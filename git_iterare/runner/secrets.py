"""Knowing a run's secrets in whichever process handles it, so they can be redacted.

The process that finishes or follows a run may not be the one that launched it (``execute``
without ``-f``, then ``list`` in another shell). The launching process keeps the values of
the variables passed in (:func:`remember_secrets`) in the run's private state directory,
``<common dir>/iterare/state/<id>/secrets/redact.json`` (0600 in a 0700 directory, never in
the worktree or the record), which finishing the run deletes; credentials are read again
from the user's configuration.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from git_iterare.git.repo import Repo

if TYPE_CHECKING:
    from git_iterare.agents.base import Agent
    from git_iterare.runs.record import RunRecord

#: File name, in the run's ``secrets/`` state directory, of the values to redact.
REDACT_FILE = "redact.json"


def remember_secrets(repo: Repo, run_id: str, values: Iterable[str]) -> None:
    """Keep ``values`` for the processes that will follow and finish the run.

    Args:
        repo: the repository.
        run_id: the run.
        values: secret values (empty ones are dropped).

    Raises:
        OSError: the state directory cannot be written.
    """
    from git_iterare.runner.paths import state_dir

    kept = sorted({v for v in values if v})
    if not kept:
        return
    folder = state_dir(repo, run_id) / "secrets"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / REDACT_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(kept, f)


def _remembered(repo: Repo, run_id: str) -> list[str]:
    from git_iterare.runner.paths import state_dir

    path = state_dir(repo, run_id) / "secrets" / REDACT_FILE
    try:
        if path.is_symlink() or path.stat().st_size > 1 << 20:
            return []
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [v for v in data if isinstance(v, str)] if isinstance(data, list) else []


def register_run_secrets(repo: Repo, record: RunRecord, agent: Agent,
                         env: Mapping[str, str] | None = None) -> None:
    """Register with :func:`git_iterare.proc.register_secret` every secret a run was given:
    the values the launching process kept (:func:`remember_secrets`), the values of the
    variables it passed in (``record.extra["env"]``) as set in ``env``, and the agent's
    credentials.

    Args:
        repo: the repository (its config locates the credentials).
        record: the run's :class:`~git_iterare.runs.record.RunRecord`.
        agent: the run's agent.
        env: the environment; ``os.environ`` when None.
    """
    from git_iterare import config as config_module
    from git_iterare import proc
    from git_iterare.errors import UserError

    env = os.environ if env is None else env
    for value in _remembered(repo, record.id):
        proc.register_secret(value)
    names = record.extra.get("env") if isinstance(record.extra, dict) else None
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str):
            proc.register_secret(env.get(name, ""))
    try:
        # Loading credentials registers every secret in them (tokens in files too).
        for secret in agent.credentials(config_module.load(repo), env).secrets():
            proc.register_secret(secret)
    except UserError:
        pass  # no credentials here: nothing of ours to find in the log
