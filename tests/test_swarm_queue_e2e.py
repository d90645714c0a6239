"""Twenty runs sent to a swarm at once (``execute -n 20 --jobs 20``) whose workers fit four
at a time: the swarm queues the others (``list`` says ``queued``), at most four run at
once, all twenty succeed with their commits, none is lost, and cleanup leaves nothing on
any node. The manager holds an egress and a tree server per run: its memory and CPU are
sampled meanwhile and printed (``-s``), with the test's time."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from git_iterare.runs.status import ACTIVE
from tests import engines
from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record
from tests.swarm import SwarmLab
from tests.test_attempts_queue_e2e import attempts, group_of
from tests.test_swarm_runs_e2e import _settle, on_swarm, swarm_image  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow]

#: Runs sent at once, and how many the lab's workers fit (each reserves one CPU).
RUNS = 20
AT_ONCE = 4

#: Each agent's seconds: long enough that the swarm has a queue while runs are still sent
#: (one at a time, as ``-n`` launches them).
SLEEP = 20

TASK = f"""\
date +%s.%N > span.txt
sleep {SLEEP}
date +%s.%N >> span.txt
git add span.txt
git commit -qm "span of attempt $ITERARE_ATTEMPT"
"""


def _parse_bytes(text: str) -> float:
    """``12.5MiB`` as docker stats prints it -> bytes."""
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
             "kB": 1e3, "MB": 1e6, "GB": 1e9}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return float(text[:-len(unit)]) * units[unit]
    return float(text)


@contextmanager
def listing(project: Path) -> Iterator[list[str]]:
    """Run ``git iterare list`` every 2 s in a thread until the block ends (it also finishes
    what ended); the outputs."""
    outputs: list[str] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            outputs.append(iterare("list", cwd=project).stdout)
            done.wait(2)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield outputs
    finally:
        done.set()
        thread.join(timeout=60)


@contextmanager
def sampled(container: str, lab: SwarmLab) -> Iterator[dict[str, list[float]]]:
    """Sample, about every 2 s, the memory (bytes) and CPU (% of one core) of the
    manager's DinD container on the local engine, how many containers the manager runs,
    and how many of the swarm's tasks wait for a node (``pending``), until the block
    ends."""
    found: dict[str, list[float]] = {"memory": [], "cpu": [], "containers": [], "pending": []}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            out = subprocess.run(
                ["docker", "stats", "--no-stream", "--format", "{{.MemUsage}}|{{.CPUPerc}}",
                 container], capture_output=True, text=True, env=engines.local_env(),
                check=False).stdout.strip()
            if "|" in out:
                memory, cpu = out.split("|")
                found["memory"].append(_parse_bytes(memory.split("/")[0].strip()))
                found["cpu"].append(float(cpu.rstrip("%")))
            with contextlib.suppress(Exception):  # a sample missed is no failure
                api = lab.manager.client().api
                found["containers"].append(len(api.containers()))
                found["pending"].append(sum(1 for t in api.tasks()
                                            if t["Status"]["State"] == "pending"))
            done.wait(2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        done.set()
        thread.join(timeout=30)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` intervals that overlap."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def test_twenty_runs_queue_on_a_swarm_that_fits_four(on_swarm: Path,  # noqa: F811
                                                     swarm: SwarmLab) -> None:
    project = on_swarm
    began, wall = time.monotonic(), time.time()
    cpus = {w.container: w.client().info()["NCPU"] for w in swarm.workers}
    assert sum(cpus.values()) == AT_ONCE, cpus  # cpus = 1 a run: four fit
    prompt(project, "span", TASK)
    git("add", ".", cwd=project)
    git("commit", "-qm", "span", cwd=project)
    with sampled(swarm.manager.container, swarm) as load, listing(project) as listed_all:
        sent = iterare("execute", "span", "-n", str(RUNS), "--jobs", str(RUNS), cwd=project)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        submitted = time.monotonic()
        group = group_of(sent.stdout)
        deadline = time.monotonic() + 600
        while True:
            now = attempts(project, group)
            if len(now) == RUNS and not any(a["status"] in ACTIVE for a in now.values()):
                break
            assert time.monotonic() < deadline, now
            time.sleep(2)
    ended = time.monotonic()
    statuses = {k: a["status"] for k, a in now.items()}
    assert statuses == dict.fromkeys(range(1, RUNS + 1), "succeeded"), statuses
    assert max(load["pending"], default=0) > 0, load  # the swarm held some back
    assert any(" queued" in out for out in listed_all), listed_all[-3:]
    spans, nodes = [], set()
    for attempt in now.values():
        rid = attempt["run"]
        rec = record(project, rid)
        assert (rec["status"], rec["placement"]) == ("succeeded", "swarm"), rec
        nodes.add(rec["extra"]["swarm"]["node_id"])
        start, end = git("show", f"iterare/{rid}:span.txt", cwd=project).stdout.split()
        spans.append((float(start), float(end)))
    peak = most_at_once(spans)
    assert 2 <= peak <= AT_ONCE, spans
    assert nodes == {swarm.node_id(w) for w in swarm.workers}, nodes
    cleaned = iterare("cleanup", group, "-y", "--force", cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    assert iterare("cleanup", "--cache", cwd=project).returncode == 0
    assert _settle(swarm) == []
    first = min(s for s, _ in spans)
    print(f"\n{RUNS} runs on {len(cpus)} workers ({AT_ONCE} at once): sent in "
          f"{submitted - began:.0f} s, all ended {ended - began:.0f} s after the start, "
          f"cleaned {time.monotonic() - ended:.0f} s later; at most {peak} ran at once; "
          f"agents ran from +{first - wall:.0f} s for "
          f"{max(e for _, e in spans) - first:.0f} s")
    if load["memory"]:
        print(f"manager: memory peak {max(load['memory']) / 2**20:.0f} MiB (median "
              f"{statistics.median(load['memory']) / 2**20:.0f} MiB), CPU peak "
              f"{max(load['cpu']):.0f} % (median {statistics.median(load['cpu']):.0f} %), "
              f"containers peak {max(load['containers'], default=0):.0f}, tasks waiting "
              f"for a node peak {max(load['pending'], default=0):.0f}, "
              f"{len(load['memory'])} samples")
