"""The watcher ``execute`` leaves behind runs this git_iterare, never the repository's:
``python -c`` puts the current directory (a hostile repository) first on the import path."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from git_iterare.git import repo as repo_mod
from git_iterare.runner.paths import state_dir
from git_iterare.runner.watch import watch


def test_the_watcher_imports_nothing_from_the_repository(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = repo.parent / "hijacked"
    fake = repo / "git_iterare"
    (fake / "cli").mkdir(parents=True)
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (fake / "cli" / "__init__.py").write_text("")
    (fake / "cli" / "main.py").write_text("def run(argv):\n    return 0\n")
    found = repo_mod.discover(repo)
    state_dir(found, "20261202-000000-none").mkdir(parents=True)
    monkeypatch.chdir(repo)
    pid = watch(found, "20261202-000000-none")
    assert pid is not None
    deadline = time.monotonic() + 60
    while True:  # the real finish finds no such run and exits
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        assert time.monotonic() < deadline, "the watcher did not end"
        time.sleep(0.1)
    log = (state_dir(found, "20261202-000000-none") / "watch.log").read_text()
    assert not marker.exists(), log
    assert os.waitstatus_to_exitcode(status) != 0, log
    assert "20261202-000000-none" in log, log
