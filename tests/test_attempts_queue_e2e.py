"""A group's queue of attempts waiting their turn (``execute -n N --jobs J``): ``merge
GROUP`` does not merge the best attempt so far while others still wait to start."""
from __future__ import annotations

import json
import os
import re
import signal
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


def test_merge_of_a_group_waits_for_the_attempts_still_queued(
        project: Path) -> None:  # noqa: F811
    prompt(project, "wait", 'sleep 2\nseq "$ITERARE_ATTEMPT" > n.txt\n')
    out = iterare("execute", "wait", "-n", "3", "--jobs", "1", cwd=project)
    assert out.returncode == 0, out.stderr
    group = group_of(out.stdout)
    queue = wait_for(lambda: processes(project, "_resume"), timeout=10)
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
