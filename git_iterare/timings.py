"""Phase timings, for benchmarks: where a run's start and finish spend their time.

With :data:`ENV` naming a file in the environment, each :func:`phase` appends one line
``{"phase": NAME, "seconds": S}`` (JSON) to it when it ends, from whichever process and
thread it runs in (lines are appended whole, so several processes may share the file).
Without it a phase costs one environment lookup; nothing is written anywhere. The file is
the user's own (their environment names it): nothing of the run's content goes into it,
only phase names and seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: The environment variable naming the file phase timings are appended to.
ENV = "ITERARE_TIMINGS"


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the ``with`` block as the phase ``name`` (see the module docstring); the line
    is written also when the block raises. A file that cannot be written is ignored (a
    benchmark's aid never fails a run)."""
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        line = f'{{"phase": "{_plain(name)}", "seconds": {time.perf_counter() - start:.6f}}}\n'
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError:
            pass


def _plain(name: str) -> str:
    """``name`` with nothing that needs escaping in a JSON string (names are ours)."""
    return "".join(c if c.isalnum() or c in "._- " else "_" for c in name)


def read(path: str | os.PathLike[str]) -> dict[str, list[float]]:
    """The phases :func:`phase` wrote to ``path``: name -> the seconds of each time it ran,
    in order; empty when there is no file. Lines that do not parse are skipped."""
    import json

    found: dict[str, list[float]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return found
    for line in lines:
        try:
            item = json.loads(line)
            name, seconds = str(item["phase"]), float(item["seconds"])
        except (ValueError, KeyError, TypeError):
            continue
        found.setdefault(name, []).append(seconds)
    return found
