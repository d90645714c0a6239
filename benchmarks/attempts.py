"""``execute -n 4`` of a one-CPU-second task, against two single runs one after the other.

The task is the shell agent's busy loop of about ``--cpu-seconds`` of CPU (its count
measured first in a container of the image). Four attempts at once (``-n 4 --jobs 4
--follow``, until all four ended) need as much CPU as two runs one after the other on
this 2-core machine; the goal is that they take at most 1.5 times as long (the two
alternating, ``--runs`` times each; the median of each pair's ratio, which others' load
changing between pairs moves less than the medians' ratio). Every run must succeed.
Usage::

    python -m benchmarks.attempts [--image git-iterare:latest] [--runs 5] [--cpu-seconds 1]
        [--attempts 4] [--jobs 4]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.common import make_repo, precompile, report_pairs

#: The busy loop; ``bash -eu`` runs it (``(( i++ ))`` would stop it: its status is 1 at 0).
BUSY = "i=0; while (( i < {count} )); do i=$((i + 1)); done"

#: Iterations timed to find how many make the task's CPU seconds.
PROBE = 300_000


def loop_count(image: str, cpu_seconds: float) -> tuple[int, float]:
    """How many iterations of :data:`BUSY` take ``cpu_seconds`` of CPU in a container of
    ``image`` (its bash, this machine), and the CPU seconds one probe took (the median of
    three).

    Raises:
        subprocess.CalledProcessError: the container failed.
    """
    script = f"TIMEFORMAT='%U %S'; time {{ {BUSY.format(count=PROBE)}; }}"
    used = []
    for _ in range(3):
        done = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint",
                               "bash", image, "-c", script], check=True, capture_output=True,
                              text=True)
        user, system = done.stderr.split()[-2:]
        used.append(float(user) + float(system))
    probe = statistics.median(used)
    return max(1, round(PROBE * cpu_seconds / probe)), probe


def singles(repo: Path, count: int) -> float:
    """Seconds for ``count`` runs of the task, one after the other, each followed to its
    end.

    Raises:
        SystemExit: a run failed.
    """
    start = time.monotonic()
    for _ in range(count):
        done = subprocess.run(["git", "iterare", "execute", "busy", "--follow"], cwd=repo,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"a single run failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    return time.monotonic() - start


def attempts(repo: Path, size: int, jobs: int) -> float:
    """Seconds for ``execute -n SIZE --jobs JOBS --follow`` of the task (``jobs`` 0: without
    ``--jobs``), until all its attempts ended.

    Raises:
        SystemExit: an attempt did not succeed.
    """
    start = time.monotonic()
    done = subprocess.run(["git", "iterare", "execute", "busy", "-n", str(size),
                           *(["--jobs", str(jobs)] if jobs else []), "--follow"], cwd=repo,
                          capture_output=True, text=True)
    seconds = time.monotonic() - start
    last = done.stdout.rstrip().splitlines()[-1:] or [""]
    if done.returncode != 0 or f": {size} of {size} attempts succeeded" not in last[0]:
        raise SystemExit(f"not every attempt succeeded: {done.stdout[-800:]} "
                         f"{done.stderr[-500:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="git-iterare:latest")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cpu-seconds", type=float, default=1.0)
    parser.add_argument("--attempts", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=4,
                        help="0: leave --jobs out (the engine's CPUs over docker.cpus)")
    args = parser.parse_args()
    if args.runs < 1 or args.cpu_seconds <= 0 or args.attempts < 2 or args.jobs < 0:
        parser.error("--runs must be at least 1, --attempts at least 2, --jobs at least 0, "
                     "--cpu-seconds above 0")
    precompile()
    count, probe = loop_count(args.image, args.cpu_seconds)
    print(f"the task: a busy loop of {count} iterations, about {args.cpu_seconds:g} "
          f"CPU-s ({PROBE} took {probe:.3f} CPU-s)")
    repo = make_repo(args.image, {"busy": f"---\nagent: shell\n---\n{BUSY.format(count=count)}\n"})
    sequential = args.attempts // 2
    jobs = f"--jobs {args.jobs}" if args.jobs else "(no --jobs)"
    singly = f"{sequential} single run{'s' if sequential > 1 else ''} one after the other"
    try:
        singles(repo, 1)  # warm caches; the first run leaves a spare sidecar for the next
        group: list[float] = []
        baseline: list[float] = []
        for _ in range(args.runs):
            baseline.append(singles(repo, sequential))
            group.append(attempts(repo, args.attempts, args.jobs))
    finally:
        # The runs left a spare sidecar waiting: cleanup removes it with the newest run.
        subprocess.run(["git", "iterare", "cleanup", "-y", "--force"], cwd=repo, check=False,
                       capture_output=True)
        shutil.rmtree(repo, ignore_errors=True)
    print(f"{singly}: " + ", ".join(f"{s:.2f}" for s in baseline) + f" s; -n {args.attempts} "
          f"{jobs}: " + ", ".join(f"{s:.2f}" for s in group) + " s")
    ratio = report_pairs(f"-n {args.attempts} {jobs}, until all ended, vs {singly}", group,
                         baseline, goal=1.5)
    if ratio > 1.5:
        raise SystemExit("-n over goal")


if __name__ == "__main__":
    main()
