"""Compare-and-swap details: a held ref lock is waited for, a stale one ends in an error."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from git_iterare.errors import OperationFailed
from git_iterare.runs.cas import Unchanged, cas_update
from git_iterare.runs.store import RunStore
from tests.runs_helpers import make_run


def test_waits_for_a_held_lock(repo: Path) -> None:
    rec = make_run(repo)
    lock = repo / ".git" / "refs" / "iterare" / "runs" / f"{rec.id}.lock"
    lock.write_text("")
    threading.Timer(0.5, lock.unlink).start()
    start = time.monotonic()
    done = RunStore(repo).transition(rec.id, "running")
    assert done.status == "running" and time.monotonic() - start >= 0.4
    assert RunStore(repo).get(rec.id).status == "running"


def test_stale_lock_gives_up_with_one_line(repo: Path) -> None:
    rec = make_run(repo)
    other = make_run(repo, "other")
    store = RunStore(repo)
    (repo / ".git" / "refs" / "iterare" / "runs" / f"{rec.id}.lock").write_text("")
    target = store.snapshot(other.id).commit
    with pytest.raises(OperationFailed, match="other processes kept changing it"):
        cas_update(store.repo, f"refs/iterare/runs/{rec.id}".encode(), lambda old: target,
                   "x", timeout=0.3)
    assert store.get(rec.id).status == "created"


def test_unchanged_leaves_ref(repo: Path) -> None:
    rec = make_run(repo)
    store = RunStore(repo)

    def build(old: bytes | None) -> bytes:
        raise Unchanged

    before = store.snapshot(rec.id).commit
    assert cas_update(store.repo, f"refs/iterare/runs/{rec.id}".encode(), build, "x") == before


def test_add_object_waits_for_another_writer_of_the_same_object(repo: Path) -> None:
    from dulwich.objects import Blob
    from dulwich.repo import Repo as DulwichRepo

    from git_iterare.runs.cas import add_object

    blob = Blob.from_string(b"same prompt text\n")
    hexid = blob.id.decode()
    path = repo / ".git" / "objects" / hexid[:2] / hexid[2:]
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = Path(f"{path}.lock")
    lock.write_bytes(b"")  # another process is writing this very object
    with DulwichRepo(str(repo)) as dul:
        done = threading.Event()

        def write() -> None:
            add_object(dul, blob)
            done.set()

        thread = threading.Thread(target=write)
        thread.start()
        assert not done.wait(0.2)  # it waits rather than failing
        lock.unlink()
        thread.join(5)
        assert done.is_set()
        assert blob.id in dul.object_store
    assert subprocess.run(["git", "cat-file", "-p", hexid], cwd=repo, capture_output=True,
                          text=True, check=True).stdout == "same prompt text\n"
