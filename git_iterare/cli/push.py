"""``git iterare push [REMOTE]``: share run records and notes (:mod:`git_iterare.runs.sync`)."""

from __future__ import annotations

import click

from git_iterare.cli.context import app


@click.command("push")
@click.argument("remote", required=False)
def command(remote: str | None) -> None:
    """Merge REMOTE's run records, then push refs/iterare/* and refs/notes/iterare."""
    from git_iterare.runs import sync
    from git_iterare.runs.store import RunStore
    from git_iterare.ui import sanitize_line

    store = RunStore(app().repo)
    name = sync.check_remote_arg(remote) if remote else sync.default_remote(
        store, for_push=True)
    from git_iterare.runner.ownership import is_local

    repo = app().repo
    result = sync.push(store, name, lambda record: is_local(repo, record))
    for line in sync.describe(result):
        click.echo(sanitize_line(line))
