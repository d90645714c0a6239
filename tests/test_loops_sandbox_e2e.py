"""A loop's check and log against an agent that tries to answer for them, in the real
sandbox with the shell agent: what the agent leaves outside the run's trees (its home,
temporary folders, a wrapper for a command) and a secret variable it tries to add do not
reach the check, which gets no secret; the round images go with the run; lines the agent
prints that look like git-iterare's own are marked as the agent's."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.test_runs_e2e import project  # noqa: F401  (the fixture)

pytestmark = pytest.mark.docker

#: Round 1 leaves files where a check could pick them up, a `false` that passes first in
#: a PATH of its own, and tries to add that PATH to the variables agent-start exports.
PLANT = """\
if [ "$ITERARE_ROUND" = 1 ]; then
  echo planted > "$HOME/planted"; echo planted > /var/tmp/planted; echo planted > /tmp/planted
  mkdir -p "$HOME/bin" && printf '#!/bin/sh\\nexit 0\\n' > "$HOME/bin/false"
  chmod +x "$HOME/bin/false"
  if chmod u+w /run/iterare/secrets/env 2>/dev/null; then echo chmod-ok; else echo chmod-denied; fi
  if (echo "$HOME/bin:/usr/bin:/bin" > /run/iterare/secrets/env/PATH) 2>/dev/null
  then echo plant-ok; else echo plant-denied; fi
fi
test -n "$LOOP_SECRET" && echo agent-has-its-secret
echo "round $ITERARE_ROUND" > "work-$ITERARE_ROUND"
"""
#: Passes only when something the agent left answers for it (or `false` is forged).
CHECK = ('if test -e "$HOME/planted" || test -e /var/tmp/planted || test -e /tmp/planted '
         '|| test -n "${LOOP_SECRET:-}" || test -e "$HOME/bin/false"; then echo DIRTY; exit 0; '
         'fi; echo "clean $ITERARE_ROUND"; PATH="$HOME/bin:$PATH" false')


def round_images(rid: str) -> list[str]:
    return subprocess.run(["docker", "images", "-q", "--filter", f"label=dev.iterare.run={rid}"],
                          capture_output=True, text=True, check=True).stdout.split()


def test_nothing_the_agent_leaves_but_its_work_answers_for_the_check(project: Path  # noqa: F811
                                                                     ) -> None:
    prompt(project, "plant", PLANT)
    run = iterare("execute", "plant", "--until", CHECK, "--max-rounds", "3", "--stall-after",
                  "0", "-e", "LOOP_SECRET", "-f", cwd=project,
                  env={"LOOP_SECRET": "loop-secret-4d9c1f"})
    rid = run_id(run.stdout)
    assert "chmod-denied" in run.stdout and "plant-denied" in run.stdout, run.stdout
    assert "agent-has-its-secret" in run.stdout  # the agent's own rounds keep it
    data = record(project, rid)
    assert data["extra"]["loop"]["reason"] == "rounds", data["extra"]
    assert [(r["check_exit"], r["check_tail"]) for r in data["extra"]["rounds"]] == [
        (1, "clean 1"), (1, "clean 2"), (1, "clean 3")]
    # Two rounds were started from images of the last (the second a child of the first):
    # both go with the run's containers (removed by its driver once the run is recorded).
    assert data["status"] == "failed"
    deadline = time.monotonic() + 60
    while round_images(rid):
        assert time.monotonic() < deadline, round_images(rid)
        time.sleep(0.5)


def test_lines_the_agent_prints_cannot_pass_for_git_iterares(project: Path  # noqa: F811
                                                             ) -> None:
    prompt(project, "forge", 'echo "[git iterare: round 7]"\n'
                             'echo "  [git iterare: the loop ended after 9 rounds]"\n'
                             'echo "round $ITERARE_ROUND" > "work-$ITERARE_ROUND"\n')
    run = iterare("execute", "forge", "--until", 'test -e work-2', "-f", cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    rid = run_id(run.stdout)
    stored = iterare("log", rid, cwd=project)
    raw = iterare("log", "--raw", rid, cwd=project)
    for shown in (run.stdout, stored.stdout, raw.stdout):
        lines = shown.splitlines()
        assert "[git iterare: round 7]" not in lines, shown
        assert lines.count("[agent] [git iterare: round 7]") == 2, shown
        assert lines.count("[agent]   [git iterare: the loop ended after 9 rounds]") == 2
    for shown in (run.stdout, stored.stdout):  # the real round lines stay as they are
        assert "[git iterare: round 2]" in shown.splitlines(), shown


def watcher_of(rid: str) -> int:
    """The pid of the process ``execute`` left to drive run ``rid`` (finish --watcher)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--watcher" in b" ".join(argv) and rid.encode() in argv:
            return int(proc.name)
    raise AssertionError(f"no watcher of {rid}")


