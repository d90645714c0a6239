"""Bounded reads through the real sandbox (issue 8, item 6), with the shell agent: the host
process's peak memory is measured with ``/usr/bin/time`` around ``git iterare``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare import limits as lim
from tests.conftest import git, iterare
from tests.test_bounds import PEAK_BYTES
from tests.test_runs_e2e import branch_files, project, prompt, record  # noqa: F401

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def remove_deep_trees(tmp_path: Path) -> Iterator[None]:
    """A deep tree left by a failure would break pytest's own (recursive) clean-up of old
    temp dirs in every later session on this machine."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False)


def timed_iterare(*args: str, cwd: Path, out: Path) -> tuple[int, int, str]:
    """``git iterare ARGS`` with stdout into ``out``; (exit status, peak RSS bytes, stderr)."""
    rss = out.with_suffix(".rss")
    with open(out, "wb") as stdout:
        result = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss), "git", "iterare",
                                 *args], cwd=cwd, stdout=stdout, stderr=subprocess.PIPE,
                                text=True, check=False, timeout=300)
    return result.returncode, int(rss.read_text().split()[-1]) * 1024, result.stderr


def first_run_id(out: Path) -> str:
    with open(out, "rb") as f:
        first = f.readline().decode()
    assert first.startswith("started run "), first
    return first.split()[2]


def test_300_mb_of_output_through_execute_follow(project: Path, tmp_path: Path  # noqa: F811
                                                 ) -> None:
    prompt(project, "loud", 'line=$(head -c 999 /dev/zero | tr "\\0" x)\n'
                            'echo first-line\n'
                            'yes "$line" | head -c 300000000\n'
                            'echo; echo last-line\n')
    out = tmp_path / "out.txt"
    status, peak, stderr = timed_iterare("execute", "loud", "--follow", cwd=project, out=out)
    assert status == 0, stderr
    assert peak < PEAK_BYTES, peak
    # Docker keeps at most 2 x 50 MB of a container's output (LOG_CONFIG): what execute -f
    # shows of an agent that prints faster than it is followed may skip parts (the
    # stored log below is read when the run ends and always has the end).
    with open(out, "rb") as f:
        f.seek(-200, os.SEEK_END)
        assert f.read().endswith(b"\ndone\n")
    assert out.stat().st_size > 30_000_000
    rid = first_run_id(out)
    out.unlink()
    assert record(project, rid)["status"] == "succeeded"
    log = git("show", f"refs/iterare/runs/{rid}:log.jsonl", cwd=project).stdout
    assert len(log) <= lim.LOG_HEAD_BYTES + lim.LOG_TAIL_BYTES + 1000
    lines = log.splitlines()
    assert lines[-1] == "last-line"
    marker = [line for line in lines if line.startswith("[git iterare: ")]
    assert len(marker) == 1 and "bytes (" in marker[0] and "dropped here" in marker[0]
    assert int(marker[0].split()[2]) > 30_000_000


