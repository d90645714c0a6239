"""Helpers shared by the benchmarks: timing commands and reporting ratios.

Timings on shared machines are noisy, so every benchmark measures a baseline in the same run
and reports the ratio of medians.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Sequence


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
    verdict = "ok" if ratio <= goal else "over goal"
    print(f"{name}: {statistics.median(subject) * 1000:.1f} ms vs baseline "
          f"{statistics.median(baseline) * 1000:.1f} ms: ratio {ratio:.2f} "
          f"(goal <= {goal}: {verdict})")
    return ratio
