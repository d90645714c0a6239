"""Loops (``execute --until``) and attempts (``-n N``) against a hostile agent and a
hostile repository or remote, found by a hostile helper (hostile5): a round that freezes
its own ``timeout`` is still held to the run's; a stop while a round is committed stops
the loop; lines that only look like git-iterare's are marked as the agent's; a NaN cost
lifts no budget; a repository's tiny ``docker.cpus`` does not start every attempt at
once; the check's time counts against the next round's timeout; ``cleanup GROUP`` stops
its queue; records that came in with ``fetch`` are never a default choice (a group's
best attempt, the most recent run)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, iterare
from tests.runs_helpers import prompt, record, run_id
from tests.test_runs_e2e import project  # noqa: F401  (the fixture)

pytestmark = pytest.mark.docker

#: Every process of the agent's container runs as the agent's uid, the `timeout` that
#: wraps its command too: SIGSTOP freezes it, and its alarm never fires.
FREEZE_TIMEOUT = """\
for p in /proc/[0-9]*; do
  if [ "$(cat "$p/comm" 2>/dev/null || true)" = timeout ]; then kill -STOP "${p#/proc/}"; fi
done
echo "round $ITERARE_ROUND" > "work-$ITERARE_ROUND"
echo frozen
sleep 100000
"""


def container_state(name: str) -> str:
    """``docker inspect``'s state of container ``name`` ("" when there is none)."""
    return subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", name],
                          capture_output=True, text=True, check=False).stdout.strip()


def test_a_round_that_freezes_its_timeout_is_still_held_to_the_runs_timeout(
        project: Path) -> None:  # noqa: F811
    # The driver `execute` leaves waits for the agent's container with no deadline: only a
    # later `list` (reconcile) stops it. Nobody runs one here, so the run must end by
    # itself at its 5 s timeout (plus the 60 s grace TIMEOUT_GRACE gives), not run on.
    prompt(project, "freeze", FREEZE_TIMEOUT)
    run = iterare("execute", "freeze", "--until", "false", "--timeout", "5", cwd=project)
    assert run.returncode == 0, run.stderr
    rid = run_id(run.stdout)
    deadline = time.monotonic() + 150
    while container_state(f"iterare-{rid}") in ("created", "running") \
            and time.monotonic() < deadline:
        time.sleep(2)
    try:
        assert container_state(f"iterare-{rid}") not in ("created", "running"), (
            f"run {rid} still runs 150 s into its 5 s timeout")
    finally:
        iterare("stop", "--grace", "1", rid, cwd=project)


def group_containers(project: Path, name: str) -> list[str]:  # noqa: F811
    """Names of the containers of the repository's runs named ``name.K`` (attempts)."""
    out = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}", "--filter",
                          f"label=dev.iterare.repo={project}"],
                         capture_output=True, text=True, check=True).stdout.split()
    return [n for n in out if n.startswith(f"iterare-{name}.")]


