"""Start cost of a run on a remote engine (one that shares no filesystem with the client).

For a repository of about ``--mb`` MB (incompressible files), the wall time of
``git iterare execute`` from the command's start until the agent's first instruction ran
(the shell agent prints the time), as a ratio to a bare ``docker run --rm IMAGE true`` on
that engine measured in the same run:

1. first run: the engine has no object cache for the repository (everything is shipped);
2. second run, after a commit changing one small file: only the new objects are shipped;
   goal: ratio <= 2.5, and the bytes sent about the size of the change.

Each run's agent also changes one small file; the bytes its finish fetched back (its
record's ``extra.fetched``: the change, not the tree) are printed beside those shipped.

The engine is ``DOCKER_HOST`` when it names a remote one (its clock must agree with this
machine's); otherwise a Docker-in-Docker engine from ``tests/engines.py`` is started (tcp+TLS)
and removed at the end, and the image is copied into it. Usage::

    python -m benchmarks.remote_start [--image git-iterare:latest] [--mb 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import precompile, report

PROMPT = "---\nagent: shell\n---\ndate +AGENT-START=%s.%N\necho done > agent-was-here\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout


@contextmanager
def engine(image: str) -> Iterator[dict[str, str]]:
    """The environment naming the remote engine (see the module docstring)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        yield {}
        return
    from tests import engines

    seed = Path(tempfile.mkdtemp(prefix="iterare-bench-seed-"))
    engines.make_seed(seed)
    engines.build_image()
    dind = engines.start(seed)
    try:
        started = time.monotonic()
        dind.load_image(image)
        print(f"DinD engine up; image copied in {time.monotonic() - started:.0f} s")
        yield dind.tls_env()
    finally:
        engines.stop(dind.container)
        shutil.rmtree(seed, ignore_errors=True)


def make_repo(image: str, megabytes: int, home: Path) -> Path:
    """A repository of about ``megabytes`` MB in 100 KiB files, with a shell-agent prompt;
    the user's own config (under ``home``) picks ``image``."""
    repo = Path(tempfile.mkdtemp(prefix="iterare-bench-remote-"))
    _git(repo, "init", "-q", "-b", "main")
    for n in range(megabytes * 10):
        folder = repo / "data" / f"{n // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{n:05d}.bin").write_bytes(os.urandom(100 * 1024))
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    (repo / ".iterare" / "prompts" / "bench.md").write_text(PROMPT)
    config = home / ".config" / "iterare"
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(f'[docker]\nimage = "{image}"\ncpus = 1\n')
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "init")
    return repo


def run_once(repo: Path, env: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """Seconds from starting ``execute`` until the agent's first command ran, and what
    the run shipped and fetched back (its record's ``extra.shipped`` and, as
    ``fetched_bytes`` and ``fetched_worktree``, its ``extra.fetched``)."""
    start = time.time()
    out = subprocess.run(["git", "iterare", "execute", "bench", "--follow"], cwd=repo,
                         check=True, capture_output=True, text=True, env=env).stdout
    marker = next(line for line in out.splitlines() if line.startswith("AGENT-START="))
    run = out.split()[2]
    record = json.loads(subprocess.run(
        ["git", "show", f"refs/iterare/runs/{run}:run.json"], cwd=repo, check=True,
        capture_output=True, text=True).stdout)
    fetched = record["extra"].get("fetched") or {}
    return float(marker.split("=", 1)[1]) - start, {
        **(record["extra"].get("shipped") or {}), "fetched_bytes": fetched.get("bytes"),
        "fetched_worktree": fetched.get("worktree")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="git-iterare:latest")
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    precompile()
    home = Path(tempfile.mkdtemp(prefix="iterare-bench-home-"))
    with engine(args.image) as engine_env:
        env = {**os.environ, **engine_env, "HOME": str(home),
               "XDG_CONFIG_HOME": str(home / ".config")}
        repo = make_repo(args.image, args.mb, home)
        size = sum(p.stat().st_size for p in (repo / "data").rglob("*") if p.is_file())
        print(f"repository: {size / 1e6:.0f} MB in {args.mb * 10} files")
        bare = ["docker", "run", "--rm", "--entrypoint", "true", args.image]
        first, second, baseline = [], [], []
        shipped_first: dict[str, Any] = {}
        shipped_second: list[dict[str, Any]] = []
        change = 0
        for n in range(args.runs):
            subprocess.run(["git", "iterare", "cleanup", "--cache"], cwd=repo, env=env,
                           check=True, capture_output=True)
            seconds, shipped_first = run_once(repo, env)
            first.append(seconds)
            baseline += _bare(bare, env)
            text = f"change {n}\n" * 100
            (repo / "data" / "changed.txt").write_text(text)
            _git(repo, "add", "data/changed.txt")
            _git(repo, "commit", "-qm", f"change {n}")
            change = len(text)
            seconds, shipped = run_once(repo, env)
            second.append(seconds)
            shipped_second.append(shipped)
            baseline += _bare(bare, env)
        report("remote execute until the agent starts, first run (no cache)", first,
               baseline, goal=float("inf"))
        ratio = report("remote execute until the agent starts, second run", second,
                       baseline, goal=2.5)
        print(f"first run shipped (and fetched back): {shipped_first}")
        print(f"second run shipped (and fetched back): {shipped_second[-1]} (the change: "
              f"{change} bytes of text in one file, plus its commit and trees; the agent's: "
              "one file of 5 bytes)")
        subprocess.run(["git", "iterare", "cleanup", "--cache"], cwd=repo, env=env,
                       check=False, capture_output=True)
        shutil.rmtree(repo, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    if ratio > 2.5:
        raise SystemExit("second run over its goal")


def _bare(argv: list[str], env: dict[str, str]) -> list[float]:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return [time.perf_counter() - start]


if __name__ == "__main__":
    main()
