"""``execute --until CHECK`` end to end with the shell agent in the real sandbox: a loop
that passes after its third round (every round a commit and a note), one that stalls, one
out of rounds, a stop and a Ctrl-C mid-loop (the finished rounds kept), best of three
loops compared and merged, and the bad input refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.test_runs_e2e import project  # noqa: F401  (the fixture)

pytestmark = pytest.mark.docker

#: Three failing tests; the check prints those that fail.
TESTS = "a=0\nb=0\nc=0\n"
CHECK = "! grep =0 state"
#: Fixes one test per round, and says which round it is in and what the check said.
FIX_ONE = """\
echo "round $ITERARE_ROUND after check ${ITERARE_CHECK_EXIT:-none}: ${ITERARE_CHECK_OUTPUT:-}"
for k in a b c; do
  if grep -q "^$k=0" state; then sed -i "s/^$k=0/$k=1/" state; break; fi
done
"""


def with_tests(project: Path) -> None:  # noqa: F811
    (project / "state").write_text(TESTS)
    git("add", "state", cwd=project)
    git("commit", "-qm", "three failing tests", cwd=project)


def round_commits(project: Path, rid: str) -> list[tuple[str, str]]:  # noqa: F811
    """``(subject, Iterare-Round trailer)`` of the run's commits, oldest first."""
    out = git("log", "--reverse", "--format=%s%x09%(trailers:key=Iterare-Round,valueonly)",
              f"main..iterare/{rid}", cwd=project).stdout
    pairs = [line.partition("\t") for line in out.splitlines() if line]
    return [(subject, trailer) for subject, _, trailer in pairs]


