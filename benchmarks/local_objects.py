"""What the object cache of local runs costs on a big repository.

For a generated repository of ``--files`` files (about 4 KB each, incompressible text:
50,000 make about 200 MB) and ``--commits`` commits changing 50 of them each:

1. the object cache's own part (:func:`git_iterare.runner.placement.objectcache.give`):
   the first run's (the base's whole history packed) and the next one's after one more
   commit (only what is new), in-process;
2. ``git iterare execute`` until the agent's first instruction ran (the shell agent prints
   the time), the first run (no cache) and the next one after one more commit;

each as a ratio to ``git worktree add --detach`` of the same commit, measured in the same
run, alternating. Usage::

    python -m benchmarks.local_objects [--image git-iterare:latest] [--files 50000]
        [--commits 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.common import precompile, report

PROMPT = "---\nagent: shell\n---\ndate +AGENT-START=%s.%N\n"


def _git(repo: Path, *args: str, text: str | None = None) -> str:
    return subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args],
                          cwd=repo, check=True, capture_output=True, text=True,
                          input=text).stdout


def file_name(i: int) -> str:
    """The path of the ``i``-th file of :func:`make_repo`'s repositories: 100 a folder,
    10 folders in each top folder."""
    return f"d{i // 1000:03d}/s{(i // 100) % 10}/f{i}.txt"


def make_repo(image: str, files: int, commits: int, prompt: str = PROMPT) -> Path:
    """The repository (see the module docstring), written with ``git fast-import``, with
    the shell-agent prompt ``prompt`` (``.iterare/prompts/bench.md``, not committed)
    whose runs use ``image``."""
    repo = Path(tempfile.mkdtemp(prefix="iterare-bench-objects-"))
    _git(repo, "init", "-q", "-b", "main")
    rnd = random.Random(1)
    names = [file_name(i) for i in range(files)]
    feed = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=repo, stdin=subprocess.PIPE)
    assert feed.stdin is not None
    for n in range(commits):
        changed = range(files) if n == 0 else rnd.sample(range(files), min(50, files))
        stamp = 1_700_000_000 + n * 60
        message = f"change {n}".encode()
        feed.stdin.write(b"commit refs/heads/main\nauthor b <b@b> %d +0000\n"
                         b"committer b <b@b> %d +0000\ndata %d\n%s\n"
                         % (stamp, stamp, len(message), message))
        for i in changed:
            data = f"file {i} version {n}\n".encode() + base64.encodebytes(
                rnd.randbytes(rnd.randint(1000, 7000) * 3 // 4))
            feed.stdin.write(b"M 100644 inline %s\ndata %d\n%s\n"
                             % (names[i].encode(), len(data), data))
        feed.stdin.write(b"\n")
    feed.stdin.close()
    if feed.wait() != 0:
        raise SystemExit("git fast-import failed")
    _git(repo, "checkout", "-q", "-f", "main")
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "config.toml").write_text(f'[docker]\nimage = "{image}"\ncpus = 1\n')
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    _git(repo, "add", ".iterare")
    _git(repo, "commit", "-qm", "iterare")
    (repo / ".iterare" / "prompts" / "bench.md").write_text(prompt)
    subprocess.run(["git", "iterare", "trust", "--yes"], cwd=repo, check=True,
                   capture_output=True)
    return repo


def worktree_add(repo: Path) -> float:
    """Seconds ``git worktree add --detach`` of HEAD takes (the worktree removed after)."""
    target = repo.parent / f"{repo.name}-worktree"
    start = time.perf_counter()
    _git(repo, "worktree", "add", "-q", "--detach", str(target), "HEAD")
    seconds = time.perf_counter() - start
    _git(repo, "worktree", "remove", "--force", str(target))
    return seconds


def give(repo: Path) -> tuple[float, object]:
    """Seconds the object cache takes to give HEAD's history to a new view, and what it
    did."""
    from git_iterare.git import repo as repo_mod
    from git_iterare.runner.placement import objectcache

    (repo / ".git" / "iterare").mkdir(exist_ok=True)
    view = Path(tempfile.mkdtemp(prefix="view-", dir=repo / ".git" / "iterare"))
    base = _git(repo, "rev-parse", "HEAD").strip()
    start = time.perf_counter()
    done = objectcache.give(repo_mod.discover(repo), base, view)
    seconds = time.perf_counter() - start
    shutil.rmtree(view)
    return seconds, done.to_json()


def run_once(repo: Path) -> tuple[float, object]:
    """Seconds from starting ``execute`` until the agent's first command ran, and what the
    object cache did for the run (its record's ``extra.cached``); the run cleaned up."""
    start = time.time()
    out = subprocess.run(["git", "iterare", "execute", "bench", "--follow"], cwd=repo,
                         check=True, capture_output=True, text=True).stdout
    marker = next(line for line in out.splitlines() if line.startswith("AGENT-START="))
    run = out.split()[2]
    record = json.loads(_git(repo, "show", f"refs/iterare/runs/{run}:run.json"))
    subprocess.run(["git", "iterare", "cleanup", "-y", "--force", run], cwd=repo, check=True,
                   capture_output=True)
    return float(marker.split("=", 1)[1]) - start, record["extra"].get("cached") or {}


def one_more_commit(repo: Path, n: int) -> None:
    (repo / f"bench-{n}.txt").write_text(f"{n}\n")
    _git(repo, "add", f"bench-{n}.txt")
    _git(repo, "commit", "-qm", f"bench {n}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="git-iterare:latest")
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    precompile()
    repo = make_repo(args.image, args.files, args.commits)
    size = sum(p.stat().st_size for p in repo.rglob("*") if p.is_file() and ".git" not in
               p.parts)
    pack = sum(p.stat().st_size for p in (repo / ".git" / "objects").rglob("*") if p.is_file())
    print(f"repository: {args.files} files, {size / 1e6:.0f} MB checked out, "
          f"{pack / 1e6:.0f} MB of objects, {args.commits + 1} commits")
    cache = repo / ".git" / "iterare" / "object-cache"
    baseline: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    first: list[float] = []
    second: list[float] = []
    done: dict[str, list[object]] = {"cold": [], "warm": [], "first": [], "second": []}
    worktree_add(repo)  # the page cache holds the repository from here on
    for n in range(args.runs):
        baseline.append(worktree_add(repo))
        shutil.rmtree(cache, ignore_errors=True)
        seconds, what = give(repo)
        cold.append(seconds)
        done["cold"].append(what)
        one_more_commit(repo, 2 * n)
        seconds, what = give(repo)
        warm.append(seconds)
        done["warm"].append(what)
        baseline.append(worktree_add(repo))
        shutil.rmtree(cache, ignore_errors=True)
        seconds, what = run_once(repo)
        first.append(seconds)
        done["first"].append(what)
        one_more_commit(repo, 2 * n + 1)
        seconds, what = run_once(repo)
        second.append(seconds)
        done["second"].append(what)
    report("object cache, first run (the history packed)", cold, baseline, goal=0.5)
    print(f"  {done['cold'][-1]}")
    report("object cache, after one more commit", warm, baseline, goal=0.05)
    print(f"  {done['warm'][-1]}")
    report("execute until the agent starts, first run", first, baseline, goal=2.0)
    print(f"  {done['first'][-1]}")
    report("execute until the agent starts, after one more commit", second, baseline, goal=2.0)
    print(f"  {done['second'][-1]}")
    shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
