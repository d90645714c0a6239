"""The per-run budget without Docker: where the limits come from, how Claude Code is told,
when a run counts as stopped at its budget, git-iterare's own stop for agents without a
budget flag (the engine faked), and spend against budget in ``show`` and ``list``.
End to end with the real Claude Code: tests/test_runs_e2e.py."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from git_iterare import config
from git_iterare.agents import get_agent
from git_iterare.agents.base import Agent, Event, RunResult
from git_iterare.agents.tally import tally
from git_iterare.errors import UserError
from git_iterare.prompt import Prompt, parse
from git_iterare.runner.finish import BUDGET_STOP, over_limits, stop_over_budget
from git_iterare.runner.request import ExecuteRequest, run_budget
from git_iterare.runs.render import spend_text
from git_iterare.runs.store import RunStore
from git_iterare.ui import usd
from tests.conftest import iterare
from tests.runs_helpers import make_run


def _prompt(front: str) -> Prompt:
    return parse(f"---\n{front}---\nDo it.\n", Path("/p/task.md"))


def test_frontmatter_reads_the_limits_and_refuses_bad_ones() -> None:
    prompt = _prompt("max_budget_usd: 2.5\nmax_turns: 7\n")
    assert (prompt.max_budget_usd, prompt.max_turns, prompt.warnings) == (2.5, 7, ())
    assert _prompt("max_budget_usd: 3\n").max_budget_usd == 3.0
    with pytest.raises(UserError, match=r"task.md:3: max_budget_usd must be a number of US "
                                        r"dollars \(0: no limit\), got -1"):
        _prompt("agent: shell\nmax_budget_usd: -1\n")
    with pytest.raises(UserError, match=r"max_turns must be a whole number of turns"):
        _prompt("max_turns: 2.5\n")


def test_flags_beat_frontmatter_beats_config(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config.load(None, env={"ITERARE_RUN_MAX_BUDGET_USD": "9", "ITERARE_RUN_MAX_TURNS": "4"})
    bare = _prompt("agent: shell\n")
    front = _prompt("max_budget_usd: 2\nmax_turns: 3\n")
    assert run_budget(cfg, bare, ExecuteRequest("p")) == {"max_budget_usd": 9.0, "max_turns": 4}
    assert run_budget(cfg, front, ExecuteRequest("p")) == {"max_budget_usd": 2.0, "max_turns": 3}
    flags = ExecuteRequest("p", max_budget_usd=0.25, max_turns=0)
    assert run_budget(cfg, front, flags) == {"max_budget_usd": 0.25, "max_turns": None}
    assert run_budget(config.load(None, env={}), bare, ExecuteRequest("p")) == {
        "max_budget_usd": None, "max_turns": None}
    assert run_budget(cfg, front, ExecuteRequest(None, tty=True)) == {}


def test_config_refuses_a_negative_budget() -> None:
    with pytest.raises(UserError, match=r"run\.max_budget_usd must be a non-negative number"):
        config.load(None, env={"ITERARE_RUN_MAX_BUDGET_USD": "-2"})


def test_claude_gets_its_own_flags_and_the_shell_agent_none() -> None:
    claude = get_agent("claude")
    assert claude.limit_args({"max_budget_usd": 0.5, "max_turns": 3}) == [
        "--max-budget-usd", "0.5", "--max-turns", "3"]
    assert claude.limit_args({"max_budget_usd": None, "max_turns": None}) == []
    assert get_agent("shell").limit_args({"max_budget_usd": 1.0}) == []
    assert get_agent("shell").own_limits == frozenset()


def test_a_run_counts_as_stopped_at_its_budget_only_when_it_reached_it() -> None:
    limits = {"max_budget_usd": 1.0, "max_turns": 5}
    over = RunResult(is_error=True, cost_usd=1.2, turns=2)
    assert over_limits(limits, over) == f"{BUDGET_STOP}: $1.20 of $1.00"
    assert over_limits(limits, RunResult(is_error=True, cost_usd=0.2, turns=6)) == (
        f"{BUDGET_STOP}: 6 turns of 5")
    # Under the limits, no limit set, or a success on the last turn: not a budget stop.
    assert over_limits(limits, RunResult(is_error=True, cost_usd=0.9, turns=4)) is None
    assert over_limits({}, over) is None
    assert over_limits(limits, over, ended_badly=False) is None
    # Stopped by git-iterare: so recorded, whatever the agent said last.
    assert over_limits({**limits, "budget_exceeded": True}, RunResult(is_error=False)) == (
        f"{BUDGET_STOP}: unknown of $1.00")


def test_small_costs_and_budgets_show_enough_digits() -> None:
    # Two decimals read "$0.00 of $0.00" here: a stop nobody could make sense of.
    assert over_limits({"max_budget_usd": 0.001}, RunResult(is_error=True, cost_usd=0.0016)) \
        == f"{BUDGET_STOP}: $0.0016 of $0.001"
    assert [usd(x) for x in (0.61, 1.2, 0, 0.05, 0.0193456, 0.0000004)] == [
        "$0.61", "$1.20", "$0.00", "$0.05", "$0.019", "$0.00"]


class _Metered(Agent):
    """An agent without a budget flag that reports what it has spent so far in
    ``cost N`` lines."""

    name = "metered"

    def parse_line(self, line: str) -> Event:
        if line.startswith("cost "):
            return Event(kind="system", line=line, data={"cost": float(line.split()[1])})
        return Event(kind="text", line=line)

    def summarize(self, events: Iterable[Event], *, exit_code: int | None = None
                  ) -> RunResult:
        costs = [e.data["cost"] for e in events if e.data is not None]
        return RunResult(is_error=False, cost_usd=costs[-1] if costs else None)


def test_git_iterare_stops_an_agent_without_a_flag_at_its_budget(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from git_iterare import sandbox
    from git_iterare.git.repo import discover

    stopped: list[str] = []
    monkeypatch.setattr(sandbox, "stop", lambda name, *a, **k: stopped.append(name))
    monkeypatch.chdir(repo)
    record = make_run(repo, extra={"max_budget_usd": 1.0})
    agent = _Metered()
    counted = tally(agent, ["hello", "cost 0.4"])
    assert not stop_over_budget(discover(), record, agent, counted.cost_usd, "c1")
    assert stopped == []
    counted.feed("cost 1.25")
    assert stop_over_budget(discover(), record, agent, counted.cost_usd, "c1")
    assert stopped == ["c1"]
    after = RunStore(repo).get(record.id)
    assert after.extra["budget_exceeded"] is True
    assert over_limits(after.extra, counted.result()) == f"{BUDGET_STOP}: $1.25 of $1.00"
    # Claude holds its own budget: git-iterare leaves it alone.
    assert not stop_over_budget(discover(), record, get_agent("claude"), 5.0, "c2")
    assert stopped == ["c1"]


def test_a_lower_cost_printed_later_never_undoes_the_budget(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the agent (or a tool it runs) prints after its spend reached the budget cannot
    bring the reported cost back under it, whoever reads the log: the process following
    the run, a later command checking a run nobody follows, or the finish."""
    from git_iterare import sandbox
    from git_iterare.git.repo import discover
    from git_iterare.runner.follow import _watch_budget

    stopped: list[str] = []
    monkeypatch.setattr(sandbox, "stop", lambda name, *a, **k: stopped.append(name))
    monkeypatch.chdir(repo)
    agent = _Metered()
    forged = ["cost 0.5", "cost 1.5", "cost 0.0"]
    assert tally(agent, forged).result().cost_usd == 1.5
    assert over_limits({"max_budget_usd": 1.0}, tally(agent, forged).result()) == (
        f"{BUDGET_STOP}: $1.50 of $1.00")
    # The forged line comes before the watch sees the real one: it still stops.
    record = make_run(repo, extra={"max_budget_usd": 1.0})
    list(_watch_budget(discover(), record, agent, "c7", ["cost 1.5", "cost 0.1", "x"]))
    assert stopped == ["c7"]


