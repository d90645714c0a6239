"""``git iterare forget (RUN... | --cleaned) [--force] [-y]``: delete the records of runs
that were cleaned up."""

from __future__ import annotations

import click

from git_iterare.cli._runs import confirm_runs, resolve_run
from git_iterare.cli.context import app, project_option


@click.command("forget")
@click.argument("runs", nargs=-1)
@click.option("--cleaned", is_flag=True,
              help="Forget every cleaned-up run whose work a branch still holds.")
@click.option("--force", is_flag=True,
              help="Also forget runs whose work nothing else holds (git gc may delete it).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@project_option()
def command(runs: tuple[str, ...], cleaned: bool, force: bool, yes: bool) -> None:
    """Delete the records (prompt, log, results) of RUNS, which must be cleaned up; their
    commits stay where branches hold them."""
    from git_iterare.errors import UserError
    from git_iterare.runner.manage import forget, forget_refusal
    from git_iterare.runs.store import RunStore
    from git_iterare.ui import sanitize_line, warn

    repo = app().repo
    if cleaned == bool(runs):
        raise UserError("give the runs to forget, or --cleaned, not both"
                        if cleaned else "give the runs to forget, or --cleaned",
                        hint="see `git iterare list --all`")
    if cleaned:
        records = []
        for record in RunStore(repo).list(statuses=["cleaned"]):
            if forget_refusal(repo, record, force=force) is None:
                records.append(record)
            else:
                warn(f"run {sanitize_line(record.id)}: its work is on no branch; its record "
                     "is kept (`git iterare forget --force "
                     f"{sanitize_line(record.id)}` forgets it)")
    else:
        records = list({r.id: r for r in (resolve_run(run) for run in runs)}.values())
        for record in records:  # refused before anything is asked
            problem = forget_refusal(repo, record, force=force)
            if problem is not None:
                raise problem
    if not confirm_runs(records, question="Delete the records (prompt, log, results) of "
                        "{names}?", nothing="nothing to forget", command="forget",
                        assume_yes=yes):
        return
    for record in records:
        forget(repo, record.id, force=force)
        click.echo(f"forgot {sanitize_line(record.id)}")
