"""``git iterare stop RUN``."""

from __future__ import annotations

import click

from git_iterare.cli._runs import resolve_run
from git_iterare.cli.context import app
from git_iterare.cli.numbers import Number


@click.command("stop")
@click.argument("run")
@click.option("--grace", type=Number("seconds", whole=False), default=10, show_default=True,
              metavar="SECONDS", help="Seconds between SIGTERM and SIGKILL.")
def command(run: str, grace: float) -> None:
    """Stop RUN; its work so far is committed on its branch."""
    from git_iterare.runner.manage import stop

    record = stop(app().repo, resolve_run(run).id, grace)
    from git_iterare.ui import sanitize_line

    click.echo(sanitize_line(f"run {record.id} {record.status}; its work is on {record.branch}"))
