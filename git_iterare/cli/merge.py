"""``git iterare merge [RUN] [--squash] [--no-ff] [--yes]``."""

from __future__ import annotations

import click

from git_iterare.cli._runs import confirm_or_refuse, resolve_run
from git_iterare.cli.context import app


@click.command("merge")
@click.argument("run", required=False)
@click.option("--squash", is_flag=True,
              help="Squash the run's changes into one new commit on the current branch.")
@click.option("--no-ff", "no_ff", is_flag=True, help="Always create a merge commit.")
@click.option("--yes", "-y", is_flag=True,
              help="Merge without asking when files that run on the host changed.")
def command(run: str | None, squash: bool, no_ff: bool, yes: bool) -> None:
    """Merge the result of RUN (default: the most recent run) into the current branch."""
    from git_iterare import ui
    from git_iterare.runner.manage import merge

    record = resolve_run(run)

    def confirm(changes: list) -> bool:
        ui.warn(f"run {record.id} changes files that would run on this machine:")
        for change in changes:
            click.echo(f"  {change.path}: {change.reason}", err=True)
        return confirm_or_refuse("Merge anyway?", yes)

    outcome = merge(app().repo, record, squash=squash, no_ff=no_ff, confirm=confirm)
    how = "squashed into the index" if squash else "merged"
    click.echo(f"run {outcome.record.id} {how}")
