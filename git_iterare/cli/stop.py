"""``git iterare stop [RUN]``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from git_iterare.cli._runs import resolve_run
from git_iterare.cli.context import app
from git_iterare.cli.numbers import Number

if TYPE_CHECKING:
    from git_iterare.runs.record import RunRecord


@click.command("stop")
@click.argument("run", required=False)
@click.option("--grace", type=Number("seconds", whole=False), default=10, show_default=True,
              metavar="SECONDS", help="Seconds between SIGTERM and SIGKILL.")
def command(run: str | None, grace: float) -> None:
    """Stop RUN (default: the only run that is running), or every attempt of GROUP that
    runs and those still waiting; the work so far is committed on each run's branch."""
    from git_iterare import ui
    from git_iterare.runner.manage import stop
    from git_iterare.runs.groups import names_group

    if names_group(run):
        _stop_group(str(run), grace)
        return
    run_id = resolve_run(run).id if run is not None else _only_running()
    record = stop(app().repo, run_id, grace, progress=ui.progress)
    click.echo(stopped_line(record))


def _stop_group(arg: str, grace: float) -> None:
    """Stop the group ``arg`` names: its waiting attempts never start
    (:func:`git_iterare.runner.attempts.cancel`), its running ones are stopped.

    Raises:
        UserError, OperationFailed: as :func:`git_iterare.runs.groups.resolve_group`.
    """
    from git_iterare import ui
    from git_iterare.cli._runs import cancel_waiting
    from git_iterare.errors import IterareError
    from git_iterare.runner.manage import stop
    from git_iterare.runs.groups import resolve_group
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore

    repo = app().repo
    group, records = resolve_group(RunStore(repo), arg)
    waiting = cancel_waiting(group)
    active = [r for r in records if r.status in ACTIVE]
    if not active and not waiting:
        click.echo(ui.sanitize_line(f"group {group}: no attempt is running"))
    for record in active:
        try:
            click.echo(stopped_line(stop(repo, record.id, grace, progress=ui.progress)))
        except IterareError as exc:  # it ended meanwhile: the others are still stopped
            ui.warn(exc.render())


def stopped_line(record: RunRecord) -> str:
    """``run ID STATUS; its work is on BRANCH``: what a stop says last."""
    from git_iterare.ui import sanitize_line

    return sanitize_line(f"run {record.id} {record.status}; its work is on {record.branch}")


def _only_running() -> str:
    """The id of the one run that is running here.

    Raises:
        OperationFailed: none is (exit 1). UserError: several are; the line names them
            (exit 2, as a RUN that matches several runs).
    """
    from git_iterare.errors import OperationFailed, UserError
    from git_iterare.runner.manage import running
    from git_iterare.ui import sanitize_line

    runs = running(app().repo)
    if not runs:
        raise OperationFailed("no run is running here", hint="see `git iterare list`")
    if len(runs) > 1:
        names = sanitize_line(", ".join(r.id for r in runs))
        raise UserError(f"{len(runs)} runs are running: {names}",
                        hint="name the one to stop: `git iterare stop RUN`")
    return str(runs[0].id)
