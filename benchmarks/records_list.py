"""How ``git iterare list --format json`` scales with the number of runs.

Creates N runs through the Python API in a temporary repository, then times
``git iterare list --format json`` against ``git for-each-ref refs/iterare/runs`` (the
cheapest possible listing of the same refs), median of several runs each, and prints the
ratio. The first ``list`` (which fills the listing cache) is reported separately as "cold".
The package is byte-compiled first, as ``pip install`` does.

Usage: python benchmarks/records_list.py [N ...]   (default: 1000 10000)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import precompile
from git_iterare.runs.store import RunStore

REPEAT = 15


def _timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def bench(n: int) -> None:
    """Create ``n`` runs and print the list/for-each-ref timings and their ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com",
               "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com"}
        os.environ.update(env)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        (repo / "README").write_text("x\n")
        subprocess.run(["git", "add", "README"], cwd=repo, check=True)
        subprocess.run(["git", "commit", "-qm", "init"], cwd=repo, check=True)
        base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True,
                              capture_output=True, text=True).stdout.strip()
        store = RunStore(repo)
        start = time.perf_counter()
        for i in range(n):
            store.create(f"bench{i % 50}", prompt_name=f"bench{i % 50}", prompt_path=None,
                         prompt_text=f"prompt {i}\n", base_commit=base, base_branch="main",
                         agent="shell", status="succeeded" if i % 3 else "failed",
                         cost_usd=0.01 * (i % 7),
                         changes={"files": i % 5, "insertions": i, "deletions": i % 11})
        made = time.perf_counter() - start
        # `git iterare` as users run it: git finds git-iterare next to this Python.
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
        git_iterare = ["git", "iterare", "list", "--format", "json"]
        cold = _timed(git_iterare, repo)
        lists: list[float] = []
        refs: list[float] = []
        for _ in range(REPEAT):  # interleaved, so a busy moment slows both alike
            lists.append(_timed(git_iterare, repo))
            refs.append(_timed(["git", "for-each-ref", "refs/iterare/runs"], repo))
        out = subprocess.run(git_iterare, cwd=repo, check=True, capture_output=True, text=True)
        assert out.stdout.count('"id"') == n, "list did not show every run"
        ratio = statistics.median(lists) / statistics.median(refs)
        print(f"{n:>6} runs: created in {made:.1f}s; list cold {cold * 1000:.0f} ms, "
              f"warm median {statistics.median(lists) * 1000:.0f} ms; for-each-ref median "
              f"{statistics.median(refs) * 1000:.0f} ms; ratio {ratio:.2f}"
              f" (of minimums {min(lists) / min(refs):.2f}; cold "
              f"{cold / statistics.median(refs):.2f})")


def main(argv: list[str]) -> None:
    """Run :func:`bench` for each N in ``argv`` (default 1000 and 10000)."""
    precompile()
    for n in [int(a) for a in argv] or [1000, 10000]:
        bench(n)


if __name__ == "__main__":
    main(sys.argv[1:])
