"""``git iterare init [PATH] [--force]``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from git_iterare.cli.context import app

if TYPE_CHECKING:
    from git_iterare.runner.project import DockerfileRewrite


@click.command("init")
@click.argument("path", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", "-f", is_flag=True, help="Overwrite files that already exist.")
def command(path: Path | None, force: bool) -> None:
    """Create .iterare/ (config, Dockerfile, example prompt) in a repository."""
    from git_iterare.errors import UserError
    from git_iterare.runner import project
    from git_iterare.runner.session import open_repository

    if path is not None and not path.is_dir():
        raise UserError(f"{path}: no such directory")
    repo = open_repository(path) if path is not None else app().repo
    if repo.main_work_tree is None:
        raise UserError("this is a bare repository; run `git iterare init` in a worktree")
    try:
        image = app().config["docker.image"]
    except UserError:
        if not force:
            raise
        # --force rewrites the project file, so a broken one must not stand in its way.
        from git_iterare.config import DEFAULT_IMAGE

        image = DEFAULT_IMAGE
    for written in project.init(repo, image, force):
        click.echo(f"{written.action:>11}  {written.path}")
    _offer_rewrite(project.legacy_rewrite(repo, image), image)
    click.echo("next: edit .iterare/prompts/example.md, then `git iterare execute example`")


def _offer_rewrite(rewrite: DockerfileRewrite | None, image: str) -> None:
    """Offer to rewrite a Dockerfile that builds on iterare's image (``iterare init``'s),
    FROM git-iterare's image; without a terminal, say how it runs and how to rewrite it."""
    import sys

    if rewrite is None:
        return
    dockerfile = rewrite.path
    question = (f"{dockerfile} builds on iterare's image {rewrite.legacy}; rewrite it "
                f"FROM {image}?")
    if not sys.stdin.isatty():
        click.echo(f"note: {dockerfile} builds on iterare's image {rewrite.legacy}; runs use "
                   f"{image} instead (run `git iterare init` at a terminal to rewrite it)")
        return
    if click.confirm(question, default=True):
        rewrite.apply()
        click.echo(f"{'rewritten':>11}  {dockerfile}")
