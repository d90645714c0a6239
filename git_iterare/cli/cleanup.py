"""``git iterare cleanup [RUN | --merged | --cache] [-y] [--force]``."""

from __future__ import annotations

import click

from git_iterare.cli._runs import confirm_runs, group_runs_to_clean, resolve_run
from git_iterare.cli.context import app, project_option
from git_iterare.ui import sanitize_line
from git_iterare.ui import sanitize_line as sanitize


@click.command("cleanup")
@click.argument("run", required=False)
@click.option("--merged", is_flag=True, help="Clean up every merged run.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True,
              help="Also drop unmerged work and stop runs that are still active.")
@click.option("--cache", is_flag=True,
              help="Remove this repository's object caches, here and on the Docker engine.")
@project_option()
def command(run: str | None, merged: bool, yes: bool, force: bool, cache: bool) -> None:
    """Remove the worktree, branch and container of RUN (default: the most recent run),
    or of every attempt of GROUP but the merged one; the record and commits are kept."""
    from git_iterare.errors import UserError
    from git_iterare.runner.manage import cleanup
    from git_iterare.runs.groups import names_group
    from git_iterare.runs.store import RunStore

    repo = app().repo
    if merged and run:
        raise UserError("give a RUN or --merged, not both")
    if cache:
        if merged or run:
            raise UserError("give --cache alone, without a RUN or --merged")
        from git_iterare.runner.placement import objectcache
        from git_iterare.runner.placement.remote import remove_cache
        from git_iterare.runner.session import engine_label

        here = objectcache.remove(repo)
        if here:
            click.echo("removed the object cache of this repository for runs on this machine")
        app().config  # noqa: B018 -- its [docker] context chooses the engine
        removed = remove_cache(repo)
        where = sanitize(engine_label())
        if removed:
            click.echo(f"removed the object cache of this repository on {where}")
        elif not here:
            click.echo(f"no object cache of this repository here or on {where}")
        return
    if merged:
        records = RunStore(repo).list(statuses=["merged"])
    elif names_group(run):
        records = group_runs_to_clean(str(run))
    else:
        records = [resolve_run(run)]
    if merged and not force:
        from git_iterare.runner.manage import merge_holds
        from git_iterare.ui import warn

        for record in [r for r in records if not merge_holds(repo, r)]:
            warn(f"run {sanitize_line(record.id)} was merged, but no local branch holds "
                    "that merge any more; left as it is (`git iterare cleanup --force "
                    f"{sanitize_line(record.id)}` removes it)")
            records.remove(record)
    if not confirm_runs(records, question="Remove the worktree and branch of {names}?",
                        nothing="nothing to clean up", command="cleanup", assume_yes=yes):
        return
    if names_group(run):
        from git_iterare.cli._runs import cancel_waiting
        from git_iterare.runs.groups import group_of

        for group in sorted({g for g in map(group_of, records) if g}):
            cancel_waiting(group)
    from git_iterare.runner.ownership import ran_elsewhere
    from git_iterare.runner.warmup import remove_spares
    from git_iterare.runs.status import CLEANED

    try:
        for record in records:
            if record.status == CLEANED:
                click.echo(f"run {sanitize_line(record.id)} was cleaned up already")
                continue
            done = cleanup(repo, record, force=force)
            if ran_elsewhere(repo, done):
                click.echo(f"cleaned what is here of {sanitize_line(done.id)} (it ran "
                           "elsewhere; its shared record is left as it is)")
            else:
                click.echo(f"cleaned {sanitize_line(done.id)} (record and commits kept)")
    finally:  # also when a run is refused: spares hold no work
        if spares := remove_spares(repo):
            click.echo(f"removed {spares} spare sidecar{'s' if spares > 1 else ''} waiting "
                       "for a next run")