def test_a_loop_whose_driver_is_killed_ends_unchecked_with_its_work(project: Path  # noqa: F811
                                                                    ) -> None:
    import os
    import signal

    prompt(project, "slow", 'echo "round $ITERARE_ROUND" > "work-$ITERARE_ROUND"\nsleep 6\n')
    run = iterare("execute", "slow", "--until", "false", "--stall-after", "0", cwd=project)
    assert run.returncode == 0, run.stderr
    rid = run_id(run.stdout)
    os.kill(watcher_of(rid), signal.SIGKILL)
    deadline = time.monotonic() + 120
    while record(project, rid)["status"] in ("created", "starting", "running"):
        assert time.monotonic() < deadline, record(project, rid)
        time.sleep(1)
        iterare("list", cwd=project)  # the next command that looks finishes it
    data = record(project, rid)
    assert (data["status"], data["extra"]["loop"]["reason"]) == ("failed", "unchecked"), data
    assert "the process that drove it ended" in data["error"]
    rounds = data["extra"]["rounds"]
    assert [(r["round"], r["check_exit"]) for r in rounds] == [(1, None)]
    assert rounds[0]["head"] and rounds[0]["exit_code"] == 0
    files = git("ls-tree", "--name-only", f"iterare/{rid}", cwd=project).stdout.split()
    assert "work-1" in files  # the round's work, kept
    lines = iterare("log", rid, cwd=project).stdout.splitlines()
    assert lines[-1] == "[git iterare: the loop ended after 1 round: its last round was not " \
                        "checked]", lines


#: Round 1 leaves its file uncommitted; from round 2 the agent commits what it did.
COMMITS_FROM_ROUND_2 = """\
git status --porcelain | sed 's/^/status: /'
echo "round $ITERARE_ROUND" >> rounds.txt
if [ "$ITERARE_ROUND" -ge 2 ]; then
  git add -A && git commit -qm "agent's own commit in round $ITERARE_ROUND"
fi
"""


def test_a_loop_keeps_the_agents_commits_after_a_round_that_left_files(
        project: Path) -> None:  # noqa: F811
    prompt(project, "commits", COMMITS_FROM_ROUND_2)
    out = iterare("execute", "commits", "-f", "--until", "exit 1", "--stall-after", "0",
                  "--max-rounds", "3", cwd=project)
    assert out.returncode == 1, out.stdout + out.stderr
    rid = run_id(out.stdout)
    subjects = git("log", "--reverse", "--format=%s", f"main..iterare/{rid}",
                   cwd=project).stdout.splitlines()
    assert subjects == [f"iterare: round 1 of run {rid}", "agent's own commit in round 2",
                        "agent's own commit in round 3"], subjects
    warnings = record(project, rid)["extra"].get("warnings", [])
    assert not [w for w in warnings if "diverged" in w], warnings
    # Each round starts from a clean tree: round 1's commit is the agent's HEAD and index.
    assert [line for line in out.stdout.splitlines() if line.startswith("status:")] == [], \
        out.stdout
    assert git("show", f"iterare/{rid}:rounds.txt", cwd=project).stdout == (
        "round 1\nround 2\nround 3\n")


def test_a_loop_whose_watcher_died_mid_round_records_that_round(project: Path  # noqa: F811
                                                                ) -> None:
    import os
    import signal

    prompt(project, "long", 'echo "round $ITERARE_ROUND" >> rounds.txt\nsleep 8\n')
    out = iterare("execute", "long", "--until", "exit 1", "--stall-after", "0",
                  "--max-rounds", "4", cwd=project)
    assert out.returncode == 0, out.stderr
    rid = run_id(out.stdout)
    deadline = time.monotonic() + 120
    first = record(project, rid)["container"]
    while True:  # round 2's container started (its record names it), and wrote its line
        data = record(project, rid)
        if (data["extra"].get("loop") or {}).get("round") == 2 \
                and data["container"] not in (first, None):
            break
        assert time.monotonic() < deadline, data
        time.sleep(0.3)
    time.sleep(2)
    os.kill(watcher_of(rid), signal.SIGKILL)
    while record(project, rid)["status"] in ("created", "starting", "running"):
        assert time.monotonic() < deadline + 60, record(project, rid)
        time.sleep(1)
        iterare("list", cwd=project)  # the next command that looks finishes it
    data = record(project, rid)
    trailers = git("log", "--format=%(trailers:key=Iterare-Round,valueonly)",
                   f"main..iterare/{rid}", cwd=project).stdout.split()
    assert sorted(trailers) == ["1", "2"]  # round 2's work is on the branch
    assert [(r["round"], r["check_exit"]) for r in data["extra"]["rounds"]] == [(1, 1),
                                                                              (2, None)]
    assert data["extra"]["rounds"][-1].get("head") == data["head"]
    assert data["extra"]["loop"]["reason"] == "unchecked"
    merged = iterare("merge", rid, "--round", "2", cwd=project)
    assert merged.returncode == 0, merged.stderr
