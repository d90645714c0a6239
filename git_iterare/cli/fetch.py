"""``git iterare fetch [REMOTE]``: share run records and notes (:mod:`git_iterare.runs.sync`)."""

from __future__ import annotations

import click

from git_iterare.cli.context import app


@click.command("fetch")
@click.argument("remote", required=False)
def command(remote: str | None) -> None:
    """Fetch REMOTE's run records and notes and merge them into the local ones."""
    from git_iterare.runs import sync
    from git_iterare.runs.store import RunStore
    from git_iterare.ui import sanitize_line

    store = RunStore(app().repo)
    name = sync.check_remote_arg(remote) if remote else sync.default_remote(
        store)
    from git_iterare.runner.ownership import is_local

    repo = app().repo
    result = sync.fetch(store, name, lambda record: is_local(repo, record))
    for line in sync.describe(result):
        click.echo(sanitize_line(line))
