"""How the model agents take part in a loop (``execute --until``), without Docker: what a
later round's argv and prompt are, which of their figures are a continued session's
running totals and how a round's own share is taken from them, and how a loop ended by
its budget comes out. End to end with the real CLIs: tests/test_loops_agents_e2e.py and
tests/test_agent_clis.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_iterare import agents, config
from git_iterare.agents.base import RunResult
from git_iterare.agents.tally import Tally, tally
from git_iterare.runner.rounds import outcome, own_share, round_prompt, so_far
from git_iterare.runs.extra import Loop, Round

DATA = Path(__file__).parent / "data"
#: Real output of Claude Code 2.1.197 against tests/fakeapi (its init event first).
CLAUDE_STREAM = (DATA / "claude-stream.jsonl").read_text().splitlines()
CLAUDE_SESSION = "c235949d-f9c7-49a1-ba62-a51a347df8e7"

claude = agents.get_agent("claude")


def _claude_stream(version: str) -> list[str]:
    """The real stream, its init event naming Claude Code ``version``."""
    init = json.loads(CLAUDE_STREAM[0])
    assert init["subtype"] == "init"
    return [json.dumps(dict(init, claude_code_version=version)), *CLAUDE_STREAM[1:]]


@pytest.mark.parametrize(("version", "totals"), [
    ("2.1.197", frozenset()), ("2.1.276", frozenset()),
    ("2.1.277", frozenset({"cost_usd"})), ("2.1.332", frozenset({"cost_usd"})),
    ("3.0.0", frozenset({"cost_usd"})), ("nightly", frozenset())])
def test_claude_says_when_its_cost_is_the_sessions(version: str,
                                                   totals: frozenset[str]) -> None:
    result = tally(claude, _claude_stream(version)).result(exit_code=0)
    assert (result.session, result.session_totals) == (CLAUDE_SESSION, totals)


def test_the_tally_keeps_the_opening_event_of_a_long_round() -> None:
    """A round longer than the events kept still shows the agent's version."""
    counted = Tally(claude, keep=3)
    lines = _claude_stream("2.1.332")
    for line in [lines[0], *[lines[1]] * 50, *lines[1:]]:
        counted.feed(line)
    assert counted.result(exit_code=0).session_totals == {"cost_usd"}


def _round(number: int, cost: float | None, session: str = "s1",
           tokens: dict[str, int] | None = None) -> Round:
    return Round(round=number, cost_usd=cost, tokens=tokens or {}, turns=2, session=session)


def test_a_rounds_own_cost_takes_off_the_earlier_rounds_of_its_session() -> None:
    # Claude Code 2.1.332 against the fake API: round 1 reported $0.80, round 2 (three
    # turns) $2.00, round 3 (one turn) $2.40: their own are $0.80, $1.20 and $0.40.
    running = RunResult(is_error=False, cost_usd=2.0005, turns=3, session="s1",
                        session_totals=frozenset({"cost_usd"}), tokens={"input": 300})
    earlier = [_round(1, 0.80018)]
    own = own_share(running, earlier)
    assert own.cost_usd == pytest.approx(1.20032)
    assert (own.turns, own.tokens) == (3, {"input": 300})  # its own already
    third = RunResult(is_error=False, cost_usd=2.40054, session="s1",
                      session_totals=frozenset({"cost_usd"}))
    assert own_share(third, [*earlier, _round(2, own.cost_usd)]).cost_usd == pytest.approx(
        0.40004)


def test_only_the_same_sessions_rounds_just_before_count() -> None:
    running = RunResult(is_error=False, cost_usd=1.5, session="s2",
                        session_totals=frozenset({"cost_usd"}))
    # Round 1 was another session (the agent's home lost it): nothing of it is carried.
    assert own_share(running, [_round(1, 0.7, "s1"), _round(2, 0.5, "s2")]).cost_usd == (
        pytest.approx(1.0))
    assert own_share(running, [_round(1, 0.7, "s1")]).cost_usd == 1.5
    # A session's own figures, or an agent that names none, are taken as they are.
    plain = RunResult(is_error=False, cost_usd=1.5, session="s1")
    assert own_share(plain, [_round(1, 0.7, "s1")]) == plain
    # What the agent saved in its home can claim more than it spent: never below 0.
    assert own_share(running, [_round(1, 9.0, "s2")]).cost_usd == 0.0


