"""``git iterare log [RUN] [-f] [--raw] [-v 0|1|2]``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from git_iterare.cli.context import app, project_option
from git_iterare.cli.numbers import VERBOSITY
from git_iterare.errors import ExitCode


def follow_and_exit(run_id: str, *, verbosity: int, raw: bool, follow: bool = True,
                    exit_status: bool = False,
                    interrupted: Callable[[], None] | None = None) -> None:
    """Print a run's log (following it when asked). Ctrl-C stops following, not the run
    (exit 130).

    Args:
        exit_status: exit 1 when the run ended without succeeding (failed, timed out,
            stopped, lost), as ``gh run watch --exit-status``; otherwise exit 0 whatever
            the run's status, as ``git log`` does.
        interrupted: called on Ctrl-C instead (it exits).
    """
    from git_iterare.runner.follow import show_log
    from git_iterare.runs.status import ACTIVE, SUCCEEDED

    try:
        # color=True: click would strip escape sequences into a pipe, so --raw would not be
        # byte-exact; rendered text has only the colors ui.paint chose (agent text is
        # sanitized), so there is nothing to strip there either.
        record = show_log(app().repo, run_id, follow=follow, verbosity=verbosity, raw=raw,
                          emit=lambda text: click.echo(text, color=True))
    except KeyboardInterrupt:
        from git_iterare.runner.interrupts import end_on_next_interrupt

        end_on_next_interrupt()
        if interrupted is not None:
            interrupted()
        click.echo(interrupted_line(run_id, "stopped following"), err=True)
        sys.exit(ExitCode.INTERRUPTED)
    if record.status in ACTIVE:
        return
    if follow and not raw:
        click.echo(ended_line(record), err=True)
    if exit_status and record.status not in (SUCCEEDED, "merged", "cleaned"):
        sys.exit(ExitCode.FAILED)


def ended_line(record: Any) -> str:
    """``run ID STATUS[: ERROR]`` for a run that ended (the status colored for stderr),
    as ``execute -f`` and ``log -f`` print it last."""
    from git_iterare import ui
    from git_iterare.runs.status import SUCCEEDED

    color = "green" if record.status in (SUCCEEDED, "merged") else "red"
    status = ui.paint(ui.sanitize_line(record.status), color, stream=sys.stderr)
    line = f"run {ui.sanitize_line(record.id)} {status}"
    if record.error:
        line += f": {ui.sanitize_line(record.error)}"
    return line


def interrupted_line(run_id: str, stopped: str) -> str:
    """What to say when Ctrl-C stopped ``stopped`` (following, say) of run ``run_id``:
    that it goes on, or, when it had ended already (Ctrl-C while it was being finished),
    how it ended. Starts with a line break (after the ^C the terminal echoed)."""
    import contextlib

    from git_iterare import ui
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore

    with contextlib.suppress(Exception):
        status = RunStore(app().repo).get(run_id).status
        if status not in ACTIVE:
            return (f"\ninterrupted; run {run_id} has ended ({ui.sanitize_line(status)}; "
                    f"`git iterare show {run_id}`)")
    return f"\n{stopped}; run {run_id} goes on (`git iterare log -f {run_id}`)"


@click.command("log")
@click.argument("run", required=False)
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until the run ends.")
@click.option("--raw", is_flag=True, help="Print the agent's output lines untouched.")
@click.option("-v", "--verbosity", type=VERBOSITY, metavar="LEVEL", default=0,
              show_default=True,
              help="0 what the agent says, 1 tool calls, 2 everything.")
@click.option("--exit-status", "exit_status", is_flag=True,
              help="Exit 1 when the run ended without succeeding.")
@project_option()
def command(run: str | None, follow: bool, raw: bool, verbosity: int, exit_status: bool
            ) -> None:
    """Show the log of RUN (default: the most recent run)."""
    from git_iterare.runs.store import RunStore

    record = RunStore(app().repo).resolve(run)
    follow_and_exit(record.id, verbosity=verbosity, raw=raw, follow=follow,
                    exit_status=exit_status)
