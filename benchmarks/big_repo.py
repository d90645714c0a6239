"""A run's cost on a big repository, against what git itself pays for the same work.

For a generated repository of ``--files`` files (default 50,000 in 500 folders, about
4 KB each: about 200 MB; :func:`benchmarks.local_objects.make_repo`) whose run changes
``--changed`` files (the shell agent appends a line to each), each figure the median of
the ratios of pairs (a run and git's command measured just before it, in the same run;
the disk of a shared machine changes speed from one minute to the next):

1. **start**: ``git iterare execute`` until the agent's first command ran (the agent
   prints the time) vs ``git worktree add --detach`` of the same commit; goal <= 1.5;
2. **finish**: from the agent's last command until ``execute --follow`` returned (the
   run recorded as succeeded: automatic commit, import, trees given back) vs
   ``git status`` + ``git commit -a`` of the same change in such a worktree; goal <= 2.0;
3. **second run vs first**: the first run of a repetition has no object cache; the second
   starts on a new base one commit later; its start and its whole run vs the first's;
   goal <= 1.0;
4. **peak RSS** of ``execute`` (the largest process of its tree: ``wait4``); goal < 300 MB;
5. **where the time goes**: the phases :mod:`git_iterare.timings` writes (medians of the
   runs), and the sidecar's handing of the trees to the agent's uid (its ``status.json``).

Usage::

    python -m benchmarks.big_repo [--image git-iterare:latest] [--files 50000]
        [--changed 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import precompile, report_pairs
from benchmarks.local_objects import _git, file_name, make_repo, one_more_commit
from git_iterare import timings

#: The phases printed, in order, with what each is (``+`` joins phases run in parallel).
PHASES = (
    ("start.validate", "validate the request"),
    ("start.plan", "plan (engine, image)"),
    ("start.make", "branch, worktree and run gitdir made"),
    ("start.fill", "fill: checkout and objects (in parallel)"),
    ("start.checkout", "  git checkout of the base"),
    ("start.checkout-map", "  the checkout map (hashed only when a conversion may apply)"),
    ("start.objects", "  the object cache gives the base's history"),
    ("start.stat-cache", "  the stat data of the files checked out, recorded for the finish"),
    ("sidecar.trees", "trees given to the agent's uid (sidecar chown)"),
    ("start.sandbox", "sandbox started (fill and sidecar included)"),
    ("finish", "finish, in all (under the run's lock)"),
    ("finish.log", "  the log read and stored"),
    ("finish.untouched", "  files the agent did not touch (stat cache, before the give-back)"),
    ("finish.give-back", "  trees given back (special files, set-uid bits, chown)"),
    ("finish.land", "  the worktree into the user's checkout"),
    ("finish.commit-work", "  import and automatic commit, in all"),
    ("finish.import", "    the agent's commits imported"),
    ("scan-worktree", "    the worktree walked (nested repositories, what git must not take)"),
    ("finish.unchanged", "    files still as checked out (hashed unless untouched)"),
    ("finish.add", "    git add of the worktree"),
    ("finish.changes", "    the change counted"),
    ("finish.remove", "  the containers removed"),
)


def prompt(changed: int, files: int) -> str:
    """The shell agent's script: print the time, append a line to ``changed`` files spread
    over the repository, print the time again."""
    step = max(1, files // max(1, changed))
    paths = " ".join(file_name(i * step) for i in range(min(changed, files)))
    return ("---\nagent: shell\n---\ndate +AGENT-START=%s.%N\n"
            f"for f in {paths}; do echo changed by the agent >> \"$f\"; done\n"
            "date +AGENT-END=%s.%N\n")


@dataclass(frozen=True)
class Run:
    """One measured run.

    Attributes:
        start: seconds from ``execute`` until the agent's first command.
        finish: seconds from the agent's last command until ``execute`` returned.
        total: seconds of the whole ``execute --follow``.
        rss_mb: peak RSS of the largest process of ``execute``'s tree, MB.
        phases: seconds per phase (:mod:`git_iterare.timings`, summed per run).
        cached: what the object cache did (the record's ``extra.cached``).
    """

    start: float
    finish: float
    total: float
    rss_mb: float
    phases: dict[str, float]
    cached: object


def run_once(repo: Path) -> Run:
    """One ``git iterare execute bench --follow`` (the run cleaned up after)."""
    log = Path(tempfile.mkstemp(prefix="iterare-timings-")[1])
    env = dict(os.environ, **{timings.ENV: str(log)})
    with tempfile.TemporaryFile() as err:
        began = time.time()
        proc = subprocess.Popen(["git", "iterare", "execute", "bench", "--follow"], cwd=repo,
                                env=env, stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        out = proc.stdout.read()
        # Reaped here, not by Popen, for its resource usage (its tree's largest RSS).
        _, status, usage = os.wait4(proc.pid, 0)
        ended = time.time()
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"execute failed: {err.read().decode(errors='replace').strip()}")
    text = out.decode(errors="replace")
    marks = dict(line.split("=", 1) for line in text.splitlines() if line.startswith("AGENT-"))
    run = text.split()[2]
    record = json.loads(_git(repo, "show", f"refs/iterare/runs/{run}:run.json"))
    if record["status"] != "succeeded" or record["changes"]["files"] == 0:
        raise SystemExit(f"run {run} did not commit its change: {record['status']}, "
                         f"{record.get('changes')}")
    phases = {name: sum(seconds) for name, seconds in timings.read(log).items()}
    log.unlink()
    sidecar = repo / ".git" / "iterare" / "state" / run / "out" / "status.json"
    steps = json.loads(sidecar.read_text()).get("timings_ms", {})
    if "trees" in steps and "go" in steps:
        phases["sidecar.trees"] = (steps["trees"] - steps["go"]) / 1000
    subprocess.run(["git", "iterare", "cleanup", "-y", "--force", run], cwd=repo, check=True,
                   capture_output=True)
    return Run(start=float(marks["AGENT-START"]) - began,
               finish=ended - float(marks["AGENT-END"]), total=ended - began,
               rss_mb=usage.ru_maxrss / 1024, phases=phases,
               cached=record["extra"].get("cached"))


def git_baseline(repo: Path, changed: int, files: int) -> tuple[float, float]:
    """Seconds of ``git worktree add --detach`` of HEAD, and of ``git status`` + ``git
    commit -a`` of the agent's change in it (the worktree removed after)."""
    target = repo.parent / f"{repo.name}-worktree"
    start = time.perf_counter()
    _git(repo, "worktree", "add", "-q", "--detach", str(target), "HEAD")
    added = time.perf_counter() - start
    step = max(1, files // max(1, changed))
    for i in range(min(changed, files)):
        with open(target / file_name(i * step), "a") as f:
            f.write("changed by the agent\n")
    start = time.perf_counter()
    _git(target, "status", "--porcelain")
    _git(target, "commit", "-qam", "the change")
    committed = time.perf_counter() - start
    _git(repo, "worktree", "remove", "--force", str(target))
    return added, committed


def breakdown(name: str, runs: list[Run]) -> None:
    """Print the median of each phase of ``runs``, in :data:`PHASES` order."""
    print(f"where the time goes, {name} (medians of {len(runs)}, ms):")
    for key, label in PHASES:
        values = [r.phases[key] for r in runs if key in r.phases]
        if values:
            print(f"  {label}: {statistics.median(values) * 1000:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="git-iterare:latest")
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    precompile()
    repo = make_repo(args.image, args.files, 1, prompt(args.changed, args.files))
    size = sum(p.stat().st_size for p in repo.rglob("*") if p.is_file() and ".git" not in
               p.parts)
    pack = sum(p.stat().st_size for p in (repo / ".git").rglob("*") if p.is_file())
    folders = len({file_name(i).rsplit("/", 1)[0] for i in range(args.files)})
    print(f"repository: {args.files} files in {folders} folders, {size / 1e6:.0f} MB checked "
          f"out, {pack / 1e6:.0f} MB .git; each run changes {args.changed} files")
    cache = repo / ".git" / "iterare" / "object-cache"
    git_baseline(repo, args.changed, args.files)  # the page cache holds the repository
    added: list[float] = []
    committed: list[float] = []
    runs: list[Run] = []  # first, second, first, ...: each beside the baseline before it
    for n in range(args.runs):
        for second in (False, True):
            if second:
                one_more_commit(repo, n)
            else:
                shutil.rmtree(cache, ignore_errors=True)  # a first run: no object cache yet
            seconds, commit = git_baseline(repo, args.changed, args.files)
            added.append(seconds)
            committed.append(commit)
            runs.append(run_once(repo))
    first, second_runs = runs[0::2], runs[1::2]
    # Pairs: on a loaded machine the disk's speed changes from one minute to the next.
    report_pairs("start: execute until the agent starts, vs git worktree add --detach",
                 [r.start for r in runs], added, goal=1.5)
    report_pairs("  the first runs (no object cache)", [r.start for r in first], added[0::2],
                 goal=1.5)
    report_pairs("  the second runs (a new base one commit later)",
                 [r.start for r in second_runs], added[1::2], goal=1.5)
    report_pairs(f"finish: the agent's end until succeeded ({args.changed} files changed), vs "
                 "git status + git commit -a", [r.finish for r in runs], committed, goal=2.0)
    report_pairs("second run vs first: start", [r.start for r in second_runs],
                 [r.start for r in first], goal=1.0)
    report_pairs("second run vs first: the whole run", [r.total for r in second_runs],
                 [r.total for r in first], goal=1.0)
    peak = max(r.rss_mb for r in runs)
    print(f"peak RSS of execute (its largest process): {peak:.0f} MB "
          f"(goal < 300 MB: {'ok' if peak < 300 else 'over goal'})")
    print(f"  object cache, first run: {first[-1].cached}; second: {second_runs[-1].cached}")
    breakdown("first runs", first)
    breakdown("second runs", second_runs)
    shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