def wait_record(project: Path, rid: str, ok: Callable[[dict[str, Any]], bool],  # noqa: F811
                timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        data = record(project, rid)
        if ok(data):
            return data
        assert time.monotonic() < deadline, data
        time.sleep(0.3)


def test_a_loop_that_passes_after_its_third_round(project: Path) -> None:  # noqa: F811
    with_tests(project)
    prompt(project, "fix", FIX_ONE)
    run = iterare("execute", "fix", "--until", CHECK, "-f", cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    rid = run_id(run.stdout)
    lines = run.stdout.splitlines()
    assert "[git iterare: round 2]" in lines and "[git iterare: round 3]" in lines
    assert "round 2 after check 1: b=0" in run.stdout  # what the check printed, given back
    assert lines[-1] == ("[git iterare: the loop ended after 3 rounds: the check passed; the "
                         "last check exited 0]")
    data = record(project, rid)
    assert (data["status"], data["extra"]["loop"]["reason"]) == ("succeeded", "passed")
    rounds = data["extra"]["rounds"]
    assert [(r["round"], r["check_exit"], r["check_tail"]) for r in rounds] == [
        (1, 1, "b=0\nc=0"), (2, 1, "c=0"), (3, 0, "")]
    assert round_commits(project, rid) == [
        (f"iterare: round {n} of run {rid}", str(n)) for n in (1, 2, 3)]
    heads = [r["head"] for r in rounds]
    assert heads[-1] == data["head"]
    assert git("show", f"{heads[0]}:state", cwd=project).stdout == "a=1\nb=0\nc=0\n"
    note = json.loads(git("notes", "--ref=iterare", "show", heads[1], cwd=project).stdout)
    assert (note["run"], note["round"], note["check_exit"]) == (rid, 2, 1)
    assert isinstance(note["check_seconds"], float)
    listed = iterare("list", cwd=project).stdout
    assert f"{rid}  succeeded (passed)" in listed
    shown = iterare("show", rid, cwd=project).stdout
    assert f"Rounds: 3 of at most 5: the check passed; the check: {CHECK}" in shown
    log = iterare("log", rid, cwd=project).stdout
    assert log.index("[git iterare: round 1]") < log.index("[git iterare: round 2]")
    # the state after round 1, merged on its own
    beyond = iterare("merge", rid, "--round", "4", cwd=project)
    assert (beyond.returncode, beyond.stderr) == (
        2, f"error: --round 4: run {rid} has rounds 1 to 3 (see its rounds with `git iterare "
           "show`)\n")
    merged = iterare("merge", rid, "--round", "1", cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert (project / "state").read_text() == "a=1\nb=0\nc=0\n"
    assert not subprocess.run(["docker", "ps", "-aq", "--filter", f"label=dev.iterare.run={rid}"],
                              capture_output=True, text=True, check=True).stdout
    assert not subprocess.run(["docker", "images", "-q", "--filter",
                               f"label=dev.iterare.run={rid}"],
                              capture_output=True, text=True, check=True).stdout


def test_a_check_that_never_passes_stalls_after_two_rounds(project: Path) -> None:  # noqa: F811
    # The work changes each round; the check's output differs in its time and duration only.
    prompt(project, "busy", "date +%s%N > stamp\n")
    check = 'echo "FAILED test_x at $(date +%T.%N) in 0.0$RANDOM s"; exit 3'
    run = iterare("execute", "busy", "--until", check, "-f", cwd=project)
    assert run.returncode == 1
    rid = run_id(run.stdout)
    data = record(project, rid)
    assert (data["status"], data["extra"]["loop"]["reason"]) == ("failed", "stalled")
    assert len(data["extra"]["rounds"]) == 2
    assert data["error"] == ("the loop stalled: the check failed the same way 2 rounds in a "
                             "row")
    assert len(round_commits(project, rid)) == 2
    merged = iterare("merge", rid, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert (f"warning: run {rid}: its last check failed (exit status 3) after round 2: "
            f"{check}") in merged.stderr


def test_a_loop_out_of_rounds_and_one_that_changes_nothing(project: Path) -> None:  # noqa: F811
    prompt(project, "count", 'echo "$ITERARE_ROUND" >> rounds.txt\n')
    check = 'echo "still failing in round $ITERARE_ROUND"; exit 1'
    run = iterare("execute", "count", "--until", check, "--max-rounds", "3", "-f",
                  cwd=project)
    assert run.returncode == 1
    data = record(project, run_id(run.stdout))
    assert (data["extra"]["loop"]["reason"], len(data["extra"]["rounds"])) == ("rounds", 3)
    assert data["error"] == "the check still failed after 3 rounds (exit status 1)"
    assert git("show", f"{data['head']}:rounds.txt", cwd=project).stdout == "1\n2\n3\n"

    prompt(project, "idle", "true\n")
    idle = iterare("execute", "idle", "--until", check, "-f", cwd=project)
    data = record(project, run_id(idle.stdout))
    assert (data["extra"]["loop"]["reason"], data["error"]) == (
        "stalled", "the loop stalled: the work did not change for 2 rounds in a row")


def test_the_timeout_counts_across_rounds(project: Path) -> None:  # noqa: F811
    # Round 1 is quick and round 2 naps past the timeout, so a slow start on a loaded
    # machine cannot use up the timeout before round 2 begins.
    prompt(project, "nap", 'echo "$ITERARE_ROUND" >> rounds.txt\n'
                           '[ "$ITERARE_ROUND" = 1 ] || sleep 600\n')
    run = iterare("execute", "nap", "--until", "false", "--timeout", "15", "-f", cwd=project)
    assert run.returncode == 1
    data = record(project, run_id(run.stdout))
    assert (data["status"], data["extra"]["loop"]["reason"]) == ("timed-out", "timed-out")
    assert data["error"] == "its rounds reached the run's timeout"
    assert git("show", f"{data['head']}:rounds.txt", cwd=project).stdout == "1\n2\n"


def test_stop_during_the_check_keeps_every_round(project: Path) -> None:  # noqa: F811
    prompt(project, "write", 'echo "$ITERARE_ROUND" >> rounds.txt\n')
    check = 'if [ "$ITERARE_ROUND" = 2 ]; then echo checking; sleep 600; fi; exit 1'
    started = iterare("execute", "write", "--until", check, cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    wait_record(project, rid, lambda d: d["extra"]["loop"].get("round") == 2
                and d["extra"]["rounds"] and subprocess.run(
                    ["docker", "logs", f"iterare-{rid}-check2"], capture_output=True,
                    text=True, check=False).stdout.strip() == "checking")
    stopped = iterare("stop", "--grace", "1", rid, cwd=project)
    assert (stopped.returncode, stopped.stdout) == (
        0, f"run {rid} stopped; its work is on iterare/{rid}\n"), stopped.stderr
    data = record(project, rid)
    assert (data["status"], data["extra"]["loop"]["reason"]) == ("stopped", "stopped")
    assert git("show", f"iterare/{rid}:rounds.txt", cwd=project).stdout == "1\n2\n"


def test_ctrl_c_while_following_a_loop_stops_it(project: Path) -> None:  # noqa: F811
    prompt(project, "slow", 'echo "$ITERARE_ROUND" >> rounds.txt\n'
                            'if [ "$ITERARE_ROUND" = 2 ]; then echo waiting; sleep 600; fi\n')
    follower = subprocess.Popen(["git-iterare", "execute", "slow", "--until", "false", "-f"],
                                cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    assert follower.stdout is not None
    rid = run_id(follower.stdout.readline())
    for line in follower.stdout:
        if line.strip() == "waiting":
            break
    os.killpg(follower.pid, signal.SIGINT)
    _, err = follower.communicate(timeout=60)
    assert follower.returncode == 130, err
    assert f"run {rid} stopped; its work is on iterare/{rid}" in err
    data = record(project, rid)
    assert (data["status"], data["extra"]["loop"]["reason"]) == ("stopped", "stopped")
    assert round_commits(project, rid)[0] == (f"iterare: round 1 of run {rid}", "1")
    assert git("show", f"iterare/{rid}:rounds.txt", cwd=project).stdout == "1\n2\n"


def test_best_of_three_loops(project: Path) -> None:  # noqa: F811
    with_tests(project)
    # Attempt 2 fixes everything in one round; the others change nothing and stall.
    prompt(project, "one", 'if [ "$ITERARE_ATTEMPT" = 2 ]; then printf "a=1\\nb=1\\nc=1\\n"'
                           ' > state; fi\n')
    run = iterare("execute", "one", "-n", "3", "--until", CHECK, "-f", cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    group = run.stdout.splitlines()[0].split()[1].rstrip(":")
    doc = json.loads(iterare("compare", group, "--format", "json", cwd=project).stdout)
    best = doc["attempts"][0]
    assert (best["attempt"], best["status"]) == (2, "succeeded"), doc
    merged = iterare("merge", group, cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert (project / "state").read_text() == "a=1\nb=1\nc=1\n"
    cleaned = iterare("cleanup", group, "--yes", "--force", cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    assert sorted(record(project, a["run"])["status"] for a in doc["attempts"]) == [
        "cleaned", "cleaned", "merged"]


def test_bad_loops_are_refused_before_anything_starts(project: Path) -> None:  # noqa: F811
    prompt(project, "x", "true\n")
    for args, line in [
        (["--until", ""], "error: --until needs a check: a shell command that exits 0 when "
                          "the work is done (for example --until 'make test')\n"),
        (["--until", "true", "--max-rounds", "51"],
         "error: --max-rounds must be 1 to 50, not 51 (fix --max-rounds or `git iterare "
         "config run.max_rounds`)\n"),
    ]:
        refused = iterare("execute", "x", *args, cwd=project)
        assert (refused.returncode, refused.stderr) == (2, line)
    zero = iterare("execute", "x", "--until", "true", "--max-rounds", "0", cwd=project)
    assert zero.returncode == 2 and zero.stderr.count("\n") == 1, zero.stderr
    assert "--max-rounds" in zero.stderr
    session = iterare("interactive", "--until", "true", cwd=project)
    assert session.returncode == 2 and "--until" in session.stderr
    assert iterare("list", "--all", cwd=project).stdout.count("\n") <= 1  # nothing started