def test_cleanup_of_a_group_stops_its_queue(project: Path) -> None:  # noqa: F811
    # `execute -n 3 -j 1` hands attempts 2 and 3 to a queue process. `cleanup --force -y
    # GROUP` cleans attempt 1 (running) and says nothing of the queue, which then starts
    # attempts 2 and 3: new sandboxes, branches and worktrees after the cleanup, the agent
    # running (with the user's credentials and money) on a group the user removed. There
    # is no `stop GROUP` either ("no run matches").
    prompt(project, "queue", 'sleep 6\necho "$ITERARE_ATTEMPT" > n.txt\n')
    out = iterare("execute", "queue", "-n", "3", "--jobs", "1", cwd=project)
    assert out.returncode == 0, out.stderr
    group = out.stdout.splitlines()[0].split()[1].rstrip(":")
    cleaned = iterare("cleanup", "-y", "--force", group, cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    seen: set[str] = set()
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        seen.update(group_containers(project, "queue"))
        time.sleep(1)
    late = sorted(n for n in seen if not n.startswith("iterare-queue.1-"))
    listed = iterare("list", cwd=project).stdout
    # Let the queue drain before the fixture goes (it cannot be stopped from here).
    drain = time.monotonic() + 60
    while "queued" in iterare("list", cwd=project).stdout and time.monotonic() < drain:
        time.sleep(2)
    assert late == [], f"after `cleanup {group}` the queue started {late}:\n{listed}"


#: Round 1 leaves 20000 new files, so committing the round takes seconds; round 2 would
#: run for a minute.
HEAVY_ROUND = """\
if [ "$ITERARE_ROUND" = 1 ]; then
  mkdir -p many; i=0; while [ $i -lt 20000 ]; do echo $i > many/f$i; i=$((i+1)); done
else
  echo "round $ITERARE_ROUND runs although stopped"; sleep 60
fi
"""


def test_a_stop_while_a_round_is_committed_stops_the_loop(project: Path) -> None:  # noqa: F811
    # The driver reads stop_requested right after the check, then commits the round and
    # starts the next one without looking again; `stop` signals only the round's old
    # (ended) container and the check, then waits. A stop in that window lets the next
    # round run to its end: the agent works a whole round after the user stopped it.
    prompt(project, "heavy", HEAVY_ROUND)
    started = iterare("execute", "heavy", "--until", "false", "--stall-after", "0",
                      cwd=project)
    assert started.returncode == 0, started.stderr
    rid = run_id(started.stdout)
    deadline = time.monotonic() + 120
    while container_state(f"iterare-{rid}-check1") != "exited":
        assert time.monotonic() < deadline, record(project, rid)
        time.sleep(0.1)
    asked = time.monotonic()
    stopped = iterare("stop", "--grace", "1", rid, cwd=project)
    took = time.monotonic() - asked
    assert stopped.returncode == 0, stopped.stderr
    log = iterare("log", rid, cwd=project).stdout
    assert "runs although stopped" not in log and took < 30, (
        f"stop took {took:.0f} s; the log:\n{log[-400:]}")


#: Lines that look like git-iterare's own, with a no-break space (U+00A0) for the space
#: after "git", or a fullwidth colon (U+FF1A): not control characters, so the sanitizer
#: leaves them, and they do not begin with "[git iterare:" byte for byte.
LOOK_ALIKES = """\
printf '[git\\302\\240iterare: round 7]\\n'
printf '[git\\302\\240iterare: the loop ended after 1 round: the check passed; '
printf 'the last check exited 0]\\n'
printf '[git iterare\\357\\274\\232 round 9]\\n'
echo "$ITERARE_ROUND" > r
"""


def test_look_alike_lines_cannot_pass_for_git_iterares(project: Path) -> None:  # noqa: F811
    import unicodedata

    prompt(project, "alike", LOOK_ALIKES)
    run = iterare("execute", "alike", "--until", 'test "$(cat r)" = 2', "-f", cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    stored = iterare("log", run_id(run.stdout), cwd=project)
    for shown in (run.stdout, stored.stdout):
        forged = [line for line in shown.splitlines()
                  if unicodedata.normalize("NFKC", line).startswith(
                      ("[git iterare: round 7]", "[git iterare: round 9]",
                       "[git iterare: the loop ended after 1 round"))]
        assert forged == [], "\n".join(forged)


def test_a_nan_cost_report_neither_hides_the_cost_nor_lifts_the_budget() -> None:
    # Anything the agent runs can write a line to Claude Code's standard output (as its
    # uid: `echo ... > /proc/$PPID/fd/1`). A closing report with "total_cost_usd": NaN
    # (json.loads takes it) before the real one: the tally keeps NaN as the highest cost
    # (no cost is greater than NaN), the round's cost is NaN, the loop's budget check
    # (cost >= budget) never holds, the next round is given --max-budget-usd nan, and the
    # record stores NaN, which is no JSON.
    import json
    import math

    from git_iterare.agents import get_agent
    from git_iterare.agents.tally import Tally
    from git_iterare.runner.rounds import left_of, over_budget
    from git_iterare.runs.extra import Round

    tally = Tally(get_agent("claude"))
    tally.feed(json.dumps({"type": "system", "subtype": "init", "session_id": "s",
                           "claude_code_version": "2.1.300"}))
    tally.feed('{"type": "result", "subtype": "success", "is_error": false, '
               '"total_cost_usd": NaN, "num_turns": 1, "result": "ok", "session_id": "s"}')
    tally.feed(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                           "total_cost_usd": 3.5, "num_turns": 9, "result": "real",
                           "session_id": "s"}))
    cost = tally.result(exit_code=0).cost_usd
    assert cost is not None and not math.isnan(cost) and cost >= 3.5, cost
    rounds = [Round(round=1, cost_usd=cost)]
    assert over_budget({"max_budget_usd": 1.0}, rounds) is not None
    assert left_of({"max_budget_usd": 1.0}, rounds) == {"max_budget_usd": 0.01}


