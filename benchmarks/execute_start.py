"""The main job's start-up cost and a burst of runs.

1. Wall time of ``git iterare execute`` from the command's start until the agent's first
   instruction runs (the shell agent prints the time), as a ratio to a bare
   ``docker run --rm IMAGE true`` measured in the same run, alternating; goal <= 2.0.
   The runs follow one another, so each takes the spare sidecar the one before left
   (git_iterare.sandbox.warm.spare), as when a user starts runs one after another; the
   plain launch (``docker.warm = false``: no start-sooner work, as the first run after a
   quiet spell has) is printed beside it, with the same goal.
2. Ten runs launched at once on this machine: all must complete, none lost; prints the
   wall time until the last one finished.

The sandboxes get the default bridge network and reach nothing (the shell agent looks no
name up). Usage::

    python -m benchmarks.execute_start [--image git-iterare:latest] [--runs 5] [--burst 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

from benchmarks.common import make_repo, precompile, report, time_command

PROMPT = "---\nagent: shell\n---\ndate +AGENT-START=%s.%N\n"


def time_to_agent(repo: Path, warm: bool = True) -> float:
    """Seconds from starting ``execute`` until the agent's first command ran; without
    ``warm``, with ``docker.warm`` false (the plain launch)."""
    env = dict(os.environ, **({} if warm else {"ITERARE_DOCKER_WARM": "false"}))
    start = time.time()
    out = subprocess.run(["git", "iterare", "execute", "bench", "--follow"], cwd=repo,
                         check=True, capture_output=True, text=True, env=env).stdout
    marker = next(line for line in out.splitlines() if line.startswith("AGENT-START="))
    return float(marker.split("=", 1)[1]) - start


def burst(repo: Path, count: int) -> tuple[float, dict[str, int]]:
    """Launch ``count`` runs at once; wait until all ended; return seconds and statuses."""
    start = time.monotonic()
    procs = [subprocess.Popen(["git", "iterare", "execute", "bench"], cwd=repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(count)]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise SystemExit(f"execute failed: {err.strip()}")
        ids.append(out.split()[2])
    while True:
        listed = json.loads(subprocess.run(
            ["git", "iterare", "list", "--format", "json"], cwd=repo, check=True,
            capture_output=True, text=True).stdout)["runs"]
        statuses = {r["id"]: r["status"] for r in listed if r["id"] in ids}
        if all(s not in ("created", "starting", "running") for s in statuses.values()):
            break
        if time.monotonic() - start > 600:
            raise SystemExit("runs did not end within 600 s")
        time.sleep(1)
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    return time.monotonic() - start, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="git-iterare:latest")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--burst", type=int, default=10)
    args = parser.parse_args()
    precompile()
    repo = make_repo(args.image, {"bench": PROMPT})
    time_to_agent(repo)  # warm caches (first list cache, page cache)
    time_to_agent(repo)  # the first of runs that follow one another leaves a spare
    subject: list[float] = []
    cold: list[float] = []
    baseline: list[float] = []
    for _ in range(args.runs):
        subject.append(time_to_agent(repo))
        baseline += time_command(["docker", "run", "--rm", "--entrypoint", "true", args.image],
                                 1)
    for _ in range(args.runs):
        cold.append(time_to_agent(repo, warm=False))
        baseline += time_command(["docker", "run", "--rm", "--entrypoint", "true", args.image],
                                 1)
    report("execute until the agent starts", subject, baseline, goal=2.0)
    report("  the plain launch (docker.warm = false; the first run after a quiet spell)",
           cold, baseline, goal=2.0)
    seconds, counts = burst(repo, args.burst)
    lost = counts.get("lost", 0)
    print(f"{args.burst} runs at once: all ended in {seconds:.1f} s: {counts}; lost: {lost}")
    # The last runs left a spare sidecar waiting: cleanup removes it with the newest run.
    subprocess.run(["git", "iterare", "cleanup", "-y"], cwd=repo, check=False,
                   capture_output=True)
    if counts.get("succeeded", 0) != args.burst:
        raise SystemExit("not every run of the burst succeeded")


if __name__ == "__main__":
    main()
