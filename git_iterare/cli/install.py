"""``git iterare install``."""

from __future__ import annotations

import click


@click.command("install")
def command() -> None:
    """Create the global configuration directory (0700) and a commented config.toml."""
    from git_iterare import scaffold

    for written in scaffold.install_global():
        click.echo(f"{written.action:>11}  {written.path}")
    click.echo("next: `git iterare credentials`, then `git iterare init` in a repository")
