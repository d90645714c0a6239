"""A run whose ``execute`` process died while launching it (kill -9) is settled as lost
and can be cleaned up at once: the launcher holds a lock the kernel releases when it dies
(runner.paths.launching); without that mark, a fresh run is taken as still being
launched for LAUNCH_GRACE seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from git_iterare.git import repo as repo_mod
from git_iterare.runner.ownership import origin
from git_iterare.runner.paths import launch_in_progress
from git_iterare.runs.store import RunStore
from tests.conftest import git, iterare

pytestmark = pytest.mark.docker

HOLDER = """
import sys, time
from git_iterare.git import repo as repo_mod
from git_iterare.runner.paths import launching
with launching(repo_mod.discover(sys.argv[1]), sys.argv[2]):
    print("held", flush=True)
    time.sleep(600)
"""


def _created_run(repo: Path) -> str:
    r = repo_mod.discover(repo)
    base = git("rev-parse", "HEAD", cwd=repo).stdout.strip()
    record = RunStore(r).create("launching", prompt_name="p", prompt_path=None,
                                prompt_text="", base_commit=base, base_branch="main",
                                agent="shell", extra=origin(r))
    return record.id


def test_a_launch_whose_process_died_is_lost_at_once(repo: Path,
                                                           hermetic_env: Path) -> None:
    run_id = _created_run(repo)
    r = repo_mod.discover(repo)
    # No mark (launched elsewhere or before marks): the grace period holds.
    assert launch_in_progress(r, run_id) is None
    early = iterare("stop", run_id, cwd=repo)
    assert (early.returncode, early.stderr) == (
        1, f"error: run {run_id} is still being launched (try again in a moment)\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(repo), run_id],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert launch_in_progress(r, run_id) is True
        busy = iterare("stop", run_id, cwd=repo)
        assert busy.returncode == 1 and "still being launched" in busy.stderr
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # as kill -9 of `git iterare execute`
        holder.wait()
    assert launch_in_progress(r, run_id) is False
    # The next command settles it at once: lost, as its sandbox never came.
    listed = iterare("list", "--all", cwd=repo)
    assert listed.returncode == 0, listed.stderr
    assert RunStore(r).get(run_id).status == "lost"
    stopped = iterare("stop", run_id, cwd=repo)
    error = RunStore(r).get(run_id).error
    assert error
    assert stopped.stderr == (f"error: run {run_id} is not running (status lost: {error}) "
                              f"(see `git iterare show {run_id}`)\n")
    cleaned = iterare("cleanup", "-y", "--force", run_id, cwd=repo)
    assert cleaned.returncode == 0, cleaned.stderr
    assert RunStore(r).get(run_id).status == "cleaned"