def test_a_repository_cannot_lift_the_default_number_of_attempts_at_once(
        project: Path) -> None:  # noqa: F811
    # `-n N` without --jobs runs the engine's CPUs / docker.cpus attempts at once. A lower
    # docker.cpus "only narrows" the sandbox, so the repository sets it with no approval:
    # 0.01 makes that 200 at a time on a 2-CPU engine, and all N sandboxes (each with its
    # sidecar and its memory limit) start together.
    cpus = int(subprocess.run(["docker", "info", "--format", "{{.NCPU}}"],
                              capture_output=True, text=True, check=True).stdout)
    config = project / ".iterare" / "config.toml"
    config.write_text(config.read_text().replace("cpus = 1\n", "cpus = 0.01\n"))
    git("commit", "-qam", "tiny cpus", cwd=project)
    prompt(project, "many", 'sleep 30\necho "$ITERARE_ATTEMPT" > n.txt\n')
    size = cpus + 2
    out = iterare("execute", "many", "-n", str(size), cwd=project)
    assert out.returncode == 0, out.stderr
    most = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        running = [n for n in group_containers(project, "many")
                   if not n.endswith("-net") and container_state(n) == "running"]
        most = max(most, len(running))
        time.sleep(0.5)
    drain = time.monotonic() + 120  # let every attempt end before the fixture goes
    while time.monotonic() < drain and any(
            word in iterare("list", cwd=project).stdout for word in ("queued", "running")):
        time.sleep(2)
    # The first line says how many run at once: "... from BASE, J at a time".
    at_once = int(out.stdout.splitlines()[0].rsplit(", ", 1)[1].split()[0])
    assert at_once <= cpus and most <= cpus, (
        f"{at_once} at a time, {most} ran at once on a {cpus}-CPU engine")


def test_the_check_counts_against_the_next_rounds_timeout(project: Path) -> None:  # noqa: F811
    # _next_round reckons the seconds left before the check and gives the next round
    # that much again after it: a check that takes most of what is left lets the next
    # round run about as long once more, past --timeout (only a later `list` would stop
    # it, TIMEOUT_GRACE after).
    prompt(project, "long", 'echo "$ITERARE_ROUND" >> rounds.txt\n'
                            'if [ "$ITERARE_ROUND" = 2 ]; then sleep 300; fi\n')
    check = 'if [ "$ITERARE_ROUND" = 1 ]; then sleep 25; fi; exit 1'
    import datetime as dt

    run = iterare("execute", "long", "--until", check, "--timeout", "40", "-f", cwd=project)
    data = record(project, run_id(run.stdout))
    assert data["status"] == "timed-out", (data["error"], data["extra"])
    started, finished = (dt.datetime.fromisoformat(data[k].replace("Z", "+00:00"))
                         for k in ("started", "finished"))
    took = (finished - started).total_seconds()
    assert took < 40 + 12, f"a run with a 40 s timeout ran {took:.0f} s: {data['extra']['rounds']}"


