"""``merge`` interrupted by Ctrl-C leaves the checkout as it was, and its error lines stay
short however many files are involved. Real git; the slow checkout comes from a smudge
filter in the repository's own config (the user's, trusted)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from git_iterare.errors import OperationFailed
from git_iterare.git import repo as repo_mod
from git_iterare.git.merge import merge_run
from git_iterare.runs.store import RunStore
from tests.conftest import git
from tests.runs_helpers import head_of, make_run

FILES = 12


def _run_adding_files(repo: Path, count: int, size: int = 10) -> str:
    """A succeeded run whose branch adds ``d/f<i>.txt`` for i < count; returns its id."""
    record = make_run(repo, "many")
    branch = f"iterare/{record.id}"
    git("checkout", "-q", "-b", branch, "main", cwd=repo)
    (repo / "d").mkdir()
    for i in range(count):
        (repo / "d" / f"f{i}.txt").write_text(f"{i}\n" * size)
    git("add", "d", cwd=repo)
    git("commit", "-qm", "many files", cwd=repo)
    head = head_of(repo)
    git("checkout", "-q", "main", cwd=repo)
    store = RunStore(repo)
    store.transition(record.id, "running")
    store.transition(record.id, "succeeded", head=head, exit_code=0)
    return record.id


def _state(repo: Path) -> tuple[str, str, list[str]]:
    status = git("status", "--porcelain", "--untracked-files=all", "--ignored", cwd=repo).stdout
    return head_of(repo), status, sorted(p.name for p in repo.iterdir())


@pytest.mark.parametrize("squash", [False, True])
def test_ctrl_c_during_the_merge_leaves_the_checkout_as_it_was(repo: Path, tmp_path: Path,
                                                               squash: bool) -> None:
    run_id = _run_adding_files(repo, FILES)
    counter = tmp_path / "smudged"
    # Every file checked out takes 0.3 s and leaves a line in the counter.
    git("config", "filter.slow.smudge", f"cat; echo x >> {counter}; sleep 0.3", cwd=repo)
    (repo / ".git" / "info" / "attributes").write_text("*.txt filter=slow\n")
    (repo / "untracked.txt").write_text("mine\n")
    before = _state(repo)
    merge = subprocess.Popen(["git", "iterare", "merge", "--yes", run_id,
                              *(["--squash"] if squash else [])],
                             cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (counter.exists() and len(counter.read_text().split()) >= 3):
        assert merge.poll() is None and time.monotonic() < deadline, merge.communicate()
        time.sleep(0.02)
    os.killpg(merge.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    out, err = merge.communicate(timeout=60)
    assert _state(repo) == before  # none of the run's files is left behind
    assert (repo / "untracked.txt").read_text() == "mine\n"
    assert not (repo / ".git" / "MERGE_HEAD").exists()
    assert err.splitlines()[-2:] == [
        "interrupted: putting the checkout back as it was...",
        f"error: merging iterare/{run_id} interrupted; nothing was changed (HEAD is at "
        f"{before[0][:12]} as before)"], err[-500:]
    assert out == ""
    assert RunStore(repo).get(run_id).status == "succeeded"  # not merged


def test_a_merge_refused_by_many_files_names_a_few(repo: Path) -> None:
    run_id = _run_adding_files(repo, 300)
    (repo / "d").mkdir()
    for i in range(300):  # the user's own files where the run adds its own
        (repo / "d" / f"f{i}.txt").write_text("the user's\n")
    with pytest.raises(OperationFailed) as err:
        merge_run(repo_mod.discover(repo), f"iterare/{run_id}")
    assert err.value.message == (
        "the run writes d/f0.txt, d/f1.txt, d/f10.txt, d/f100.txt, d/f101.txt and 295 more, "
        "which this worktree has as files git does not track (ignored ones too); not merging")


def test_error_and_warning_lines_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    from git_iterare import ui
    from git_iterare.limits import MAX_MESSAGE_CHARS

    ui.error("e" * 40_000)
    ui.warn("w" * (MAX_MESSAGE_CHARS + 1))
    ui.error("fits\tin one line")
    assert capsys.readouterr().err.splitlines() == [
        f"error: {'e' * MAX_MESSAGE_CHARS}... ({40_000 - MAX_MESSAGE_CHARS} more characters)",
        f"warning: {'w' * MAX_MESSAGE_CHARS}... (1 more characters)",
        "error: fits^Iin one line"]
