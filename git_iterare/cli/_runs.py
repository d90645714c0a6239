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
