"""``git iterare diff [RUN] [GIT-DIFF-OPTIONS...]``."""

from __future__ import annotations

import sys

import click

from git_iterare.cli._runs import resolve_run
from git_iterare.cli.context import app


@click.command("diff", context_settings={"ignore_unknown_options": True,
                                         "allow_interspersed_args": False})
@click.argument("run", required=False)
@click.argument("git_args", nargs=-1, type=click.UNPROCESSED)
def command(run: str | None, git_args: tuple[str, ...]) -> None:
    """Show the changes of RUN against its base; other arguments go to git diff."""
    from git_iterare.runner.manage import diff

    args = list(git_args)
    if run is not None and run.startswith("-"):
        args.insert(0, run)
        run = None
    record = resolve_run(run)
    sys.exit(diff(app().repo, record, args))