def test_merge_group_does_not_pick_an_attempt_a_fetched_record_added(tmp_path: Path) -> None:
    # A group is what its attempts' records say (extra.group), and records travel with
    # push and fetch. Whoever can push to the shared remote reads the user's group id
    # from the records the user pushed and publishes one more "attempt" of it: its check
    # passed in one round, its changes {0, 0, 0} (the record's own figures, which the
    # ranking takes as they are), its result any commit. The user's `merge GROUP` ranks
    # it first and merges it, a run that never ran here.
    from git_iterare.runs.store import RunStore
    from tests.runs_helpers import commit_on_branch, make_run

    upstream = tmp_path / "upstream.git"
    git("init", "-q", "--bare", str(upstream), cwd=tmp_path)
    user = tmp_path / "user"
    git("init", "-q", "-b", "main", str(user), cwd=tmp_path)
    git("commit", "-q", "--allow-empty", "-m", "i", cwd=user)
    git("remote", "add", "origin", str(upstream), cwd=user)
    git("push", "-q", "origin", "main", cwd=user)
    group = "fix:a1b2c3"
    loop = {"until": "make test", "max_rounds": 3}
    mine = make_run(user, "fix.1", status="succeeded", extra={
        "group": group, "attempt": 1, "loop": {**loop, "reason": "passed"},
        "rounds": [{"round": 1, "check_exit": 0}]})
    head = commit_on_branch(user, f"iterare/{mine.id}", "fix.txt", "the user's own fix\n")
    RunStore(user).set_head(mine.id, head)
    assert iterare("push", "origin", cwd=user).returncode == 0

    other = tmp_path / "other"
    git("clone", "-q", str(upstream), str(other), cwd=tmp_path)
    evil = commit_on_branch(other, "evil", "fix.txt", "someone else's\n")
    forged = make_run(other, "fix.2", status="succeeded", extra={
        "group": group, "attempt": 2, "loop": {**loop, "reason": "passed"},
        "rounds": [{"round": 1, "check_exit": 0}]})
    RunStore(other).set_head(forged.id, evil, {"files": 0, "insertions": 0, "deletions": 0})
    assert iterare("push", "origin", cwd=other).returncode == 0

    assert iterare("fetch", "origin", cwd=user).returncode == 0
    merged = iterare("merge", group, "-y", cwd=user)
    assert merged.returncode == 0, merged.stderr
    assert (user / "fix.txt").read_text() == "the user's own fix\n", merged.stderr


def test_a_fetched_record_from_the_future_is_not_the_most_recent_run(tmp_path: Path) -> None:
    # `merge`, `show`, `diff` and `log` without a RUN take the most recently created run,
    # and `compare` and `merge` without a group the newest attempt's group, by the
    # records' own `created`. A record published with created 9999-12-31 is the newest
    # for ever: after `git iterare fetch`, the user's `git iterare merge` (the README's
    # flow after their own run) merges the stranger's result, without asking when it
    # touches no file that runs on the host; `list` shows its AGE as 0s.
    from git_iterare.runs.store import RunStore
    from tests.runs_helpers import commit_on_branch, make_run

    upstream = tmp_path / "upstream.git"
    git("init", "-q", "--bare", "-b", "main", str(upstream), cwd=tmp_path)
    user = tmp_path / "user"
    git("init", "-q", "-b", "main", str(user), cwd=tmp_path)
    git("commit", "-q", "--allow-empty", "-m", "i", cwd=user)
    git("remote", "add", "origin", str(upstream), cwd=user)
    git("push", "-q", "origin", "main", cwd=user)
    other = tmp_path / "other"
    git("clone", "-q", str(upstream), str(other), cwd=tmp_path)
    evil = commit_on_branch(other, "evil", "evil.txt", "a stranger's\n")
    forged = make_run(other, "innocent", status="succeeded", created="9999-12-31T23:59:59Z")
    RunStore(other).set_head(forged.id, evil, {"files": 1, "insertions": 1, "deletions": 0})
    assert iterare("push", "origin", cwd=other).returncode == 0
    assert iterare("fetch", "origin", cwd=user).returncode == 0

    mine = make_run(user, "mine", status="succeeded")  # the user's own run, just ended
    head = commit_on_branch(user, f"iterare/{mine.id}", "mine.txt", "mine\n")
    RunStore(user).set_head(mine.id, head)
    merged = iterare("merge", cwd=user)
    assert not (user / "evil.txt").exists(), merged.stdout + merged.stderr


