"""The rules of a loop's rounds (git_iterare.runner.rounds), without an engine."""

from __future__ import annotations

from pathlib import Path

from git_iterare.agents.values import RunResult
from git_iterare.runner.rounds import (
    left_of,
    normalized,
    outcome,
    over_budget,
    round_entry,
    round_prompt,
    stall_reason,
    totals,
)
from git_iterare.runs.extra import Loop, Round


def failing(output: str, code: int = 1) -> Round:
    return Round(round=1, check_exit=code, check_tail=output)


def test_what_changes_between_two_runs_of_a_check_is_not_a_difference() -> None:
    a = "FAILED test_x at 12:01:02.123 in 0.31s (0x7f3a2c) /tmp/pytest-12/x pid 4411"
    b = "FAILED test_x at 12:05:59.999 in 1.2 seconds (0x55aa01) /tmp/pytest-99/x pid 17"
    assert normalized(a) == normalized(b)
    assert normalized("FAILED test_x") != normalized("FAILED test_y")


def test_a_loop_stalls_on_the_same_failure_or_the_same_tree() -> None:
    same = [failing("E assert 1 == 2 (0.1s)"), failing("E assert 1 == 2 (0.3s)")]
    assert stall_reason(same, ["t1", "t2"], 2) == \
        "the check failed the same way 2 rounds in a row"
    assert stall_reason(same, ["t1", "t2"], 3) is None  # not yet three
    assert stall_reason(same, ["t1", "t2"], 0) is None  # never
    moving = [failing("3 failed"), failing("2 failed")]
    assert stall_reason(moving, ["t1", "t2"], 2) is None
    assert stall_reason(moving, ["t", "t"], 2) == "the work did not change for 2 rounds in a row"
    assert stall_reason(moving, [None, None], 2) is None  # unknown trees say nothing


def test_what_rounds_cost_together_and_what_is_left() -> None:
    rounds = [Round(cost_usd=0.25, tokens={"input": 10}, turns=3),
              Round(cost_usd=0.5, tokens={"input": 5, "output": 2}, turns=2),
              Round(cost_usd=None, tokens={}, turns=None)]
    assert totals(rounds) == (0.75, {"input": 15, "output": 2}, 5)
    assert totals([Round()]) == (None, {}, None)
    assert left_of({"max_budget_usd": 1.0, "max_turns": 8}, rounds) == {
        "max_budget_usd": 0.25, "max_turns": 3}
    assert left_of({"max_budget_usd": None}, rounds) == {}
    assert over_budget({"max_budget_usd": 0.75}, rounds) == "3 rounds spent $0.75 of $0.75"
    assert over_budget({"max_turns": 6}, rounds) is None
    assert over_budget({"max_turns": 5}, rounds) == "3 rounds took 5 turns of 5"


def test_the_next_round_is_told_what_the_check_said() -> None:
    entry = round_entry(2, RunResult(is_error=False), started=None, ended=None, exit_code=0,
                        check_exit=1, check_seconds=0.5, check_tail="1 failed")
    told = round_prompt(task="Fix the tests.", until="pytest", entry=entry, continues=True)
    assert "`pytest` failed after round 2 (exit status 1)" in told and "1 failed" in told
    assert "Fix the tests." not in told  # its own session has the task
    fresh = round_prompt(task="Fix the tests.", until="pytest", entry=entry, continues=False)
    assert fresh.startswith("Fix the tests.") and "round 3" in fresh and "1 failed" in fresh


def test_how_a_loop_ends() -> None:
    loop = Loop(until="make test", max_rounds=3)
    last = [Round(round=3, check_exit=2)]
    assert outcome({**loop, "reason": "passed"}, last, "failed", "x") == ("succeeded", None)
    assert outcome({**loop, "reason": "rounds"}, last, "succeeded", None) == (
        "failed", "the check still failed after 1 round (exit status 2)")
    assert outcome({**loop, "reason": "stalled", "stalled": "it repeated"}, last,
                   "succeeded", None) == ("failed", "the loop stalled: it repeated")
    assert outcome({**loop, "reason": "stopped"}, last, "stopped", "stopped by you") == (
        "stopped", "stopped by you")
    assert outcome(loop, last, "succeeded", None) == (
        "failed", "the loop ended before its check passed")


def test_trust_show_lists_the_checks_a_repository_asks_loops_to_run(repo: Path) -> None:
    from tests.conftest import iterare

    prompts = repo / ".iterare" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "fix.md").write_text("---\nagent: shell\nuntil: make test\n---\ntrue\n")
    (prompts / "plain.md").write_text("---\nagent: shell\n---\ntrue\n")
    (repo / ".iterare" / "config.toml").write_text('[run]\nuntil = "\\u001b[2Jpytest"\n')
    shown = iterare("trust", "--show", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    start = lines.index("loop checks (`until`: they run in the sandbox only, no approval needed):")
    assert lines[start + 1:] == ["  prompt fix: make test", "  run.until: ^[[2Jpytest"]
