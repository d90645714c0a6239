"""``git iterare show [RUN]``: a run's record, prompt, log summary and changes."""

from __future__ import annotations

import click

from git_iterare.cli.context import app


@click.command("show")
@click.argument("run", required=False)
def command(run: str | None) -> None:
    """Show RUN (id, unique id prefix or prompt name; the newest run when omitted)."""
    import datetime as dt

    from git_iterare import ui
    from git_iterare.runner.manage import diffstat, settle
    from git_iterare.runs import render
    from git_iterare.runs.legacy import follow
    from git_iterare.runs.store import RunStore

    store = RunStore(app().repo)
    record = settle(app().repo, follow(store, store.resolve(run)), tolerant=True)
    prompt = store.read_prompt(record.id)
    log = store.read_log(record.id)
    now = dt.datetime.now(dt.timezone.utc)
    click.echo(render.show_text(record, prompt, log, diffstat(app().repo, record), now,
                                ui.paint), nl=False,
               color=True)  # ui.paint already decided; keep click from stripping
