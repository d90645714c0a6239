"""Ctrl-C while following a run: the run goes on, unless it had ended already (Ctrl-C
while it was being finished, just after "done"), which the message then says instead of
"goes on" (found by a helper)."""

from __future__ import annotations

from pathlib import Path

import pytest

from git_iterare.cli import main
from git_iterare.git import repo as repo_mod
from git_iterare.runner import follow, interrupts
from git_iterare.runs.store import RunStore
from tests.runs_helpers import make_run


def _interrupted(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(("statuses", "line"), [
    (("running",), "stopped following; run {id} goes on (`git iterare log -f {id}`)"),
    (("running", "succeeded"),
     "interrupted; run {id} has ended (succeeded; `git iterare show {id}`)"),
])
def test_ctrl_c_while_following_says_what_became_of_the_run(
        repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        statuses: tuple[str, ...], line: str) -> None:
    record = make_run(repo)
    store = RunStore(repo_mod.discover(repo))
    for status in statuses:
        store.transition(record.id, status)
    monkeypatch.chdir(repo)
    monkeypatch.setattr(follow, "show_log", _interrupted)
    # Not this test process's own Ctrl-C handling.
    monkeypatch.setattr(interrupts, "end_on_next_interrupt", lambda: None)
    with pytest.raises(SystemExit) as ended:
        main.run(["git-iterare", "log", "-f", record.id])
    assert ended.value.code == 130
    assert capsys.readouterr().err == "\n" + line.format(id=record.id) + "\n"
