"""A group's queue of attempts waiting their turn (``execute -n N --jobs J``), as a new
user met it: ``merge GROUP`` does not merge the best attempt so far while others still
wait to start; ``cleanup GROUP`` leaves no waiting attempt to start later; the attempts
of a queue that died are shown as never started; a closed output pipe drops none."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from git_iterare.runs.status import ACTIVE
from tests.conftest import iterare
from tests.runs_helpers import prompt
from tests.test_runs_e2e import project  # noqa: F401  (the fixture)

pytestmark = pytest.mark.docker


def wait_for(what: Callable[[], Any], timeout: float = 90) -> Any:
    """``what()`` once it is truthy; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def group_of(output: str) -> str:
    match = re.search(r"^group (\S+):( |$)", output, re.M)
    assert match, output
    return match.group(1)


def attempts(project: Path, group: str) -> dict[int, dict[str, Any]]:  # noqa: F811
    """The group's attempts as ``compare --format json`` gives them, by attempt number."""
    out = iterare("compare", group, "--format", "json", cwd=project)
    assert out.returncode == 0, out.stderr
    return {a["attempt"]: a for a in json.loads(out.stdout)["attempts"]}


def processes(project: Path, *needles: str) -> list[int]:  # noqa: F811
    """Pids of this host's processes whose command line holds every one of ``needles``
    and whose working directory is ``project`` (another test's are left alone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if all(n in cmdline for n in needles) and Path(cwd) == project:
            found.append(int(entry.name))
    return found


def queued_group(project: Path, script: str) -> tuple[str, list[int]]:  # noqa: F811
    """Start ``execute -n 3 --jobs 1`` of ``script``: its group, and its queue's pids."""
    prompt(project, "wait", script)
    out = iterare("execute", "wait", "-n", "3", "--jobs", "1", cwd=project)
    assert out.returncode == 0, out.stderr
    assert "2 attempts queued" in out.stdout, out.stdout
    return group_of(out.stdout), wait_for(lambda: processes(project, "_resume"), timeout=10)


def test_merge_of_a_group_waits_for_the_attempts_still_queued(
        project: Path) -> None:  # noqa: F811
    group, queue = queued_group(project, 'sleep 2\nseq "$ITERARE_ATTEMPT" > n.txt\n')
    # Held between attempt 1's end and attempt 2's start, as a slow launch would hold it.
    for pid in queue:
        os.kill(pid, signal.SIGSTOP)
    try:
        def first_ended() -> bool:
            iterare("list", cwd=project)  # finishes what ended
            return attempts(project, group)[1]["status"] not in ACTIVE

        wait_for(first_ended, timeout=60)
        early = iterare("merge", group, cwd=project)
        assert early.returncode == 1, early.stderr
        assert f"group {group} has attempts still waiting to start: 2/3, 3/3" in early.stderr
        assert not (project / "n.txt").exists()
    finally:
        for pid in queue:
            os.kill(pid, signal.SIGCONT)
    wait_for(lambda: not processes(project, "_resume"), timeout=90)
    merged = iterare("merge", group, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert (project / "n.txt").read_text() == "1\n"  # attempt 1 ranks first: one line


def test_cleanup_of_a_group_leaves_no_waiting_attempt_to_start_later(
        project: Path) -> None:  # noqa: F811
    group, _ = queued_group(project, 'sleep 6\necho "$ITERARE_ATTEMPT" > n.txt\n')
    cleaned = iterare("cleanup", group, "--force", "--yes", cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"group {group}: 2 waiting attempts will not start" in cleaned.stdout
    # Give the queue the time it needs to start attempt 2 and 3 (six seconds each).
    time.sleep(20)
    iterare("list", cwd=project)  # finishes what ended
    alive = {k: a["status"] for k, a in attempts(project, group).items()
             if a["status"] != "cleaned"}
    assert alive == {}, alive
    assert "queued" not in iterare("list", cwd=project).stdout


def test_a_group_whose_queue_died_says_which_attempts_never_started(
        project: Path) -> None:  # noqa: F811
    group, queue = queued_group(project, 'sleep 4\necho "$ITERARE_ATTEMPT" > n.txt\n')
    for pid in queue:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: set(attempts(project, group)) == {1}
             and attempts(project, group)[1]["status"] == "succeeded")
    shown = (iterare("list", cwd=project).stdout
             + iterare("compare", group, cwd=project).stdout)
    assert re.search(r"\b2/3\b|attempts? 2\b", shown), shown
    assert re.search(r"\b3/3\b|attempts? 3\b|2 and 3|2, 3", shown), shown
    assert f"attempt 2/3 (its queue ended first; `git iterare cleanup {group}` forgets it)" \
        in shown, shown
    forgot = iterare("cleanup", group, "--force", "--yes", cwd=project)
    assert forgot.returncode == 0, forgot.stderr
    assert "not started" not in iterare("list", "--all", cwd=project).stdout


def test_a_closed_output_pipe_does_not_drop_the_waiting_attempts(
        project: Path) -> None:  # noqa: F811
    prompt(project, "wait", 'sleep 2\necho "$ITERARE_ATTEMPT" > n.txt\n')
    # As `git iterare execute wait -n 3 --jobs 1 | head -1` does.
    child = subprocess.Popen(["git", "iterare", "execute", "wait", "-n", "3", "--jobs", "1"],
                             cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None and child.stderr is not None
    first = child.stdout.readline()
    child.stdout.close()
    child.wait(timeout=60)
    error = child.stderr.read()
    group = group_of(first)
    def settled() -> dict[int, dict[str, Any]] | None:
        if processes(project, "_resume"):
            return None
        iterare("list", cwd=project)  # finishes what ended
        now = attempts(project, group)
        return None if any(a["status"] in ACTIVE for a in now.values()) else now

    done = wait_for(settled, timeout=90)
    assert sorted((k, a["status"]) for k, a in done.items()) == [
        (1, "succeeded"), (2, "succeeded"), (3, "succeeded")], (child.returncode, error)


def test_stop_of_a_group_stops_its_attempts_and_its_queue(project: Path) -> None:  # noqa: F811
    group, _ = queued_group(project, 'echo started\nsleep 600\n')
    wait_for(lambda: attempts(project, group).get(1, {}).get("status") == "running")
    stopped = iterare("stop", group, "--grace", "1", cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    assert f"group {group}: 2 waiting attempts will not start" in stopped.stdout
    assert re.search(r"^run wait\.1-\S+ stopped; its work is on iterare/wait\.1-",
                     stopped.stdout, re.M), stopped.stdout
    wait_for(lambda: not processes(project, "_resume"), timeout=60)
    assert {k: a["status"] for k, a in attempts(project, group).items()} == {1: "stopped"}
    assert "queued" not in iterare("list", cwd=project).stdout

