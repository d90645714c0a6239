"""Who drives a loop (:mod:`git_iterare.runner.loop`): one process at a time, the run's
*driver*, holding the mark ``loop.lock`` in the run's state folder
(:mod:`git_iterare.marks`). ``execute`` holds it first and hands it to the watcher it
starts (:func:`git_iterare.runner.watch.watch`), so no other command takes a loop's
rounds for its own in the moment the watcher starts; every other command leaves the run
to its driver while the mark is held (:func:`left_to_driver`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import marks
from git_iterare.git.repo import Repo
from git_iterare.runner.paths import state_dir
from git_iterare.runs.loops import loop_of

if TYPE_CHECKING:
    from git_iterare.runs.record import RunRecord

#: Runs this process drives (a driver finishes its own run: the mark is its own).
DRIVING: set[str] = set()

#: The variable naming the descriptor of a loop's driver mark the watcher inherits.
LOOP_FD = "ITERARE_LOOP_FD"


def _lock_path(repo: Repo, run_id: str) -> Path:
    """The mark a run's driver holds (:mod:`git_iterare.marks`)."""
    return state_dir(repo, run_id) / "loop.lock"


def left_to_driver(repo: Repo, record: RunRecord) -> bool:
    """Whether ``record``'s run is a loop that another live process drives: then its
    rounds, and its end, are that process's."""
    if loop_of(record) is None or record.id in DRIVING:
        return False
    return marks.held(_lock_path(repo, record.id)) is True


def is_loop_run(repo: Repo, run_id: str) -> bool:
    """Whether run ``run_id``'s record asks for a loop (False when it cannot be read)."""
    from git_iterare.errors import OperationFailed
    from git_iterare.runs.store import RunStore

    try:
        return loop_of(RunStore(repo).get(run_id)) is not None
    except OperationFailed:
        return False


def hold_driver(repo: Repo, run_id: str) -> int | None:
    """Hold run ``run_id``'s driver mark; its descriptor, or None when another process
    holds it."""
    path = _lock_path(repo, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return marks.hold(path, wait=False)
    except BlockingIOError:
        return None


def inherited(repo: Repo, run_id: str) -> int | None:
    """The descriptor of run ``run_id``'s driver mark this process was given by
    ``execute`` (:func:`git_iterare.runner.watch.watch`), when it is that file."""
    import os

    value = os.environ.pop(LOOP_FD, "")
    if not value.isdigit():
        return None
    fd = int(value)
    try:
        given, path = os.fstat(fd), os.stat(_lock_path(repo, run_id))
    except OSError:
        return None
    return fd if (given.st_dev, given.st_ino) == (path.st_dev, path.st_ino) else None


def wait_for_round(repo: Repo, run_id: str, container: str, poll: float = 0.5
                   ) -> RunRecord:
    """Wait until the loop of run ``run_id`` moved past the agent's container
    ``container`` (its next round started: the record names another one) or the run
    ended, or no process drives it any more; the record then."""
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore

    store = RunStore(repo)
    while True:
        record = store.get(run_id)
        if record.status not in ACTIVE or record.container != container \
                or not left_to_driver(repo, record):
            return record
        time.sleep(poll)
