"""Finishing a run whose work cannot be committed: an error git-iterare expects (its own,
the filesystem's, dulwich's) fails the run with its work kept and a warning; anything else
is a bug, and after the run is recorded the same way it propagates (``main`` prints it as
a bug, with where to report it). The sandbox and the importer are faked; the records are
real."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from dulwich.errors import ObjectFormatException

from git_iterare.errors import OperationFailed
from git_iterare.git.repo import discover
from git_iterare.runner import finish as finish_mod
from git_iterare.runs.status import FAILED, RUNNING
from git_iterare.runs.store import RunStore
from git_iterare.sandbox.spec import ContainerInfo
from tests.runs_helpers import make_run


@pytest.fixture
def failure() -> list[Exception]:
    """What the faked importer raises (the test puts it in)."""
    return []


@pytest.fixture
def ended_run(repo: Path, monkeypatch: pytest.MonkeyPatch, failure: list[Exception]) -> str:
    """A running run whose sandbox has exited 0, with a worktree the importer is asked
    to commit and fails to (everything around it faked)."""
    from git_iterare import sandbox
    from git_iterare.runner import importer, workspace

    monkeypatch.chdir(repo)
    record = make_run(repo)
    RunStore(repo).transition(record.id, RUNNING, container="c0ffee")
    from git_iterare.runner.placement.local import Local

    monkeypatch.setattr(sandbox, "output", lambda *a, **k: iter([b"done\n"]))
    monkeypatch.setattr(sandbox, "remove", lambda *a, **k: None)
    monkeypatch.setattr(Local, "give_back", lambda *a, **k: None)
    monkeypatch.setattr(finish_mod, "has_worktree", lambda *a, **k: True)
    tree = SimpleNamespace(worktree=repo, gitdir=repo, gitfile=repo)
    monkeypatch.setattr(workspace, "open_run", lambda *a, **k: tree)

    def finish_run(*args: object, **kwargs: object) -> None:
        raise failure[0]

    monkeypatch.setattr(importer, "finish_run", finish_run)
    return record.id


def _finish(repo: Path, run_id: str) -> object:
    store = RunStore(repo)
    info = ContainerInfo(id="c0ffee", name=f"iterare-{run_id}", state="exited", exit_code=0,
                         labels={}, image="", ran_seconds=5.0)
    return finish_mod._finish_locked(discover(), store, store.get(run_id), info)


@pytest.mark.parametrize("error", [
    OperationFailed("git refused"), PermissionError(13, "Permission denied"),
    ObjectFormatException("bad tree")])
def test_an_expected_error_fails_the_run_with_its_work_kept(
        repo: Path, ended_run: str, failure: list[Exception],
        capsys: pytest.CaptureFixture[str], error: Exception) -> None:
    failure.append(error)
    record = _finish(repo, ended_run)
    assert record.status == FAILED  # type: ignore[attr-defined]
    assert "its work could not be committed" in record.error  # type: ignore[attr-defined]
    assert f"`git iterare finish {ended_run}` commits it" in capsys.readouterr().err
    assert RunStore(repo).get(ended_run).extra["unfinished"]["outcome"] == "succeeded"


def test_a_bug_is_recorded_then_raised(repo: Path, ended_run: str,
                                       failure: list[Exception]) -> None:
    failure.append(KeyError("oops"))
    with pytest.raises(KeyError, match="oops"):
        _finish(repo, ended_run)
    after = RunStore(repo).get(ended_run)
    assert after.status == FAILED
    assert after.extra["unfinished"]["reason"] == "KeyError: 'oops'"
    assert "kept in .iterare/worktrees/" in (after.error or "")
