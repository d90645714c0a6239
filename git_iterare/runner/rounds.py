"""The rules of a loop's rounds (``execute --until``), apart from running them
(:mod:`git_iterare.runner.loop`): what a round's check said, when the loop stops, what
the next round is told, and what the whole run comes to.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from git_iterare.runs.extra import Loop, Round

if TYPE_CHECKING:
    from git_iterare.agents.values import RunResult

#: In-sandbox path of a later round's prompt (root's, read-only to the agent).
ROUND_FILE = "/run/iterare/round.md"

# What differs between two runs of the same failing check but says nothing of the work:
# times and durations, addresses, temporary names.
_NOISE = [
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"),
     "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b"), "<time>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s*(?:ns|us|µs|ms|s|sec|secs|seconds?|m|min|minutes?)\b"),
     "<duration>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<address>"),
    (re.compile(r"/tmp/[^\s:'\"]+"), "<tmp>"),
    (re.compile(r"\bpid[ =:]?\d+\b", re.IGNORECASE), "<pid>"),
]

def normalized(output: str) -> str:
    """A check's output with what changes from one run of it to the next (times,
    durations, addresses, temporary paths, process ids) replaced, for
    :func:`stall_reason`."""
    for pattern, mark in _NOISE:
        output = pattern.sub(mark, output)
    return output.strip()


def stall_reason(rounds: Sequence[Round], trees: Sequence[str | None], after: int
                 ) -> str | None:
    """Why the loop is stalled, or None: the last ``after`` rounds (``after`` >= 2; 0 or 1
    never stalls) all ended with the same failing check output (:func:`normalized`), or on
    the same tree.

    Args:
        rounds: every round so far, the last one included.
        trees: the tree id each round ended on (hex; None when unknown), one per round.
        after: ``stall_after``.
    """
    if after < 2 or len(rounds) < after:
        return None
    last = rounds[-after:]
    outputs = {normalized(r.get("check_tail") or "") for r in last}
    if len(outputs) == 1 and all(r.get("check_exit") not in (0, None) for r in last):
        return f"the check failed the same way {after} rounds in a row"
    ended_on = trees[-after:]
    if len(ended_on) == after and None not in ended_on and len(set(ended_on)) == 1:
        return f"the work did not change for {after} rounds in a row"
    return None


def totals(rounds: Iterable[Round]) -> tuple[float | None, dict[str, int], int | None]:
    """What ``rounds`` cost together: US dollars (None when no round reported a cost),
    tokens by kind, turns (None when no round reported them)."""
    cost: float | None = None
    tokens: dict[str, int] = {}
    turns: int | None = None
    for r in rounds:
        spent = r.get("cost_usd")
        if isinstance(spent, (int, float)) and not isinstance(spent, bool):
            cost = (cost or 0.0) + spent
        for kind, n in (r.get("tokens") or {}).items():
            if isinstance(n, int) and not isinstance(n, bool):
                tokens[kind] = tokens.get(kind, 0) + n
        taken = r.get("turns")
        if isinstance(taken, int) and not isinstance(taken, bool):
            turns = (turns or 0) + taken
    return cost, tokens, turns


def left_of(extra: Mapping[str, object], rounds: Sequence[Round]) -> dict[str, object]:
    """The run's ``max_budget_usd`` and ``max_turns`` left after ``rounds``, for the next
    round's :meth:`~git_iterare.agents.base.Agent.limit_args` (None: no limit)."""
    cost, _, turns = totals(rounds)
    left: dict[str, object] = {}
    budget, most = extra.get("max_budget_usd"), extra.get("max_turns")
    if isinstance(budget, (int, float)) and budget:
        left["max_budget_usd"] = max(budget - (cost or 0.0), 0.01)
    if isinstance(most, int) and most:
        left["max_turns"] = max(most - (turns or 0), 1)
    return left


def over_budget(extra: Mapping[str, object], rounds: Sequence[Round]) -> str | None:
    """Why the rounds so far used up the run's budget, or None."""
    cost, _, turns = totals(rounds)
    budget, most = extra.get("max_budget_usd"), extra.get("max_turns")
    counted = f"{len(rounds)} round{'' if len(rounds) == 1 else 's'}"
    if isinstance(budget, (int, float)) and budget and cost is not None and cost >= budget:
        return f"{counted} spent ${cost:.2f} of ${budget:.2f}"
    if isinstance(most, int) and most and turns is not None and turns >= most:
        return f"{counted} took {turns} turns of {most}"
    return None


def own_share(result: RunResult, earlier: Sequence[Round]) -> RunResult:
    """``result`` with the round's own figures: an agent that reports its continued
    session's running totals (:attr:`~git_iterare.agents.values.RunResult.session_totals`)
    counted the rounds just before it of that session too, and theirs are taken off
    (never below 0: what the session saved is the agent's to change).

    Args:
        result: what the round's agent reported.
        earlier: the rounds before it, in order.
    """
    import dataclasses

    if not result.session or not result.session_totals:
        return result
    cost, tokens, _ = totals(itertools.takewhile(
        lambda r: r.get("session") == result.session, reversed(earlier)))
    own = result
    if "cost_usd" in result.session_totals and result.cost_usd is not None:
        own = dataclasses.replace(own, cost_usd=max(result.cost_usd - (cost or 0.0), 0.0))
    if "tokens" in result.session_totals:
        own = dataclasses.replace(own, tokens={
            kind: max(n - tokens.get(kind, 0), 0) for kind, n in result.tokens.items()})
    return own