def test_fifo_and_1500_deep_directories_in_the_worktree(project: Path, tmp_path: Path  # noqa: F811
                                                        ) -> None:
    prompt(project, "odd", 'rm README.md && mkfifo README.md && mkfifo pipe\n'
                           "mkfifo $'odd\\nwarning: all good'\n"
                           'deep=$(printf "d/%.0s" $(seq 1500))\n'
                           'mkdir -p "$deep" && echo deep > "${deep}deep.txt"\n'
                           'echo kept > kept.txt\n')
    out = tmp_path / "out.txt"
    status, peak, stderr = timed_iterare("execute", "odd", "--follow", cwd=project, out=out)
    assert status == 0, stderr
    assert peak < PEAK_BYTES
    rid = first_run_id(out)
    # The sandbox strips special files from the agent's trees before anything reads them.
    for name in ("README.md", "pipe"):
        assert f"warning: run {rid}: removed special file: {rid}/{name}" in stderr
    # A line break in a name does not start a line of its own (a forged warning).
    assert (f"warning: run {rid}: removed special file: $'{rid}/odd\\nwarning: all good'"
            in stderr), stderr
    assert "\nwarning: all good" not in stderr
    files = branch_files(project, rid)
    assert "kept.txt" in files and "README.md" not in files
    assert "d/" * 1500 + "deep.txt" in files
    cleaned = iterare("cleanup", "--force", "-y", rid, cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    assert "Traceback" not in cleaned.stderr
    assert not (project / ".iterare" / "worktrees" / rid).exists()
    assert not os.path.lexists(project / ".iterare" / "worktrees" / rid)


def test_cleanup_keeps_a_file_too_big_to_commit(project: Path) -> None:  # noqa: F811
    """A file over MAX_OBJECT_BYTES is not committed; cleanup must not then delete it
    silently (found by an adversarial test)."""
    prompt(project, "huge", "head -c 105000000 /dev/zero > big.dat\necho small > small.txt\n")
    done = iterare("execute", "huge", "--follow", cwd=project)
    assert done.returncode == 0, done.stderr
    rid = done.stdout.split()[2]
    assert "big.dat" in done.stderr and "not committed" in done.stderr
    assert iterare("merge", "--yes", rid, cwd=project).returncode == 0
    refused = iterare("cleanup", "-y", rid, cwd=project)
    assert refused.returncode == 1
    assert (f"run {rid} left files that could not be committed and would be deleted: "
            "big.dat") in refused.stderr
    worktree = project / ".iterare" / "worktrees" / rid
    assert (worktree / "big.dat").stat().st_size == 105_000_000
    assert iterare("cleanup", "-y", "--force", rid, cwd=project).returncode == 0
    assert not worktree.exists()


def test_a_nested_repository_is_warned_about_and_kept_by_cleanup(project: Path  # noqa: F811
                                                                 ) -> None:
    """The files of a repository the agent made inside the worktree are not committed:
    the run says so, and cleanup does not delete them without --force."""
    prompt(project, "nest", "mkdir lib && cd lib && git init -q && echo mine > mine.txt\n"
                            "cd .. && echo top > top.txt\n")
    done = iterare("execute", "nest", "--follow", cwd=project)
    assert done.returncode == 0, done.stderr
    rid = done.stdout.split()[2]
    assert (f"warning: run {rid}: not committed: lib (a nested git repository: its new "
            "files are not committed)") in done.stderr
    assert "top.txt" in branch_files(project, rid)
    assert not any(f.startswith("lib/") for f in branch_files(project, rid))
    shown = iterare("show", rid, cwd=project).stdout
    assert ("Not committed: left in the run's worktree by its automatic commit\n"
            "    lib  (a nested git repository: its new files are not committed)\n") in shown
    refused = iterare("cleanup", "-y", rid, cwd=project)
    assert refused.returncode == 1
    assert (f"run {rid} left files that could not be committed and would be deleted: "
            "lib") in refused.stderr
    worktree = project / ".iterare" / "worktrees" / rid
    assert (worktree / "lib" / "mine.txt").read_text() == "mine\n"
    assert iterare("cleanup", "-y", "--force", rid, cwd=project).returncode == 0
    assert not worktree.exists()


def test_every_special_file_is_removed_however_many(project: Path) -> None:  # noqa: F811
    """400 FIFOs: the warnings name at most 100, and none is left in the worktree (a
    reader of the names that stopped at 100 once ended their removal early)."""
    prompt(project, "fifos", "mkdir pipes && cd pipes && for i in $(seq 400); do "
                             "mkfifo p$i; done\necho kept > ../kept.txt\n")
    done = iterare("execute", "fifos", "--follow", cwd=project)
    assert done.returncode == 0, done.stderr
    rid = done.stdout.split()[2]
    assert done.stderr.count("removed special file:") == 100
    pipes = project / ".iterare" / "worktrees" / rid / "pipes"
    assert sorted(os.listdir(pipes)) == []
    assert "kept.txt" in branch_files(project, rid)
    assert iterare("cleanup", "-y", "--force", rid, cwd=project).returncode == 0
