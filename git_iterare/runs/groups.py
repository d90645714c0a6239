"""Groups of runs: the attempts ``execute -n N`` makes at one prompt, and their ranking.

A group has no record of its own: each attempt's record names it (``extra.group``, with
``extra.attempt``, 1 for the first), so a group travels with its runs (``push``/``fetch``)
and is what those records say. A group id is ``<name>:<6 hex>``: git-check-ref-format(1)
refuses ``:`` in a ref name, so no run id can hold one, and an argument with a ``:`` is
always a group.

Ranking (gititerare-compare(1)): attempts whose check passed first (the last round's
check exited 0; a run without a loop counts as passed when it succeeded), then fewer
rounds, a smaller diff (lines inserted plus deleted, each binary file changed counting as
:data:`BINARY_LINES`), a lower cost; the attempt number breaks ties. ``--sort KEY`` puts
one key first and keeps the others after it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from git_iterare.errors import OperationFailed, UserError

if TYPE_CHECKING:
    from git_iterare.runs.record import RunRecord
    from git_iterare.runs.store import RunStore

#: What separates a group's name from its hex digits (never in a run id).
SEPARATOR = ":"
_GROUP_RE = re.compile(r"^(?P<name>[^:]+):(?P<suffix>[0-9a-f]{6})$")

#: The keys ``compare --sort`` takes, in the default order of the ranking.
SORT_KEYS = ("check", "rounds", "diff", "cost", "duration", "attempt")
#: What the ``check`` column says for each outcome.
PASSED, FAILED, NO_CHECK = "passed", "failed", "-"


def new_group_id(name: str) -> str:
    """A fresh group id ``<name>:<6 random hex digits>`` for attempts named ``name`` (a
    valid run name, see :func:`git_iterare.runs.ids.validate_name`)."""
    import secrets

    return f"{name}{SEPARATOR}{secrets.token_hex(3)}"


def is_group_id(text: str) -> bool:
    """Whether ``text`` has the shape of a group id (``<name>:<6 hex>``)."""
    return _GROUP_RE.fullmatch(text) is not None


def names_group(arg: str | None) -> bool:
    """Whether a RUN argument names a group rather than a run: it holds the separator
    (a group id or a prefix of one that reaches the ``:``)."""
    return arg is not None and SEPARATOR in arg


def group_of(record: RunRecord) -> str | None:
    """The group ``record`` is an attempt of, or None (a record may be crafted: a value
    that is no group id counts as none)."""
    group = record.extra.get("group")
    return group if isinstance(group, str) and is_group_id(group) else None


def attempt_of(record: RunRecord) -> int:
    """The record's attempt number (0 when it has none, or a bad one)."""
    attempt = record.extra.get("attempt")
    ok = isinstance(attempt, int) and not isinstance(attempt, bool) and attempt > 0
    return attempt if ok else 0  # type: ignore[return-value]


def attempt_env(record: RunRecord) -> dict[str, str]:
    """The sandbox environment that tells an attempt which one it is: ``ITERARE_ATTEMPT``
    (``1`` for the first) for a run of a group, nothing for any other run."""
    attempt = attempt_of(record)
    return {"ITERARE_ATTEMPT": str(attempt)} if group_of(record) and attempt else {}


def members(records: Iterable[RunRecord], group: str) -> list[RunRecord]:
    """The records of ``group``'s attempts among ``records``, by attempt number."""
    return sorted((r for r in records if group_of(r) == group),
                  key=lambda r: (attempt_of(r), r.id))


def resolve_group(store: RunStore, arg: str | None) -> tuple[str, list[RunRecord]]:
    """Find the group a user means and its attempts' records.

    Args:
        store: the repository's records.
        arg: a group id, a unique prefix of one, or a run of the group; None: the group
            of the most recently created attempt.

    Returns:
        ``(group id, records by attempt number)``; cleaned attempts included.

    Raises:
        UserError: ``arg`` matches several groups, or names a run that is no attempt of a
            group (exit 2).
        OperationFailed: nothing matches, or there are no groups (exit 1).
    """
    records = store.list(include_cleaned=True)
    groups: dict[str, None] = {}  # newest first, as records are listed
    for record in records:
        if (group := group_of(record)) is not None:
            groups.setdefault(group)
    if arg is None:
        if not groups:
            raise OperationFailed("there are no groups of attempts yet",
                                  hint="start one with `git iterare execute PROMPT -n N`")
        first = next(iter(groups))
        return first, members(records, first)
    if arg in groups:
        return arg, members(records, arg)
    by_prefix = sorted(g for g in groups if g.startswith(arg))
    if len(by_prefix) == 1:
        return by_prefix[0], members(records, by_prefix[0])
    if len(by_prefix) > 1:
        raise UserError(f"{arg!r} matches {len(by_prefix)} groups: {', '.join(by_prefix)}",
                        hint="give more of the group id")
    if names_group(arg):
        raise OperationFailed(f"no group matches {arg!r}", hint="see `git iterare list --all`")
    record = store.resolve(arg)
    group = group_of(record)
    if group is None:
        raise UserError(f"run {record.id} is no attempt of a group",
                        hint="`git iterare execute PROMPT -n N` starts a group; "
                             f"see the run with `git iterare show {record.id}`")
    return group, members(records, group)


