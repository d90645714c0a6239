"""A run nobody follows is finished when its agent ends, not when a command next looks:
``execute`` leaves a watcher (git_iterare.runner.watch) that finishes it and removes its
sandbox, network sidecar included; and a run finished late anyway (no watcher: its
process was killed, say) keeps its container's own end as its finish time."""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from pathlib import Path

import pytest

from git_iterare.git import repo as repo_mod
from git_iterare.runner import launch
from git_iterare.runner.session import load_config
from git_iterare.runs.status import parse_iso
from tests.conftest import iterare
from tests.runs_helpers import prompt, record, run_id
from tests.test_runs_e2e import project  # noqa: F401  (fixture)

pytestmark = pytest.mark.docker


def _containers(repo: Path) -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=dev.iterare.repo={repo}"],
                          capture_output=True, text=True, check=True).stdout.split()


def test_a_run_nobody_follows_is_finished_as_its_agent_ends(project: Path) -> None:  # noqa: F811
    prompt(project, "quiet", "sleep 2; echo done > done.txt\n")
    started = iterare("execute", "quiet", cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    deadline = time.monotonic() + 90
    # No git iterare command looks at it: only the record ref is read, with git.
    while record(project, rid)["status"] == "running":
        assert time.monotonic() < deadline, "the run was not finished"
        time.sleep(0.5)
    done = record(project, rid)
    assert done["status"] == "succeeded" and done["head"], done
    while _containers(project):  # the sidecar ended with its agent
        assert time.monotonic() < deadline, _containers(project)
        time.sleep(0.5)
    finished, began = parse_iso(done["finished"]), parse_iso(done["started"])
    assert finished is not None and began is not None, done
    assert 1 <= (finished - began).total_seconds() <= 30, done


def test_a_run_finished_late_keeps_its_containers_end_as_its_finish(
        project: Path) -> None:  # noqa: F811
    prompt(project, "brief", "echo done > done.txt\n")
    found = repo_mod.discover(project)
    # In this process: no watcher, as after the one of execute was killed.
    running = launch.execute(found, load_config(found, {}),
                             launch.ExecuteRequest(prompt="brief"))
    container = running.container
    assert container
    subprocess.run(["docker", "wait", container], capture_output=True, check=True, timeout=60)
    ended = dt.datetime.now(dt.timezone.utc)
    time.sleep(4)
    assert record(project, running.id)["status"] == "running"
    shown = iterare("show", running.id, cwd=project)  # the next command finishes it
    assert shown.returncode == 0, shown.stderr
    done = record(project, running.id)
    assert done["status"] == "succeeded"
    finished = parse_iso(done["finished"])
    assert finished is not None and finished <= ended, (done["finished"], ended)
    assert "duration:  0s" in shown.stdout or "duration:  1s" in shown.stdout, shown.stdout
