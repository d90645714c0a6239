"""Cold start of ``git iterare --version`` against ``python3 -c "import click"``.

Both are started as fresh processes, alternating, so a busy machine slows both alike. The
goal (issue 11) is a median ratio of at most 1.2.

usage: python benchmarks/startup.py [REPEAT]
"""

from __future__ import annotations

import shutil
import sys

from benchmarks.common import precompile, report, time_command


def main(repeat: int = 30) -> float:
    """Measure and print the ratio; returns it."""
    exe = shutil.which("git-iterare")
    if exe is None:
        raise SystemExit("git-iterare is not on PATH; pip install the package first")
    precompile()
    subject: list[float] = []
    baseline: list[float] = []
    for _ in range(repeat):
        subject += time_command([sys.executable, exe, "--version"], 1)
        baseline += time_command([sys.executable, "-c", "import click"], 1)
    return report("git iterare --version", subject, baseline, goal=1.2)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
