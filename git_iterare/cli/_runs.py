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
