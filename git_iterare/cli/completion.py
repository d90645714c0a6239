"""``git iterare completion bash|zsh|fish``."""

from __future__ import annotations

import click

from git_iterare.cli.completion_script import SHELLS


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def command(shell: str) -> None:
    """Print a completion script that plugs into git's completion for SHELL."""
    from git_iterare.cli.completion_script import script

    click.echo(script(shell), nl=False)
