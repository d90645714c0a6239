"""``git iterare show [RUN] [-p] [--format text|json]``: a run's record, prompt, log
summary and changes."""

from __future__ import annotations

import click

from git_iterare.cli.context import app


@click.command("show")
@click.argument("run", required=False)
@click.option("--patch", "-p", "with_patch", is_flag=True,
              help="Also show the run's changes as a patch (git diff of base..head).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
def command(run: str | None, with_patch: bool, fmt: str) -> None:
    """Show RUN (id, unique id prefix or prompt name; the newest run when omitted)."""
    import datetime as dt

    from git_iterare import ui
    from git_iterare.runner.manage import diffstat, files_if_known, patch, settle
    from git_iterare.runs import render
    from git_iterare.runs.legacy import follow
    from git_iterare.runs.store import RunStore

    repo = app().repo
    store = RunStore(repo)
    record = settle(repo, follow(store, store.resolve(run)), tolerant=True)
    now = dt.datetime.now(dt.timezone.utc)
    prompt, log = store.read_prompt(record.id), store.read_log(record.id)
    the_patch = patch(repo, record) if with_patch else None
    if fmt == "json":
        files = files_if_known(repo, record)
        shown = render.Shown(record, prompt, log, files=None if files is None else tuple(files),
                             patch=the_patch)
        click.echo(render.show_json(shown, now))
        return
    shown = render.Shown(record, prompt, log, diffstat=diffstat(repo, record), patch=the_patch)
    # ui.paint already decided the colors; keep click from stripping them
    ui.page(render.show_text(shown, now, ui.paint), "show")
