"""``git iterare interactive``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from git_iterare import ui
from git_iterare.cli.context import app, docker_network_options, project_option

if TYPE_CHECKING:
    from git_iterare.runner.interactive import SessionEnd


@click.command("interactive")
@click.option("--worktree/--no-worktree", default=False,
              help="Work in a run of its own (branch, worktree, record), finished like any "
                   "run when the session ends; --no-worktree (the default) works on your "
                   "checkout.")
@click.option("--workspace", "-w", "run_name", metavar="NAME",
              help="Run name with --worktree.")
@click.option("--branch", "-b", metavar="BASE",
              help="Base branch or commit with --worktree (default: HEAD).")
@click.option("--reuse", "-r", metavar="RUN",
              help="With --worktree: start from the result of RUN.")
@click.option("--env", "-e", "env_names", multiple=True, metavar="NAME",
              help="Pass the host variable NAME into the sandbox (repeatable).")
@click.option("--shell", is_flag=True,
              help="Start a shell (session.shell) instead of the agent (run.agent).")
@docker_network_options()
@project_option()
def command(worktree: bool, run_name: str | None, branch: str | None, reuse: str | None,
            env_names: tuple[str, ...], shell: bool, networks: tuple[str, ...],
            compose: bool) -> None:
    """Open a terminal session with the agent (or a shell) in the sandbox."""
    import sys

    from git_iterare.errors import UserError
    from git_iterare.runner.interactive import InteractiveRequest, interactive

    if not worktree and (run_name or branch or reuse):
        raise UserError("--workspace, --branch and --reuse need --worktree")
    if not sys.stdin.isatty():
        raise UserError("interactive needs a terminal", hint="use `git iterare execute` for "
                        "unattended runs")
    ctx = app()
    request = InteractiveRequest(worktree=worktree, name=run_name, branch=branch,
                                 reuse=reuse, env_names=env_names, shell=shell,
                                 networks=networks, compose=compose)
    end_session(interactive(ctx.repo, ctx.config, request, progress=ui.progress))


def end_session(end: SessionEnd) -> None:
    """Say how a terminal session ended and what to do next (on stderr, as ``execute -f``
    does), then exit with the session's status."""
    import sys

    from git_iterare.cli.log import ended_line
    from git_iterare.runs.status import ACTIVE

    record = end.record
    if record is None:
        line = ("\ndetached; a session on your checkout cannot be attached again, so it was "
                "ended (`git iterare interactive --worktree` makes one that goes on)"
                if end.detached else
                f"session ended (exit status {end.status}); its changes are in your "
                "checkout, not committed (`git status`)")
    else:
        rid = ui.sanitize_line(record.id)
        if end.detached:
            # after the line the terminal was on (a prompt, say)
            line = (f"\ndetached; run {rid} goes on (`git iterare attach {rid}` attaches it "
                    f"again, `git iterare stop {rid}` ends it)")
        elif record.status in ACTIVE:  # not finished here (the engine could not tell)
            line = f"run {rid} is {record.status} (`git iterare log -f {rid}` follows it)"
        else:
            line = ended_line(record)
            if record.head and (record.changes or {}).get("files"):
                line += (f"; its work is on {ui.sanitize_line(record.branch or '')} "
                         f"(`git iterare diff {rid}`, then `git iterare merge {rid}`)")
            elif record.head:
                line += "; it changed nothing"
    click.echo(line, err=True)
    sys.exit(end.status)
