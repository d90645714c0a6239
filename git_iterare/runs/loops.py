"""A run record's loop (``execute --until``): ``extra.loop`` and ``extra.rounds`` read
safely (records may come from elsewhere: :mod:`git_iterare.runs.extra`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from git_iterare.runs.extra import Loop, Round

if TYPE_CHECKING:
    from git_iterare.runs.record import RunRecord

#: Why a loop ended (``extra.loop.reason``), as ``list`` and ``show`` say it.
REASONS = {"passed": "the check passed", "rounds": "out of rounds",
           "stalled": "stalled", "budget": "stopped at its budget",
           "stopped": "stopped", "timed-out": "timed out", "failed": "failed",
           "unchecked": "its last round was not checked"}


def loop_of(record: RunRecord) -> Loop | None:
    """The loop ``record``'s run was asked for (``extra.loop``), or None for a run of one
    round (or a record whose ``loop`` is no object)."""
    loop = record.extra.get("loop")
    return loop if isinstance(loop, dict) and isinstance(loop.get("until"), str) else None


#: The types of a round's fields (``extra.rounds[]``); None is always allowed.
_ROUND_TYPES: dict[str, type | tuple[type, ...]] = {
    "round": int, "exit_code": int, "check_exit": int, "check_seconds": (int, float),
    "check_tail": str, "cost_usd": (int, float), "tokens": dict, "turns": int,
    "started": str, "ended": str, "session": str, "head": str}


def rounds_of(record: RunRecord) -> list[Round]:
    """The rounds recorded so far (``extra.rounds``): those that are objects whose fields
    have their types (a fetched record's may be anything)."""
    rounds = record.extra.get("rounds")
    if not isinstance(rounds, list):
        return []
    return [r for r in rounds if isinstance(r, dict) and all(
        _typed(r.get(k), t) for k, t in _ROUND_TYPES.items())]


def _typed(value: object, kinds: type | tuple[type, ...]) -> bool:
    return value is None or (isinstance(value, kinds) and not isinstance(value, bool))


def current_round(record: RunRecord) -> int:
    """The round under way (``extra.loop.round``; 1 when unknown)."""
    loop = loop_of(record) or {}
    value = loop.get("round")
    return value if isinstance(value, int) and value > 0 else 1
