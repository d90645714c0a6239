"""16 processes making 50 updates each never lose one (compare-and-swap on refs)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from git_iterare.runs.store import RunStore
from tests.conftest import git
from tests.runs_helpers import head_of, make_run

PROCESSES = 16
UPDATES = 50

WORKER = textwrap.dedent("""
    import sys
    from git_iterare.runs.store import RunStore
    repo, worker, count, base, *run_ids = sys.argv[1:]
    store = RunStore(repo)
    for i in range(int(count)):
        marker = f"{worker}:{i}"
        for run_id in run_ids:
            store.update(run_id, lambda r, m=marker: r.replace(
                extra={**r.extra, "markers": [*r.extra.get("markers", []), m]}), marker)
    store.add_note([base], {"run": f"w{worker}-0000000{int(worker) % 10}",
                            "prompt": "p", "agent": "shell", "status": "running"})
""")


@pytest.mark.slow
def test_concurrent_updates_are_never_lost(repo: Path) -> None:
    shared = make_run(repo, "shared")
    own = [make_run(repo, f"own{i}") for i in range(PROCESSES)]
    base = head_of(repo)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(repo), str(w), str(UPDATES),
                               base, shared.id, own[w].id])
             for w in range(PROCESSES)]
    assert [p.wait(timeout=600) for p in procs] == [0] * PROCESSES
    store = RunStore(repo)
    markers = store.get(shared.id).to_dict()["extra"]["markers"]
    expected = {f"{w}:{i}" for w in range(PROCESSES) for i in range(UPDATES)}
    assert len(markers) == PROCESSES * UPDATES and set(markers) == expected
    for w in range(PROCESSES):
        assert store.get(own[w].id).to_dict()["extra"]["markers"] == [
            f"{w}:{i}" for i in range(UPDATES)]
    chain = git("rev-list", "--first-parent", "--count", f"refs/iterare/runs/{shared.id}",
                cwd=repo).stdout
    assert int(chain) == PROCESSES * UPDATES + 1
    note = git("notes", "--ref=iterare", "show", base, cwd=repo).stdout.splitlines()
    assert len(note) == PROCESSES
    assert git("fsck", "--strict", cwd=repo).returncode == 0
