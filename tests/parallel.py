"""Running the suite on several pytest-xdist workers (``.ci/test`` passes ``-n``).

Each worker is a process of its own with its own session fixtures. Most Docker tests
make their own repository, containers and networks (unique names) and run side by side;
a few session fixtures stand for one thing on this machine (the swarm lab, the DinD
engine, Podman's socket, the predecessor's virtual environment), so every test that uses
one runs on the same worker (``--dist loadgroup``, groups from :data:`GROUPS`). Images
that several workers build under one tag are built under :func:`machine_lock`, so the
first build fills Docker's cache and the next ones take it.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

#: Session fixture name -> xdist group of the tests that use it (directly or through
#: another fixture). The first match in this order wins.
GROUPS = (
    ("swarm", "swarm"),
    ("dind_engine", "dind"),
    ("podman_engine", "podman"),
    ("legacy", "legacy"),
)


def group_of(fixturenames: list[str]) -> str | None:
    """The xdist group a test with these fixtures (its whole closure) belongs to, or None
    when it may run on any worker."""
    for fixture, group in GROUPS:
        if fixture in fixturenames:
            return group
    return None


def add_groups(items: list[pytest.Item]) -> None:
    """Mark each collected test with its ``xdist_group`` (see :data:`GROUPS`)."""
    for item in items:
        group = group_of(list(getattr(item, "fixturenames", ())))
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


def worker_index() -> int | None:
    """This process's xdist worker number (``gw3`` -> 3), or None outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


@contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold an exclusive lock named ``name`` shared by every process on this machine
    (``flock(2)`` on a file in the temporary directory); blocks until it is free."""
    path = Path(tempfile.gettempdir()) / f"iterare-tests-{name}.lock"
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