def so_far(result: RunResult, earlier: Sequence[Round]) -> RunResult:
    """``result`` (a round's own: :func:`own_share`) with the cost and turns of the rounds
    before it added: what the run has spent, which its limits hold (each round is given
    what is left: :func:`left_of`)."""
    import dataclasses

    cost, _, turns = totals([*earlier, Round(cost_usd=result.cost_usd, turns=result.turns)])
    return dataclasses.replace(result, cost_usd=cost, turns=turns)


def round_entry(number: int, result: RunResult, *, started: str | None, ended: str | None,
                exit_code: int | None, check_exit: int | None, check_seconds: float | None,
                check_tail: str) -> Round:
    """A round as the record keeps it (``extra.rounds[]``; its ``head`` comes later)."""
    entry = Round(round=number, exit_code=exit_code, check_exit=check_exit,
                  check_tail=check_tail, cost_usd=result.cost_usd, tokens=dict(result.tokens),
                  turns=result.turns, head=None)
    if result.session:
        entry["session"] = result.session
    if started:
        entry["started"] = started
    if ended:
        entry["ended"] = ended
    if check_seconds is not None:
        entry["check_seconds"] = round(check_seconds, 3)
    return entry


def round_prompt(*, task: str, until: str, entry: Round, continues: bool) -> str:
    """What the agent is told at the start of the round after ``entry``: the check, its
    exit status and output; for an agent that starts a fresh session each round
    (``continues`` False), the task first."""
    tail = entry.get("check_tail") or ""
    report = (f"The check `{until}` failed after round {entry.get('round')} (exit status "
              f"{entry.get('check_exit')}). The end of its output:\n\n```\n{tail}\n```\n\n"
              "Fix what it reports. Your earlier work is in the worktree and committed on "
              "the branch; the check runs again when you stop.\n")
    if continues:
        return report
    return (f"{task.rstrip()}\n\n---\n\nThis task is being worked on in rounds: you are in "
            f"round {int(entry.get('round') or 0) + 1}. {report}")


def outcome(loop: Loop, rounds: Sequence[Round], status: str, error: str | None,
            extra: Mapping[str, object] | None = None) -> tuple[str, str | None]:
    """The status and error of a loop's run once it ended, from its ``reason`` and the
    last round's own outcome (``status``, ``error``: as a run of one round would end).
    A loop its budget ended is ``stopped``, as a run of one round is, whether its last
    round reached the budget or ended under what was left (``extra``: the run record's,
    its ``max_budget_usd`` and ``max_turns``)."""
    BUDGET_STOP = "stopped at its budget"
    from git_iterare.runs.status import FAILED, STOPPED, SUCCEEDED, TIMED_OUT

    reason = loop.get("reason")
    last = rounds[-1] if rounds else Round()
    if reason == "passed":
        return SUCCEEDED, None
    if reason == "rounds":
        n = len(rounds)
        return FAILED, (f"the check still failed after {n} round{'' if n == 1 else 's'} "
                        f"(exit status {last.get('check_exit')})")
    if reason == "failed":
        return FAILED, (f"the loop could not go on after round {len(rounds) or 1}: "
                        f"{loop.get('error') or 'the engine refused'}")
    if reason == "stalled":
        return FAILED, f"the loop stalled: {loop.get('stalled') or 'no progress'}"
    if reason == "timed-out":
        return TIMED_OUT, (error if status == TIMED_OUT
                           else "its rounds reached the run's timeout")
    if reason == "budget":
        return STOPPED, (f"{BUDGET_STOP}: "
                         f"{over_budget(extra or {}, rounds) or 'its rounds used up its limits'}")
    if status == SUCCEEDED:  # its driver ended before the loop did
        return FAILED, ("the loop ended before its check passed: the process that drove "
                        "it ended (see its watch.log)" if reason == "unchecked"
                        else "the loop ended before its check passed")
    return status, error


def check_name(run_id: str, number: int) -> str:
    """The name of round ``number``'s check container."""
    from git_iterare.sandbox.spec import sandbox_name

    return f"{sandbox_name(run_id)}-check{number}"


def joined_log(before: bytes, number: int, log: bytes) -> bytes:
    """The log of the rounds before (``before``) and round ``number``'s ``log``, with a
    line naming the round between, capped as one log is
    (:func:`git_iterare.loglimit.capped`)."""
    from git_iterare.loglimit import capped

    header = f"[git iterare: round {number}]\n".encode()
    return capped(_lines(before + header + log))


def _lines(data: bytes) -> Iterator[bytes]:
    yield from data.splitlines(keepends=True)
