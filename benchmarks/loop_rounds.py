"""A loop's overhead per round: from the agent's exit to its check's first instruction.

In ``execute --until CHECK`` each round's check runs in a container of its own in the
sandbox (git_iterare.runner.loop, git_iterare.sandbox.again with ``pristine``: created
from the run's image, the agent's account put in, started); the agent's container is
committed to an image only afterwards, for the next round. The shell agent's script
prints the time (``date +%s.%N``) as its last instruction, and the check prints it as its
first and fails (``--stall-after 0``, so every round runs); a round's overhead is the
difference, read from the run's log and ``extra.rounds[].check_tail``.

The baseline is the same check alone in a container of the image, measured in the same
run: by ``docker exec`` in a running one (the goal's: at most 0.5 s over it, medians), and
in a plain container created and started through the Engine API, as the sandbox's are
(from the host's clock before the create to the check's first instruction). One loop of
``--rounds`` rounds, then as many of each baseline, and so on ``--loops`` times.

Also printed: where a round's time goes (the engine's events: the agent's container's
``die``, the check's ``create``), the engine's commit of an exited plain container alone
(which the other half of a round pays), and that other half, from the check to the next
round's agent's first instruction (the trees given back, the round committed, the agent's
container committed and made again). The agent's script sleeps a second, so the run's
driver is waiting for its end as for an agent that works for a while. Usage::

    python -m benchmarks.loop_rounds [--image git-iterare:latest] [--loops 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import make_repo, precompile, report_over

if TYPE_CHECKING:
    from docker.models.containers import Container

PROMPT = "---\nagent: shell\n---\ndate +AGENT-START=%s.%N\nsleep 1\ndate +AGENT-END=%s.%N\n"
CHECK = "date +CHECK-START=%s.%N; exit 1"

#: Goal: a round's overhead at most this many seconds over ``docker exec`` of the check.
GOAL_SECONDS = 0.5

#: A round's steps, as the engine's events (die, create) split it.
STEPS = ("the agent's container ends", "the host sees it and creates the check's container",
         "started, to the check's first instruction")

Event = Mapping[str, Any]

#: How the baselines' containers are made: as the sandbox's (no capabilities, Docker's
#: init), with no network.
PLAIN: dict[str, Any] = {
    "entrypoint": ["/bin/sh"], "network_mode": "none", "init": True, "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges:true"], "labels": {"dev.iterare.bench": "loop_rounds"}}


@dataclass
class Figures:
    """What the benchmark measured, in seconds.

    Attributes:
        rounds: each round's overhead, the agent's exit to its check's first instruction.
        steps: per round whose events all came, the seconds of each of :data:`STEPS`.
        next_round: per round but a loop's last, its check's first instruction to the
            next round's agent's first instruction.
        execs: each check by ``docker exec``, from before the exec.
        plains: each check in a plain container, from before its create.
        plain_steps: per plain container, its create, and its start to the first
            instruction.
        commits: the engine's commit of each exited plain container.
    """

    rounds: list[float] = field(default_factory=list)
    steps: list[list[float]] = field(default_factory=list)
    next_round: list[float] = field(default_factory=list)
    execs: list[float] = field(default_factory=list)
    plains: list[float] = field(default_factory=list)
    plain_steps: list[list[float]] = field(default_factory=list)
    commits: list[float] = field(default_factory=list)


def _marker(text: str, name: str) -> list[float]:
    """The times ``NAME=seconds`` lines of ``text`` give, in order."""
    return [float(line.split("=", 1)[1]) for line in text.splitlines()
            if line.startswith(f"{name}=")]


@contextmanager
def engine_events(repo: Path) -> Iterator[list[Event]]:
    """The engine's events for the containers of ``repo``'s runs while the block runs,
    collected by a thread (the engine keeps only its last few events for later)."""
    import docker

    stream = docker.from_env().events(
        decode=True, filters={"label": f"dev.iterare.repo={repo.resolve()}"})
    events: list[Event] = []
    reader = threading.Thread(target=lambda: events.extend(stream), daemon=True)
    reader.start()
    try:
        yield events
    finally:
        time.sleep(0.2)  # the last events are on their way
        stream.close()
        reader.join(timeout=5)


def _at(events: list[Event], action: str, name: str, before: float | None = None
        ) -> float | None:
    """Seconds (the engine's clock) of the last ``action`` event of container ``name``
    (before ``before``), None when there is none."""
    times = [e["timeNano"] / 1e9 for e in events
             if e.get("Type") == "container" and e.get("Action") == action
             and e.get("Actor", {}).get("Attributes", {}).get("name") == name
             and (before is None or e["timeNano"] / 1e9 < before)]
    return max(times) if times else None


def loop(repo: Path, rounds: int, into: Figures) -> None:
    """Run one loop of ``rounds`` rounds; add its figures to ``into``.

    Raises:
        SystemExit: the loop did not run its ``rounds`` rounds, each check failing.
    """
    with engine_events(repo) as events:
        done = subprocess.run(["git", "iterare", "execute", "loop", "--until", CHECK,
                               "--max-rounds", str(rounds), "--stall-after", "0",
                               "--follow"], cwd=repo, capture_output=True, text=True)
    started = [line for line in done.stdout.splitlines() if line.startswith("started run ")]
    if not started:
        raise SystemExit(f"execute failed: {done.stderr.strip()}")
    run = started[0].split()[2]
    record = json.loads(subprocess.run(["git", "iterare", "show", run, "--format", "json"],
                                       cwd=repo, check=True, capture_output=True,
                                       text=True).stdout)["run"]
    log = subprocess.run(["git", "iterare", "log", run], cwd=repo, check=True,
                         capture_output=True, text=True).stdout
    ran = record["extra"].get("rounds") or []
    begins, ends = _marker(log, "AGENT-START"), _marker(log, "AGENT-END")
    checks = [_marker(r.get("check_tail") or "", "CHECK-START") for r in ran]
    if (record["extra"]["loop"].get("reason") != "rounds" or len(ran) != rounds
            or len(ends) != rounds or len(begins) != rounds
            or any(r.get("check_exit") != 1 for r in ran) or any(len(c) != 1 for c in checks)):
        raise SystemExit(f"the loop of run {run} did not run {rounds} failing checks: "
                         f"{record['extra']['loop']}, {ran}, log: {log}")
    agent = f"iterare-{run}"
    for number, (end, (check,)) in enumerate(zip(ends, checks, strict=True), start=1):
        into.rounds.append(check - end)
        created = _at(events, "create", f"{agent}-check{number}")
        marks = [end, _at(events, "die", agent, created), created, check]
        if all(mark is not None for mark in marks):
            into.steps.append([b - a for a, b in itertools.pairwise(marks)])  # type: ignore[operator]
        if number < rounds:
            into.next_round.append(begins[number] - check)


def plain_check(image: str, into: Figures) -> None:
    """Run :data:`CHECK` alone in a plain container of ``image``, then commit it; add the
    figures to ``into``.

    Raises:
        SystemExit: its output has no time.
    """
    import docker

    engine = docker.from_env()
    began = time.time()
    container = engine.containers.create(image, ["-c", CHECK], **PLAIN)
    try:
        created = time.time()
        container.start()
        container.wait(timeout=60)
        said = container.logs().decode("utf-8", "replace")
        committing = time.time()
        committed = engine.api.commit(container.id)
        into.commits.append(time.time() - committing)
        engine.images.remove(committed["Id"])
    finally:
        container.remove(force=True)
    first = _marker(said, "CHECK-START")
    if len(first) != 1:
        raise SystemExit(f"the plain container said: {said!r}")
    into.plains.append(first[0] - began)
    into.plain_steps.append([created - began, first[0] - created])


@contextmanager
def running_container(image: str) -> Iterator[Container]:
    """A container of ``image`` that runs (a sleep) while the block runs."""
    import docker

    container = docker.from_env().containers.run(image, ["-c", "sleep 3600"], detach=True,
                                                 **PLAIN)
    try:
        yield container
    finally:
        container.remove(force=True)


def exec_check(container: Container, into: Figures) -> None:
    """Run :data:`CHECK` in the running ``container`` (``docker exec``); add the seconds
    from before the exec to its first instruction to ``into``.

    Raises:
        SystemExit: its output has no time.
    """
    began = time.time()
    _, said = container.exec_run(["sh", "-c", CHECK])
    first = _marker(bytes(said).decode("utf-8", "replace"), "CHECK-START")
    if len(first) != 1:
        raise SystemExit(f"docker exec said: {said!r}")
    into.execs.append(first[0] - began)


def measure(repo: Path, image: str, loops: int, rounds: int) -> Figures:
    """``loops`` loops of ``rounds`` rounds in ``repo``, each followed by as many checks by
    ``docker exec`` in a running container of ``image`` and in plain ones, alternating."""
    with running_container(image) as running:
        # Warm caches; the first run of a repository leaves a spare sidecar for the next.
        loop(repo, 1, Figures())
        exec_check(running, Figures())
        plain_check(image, Figures())
        got = Figures()
        for _ in range(loops):
            loop(repo, rounds, got)
            for _ in range(rounds):
                exec_check(running, got)
                plain_check(image, got)
    return got


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _medians(steps: list[list[float]]) -> list[float]:
    return [statistics.median(column) for column in zip(*steps, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="git-iterare:latest")
    parser.add_argument("--loops", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.loops < 1 or args.rounds < 2:
        parser.error("--loops must be at least 1 and --rounds at least 2")
    precompile()
    repo = make_repo(args.image, {"loop": PROMPT})
    try:
        got = measure(repo, args.image, args.loops, args.rounds)
    finally:
        # The runs left a spare sidecar waiting: cleanup removes it with the newest run.
        subprocess.run(["git", "iterare", "cleanup", "-y", "--force"], cwd=repo, check=False,
                       capture_output=True)
        shutil.rmtree(repo, ignore_errors=True)
    print("rounds: " + ", ".join(map(_ms, got.rounds)) + "; docker exec: "
          + ", ".join(map(_ms, got.execs)) + "; plain container: "
          + ", ".join(map(_ms, got.plains)))
    over = report_over(f"a round, the agent's exit to the check's first instruction "
                       f"({len(got.rounds)} rounds), vs docker exec of the check in a running "
                       f"container of the image", got.rounds, got.execs, GOAL_SECONDS)
    report_over("  vs a plain container of the image (create, start)", got.rounds, got.plains,
                GOAL_SECONDS)
    if got.steps:
        print(f"  where a round's time goes (medians of {len(got.steps)}): " + "; ".join(
            f"{what} {_ms(s)}" for what, s in zip(STEPS, _medians(got.steps), strict=True)))
    created, first = _medians(got.plain_steps)
    print(f"  the plain container (medians): created {_ms(created)}; started, to the check's "
          f"first instruction {_ms(first)}; the engine's commit of it once exited "
          f"{_ms(statistics.median(got.commits))}")
    print(f"the other half of a round, the check's first instruction to the next round's "
          f"agent's ({len(got.next_round)}): median {_ms(statistics.median(got.next_round))}")
    if over > GOAL_SECONDS:
        raise SystemExit("a round's overhead is over goal")


if __name__ == "__main__":
    main()