def test_cleanup_leaves_no_file_of_a_loops_run_behind(project: Path) -> None:  # noqa: F811
    # cleanup says it removes the run's host-side state; the run's lock file
    # (.git/iterare/state/ID.lock, made by runner.paths.run_lock) stays, one per run ever.
    prompt(project, "tiny", 'echo "$ITERARE_ROUND" > r\n')
    run = iterare("execute", "tiny", "--until", 'test "$(cat r)" = 2', "-f", cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    rid = run_id(run.stdout)
    cleaned = iterare("cleanup", "-y", "--force", rid, cwd=project)
    assert cleaned.returncode == 0, cleaned.stderr
    state = project / ".git" / "iterare" / "state"
    left = sorted(p.name for p in state.iterdir() if rid in p.name)
    assert left == [], left
    assert record(project, rid)["status"] == "cleaned"


def test_cleanup_force_of_a_running_loop_cleans_it(project: Path) -> None:  # noqa: F811
    # cleanup --force stops a running run first; a loop's stop is finished by its driver,
    # which removes the sandbox while cleanup removes it too: "cannot remove the sandbox
    # of run ID: something else is removing it" (exit 1), after the branch and worktree
    # are gone, so the record still says `stopped` on branch iterare/ID (which no longer
    # exists) and its state folder stays, until a second cleanup. A race: tried 3 times.
    prompt(project, "cl", 'echo "r $ITERARE_ROUND" >> rounds.txt\nsleep 4\n')
    failures = []
    for _ in range(3):
        started = iterare("execute", "cl", "--until", "sleep 2; false", "--stall-after", "0",
                          "--max-rounds", "10", cwd=project)
        assert started.returncode == 0, started.stderr
        rid = run_id(started.stdout)
        deadline = time.monotonic() + 90
        while record(project, rid)["extra"]["loop"].get("round", 1) < 2:
            assert time.monotonic() < deadline, record(project, rid)
            time.sleep(0.3)
        cleaned = iterare("cleanup", "--force", "-y", rid, cwd=project)
        status = record(project, rid)["status"]
        if cleaned.returncode != 0 or status != "cleaned":
            failures.append(f"{rid}: exit {cleaned.returncode}, {status}: "
                            f"{cleaned.stderr.strip()[-200:]}")
            iterare("cleanup", "--force", "-y", rid, cwd=project)
    assert failures == [], "\n".join(failures)


#: Records a hostile upstream publishes (refs/iterare/runs/*, fetched by `git iterare
#: fetch`), each an attempt of group g:abcdef with one field of a wrong type.
ODD_RECORDS: dict[str, dict[str, Any]] = {
    "check-tail-int": {"extra": {"group": "g:abcdef", "attempt": 1, "rounds": [
        {"round": 1, "check_exit": 1, "check_tail": 5}],
        "loop": {"until": "make test", "max_rounds": 3, "reason": "rounds"}}},
    "started-int": {"started": 5},
    "cost-str": {"cost_usd": "1.5"},
    "changes-str": {"changes": "x"},
}


@pytest.mark.parametrize("name", sorted(ODD_RECORDS))
def test_a_fetched_record_with_an_odd_field_crashes_no_command(tmp_path: Path, name: str
                                                               ) -> None:
    # Records travel with `git iterare fetch`, and list, show, compare and merge GROUP
    # read their fields as the types they should be: a number for `started`, a string for
    # `cost_usd` or `changes`, a number for a round's check_tail end each of them in a
    # traceback ("this is a bug; please report it") for whoever fetched the record; a
    # `list` that crashes is every later command's `list`.
    from tests.runs_helpers import make_run

    upstream = tmp_path / "upstream"
    git("init", "-q", "-b", "main", str(upstream), cwd=tmp_path)
    git("commit", "-q", "--allow-empty", "-m", "i", cwd=upstream)
    fields: dict[str, Any] = {"extra": {"group": "g:abcdef", "attempt": 1},
                              **ODD_RECORDS[name]}
    forged = make_run(upstream, name, status="failed", **fields)
    user = tmp_path / "user"
    git("clone", "-q", str(upstream), str(user), cwd=tmp_path)
    fetched = iterare("fetch", "origin", cwd=user)
    assert fetched.returncode == 0, fetched.stderr
    crashed = []
    for args in (["list"], ["list", "--format", "json"], ["show", forged.id],
                 ["compare", "g:abcdef"], ["merge", "g:abcdef"]):
        done = iterare(*args, cwd=user)
        if "Traceback" in done.stderr:
            crashed.append(f"{' '.join(args)}: {done.stderr.strip().splitlines()[-2]}")
    assert crashed == [], "\n".join(crashed)


def test_show_says_no_word_of_git_iterares_as_the_agents(project: Path) -> None:  # noqa: F811
    # The last round prints nothing: show's "last result (reported by the agent)" is then
    # the line git iterare put before that round, "[git iterare: round 2]".
    prompt(project, "quiet", 'if [ "$ITERARE_ROUND" = 1 ]; then echo "working"; fi\n'
                             'echo "$ITERARE_ROUND" > r\n')
    run = iterare("execute", "quiet", "--until", 'test "$(cat r)" = 2', "-f", cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    shown = iterare("show", run_id(run.stdout), cwd=project).stdout
    assert "reported by the agent): [git iterare:" not in shown, shown


#: Attempt 1 makes the tiny fix; attempt 2 rewrites every line of the file and appends a
#: NUL byte, so git counts the file as binary: +0 -0.
HIDE_AS_BINARY = """\
if [ "$ITERARE_ATTEMPT" = 1 ]; then
  sed -i 's/^line 7$/line seven/' src.txt
else
  seq 1 200 | sed 's/^/evil /' > src.txt
  printf '\\0' >> src.txt
fi
touch done
"""


def test_a_rewrite_hidden_as_binary_does_not_rank_as_the_smallest_diff(
        project: Path) -> None:  # noqa: F811
    # compare ranks a smaller diff first (lines inserted plus deleted) and merge GROUP
    # merges the first: a binary file counts no line, so rewriting all of src.txt and
    # adding a NUL byte reads "+0 -0" and beats the two-line fix.
    (project / "src.txt").write_text("".join(f"line {n}\n" for n in range(1, 201)))
    git("add", "src.txt", cwd=project)
    git("commit", "-qm", "source", cwd=project)
    prompt(project, "rank", HIDE_AS_BINARY)
    run = iterare("execute", "rank", "-n", "2", "-j", "1", "--until", "test -e done", "-f",
                  cwd=project)
    assert run.returncode == 0, run.stdout + run.stderr
    group = run.stdout.splitlines()[0].split()[1].rstrip(":")
    merged = iterare("merge", group, "-y", cwd=project)
    assert merged.returncode == 0, merged.stderr
    assert "line seven" in (project / "src.txt").read_text(), (
        "merge GROUP merged the attempt that rewrote src.txt: " + merged.stderr)


def test_show_does_not_call_a_round_the_timeout_ended_stopped(project: Path  # noqa: F811
                                                               ) -> None:
    # A round that reached the run's timeout had no check; show says "no check
    # (stopped)" though nobody stopped it (the loop's reason is timed-out).
    prompt(project, "nap", 'echo "$ITERARE_ROUND" >> rounds.txt\nsleep 3\n')
    run = iterare("execute", "nap", "--until", "false", "--timeout", "5", "-f", cwd=project)
    data = record(project, run_id(run.stdout))
    assert data["extra"]["loop"]["reason"] == "timed-out", data["extra"]
    shown = iterare("show", data["id"], cwd=project).stdout
    assert "(stopped)" not in shown, shown
