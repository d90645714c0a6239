"""``git iterare install``."""

from __future__ import annotations

import click


@click.command("install")
def command() -> None:
    """Create the global configuration directory (0700) and a commented config.toml."""
    from git_iterare.runner import project

    for written in project.install():
        click.echo(f"{written.action:>11}  {written.path}")
    click.echo("next: `git iterare credentials`, then `git iterare init` in a repository")
