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


def rounds_of(record: RunRecord) -> list[Round]:
    """The rounds recorded so far (``extra.rounds``), those that are objects."""
    rounds = record.extra.get("rounds")
    return [r for r in rounds if isinstance(r, dict)] if isinstance(rounds, list) else []


def current_round(record: RunRecord) -> int:
    """The round under way (``extra.loop.round``; 1 when unknown)."""
    loop = loop_of(record) or {}
    value = loop.get("round")
    return value if isinstance(value, int) and value > 0 else 1
