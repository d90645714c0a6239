"""``git iterare attach [RUN]``."""

from __future__ import annotations

import click

from git_iterare.cli.context import app, project_option


@click.command("attach")
@click.argument("run", required=False)
@project_option()
def command(run: str | None) -> None:
    """Connect your terminal again to RUN, a detached terminal session (default: the only
    one running)."""
    import sys

    from git_iterare import ui
    from git_iterare.cli.interactive import end_session
    from git_iterare.errors import UserError
    from git_iterare.runner.interactive import attach

    if not sys.stdin.isatty():
        raise UserError("attach needs a terminal",
                        hint="follow a run's log with `git iterare log -f`")
    end_session(attach(app().repo, run, progress=ui.progress))
