"""How a launch that did not complete is recorded when it is kept rather than undone (its
worktree holds more than its base): the status, a readable error, and a line naming the
run, which the user otherwise never learnt of (found by a helper: a bare "interrupted",
and "KeyboardInterrupt: " as the run's error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from git_iterare import sandbox
from git_iterare.errors import OperationFailed
from git_iterare.git import repo as repo_mod
from git_iterare.runner import launch
from git_iterare.runs.store import RunStore
from tests.runs_helpers import make_run


@pytest.mark.parametrize(("exc", "status", "error"), [
    (KeyboardInterrupt(), "stopped", "interrupted (Ctrl-C) while it was launched"),
    (OperationFailed("the engine refused"), "failed", "the engine refused"),
])
def test_a_kept_launch_is_recorded_and_named(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str],
                                             exc: BaseException, status: str,
                                             error: str) -> None:
    record = make_run(repo)
    monkeypatch.setattr(sandbox, "inspect", lambda name: None)  # no agent started
    found = repo_mod.discover(repo)
    store = RunStore(found)
    launch._record_launch_failure(found, store, record.id, exc)
    kept = store.get(record.id)
    assert (kept.status, kept.error) == (status, error)
    assert capsys.readouterr().err == (
        f"warning: run {record.id} is kept as {status} (`git iterare show {record.id}`; "
        f"`git iterare cleanup {record.id}` removes it)\n")
