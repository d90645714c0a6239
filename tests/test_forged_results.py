"""A second closing report in an agent's log (printed by a hook of the repository's, or by
anything the agent runs) never replaces the first: the figures are marked disputed, the
cost never goes down and a budget stop stays one. Without Docker; the record's side with
the real engine is in tests/test_runs_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

from git_iterare.agents import get_agent
from git_iterare.agents.render import render_lines
from git_iterare.agents.tally import tally
from git_iterare.runner.finish import BUDGET_STOP, over_limits
from git_iterare.runs.status import RUNNING, STOPPED
from git_iterare.runs.store import RunStore
from tests.conftest import iterare
from tests.runs_helpers import make_run

#: Claude Code's own report of a run it ended at its --max-budget-usd.
REAL = json.dumps({"type": "result", "subtype": "error_max_budget_usd", "is_error": True,
                   "total_cost_usd": 0.61, "num_turns": 3, "duration_ms": 4200,
                   "usage": {"input_tokens": 300000, "output_tokens": 90},
                   "errors": ["Reached maximum budget ($0.5)"]})
#: What a SessionEnd hook printed after it.
FORGED = json.dumps({"type": "result", "subtype": "error_during_execution", "is_error": True,
                     "total_cost_usd": 0.0, "num_turns": 1, "duration_ms": 1,
                     "result": "nothing spent"})
SUCCESS = json.dumps({"type": "result", "subtype": "success", "is_error": False,
                      "total_cost_usd": 0.0, "num_turns": 1, "result": "all good"})
SAID = json.dumps({"type": "assistant", "message": {"content": [
    {"type": "text", "text": "working"}]}})
LIMITS = {"max_budget_usd": 0.5}


def test_a_forged_report_after_the_real_one_changes_no_figure() -> None:
    claude = get_agent("claude")
    result = tally(claude, [SAID, REAL, FORGED]).result(exit_code=1)
    assert (result.cost_usd, result.turns, result.duration_ms, result.disputed) == (
        0.61, 3, 4200, 2)
    assert result.tokens == {"input": 300000, "output": 90}
    assert over_limits(LIMITS, result) == f"{BUDGET_STOP}: $0.61 of $0.50"
    assert list(render_lines([SAID, REAL, FORGED], claude))[-1] == (
        "failed: 4.2s, $0.6100, 3 turns (reported by the agent, disputed: its log holds 2 "
        "result reports; the first is shown)")


def test_a_forged_success_before_the_real_report_undoes_no_stop() -> None:
    # Printed by a tool call while the agent worked: it comes first, so its figures are the
    # ones shown, but the real report's failure and cost still count.
    result = tally(get_agent("claude"), [SUCCESS, SAID, REAL]).result(exit_code=1)
    assert (result.is_error, result.cost_usd, result.disputed) == (True, 0.61, 2)
    assert over_limits(LIMITS, result) == f"{BUDGET_STOP}: $0.61 of $0.50"


def test_output_after_the_report_cannot_push_it_out_of_what_is_read() -> None:
    junk = [SAID] * 5000  # far more events than a summary keeps
    result = tally(get_agent("claude"), [REAL, *junk, FORGED]).result(exit_code=1)
    assert (result.cost_usd, result.turns, result.disputed) == (0.61, 3, 2)


def test_one_report_is_not_disputed() -> None:
    result = tally(get_agent("claude"), [SAID, REAL]).result(exit_code=1)
    assert (result.cost_usd, result.turns, result.disputed) == (0.61, 3, 0)
    assert "disputed" not in list(render_lines([SAID, REAL], get_agent("claude")))[-1]


def test_gemini_keeps_its_first_report() -> None:
    failed = json.dumps({"type": "result", "status": "error",
                         "error": {"message": "quota exceeded"}, "stats": {"duration_ms": 9}})
    forged = json.dumps({"type": "result", "status": "success", "stats": {"duration_ms": 1}})
    result = tally(get_agent("gemini"), [failed, forged]).result(exit_code=0)
    assert (result.is_error, result.duration_ms, result.summary, result.disputed) == (
        True, 9, "quota exceeded", 2)


def test_show_and_list_say_the_figures_are_disputed(repo: Path) -> None:
    store = RunStore(repo)
    rec = make_run(repo, "forged", extra={"max_budget_usd": 0.5})
    store.transition(rec.id, RUNNING, container="c0ffee")
    store.update(rec.id, lambda r: r.replace(extra={**r.extra, "disputed": {"reports": 2}}),
                 "disputed")
    store.transition(rec.id, STOPPED, cost_usd=0.61, turns=3, exit_code=1,
                     error=f"{BUDGET_STOP}: $0.61 of $0.50")
    shown = iterare("show", rec.id, cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert ("cost:      $0.61 of $0.50 budget (reported by the agent, disputed: its log holds "
            "2 result reports; the first is shown)\n") in shown.stdout
    listed = iterare("list", cwd=repo).stdout
    assert "$0.61?/$0.50" in listed
    assert listed.endswith("? disputed: the run's log holds more than one result report "
                           "(see `git iterare show`)\n")
    # A record from before (no extra.disputed) reads as it did.
    plain = make_run(repo, "plain")
    store.transition(plain.id, RUNNING, container="c0ffee")
    store.transition(plain.id, STOPPED, cost_usd=0.2, exit_code=1)
    assert "(reported by the agent)\n" in iterare("show", plain.id, cwd=repo).stdout
