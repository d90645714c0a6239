"""``git iterare init [PATH] [--force]``."""

from __future__ import annotations

from pathlib import Path

import click

from git_iterare.cli.context import app


@click.command("init")
@click.argument("path", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files that already exist.")
def command(path: Path | None, force: bool) -> None:
    """Create .iterare/ (config, Dockerfile, example prompt) in a repository."""
    from git_iterare import scaffold
    from git_iterare.errors import UserError
    from git_iterare.repo import discover

    if path is not None and not path.is_dir():
        raise UserError(f"{path}: no such directory")
    repo = discover(path) if path is not None else app().repo
    top = repo.main_work_tree
    if top is None:
        raise UserError("this is a bare repository; run git iterare init in a worktree")
    try:
        image = app().config["docker.image"]
    except UserError:
        if not force:
            raise
        # --force rewrites the project file, so a broken one must not stand in its way.
        from git_iterare.config import DEFAULT_IMAGE

        image = DEFAULT_IMAGE
    for written in scaffold.init_project(top, image, force):
        click.echo(f"{written.action:>11}  {written.path}")
    click.echo("next: edit .iterare/prompts/example.md, then `git iterare execute example`")
