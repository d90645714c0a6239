"""``git iterare list [--all] [--status S] [-n N] [--format table|json|porcelain]``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from git_iterare.cli.context import app, project_option
from git_iterare.cli.numbers import Number

if TYPE_CHECKING:
    from git_iterare.runner.session import Repo

STATUS_CHOICES = ("created", "starting", "running", "succeeded", "failed", "stopped",
                  "timed-out", "lost", "merged", "cleaned", "corrupt")


@click.command("list")
@click.option("--all", "-a", "all_", is_flag=True, help="Also list cleaned runs.")
@click.option("--status", "-s", "statuses", multiple=True, type=click.Choice(STATUS_CHOICES),
              help="Only runs with this status (repeatable).")
@click.option("--max-count", "-n", "max_count", type=Number("runs", whole=True), metavar="N",
              help="Show at most N runs, the newest.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "porcelain"]),
              default="table", show_default=True, help="Output format.")
@project_option()
def command(all_: bool, statuses: tuple[str, ...], max_count: int | None, fmt: str) -> None:
    """List runs: active and finished ones, cleaned ones too with --all."""
    import datetime as dt

    from git_iterare import ui
    from git_iterare.runs import index, render

    # No RunStore here: a warm listing is served from refs and the cache without dulwich.
    repo = app().repo
    entries = index.load_entries(repo.common_dir)
    if any(e.status in ("created", "starting", "running") for e in entries):
        # Only now is the Docker engine asked: runs that ended unobserved are finished.
        from git_iterare.errors import IterareError
        from git_iterare.runner.finish import reconcile

        try:
            reconcile(repo)  # finished runs, and where live ones are, are in the records
            entries = index.load_entries(repo.common_dir)
        except IterareError as exc:
            ui.warn(f"active runs could not be checked: {exc.render()}")
    wanted = set(statuses)

    def keep(entry: index.Entry) -> bool:
        status = entry.status
        if wanted:
            return status in wanted
        return all_ or status != "cleaned"

    shown = [e for e in entries if keep(e)][:max_count]
    now = dt.datetime.now(dt.timezone.utc)
    waiting = queued_lines(repo) if fmt == "table" and not wanted else []
    if fmt == "table" and not shown and not waiting:
        click.echo("no runs" + ("" if all_ or wanted else " (see --all for cleaned runs)"),
                   err=True)
        return
    text = (render.list_json(shown, now) + "\n" if fmt == "json"
            else render.list_porcelain(shown, now) if fmt == "porcelain"
            else render.list_table(shown, now, ui.paint) if shown else "")
    text += "".join(f"{line}\n" for line in waiting)
    # On a terminal, through the pager git would use; ui already decided the colors.
    ui.page(text, "list", repo.work_tree)


def queued_lines(repo: Repo) -> list[str]:
    """One line per attempt of ``execute -n`` still waiting for a slot, and one per
    attempt a queue that died never started (:func:`git_iterare.runner.attempts.queued`)."""
    from git_iterare import ui
    from git_iterare.runner.attempts import queued

    waiting = [f"{ui.sanitize_line(group)}  {ui.paint('queued', 'cyan')}  attempt "
               f"{attempt}/{size} (starts when a running attempt of its group ends)"
               for group, attempt, size in queued(repo)]
    return waiting + [
        f"{ui.sanitize_line(group)}  {ui.paint('not started', 'red')}  attempt {attempt}/{size} "
        f"(its queue ended first; `git iterare cleanup {ui.sanitize_line(group)}` forgets it)"
        for group, attempt, size in queued(repo, dead=True)]
