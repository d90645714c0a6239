"""``git iterare execute PROMPT -n N [--jobs J] [-f]``: the attempts of one group."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from git_iterare.cli.context import app

if TYPE_CHECKING:
    from git_iterare.runner.request import ExecuteRequest
    from git_iterare.runs.record import RunRecord


def execute_group(request: ExecuteRequest, size: int, jobs: int | None, follow: bool) -> None:
    """Start ``size`` attempts at ``request`` (an
    :class:`~git_iterare.runner.request.ExecuteRequest`), at most ``jobs`` at once
    (:mod:`git_iterare.runner.attempts`).

    With ``follow``, wait for all of them, one line as each ends, and exit 0 when one
    succeeded, else 1; Ctrl-C leaves the started ones going, and starts no more (exit
    130). Without, start the first ``jobs`` and leave the rest to a detached queue.

    Raises:
        UserError: see :func:`git_iterare.runner.request.validate` and
            :func:`git_iterare.runner.attempts.prepare`.
        OperationFailed: the first attempt could not be launched.
    """
    import os

    from git_iterare import gcpause, ui
    from git_iterare.errors import ExitCode
    from git_iterare.runner import attempts
    from git_iterare.runner.interrupts import RunGoesOn, end_on_next_interrupt
    from git_iterare.runner.request import validate
    from git_iterare.ui import sanitize_line

    attempts.check_counts(size, jobs)  # before anything else is looked at
    ctx = app()
    repo, config = ctx.repo, ctx.config
    checked = validate(repo, config, request, os.environ)
    queue = attempts.prepare(repo, config, checked, size, jobs)
    group = sanitize_line(queue.group)

    def started(attempt: int, record: RunRecord) -> None:
        say(f"{ui.paint('started', 'green')} {attempts.started_line(queue, attempt, record)}")

    def failed(ended: attempts.Ended) -> None:
        ui.warn(attempts.ended_line(queue, ended))

    def done(ended: attempts.Ended) -> None:
        say(attempts.ended_line(queue, ended))

    try:
        try:
            first = queue.start_next(progress=ui.progress)  # its error is the command's
        finally:
            gcpause.resume()
        say(f"group {group}: {size} attempts at {sanitize_line(checked.prompt.name)} "
            f"from {checked.base_commit[:12]}, {queue.jobs} at a time")
        started(1, first)
        if follow:
            queue.run(started=started, done=done)
        else:
            queue.fill(started=started, failed=failed)
    except KeyboardInterrupt as exc:
        end_on_next_interrupt()
        going = sorted(queue.running.items())
        if isinstance(exc, RunGoesOn) and exc.run_id not in dict(going).values():
            going.append((0, exc.run_id))
        runs = ", ".join(run_id for _, run_id in going) or "none"
        waiting = len(queue.waiting)
        click.echo(f"\ninterrupted; attempts that started go on ({runs}); "
                   f"{waiting} waiting attempt{'s were' if waiting != 1 else ' was'} "
                   "not started", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    if follow:
        ok = sum(1 for ended in queue.ended if attempts.succeeded(ended))
        say(f"group {group}: {ok} of {size} attempts succeeded; compare them with "
            f"`git iterare compare {group}`")
        sys.exit(ExitCode.OK if ok else ExitCode.FAILED)
    if queue.waiting:
        log = attempts.detach(queue)
        waiting = len(queue.waiting)
        if log is None:
            ui.warn(f"the {waiting} waiting attempts could not be handed to a process of "
                    "their own: they were not started")
        else:
            say(f"{waiting} attempt{'s' if waiting != 1 else ''} queued: each starts when a "
                f"running one ends (`git iterare list` shows them; the queue writes to {log})")
    say(f"compare the attempts with: `git iterare compare {group}`")


def say(line: str) -> None:
    """Print ``line`` on standard output; once that is closed (``| head -1``), print
    nothing more there, and go on: the attempts still start, and their queue is handed
    on."""
    import os

    try:
        click.echo(line)
        sys.stdout.flush()
    except BrokenPipeError:
        # What is left unwritten would fail again at exit: stdout goes nowhere from now.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