#: What a binary file changed counts as in the ranking's diff size (lines): git counts
#: none of its lines, so a rewrite could hide as one (a NUL byte added).
BINARY_LINES = 1000

@dataclass(frozen=True)
class Attempt:
    """One attempt as ``compare`` shows and ranks it.

    Attributes:
        record: the run's record.
        attempt: its number in the group (1 for the first; 0 when unknown).
        reason: why its loop ended (``extra.loop.reason``), or None (no loop, or not yet).
        check: :data:`PASSED`, :data:`FAILED` or :data:`NO_CHECK` (no check ran).
        rounds: rounds it ran (1 without a loop).
        lines: lines inserted plus deleted (None: not known yet).
        binary: binary files changed (git counts no lines of them).
        cost_usd: what the agent reported it spent (US dollars), or None.
        duration: seconds from start to end (None: not known).
        host_executables: changed files that would run on the host (merge's review).
    """

    record: RunRecord
    attempt: int
    reason: str | None
    check: str
    rounds: int
    lines: int | None
    cost_usd: float | None
    duration: float | None
    host_executables: tuple[str, ...] = ()
    binary: int = 0

    @property
    def passed(self) -> bool:
        """Whether it counts as passed for the ranking: its last check passed, or it ran
        no check and succeeded."""
        from git_iterare.runs.status import MERGED, SUCCEEDED

        if self.check != NO_CHECK:
            return self.check == PASSED
        return self.record.status in (SUCCEEDED, MERGED) and self.record.exit_code in (0, None)


def attempt_row(record: RunRecord, duration: float | None,
                host_executables: Sequence[str] = ()) -> Attempt:
    """The :class:`Attempt` of ``record`` (its ``extra.loop`` and ``extra.rounds`` read
    as gititerare-records(5) describes them; values of the wrong type count as absent)."""
    loop = record.extra.get("loop")
    reason = loop.get("reason") if isinstance(loop, dict) else None
    rounds = record.extra.get("rounds")
    rounds = rounds if isinstance(rounds, list) else []
    last = rounds[-1] if rounds and isinstance(rounds[-1], dict) else {}
    check_exit = last.get("check_exit")
    if isinstance(check_exit, int) and not isinstance(check_exit, bool):
        check = PASSED if check_exit == 0 else FAILED
    else:
        check = NO_CHECK
    changes = record.changes if isinstance(record.changes, dict) else None
    lines = None
    binary = 0
    if changes is not None:
        lines = sum(v for k in ("insertions", "deletions")
                    if isinstance(v := changes.get(k, 0), int))
        binary = changes.get("binary", 0) if isinstance(changes.get("binary", 0), int) else 0
    cost = record.cost_usd if isinstance(record.cost_usd, (int, float)) else None
    return Attempt(record=record, attempt=attempt_of(record),
                   reason=reason if isinstance(reason, str) else None, check=check,
                   rounds=max(len(rounds), 1), lines=lines, binary=binary, cost_usd=cost,
                   duration=duration,
                   host_executables=tuple(host_executables))


def _key(row: Attempt, key: str) -> float:
    """One sort key of ``row``: smaller ranks first; unknown values last."""
    if key == "check":
        return 0 if row.passed else 1
    if key == "rounds":
        return row.rounds
    if key == "diff":
        # A binary file's lines are not counted: a rewrite can hide as one.
        return math.inf if row.lines is None else row.binary * BINARY_LINES + row.lines
    if key == "cost":
        return row.cost_usd or 0.0  # an agent that reports no cost spent none we know of
    if key == "duration":
        return math.inf if row.duration is None else row.duration
    return row.attempt


def rank(rows: Iterable[Attempt], sort: str = "check") -> list[Attempt]:
    """``rows`` best first: by ``sort``, then the other keys of :data:`SORT_KEYS` in
    their order (check passed, rounds, diff, cost, duration, attempt).

    Raises:
        UserError: ``sort`` is not one of :data:`SORT_KEYS`.
    """
    if sort not in SORT_KEYS:
        raise UserError(f"--sort {sort!r}: not a key to sort by",
                        hint=f"use one of {', '.join(SORT_KEYS)}")
    keys = (sort, *(k for k in SORT_KEYS if k != sort))
    return sorted(rows, key=lambda row: tuple(_key(row, k) for k in keys))
