"""``git iterare init [PATH] [--force]``."""

from __future__ import annotations

from pathlib import Path

import click

from git_iterare.cli.context import app


@click.command("init")
@click.argument("path", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", "-f", is_flag=True, help="Overwrite files that already exist.")
def command(path: Path | None, force: bool) -> None:
    """Create .iterare/ (config, Dockerfile, example prompt) in a repository."""
    from git_iterare import scaffold
    from git_iterare.errors import UserError
    from git_iterare.git.repo import discover

    if path is not None and not path.is_dir():
        raise UserError(f"{path}: no such directory")
    repo = discover(path) if path is not None else app().repo
    top = repo.main_work_tree
    if top is None:
        raise UserError("this is a bare repository; run `git iterare init` in a worktree")
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
    _offer_rewrite(top / ".iterare" / "Dockerfile", image)
    click.echo("next: edit .iterare/prompts/example.md, then `git iterare execute example`")


def _offer_rewrite(dockerfile: Path, image: str) -> None:
    """Offer to rewrite a Dockerfile that builds on iterare's image (``iterare init``'s),
    FROM git-iterare's image; without a terminal, say how it runs and how to rewrite it."""
    import sys

    from git_iterare import scaffold
    from git_iterare.sandbox.image import legacy_dockerfile

    try:
        text = dockerfile.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return
    legacy = legacy_dockerfile(text, image)
    if legacy is None:
        return
    new = scaffold.DOCKERFILE.format(image=image) if legacy.names_only else legacy.text
    question = (f"{dockerfile} builds on iterare's image {legacy.legacy}; rewrite it "
                f"FROM {image}?")
    if not sys.stdin.isatty():
        click.echo(f"note: {dockerfile} builds on iterare's image {legacy.legacy}; runs use "
                   f"{image} instead (run `git iterare init` at a terminal to rewrite it)")
        return
    if click.confirm(question, default=True):
        dockerfile.write_text(new, encoding="utf-8", errors="surrogateescape")
        click.echo(f"{'rewritten':>11}  {dockerfile}")