def test_codex_tokens_of_a_resumed_thread_are_its_own() -> None:
    # Codex 0.171 against the fake: round 1 (two requests) reported 2000 input tokens, the
    # resumed round 2 (two more) 4000.
    events = [codex.parse_line(line) for line in (DATA / "codex-stream.jsonl").read_text(
        ).splitlines()]
    first = codex.summarize(events, exit_code=0)
    assert first.session_totals == {"tokens"} and first.session
    earlier = [Round(round=1, tokens=dict(first.tokens), session=first.session)]
    doubled = RunResult(is_error=False, session=first.session,
                        session_totals=frozenset({"tokens"}),
                        tokens={k: 2 * n for k, n in first.tokens.items()})
    assert own_share(doubled, earlier).tokens == first.tokens


codex = agents.get_agent("codex")


def test_codex_resumes_its_last_session_with_the_exec_options_first() -> None:
    cfg = config.load(None, {"codex.base_url": "http://fakeapi.test:8080/v1"}, env={},
                      git_entries=[])
    first = codex.command(prompt_file="/run/iterare/prompt.md", config=cfg)
    later = codex.round_command(prompt_file="/run/iterare/prompt.md",
                                round_file="/run/iterare/round.md", config=cfg)
    assert later[:5] == ["sh", "-c", 'f=$1; shift; exec "$@" < "$f"', "sh",
                         "/run/iterare/round.md"]
    # `codex exec [OPTIONS] resume --last -`: the options of the first round's exec, then
    # the subcommand (tests/test_agent_clis.py runs it against the fake Responses API).
    assert later[5:] == [*first[5:-1], "resume", "--last", "-"]


def test_gemini_starts_afresh_with_the_task_and_the_checks_output() -> None:
    gemini = agents.get_agent("gemini")
    cfg = config.load(None, {}, env={}, git_entries=[])
    assert not gemini.continues_session
    later = gemini.round_command(prompt_file="/run/iterare/prompt.md",
                                 round_file="/run/iterare/round.md", config=cfg)
    assert later == gemini.command(prompt_file="/run/iterare/round.md", config=cfg)
    entry = Round(round=1, check_exit=1, check_tail="FAILED tests/test_x.py::test_y")
    told = round_prompt(task="Make the tests pass.\n", until="pytest -q", entry=entry,
                        continues=gemini.continues_session)
    assert told.startswith("Make the tests pass.\n\n---\n\n")
    assert "you are in round 2" in told
    assert ("The check `pytest -q` failed after round 1 (exit status 1). The end of its "
            "output:\n\n```\nFAILED tests/test_x.py::test_y\n```\n") in told


def test_the_run_so_far_is_what_its_limits_hold() -> None:
    # Round 2 was given the $0.20 left of $1.00 and stopped itself at $0.40.
    stopped = RunResult(is_error=True, cost_usd=0.4, turns=1)
    whole = so_far(stopped, [_round(1, 0.8)])
    assert (whole.cost_usd, whole.turns, whole.is_error) == (pytest.approx(1.2), 3, True)


def test_a_loop_its_budget_ended_is_stopped_at_its_budget() -> None:
    loop = Loop(until="make test", reason="budget")
    rounds = [_round(1, 0.8), _round(2, 0.4)]
    extra = {"max_budget_usd": 1.0}
    expected = ("stopped", "stopped at its budget: 2 rounds spent $1.20 of $1.00")
    # Whether the last round's agent stopped itself (failed, as a round alone under the
    # run's budget) or ended well and the rounds together reached it.
    assert outcome(loop, rounds, "failed", "the agent reported an error", extra) == expected
    assert outcome(loop, rounds, "succeeded", None, extra) == expected
    assert outcome(loop, [_round(1, 0.3)], "failed", None, {"max_turns": 2}) == (
        "stopped", "stopped at its budget: 1 round took 2 turns of 2")
    # A round stopped at what it was given, its figures short of the run's (a report
    # left out): still the budget's stop.
    assert outcome(loop, [_round(1, 0.3)], "failed", None, {"max_turns": 5}) == (
        "stopped", "stopped at its budget: its rounds used up its limits")
