"""``stop`` of a run whose sandbox ends by itself between the stop's first look and its
signal: the run was finished by someone else (its watcher, whose warnings go to
``watch.log``), so the stop says it was not running, with the run's error, and signals
nothing. (The window is too narrow to hit with a real engine on purpose; the stop of a
running sandbox, and of one ended before the stop looked, have real tests in
tests/test_runs_e2e.py and tests/test_launch_mark.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from git_iterare.errors import OperationFailed
from git_iterare.runner import finish, manage, ownership
from git_iterare.runs.record import RunRecord
from git_iterare.sandbox.spec import ContainerInfo


class Store:
    """The records a stop reads, and the writes it makes."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.writes: list[str] = []

    def get(self, run_id: str) -> RunRecord:
        return self.record

    def update(self, run_id: str, fn: Any, message: str) -> RunRecord:
        self.writes.append(message)
        return self.record


def test_a_sandbox_that_ended_meanwhile_is_not_signalled(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    running = RunRecord(id="wait-0123abcd", name="wait", status="running",
                        container="c0ffee")
    ended = running.replace(status="failed", error="its work could not be committed (x)")
    store = Store(running)
    finished: list[tuple[str, bool]] = []

    def finish_it(repo: Any, run_id: str, *, wait: bool = False) -> RunRecord:
        finished.append((run_id, wait))
        return ended

    def never(*args: Any) -> None:
        raise AssertionError("an ended sandbox was signalled")

    monkeypatch.setattr(manage, "_store", lambda repo: store)
    monkeypatch.setattr(manage, "settle", lambda repo, record: record)
    monkeypatch.setattr(ownership, "is_local", lambda repo, record: True)
    monkeypatch.setattr(ownership, "container_of", lambda repo, record: ContainerInfo(
        id="c0ffee", name="iterare-wait-0123abcd", state="exited", exit_code=0,
        labels={}, image="img"))
    monkeypatch.setattr(finish, "finish", finish_it)
    monkeypatch.setattr("git_iterare.sandbox.stop", never)
    with pytest.raises(OperationFailed) as caught:
        manage.stop(Path("/nonexistent"), running.id)  # type: ignore[arg-type]
    assert caught.value.render() == (
        "run wait-0123abcd is not running (status failed: its work could not be committed "
        "(x)) (see `git iterare show wait-0123abcd`)")
    assert finished == [("wait-0123abcd", True)]
    assert store.writes == []  # no stop was requested of it
