"""``git iterare interactive``."""

from __future__ import annotations

import click

from git_iterare import ui
from git_iterare.cli.context import app, docker_network_options, project_option


@click.command("interactive")
@click.option("--worktree/--no-worktree", default=False,
              help="Work in a run of its own (branch, worktree, record), finished like any "
                   "run when the session ends; --no-worktree (the default) works on your "
                   "checkout.")
@click.option("--workspace", "-w", "run_name", metavar="NAME",
              help="Run name with --worktree.")
@click.option("--branch", "-b", help="Base branch or commit with --worktree (default: HEAD).")
@click.option("--reuse", "-r", metavar="RUN",
              help="With --worktree: start from the result of RUN.")
@click.option("--env", "-e", "env_names", multiple=True, metavar="NAME",
              help="Pass the host variable NAME into the sandbox (repeatable).")
@click.option("--shell", is_flag=True, help="Start a shell (session.shell) instead of Claude.")
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
    sys.exit(interactive(ctx.repo, ctx.config, request,
                         progress=ui.progress))
