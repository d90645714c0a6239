"""Helpers shared by the commands that take a RUN argument."""

from __future__ import annotations

from typing import Any

import click

from git_iterare.cli.context import app


def resolve_run(arg: str | None) -> Any:
    """The record a RUN argument names (full id, unique prefix, prompt name; None: the most
    recent run), after finishing it if its sandbox ended unobserved.

    Raises:
        UserError: ambiguous (exit 2). OperationFailed: unknown (exit 1).
    """
    from git_iterare.runner.manage import settle
    from git_iterare.runs.legacy import follow
    from git_iterare.runs.store import RunStore

    repo = app().repo
    store = RunStore(repo)
    return settle(repo, follow(store, store.resolve(arg)))


def confirm_or_refuse(question: str, assume_yes: bool) -> bool:
    """Ask on a terminal; without one, only ``--yes`` says yes."""
    import sys

    if assume_yes:
        return True
    if not sys.stdin.isatty():
        return False
    return click.confirm(question, default=False)


def confirm_runs(records: list[Any], *, question: str, nothing: str, command: str,
                 assume_yes: bool) -> bool:
    """Before ``cleanup`` or ``forget`` acts on ``records``: say ``nothing`` and return
    False when there are none; else ask ``question`` (``{names}`` in it becomes the runs'
    ids, sanitized) as :func:`confirm_or_refuse` does, and return True.

    Raises:
        OperationFailed: not confirmed (``<command> not confirmed (rerun with --yes)``).
    """
    from git_iterare.errors import OperationFailed
    from git_iterare.ui import sanitize_line

    if not records:
        click.echo(nothing)
        return False
    names = sanitize_line(", ".join(r.id for r in records))
    if not confirm_or_refuse(question.format(names=names), assume_yes):
        raise OperationFailed(f"{command} not confirmed", hint="rerun with --yes")
    return True


def best_attempt(arg: str | None, pick: str | None) -> Any:
    """The run ``merge GROUP`` merges: ``pick`` (a run, which must be an attempt of the
    group ``arg`` when ``arg`` names one), else the group's best-ranked attempt
    (:func:`git_iterare.runs.groups.rank`), said on stderr.

    Raises:
        UserError: ``pick`` is no attempt of the group (exit 2).
        OperationFailed: no such group or run; an attempt is still active or waits in the
            group's queue, or none is left.
    """
    from git_iterare import ui
    from git_iterare.cli.compare import ranked_attempts
    from git_iterare.errors import OperationFailed, UserError
    from git_iterare.runner.attempts import queued
    from git_iterare.runs.groups import group_of, resolve_group
    from git_iterare.runs.status import ACTIVE, CLEANED
    from git_iterare.runs.store import RunStore

    store = RunStore(app().repo)
    group, records = resolve_group(store, arg)
    if pick is not None:
        record = resolve_run(pick)
        if group_of(record) != group:
            raise UserError(f"--pick {record.id}: not an attempt of group {group}",
                            hint=f"see them with `git iterare compare {group}`")
        return record
    # What a fetched record says of an attempt (its check, its changes) can be anything:
    # the best of a group is chosen among those that ran here.
    fetched = store.fetched_ids()
    if elsewhere := sorted(r.id for r in records if r.id in fetched):
        ui.warn(f"group {ui.sanitize_line(group)}: left out "
                f"{ui.sanitize_line(', '.join(elsewhere))}, which came in with `git iterare "
                "fetch` (choose one with --pick RUN)")
    rows = [row for row in ranked_attempts(app().repo, records, "check")
            if row.record.status != CLEANED and row.record.id not in fetched]
    hint = "wait for them (`git iterare list`), or choose one with --pick RUN"
    if active := [row.record.id for row in rows if row.record.status in ACTIVE]:
        raise OperationFailed(f"group {group} has attempts still running: {', '.join(active)}",
                              hint=hint)
    # Between one attempt's end and the next one's start no record is active, but the
    # group has not ended: its queue still holds attempts that may rank better.
    if waiting := [f"{k}/{size}" for g, k, size in queued(app().repo) if g == group]:
        raise OperationFailed(f"group {group} has attempts still waiting to start: "
                              f"{', '.join(waiting)}", hint=hint)
    if not rows:
        raise OperationFailed(f"group {group} has no attempt left to merge (all cleaned up)")
    best = rows[0]
    if not best.passed:
        ui.warn(f"no attempt of group {group} passed; the best ranked is "
                f"{best.record.id} ({best.record.status})")
    click.echo(f"the best attempt of group {ui.sanitize_line(group)}: "
               f"{ui.sanitize_line(best.record.id)} (attempt {best.attempt}; "
               f"`git iterare compare {ui.sanitize_line(group)}` ranks them)", err=True)
    return best.record


def group_runs_to_clean(arg: str) -> list[Any]:
    """The attempts ``cleanup GROUP`` removes: all of the group's but those merged (the
    attempt kept), said on stderr.

    Raises:
        UserError, OperationFailed: as :func:`git_iterare.runs.groups.resolve_group`.
    """
    from git_iterare import ui
    from git_iterare.runs.groups import resolve_group
    from git_iterare.runs.status import MERGED
    from git_iterare.runs.store import RunStore

    group, records = resolve_group(RunStore(app().repo), arg)
    kept = [r.id for r in records if r.status == MERGED]
    if kept:
        click.echo(f"keeping {ui.sanitize_line(', '.join(kept))}, merged from group "
                   f"{ui.sanitize_line(group)}", err=True)
    return [r for r in records if r.status != MERGED]


def cancel_waiting(group: str) -> int:
    """Let none of ``group``'s waiting attempts start
    (:func:`git_iterare.runner.attempts.cancel`), with a line saying how many; their
    number."""
    from git_iterare.runner.attempts import cancel
    from git_iterare.ui import sanitize_line

    waiting = cancel(app().repo, group)
    if waiting:
        click.echo(sanitize_line(f"group {group}: {waiting} waiting attempt"
                                 f"{'s' if waiting != 1 else ''} will not start"))
    return waiting

