"""Groups of attempts (``execute -n``) without Docker: group ids and their resolution, the
ranking ``compare`` and ``merge GROUP`` use, ``compare``'s output, the note's group, and
the bad input ``execute -n`` refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from git_iterare.errors import OperationFailed, UserError
from git_iterare.runs.groups import (
    attempt_env,
    attempt_row,
    is_group_id,
    names_group,
    new_group_id,
    rank,
    resolve_group,
)
from git_iterare.runs.ids import is_run_id
from git_iterare.runs.record import RunRecord
from git_iterare.runs.store import RunStore
from tests.conftest import iterare
from tests.runs_helpers import make_run


def attempt(group: str, k: int, *, status: str = "succeeded", check: int | None = None,
            rounds: int = 0, lines: int | None = 10, cost: float | None = None,
            reason: str | None = None) -> RunRecord:
    extra: dict[str, Any] = {"group": group, "attempt": k}
    if rounds:
        extra["loop"] = {"until": "make test", "max_rounds": 5, "stall_after": 2,
                         **({"reason": reason} if reason else {})}
        extra["rounds"] = [{"round": i + 1, "check_exit": 1} for i in range(rounds)]
        extra["rounds"][-1]["check_exit"] = check
    return RunRecord(id=f"fix.{k}-0000000{k}", name=f"fix.{k}", status=status, exit_code=0,
                     changes=None if lines is None else {"files": 1, "insertions": lines,
                                                         "deletions": 0},
                     cost_usd=cost, extra=extra)  # type: ignore[arg-type]


def ranked(records: list[RunRecord], sort: str = "check") -> list[int]:
    return [row.attempt for row in rank([attempt_row(r, None) for r in records], sort)]


def test_a_group_id_is_never_a_run_id_and_names_a_group_by_its_colon() -> None:
    group = new_group_id("fix")
    assert is_group_id(group) and not is_run_id(group) and names_group(group)
    assert group.startswith("fix:") and len(group) == len("fix:") + 6
    assert not is_group_id("fix-0123abcd") and not names_group("fix-0123abcd")
    assert names_group("fix:") and not names_group(None)


def test_ranking_puts_a_passed_check_first_then_fewer_rounds_smaller_diff_lower_cost() -> None:
    g = "fix:abcdef"
    # 1: check failed after 2 rounds; 2: passed after 3; 3: passed after 2 with a big diff;
    # 4: passed after 2, small diff but dearer; 5: passed after 2, small and cheap.
    records = [attempt(g, 1, check=1, rounds=2, lines=1, cost=0.01, reason="stalled"),
               attempt(g, 2, check=0, rounds=3, lines=1, cost=0.01),
               attempt(g, 3, check=0, rounds=2, lines=500, cost=0.01),
               attempt(g, 4, check=0, rounds=2, lines=5, cost=0.50),
               attempt(g, 5, check=0, rounds=2, lines=5, cost=0.02)]
    assert ranked(records) == [5, 4, 3, 2, 1]
    # --sort puts its key first and keeps the others, in order, after it.
    assert ranked(records, "cost") == [3, 2, 1, 5, 4]
    assert ranked(records, "diff") == [2, 1, 5, 4, 3]
    assert ranked(records, "attempt") == [1, 2, 3, 4, 5]


def test_without_a_loop_success_counts_as_passed_and_an_unknown_diff_ranks_last() -> None:
    g = "fix:abcdef"
    records = [attempt(g, 1, status="failed", lines=1), attempt(g, 2, lines=None),
               attempt(g, 3, lines=40), attempt(g, 4, status="running", lines=None)]
    assert ranked(records) == [3, 2, 1, 4]
    rows = rank([attempt_row(r, None) for r in records])
    assert [(row.check, row.rounds) for row in rows] == [("-", 1)] * 4


def test_an_unknown_sort_key_is_refused() -> None:
    with pytest.raises(UserError, match="--sort 'size'"):
        rank([], "size")


def test_crafted_loop_values_count_as_absent() -> None:
    crafted: Any = {"group": "x:abcdef", "attempt": True, "loop": "yes",
                    "rounds": [{"check_exit": "0"}]}
    record = RunRecord(id="x-00000001", name="x", status="succeeded", extra=crafted)
    row = attempt_row(record, None)
    assert (row.attempt, row.reason, row.check, row.rounds) == (0, None, "-", 1)
    assert attempt_env(record) == {}
    assert attempt_env(attempt("x:abcdef", 3)) == {"ITERARE_ATTEMPT": "3"}
    assert attempt_env(RunRecord(id="y-00000001", name="y", extra={"attempt": 2})) == {}


def test_a_group_resolves_by_id_prefix_or_run_and_a_plain_run_is_no_group(repo: Path) -> None:
    store = RunStore(repo)
    first = [make_run(repo, f"fix.{k}", extra={"group": "fix:aaaaaa", "attempt": k})
             for k in (1, 2)]
    other = make_run(repo, "fix.1", extra={"group": "fix:bbbbbb", "attempt": 1},
                     created="2099-01-01T00:00:00Z")
    plain = make_run(repo, "plain")
    assert resolve_group(store, "fix:aaaaaa")[1] == first
    assert resolve_group(store, "fix:a") == ("fix:aaaaaa", first)
    assert resolve_group(store, first[1].id)[0] == "fix:aaaaaa"
    assert resolve_group(store, other.id)[0] == "fix:bbbbbb"
    assert resolve_group(store, None)[0] == "fix:bbbbbb"  # the newest attempt's
    with pytest.raises(UserError, match="matches 2 groups: fix:aaaaaa, fix:bbbbbb"):
        resolve_group(store, "fix:")
    with pytest.raises(UserError, match=f"run {plain.id} is no attempt of a group"):
        resolve_group(store, plain.id)
    with pytest.raises(OperationFailed, match="no group matches 'fix:c'"):
        resolve_group(store, "fix:c")


def test_compare_shows_the_attempts_best_first_and_refuses_a_plain_run(repo: Path) -> None:
    make_run(repo, "fix.1", status="failed", exit_code=1, extra={"group": "fix:aaaaaa",
                                                                   "attempt": 1})
    make_run(repo, "fix.2", status="succeeded", exit_code=0, cost_usd=0.25,
             changes={"files": 2, "insertions": 7, "deletions": 1},
             extra={"group": "fix:aaaaaa", "attempt": 2})
    plain = make_run(repo, "plain", status="succeeded")
    out = iterare("compare", "fix:aaaaaa", cwd=repo)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "group fix:aaaaaa: 2 attempts, best first (by check)"
    assert lines[1].split() == ["#", "RUN", "STATUS", "CHECK", "ROUNDS", "CHANGES", "COST*",
                                "DURATION", "HOST-EXEC"]
    assert lines[2].split()[:4] == ["2", lines[2].split()[1], "succeeded", "-"]
    assert "2 files +7 -1" in lines[2] and "$0.25" in lines[2]
    assert lines[3].split()[:3] == ["1", lines[3].split()[1], "failed"]
    doc = json.loads(iterare("compare", "fix:a", "--format", "json", cwd=repo).stdout)
    assert [(a["rank"], a["attempt"], a["status"], a["check"], a["rounds"], a["lines"])
            for a in doc["attempts"]] == [(1, 2, "succeeded", None, 1, 8),
                                          (2, 1, "failed", None, 1, None)]
    assert list(doc) == ["v", "group", "sort", "attempts"]
    assert list(doc["attempts"][0]) == [
        "rank", "attempt", "run", "status", "reason", "check", "check_exit", "rounds",
        "changes", "lines", "cost_usd", "duration_seconds", "branch", "host_executables"]
    refused = iterare("compare", plain.id, cwd=repo)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith(f"error: run {plain.id} is no attempt of a group")
    assert len(refused.stderr.splitlines()) == 1


def test_the_note_of_an_attempt_names_its_group() -> None:
    from git_iterare.runner.finish import note_entry

    assert note_entry(attempt("fix:abcdef", 2), "succeeded") == {
        "run": "fix.2-00000002", "prompt": None, "agent": None, "status": "succeeded",
        "group": "fix:abcdef"}
    assert "group" not in note_entry(RunRecord(id="p-00000001", name="p"), "failed")


@pytest.mark.parametrize("args, message", [
    (["-n", "0"], "'0' is not a whole number of attempts (1 or more)"),
    (["-n", "65"], "-n 65: at most 64 attempts (MAX_ATTEMPTS)"),
    (["-n", "3", "--jobs", "0"], "'0' is not a whole number of attempts at once (1 or more)"),
])
def test_execute_refuses_bad_counts_in_one_line(repo: Path, args: list[str], message: str
                                                ) -> None:
    result = iterare("execute", "task", *args, cwd=repo)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_interactive_takes_no_attempts(repo: Path) -> None:
    result = iterare("interactive", "-n", "3", cwd=repo)
    assert result.returncode == 2
    assert result.stderr.startswith("error: No such option '-n'")