def test_show_and_list_give_spend_against_budget(repo: Path) -> None:
    from git_iterare.runs.status import RUNNING, STOPPED

    store = RunStore(repo)
    capped = make_run(repo, "capped", extra={"max_budget_usd": 0.5, "max_turns": 3})
    store.transition(capped.id, RUNNING, container="c0ffee")
    store.transition(capped.id, STOPPED, cost_usd=0.61, turns=2, exit_code=1,
                     error=f"{BUDGET_STOP}: $0.61 of $0.50")
    free = make_run(repo, "free")
    assert spend_text(store.get(capped.id)) == "$0.61/$0.50"
    assert spend_text(store.get(free.id)) == "-"
    shown = iterare("show", capped.id, cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert "cost:      $0.61 of $0.50 budget" in shown.stdout
    assert "turns:     2 of 3" in shown.stdout
    listed = iterare("list", cwd=repo)
    assert "$0.61/$0.50" in listed.stdout




def test_following_stops_the_run_once_the_reported_cost_reaches_the_budget(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from git_iterare import sandbox
    from git_iterare.git.repo import discover
    from git_iterare.runner.follow import _watch_budget

    stopped: list[str] = []
    monkeypatch.setattr(sandbox, "stop", lambda name, *a, **k: stopped.append(name))
    monkeypatch.chdir(repo)
    record = make_run(repo, extra={"max_budget_usd": 1.0})
    lines = ["start", "cost 0.5", "cost 1.5", "after", "cost 2.0"]
    passed = list(_watch_budget(discover(), record, _Metered(), "c9", lines))
    assert passed == lines  # every line is still shown
    assert stopped == ["c9"]  # once, at the line that reached the budget
    assert RunStore(repo).get(record.id).extra["budget_exceeded"] is True
    unlimited = make_run(repo, "free")
    assert list(_watch_budget(discover(), unlimited, _Metered(), "c8", lines)) == lines
    assert stopped == ["c9"]
