"""Run statuses, the transitions between them, and record timestamps.

Kept apart from :mod:`record` (and free of dataclasses) so ``git iterare list`` can import
it cheaply. The table is documented in gititerare-records(5).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping

from git_iterare.errors import OperationFailed

CREATED = "created"
STARTING = "starting"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
STOPPED = "stopped"
TIMED_OUT = "timed-out"
LOST = "lost"
MERGED = "merged"
CLEANED = "cleaned"

#: Every status, in lifecycle order.
STATUSES = (CREATED, STARTING, RUNNING, SUCCEEDED, FAILED, STOPPED, TIMED_OUT, LOST, MERGED,
            CLEANED)
#: The run's process may still be working.
ACTIVE = frozenset({CREATED, STARTING, RUNNING})
#: The run ended; its branch holds its result.
ENDED = frozenset({SUCCEEDED, FAILED, STOPPED, TIMED_OUT, LOST})

#: Allowed moves, ``from -> {to}``. Moving to the same status is always allowed (an update
#: of other fields). Why each one exists:
#:
#: * created/starting/running move forward, or end early (failed, stopped, lost) when the
#:   launch fails, the user stops it, or the process that watched it disappeared;
#:   starting/running also time out.
#: * an ended run (succeeded, failed, stopped, timed-out) can be merged (its partial work is
#:   still a commit, see DESIGN "nothing is lost") or cleaned (worktree and branch removed).
#: * lost means nobody saw the end: a later check may find the real outcome, so lost can
#:   still become succeeded/failed/stopped/timed-out, or be merged or cleaned.
#: * merged can only be cleaned; cleaned is final (its record and commits stay reachable).
TRANSITIONS: Mapping[str, frozenset[str]] = {
    CREATED: frozenset({STARTING, RUNNING, FAILED, STOPPED, LOST, CLEANED}),
    STARTING: frozenset({RUNNING, FAILED, STOPPED, TIMED_OUT, LOST}),
    RUNNING: frozenset({SUCCEEDED, FAILED, STOPPED, TIMED_OUT, LOST}),
    SUCCEEDED: frozenset({MERGED, CLEANED}),
    FAILED: frozenset({MERGED, CLEANED}),
    STOPPED: frozenset({MERGED, CLEANED}),
    TIMED_OUT: frozenset({MERGED, CLEANED}),
    LOST: frozenset({SUCCEEDED, FAILED, STOPPED, TIMED_OUT, MERGED, CLEANED}),
    MERGED: frozenset({CLEANED}),
    CLEANED: frozenset(),
}

#: How far along the lifecycle a status is; used when two copies of a record diverged.
STATUS_RANK: Mapping[str, int] = {
    CREATED: 0, STARTING: 1, RUNNING: 2, LOST: 3,
    SUCCEEDED: 4, FAILED: 4, STOPPED: 4, TIMED_OUT: 4, MERGED: 5, CLEANED: 6,
}


class InvalidTransition(OperationFailed):
    """A status change the table in :data:`TRANSITIONS` does not allow (exit status 1)."""


def check_transition(old: str, new: str) -> None:
    """Raise :class:`InvalidTransition` unless ``old -> new`` is allowed.

    Raises:
        InvalidTransition: not in :data:`TRANSITIONS`; UserError-like message names both.
    """
    if new not in STATUSES:
        raise InvalidTransition(f"unknown run status {new!r}")
    if old != new and new not in TRANSITIONS.get(old, frozenset()):
        allowed = ", ".join(sorted(TRANSITIONS.get(old, frozenset()))) or "none"
        raise InvalidTransition(f"a run cannot go from {old} to {new} (from {old}: {allowed})")


def now_iso() -> str:
    """The current time as ISO 8601 UTC with seconds, e.g. ``2026-01-01T12:00:00Z``."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str | None) -> _dt.datetime | None:
    """Parse a timestamp written by :func:`now_iso` (or any ISO 8601); None when absent/bad."""
    if not text:
        return None
    try:
        value = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
