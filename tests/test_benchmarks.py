"""Every benchmark of benchmarks/ runs once, at its smallest size, so none can rot: each
must print its figures. A benchmark may miss its goal on a loaded machine (it then says
so and exits 1); a crash, or figures missing, fails the test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines import DindEngine
from tests.swarm import SwarmLab

ROOT = Path(__file__).resolve().parents[1]


def bench(module: str, *args: str, env: dict[str, str] | None = None,
          timeout: float = 900) -> str:
    """Run ``python -m benchmarks.MODULE ARGS`` from the checkout; its standard output.
    Fails unless it exited 0, or 1 saying it missed its goal."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    said = done.stdout + done.stderr
    missed = done.returncode == 1 and ("over goal" in said or "over its goal" in said
                                        or module == "sandbox_start")
    assert done.returncode == 0 or missed, said
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def positive(pattern: str, out: str) -> None:
    """A line of ``out`` matches ``pattern``, and every figure it captures is above 0."""
    found = re.search(pattern, out, re.M)
    assert found and all(float(figure) > 0 for figure in found.groups()), out


def test_startup() -> None:
    assert "git iterare --version:" in bench("startup", "2")


def test_records_list() -> None:
    out = bench("records_list", "3")
    assert "3 runs: created in" in out and "ratio" in out, out


@pytest.mark.docker
def test_execute_start(sandbox_image: str) -> None:
    out = bench("execute_start", "--image", sandbox_image, "--runs", "1", "--burst", "2")
    assert "execute until the agent starts:" in out, out
    assert "the plain launch" in out, out
    assert "2 runs at once: all ended" in out and "lost: 0" in out, out


@pytest.mark.docker
def test_sandbox_start(sandbox_image: str) -> None:
    out = bench("sandbox_start", "--image", sandbox_image, "--runs", "1", "--domains", "5")
    assert "bare docker run (true):" in out and "sandbox, 5 domains:" in out, out


@pytest.mark.docker
def test_remote_start(dind_engine: DindEngine, sandbox_image: str) -> None:
    dind_engine.load_image(sandbox_image)
    out = bench("remote_start", "--image", sandbox_image, "--mb", "1", "--runs", "1",
                env=dind_engine.tls_env())
    assert "first run (no cache)" in out and "second run shipped (and fetched back):" in out
    fetched = re.search(r"^second run shipped .*'fetched_bytes': (\d+), "
                        r"'fetched_worktree': 'change'", out, re.M)
    assert fetched and int(fetched[1]) < 64 * 1024, out  # the change, not 1 MB of tree


@pytest.mark.docker
@pytest.mark.slow
def test_swarm_start(swarm: SwarmLab, sandbox_image: str) -> None:
    swarm.manager.load_image(sandbox_image)
    out = bench("swarm_start", "--image", sandbox_image, "--mb", "1", "--runs", "1",
                "--registry", swarm.registry, env=swarm.manager.tls_env())
    positive(r"^bare one-replica service \(true\), create to complete: ([\d.]+) s", out)
    assert re.search(r"^swarm execute until the agent starts, second run: [\d.]+ ms vs "
                     r"baseline [\d.]+ ms: ratio [\d.]+ \(goal <= 3.0: (ok|over goal)\)$",
                     out, re.M), out
    section = out.split("where the second run's start goes (the last of 1, ms):\n", 1)[1]
    for label in ("ship: code into the manager's volumes", "publish: push to the registry",
                  "overlay network made", "egress ready (firewall locked, self-check)",
                  "tree server started", "task scheduled (given a node)",
                  "trees fetched, until the agent's first command"):
        assert re.search(rf"^  {re.escape(label)}: -?\d+$", section, re.M), (label, out)


@pytest.mark.docker
def test_local_objects(sandbox_image: str) -> None:
    out = bench("local_objects", "--image", sandbox_image, "--files", "40", "--commits", "2",
                "--runs", "1")
    assert "object cache, after one more commit" in out and "repository: 40 files" in out, out


@pytest.mark.docker
def test_big_repo(sandbox_image: str) -> None:
    out = bench("big_repo", "--image", sandbox_image, "--files", "40", "--changed", "2",
                "--runs", "1")
    assert "repository: 40 files in 1 folders" in out, out
    pairs = (r" [\d.]+ s vs baseline [\d.]+ s \(medians\); the median of the [12] pairs' "
             r"ratios [\d.]+ \(goal <= [\d.]+: (ok|over goal)\)$")
    for line in ("start: execute until the agent starts, vs git worktree add --detach",
                 "  the first runs (no object cache)",
                 "finish: the agent's end until succeeded (2 files changed), vs git status "
                 "+ git commit -a", "second run vs first: start",
                 "second run vs first: the whole run"):
        assert re.search(f"^{re.escape(line)}:{pairs}", out, re.M), (line, out)
    positive(r"^peak RSS of execute \(its largest process\): (\d+) MB", out)
    for part in ("first runs", "second runs"):
        section = out.split(f"where the time goes, {part} (medians of 1, ms):\n", 1)[1]
        for label in ("git checkout of the base",
                      "the checkout map (hashed only when a conversion may apply)",
                      "trees given to the agent's uid (sidecar chown)",
                      "trees given back (special files, set-uid bits, chown)",
                      "files the agent did not touch (stat cache, before the give-back)",
                      "files still as checked out (hashed unless untouched)",
                      "git add of the worktree", "the agent's commits imported"):
            assert re.search(rf"^ +{re.escape(label)}: \d+$", section, re.M), (label, out)


@pytest.mark.docker
def test_loop_rounds(sandbox_image: str) -> None:
    out = bench("loop_rounds", "--image", sandbox_image, "--loops", "1", "--rounds", "2")
    positive(r"^rounds: (\d+) ms, (\d+) ms; docker exec: (\d+) ms, (\d+) ms; "
             r"plain container: (\d+) ms, (\d+) ms$", out)
    assert re.search(r"^a round, the agent's exit to the check's first instruction \(2 rounds\)"
                     r", vs docker exec .*: [\d.]+ ms vs baseline [\d.]+ ms: ratio [\d.]+, "
                     r"[+-][\d.]+ ms \(goal <= \+500 ms: (ok|over goal)\)$", out, re.M), out
    assert "where a round's time goes (medians of 2): the agent's container ends" in out, out
    assert re.search(r"^the other half of a round, .*\(1\): median \d+ ms$", out, re.M), out


@pytest.mark.docker
def test_attempts(sandbox_image: str) -> None:
    out = bench("attempts", "--image", sandbox_image, "--runs", "1", "--cpu-seconds", "0.2",
                "--attempts", "2", "--jobs", "2")
    positive(r"^1 single run one after the other: ([\d.]+) s; -n 2 --jobs 2: ([\d.]+) s$", out)
    assert re.search(r"^-n 2 --jobs 2, until all ended, vs 1 single run one .*: [\d.]+ s vs "
                     r"baseline [\d.]+ s \(medians\); the median of the 1 pairs' ratios "
                     r"[\d.]+ \(goal <= 1.5: (ok|over goal)\)$", out, re.M), out


def test_every_benchmark_is_run_here() -> None:
    """A benchmark added to benchmarks/ gets its test in this file."""
    source = Path(__file__).read_text(encoding="utf-8")
    modules = {p.stem for p in (ROOT / "benchmarks").glob("*.py")} - {"__init__", "common"}
    assert modules and [m for m in sorted(modules) if f'bench("{m}"' not in source] == []
