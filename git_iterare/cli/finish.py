"""``git iterare finish RUN``."""

from __future__ import annotations

import click

from git_iterare.cli._runs import resolve_run
from git_iterare.cli.context import app


@click.command("finish")
@click.argument("run")
@click.option("--wait", is_flag=True,
              help="Wait for RUN's sandbox to end, then finish it (and commit what is left).")
@click.option("--watcher", is_flag=True, hidden=True,
              help="As the watcher execute leaves: a run being stopped is the stop's.")
def command(run: str, wait: bool, watcher: bool) -> None:
    """Commit the work RUN left in its worktree when committing it at the end failed."""
    from git_iterare.runner.finish import finish_later
    from git_iterare.runs.loops import loop_of
    from git_iterare.runs.status import ACTIVE
    from git_iterare.ui import sanitize_line

    found = resolve_run(run)
    if watcher and loop_of(found) is not None and found.status in ACTIVE:
        from git_iterare.runner.loop import drive

        ended = drive(app().repo, app().config, found.id)
        click.echo(sanitize_line(f"run {ended.id}: {ended.status}"))
        return
    record, work = finish_later(app().repo, found.id, wait=wait, defer_to_stop=watcher)
    if record.status in ACTIVE:
        click.echo(sanitize_line(f"run {record.id}: left to the `git iterare stop` that "
                                 "stops it"))
        return
    if work is None:
        click.echo(sanitize_line(f"run {record.id}: nothing left to commit; its result is "
                                 f"{record.head or 'empty'}"))
        return
    changes = work.changes
    click.echo(sanitize_line(
        f"run {record.id}: work committed on {record.branch} ({changes.files} file"
        f"{'' if changes.files == 1 else 's'} changed against its base); status "
        f"{record.status}"))
