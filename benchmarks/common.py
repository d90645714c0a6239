"""Helpers shared by the benchmarks: timing commands and reporting ratios.

Timings on shared machines are noisy, so every benchmark measures a baseline in the same run
and reports the ratio of medians.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

# `git iterare` is the git-iterare installed beside the Python running the benchmark
# (a virtual environment's, not on PATH unless activated), as in the tests.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def precompile() -> None:
    """Byte-compile git_iterare and the installed packages as ``pip install`` does, so a
    PYTHONDONTWRITEBYTECODE environment (where pip compiles nothing either) does not make
    every ``git iterare`` compile them from source (about 0.7 s of its start here)."""
    import compileall
    import os
    import sysconfig

    import git_iterare

    compileall.compile_dir(os.path.dirname(git_iterare.__file__), quiet=1)
    compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=1, workers=0)


def git(repo: Path, *args: str) -> str:
    """Run ``git ARGS`` in ``repo``; its standard output.

    Raises:
        subprocess.CalledProcessError: git failed.
    """
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def make_repo(image: str, prompts: Mapping[str, str]) -> Path:
    """A new repository (in a temporary folder) whose runs use ``image``, with the prompt
    files ``prompts`` (name -> content of ``.iterare/prompts/NAME.md``), committed and
    trusted.

    Raises:
        subprocess.CalledProcessError: git or ``git iterare trust`` failed.
    """
    repo = Path(tempfile.mkdtemp(prefix="iterare-bench-"))
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("bench\n")
    (repo / ".iterare" / "prompts").mkdir(parents=True)
    (repo / ".iterare" / "config.toml").write_text(f'[docker]\nimage = "{image}"\n')
    (repo / ".iterare" / ".gitignore").write_text("/worktrees/\n")
    for name, text in prompts.items():
        (repo / ".iterare" / "prompts" / f"{name}.md").write_text(text)
    git(repo, "add", ".")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init")
    # The project file picks the image: a setting the user approves once.
    subprocess.run(["git", "iterare", "trust", "--yes"], cwd=repo, check=True,
                   capture_output=True)
    return repo


def time_command(argv: Sequence[str], repeat: int, cwd: str | None = None) -> list[float]:
    """Run ``argv`` ``repeat`` times; return the wall time of each run, in seconds.

    Raises:
        subprocess.CalledProcessError: the command failed.
    """
    return time_call(lambda: subprocess.run(list(argv), cwd=cwd, check=True,
                                            stdout=subprocess.DEVNULL), repeat)


def time_call(fn: Callable[[], object], repeat: int) -> list[float]:
    """Call ``fn`` ``repeat`` times; return the wall time of each call, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def report(name: str, subject: list[float], baseline: list[float], goal: float) -> float:
    """Print the medians and their ratio; return the ratio."""
    ratio = statistics.median(subject) / statistics.median(baseline)
    _verdict(name, subject, baseline, f"ratio {ratio:.2f}", f"<= {goal}", ratio <= goal)
    return ratio


def report_over(name: str, subject: list[float], baseline: list[float],
                goal_seconds: float) -> float:
    """Print the medians, their ratio and how far the subject's is over the baseline's
    (seconds); return that difference, in seconds."""
    over = statistics.median(subject) - statistics.median(baseline)
    ratio = statistics.median(subject) / statistics.median(baseline)
    _verdict(name, subject, baseline, f"ratio {ratio:.2f}, {over * 1000:+.1f} ms",
             f"<= +{goal_seconds * 1000:.0f} ms", over <= goal_seconds)
    return over


def _verdict(name: str, subject: list[float], baseline: list[float], figures: str, goal: str,
             met: bool) -> None:
    print(f"{name}: {statistics.median(subject) * 1000:.1f} ms vs baseline "
          f"{statistics.median(baseline) * 1000:.1f} ms: {figures} "
          f"(goal {goal}: {'ok' if met else 'over goal'})")


def report_pairs(name: str, subject: list[float], baseline: list[float], goal: float) -> float:
    """Print the medians and the median of the ratios of each ``subject[i]`` to the
    ``baseline[i]`` measured beside it (alternating), which a machine's load changing
    between the pairs moves less than the ratio of the medians; return it."""
    ratio = statistics.median(s / b for s, b in zip(subject, baseline, strict=True))
    verdict = "ok" if ratio <= goal else "over goal"
    print(f"{name}: {statistics.median(subject):.2f} s vs baseline "
          f"{statistics.median(baseline):.2f} s (medians); the median of the {len(subject)} "
          f"pairs' ratios {ratio:.2f} (goal <= {goal}: {verdict})")
    return ratio
