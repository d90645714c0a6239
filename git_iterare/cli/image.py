"""``git iterare image build|status``: the sandbox image."""

from __future__ import annotations

import click

from git_iterare import ui
from git_iterare.cli.agent_options import image_build_options
from git_iterare.cli.context import app


@click.group("image", invoke_without_command=True,
             context_settings={"help_option_names": ["-h"]})
@click.pass_context
def command(ctx: click.Context) -> None:
    """Build the sandbox image or show its status."""
    if ctx.invoked_subcommand is None:
        # Like 'git iterare' alone: the list of subcommands, exit 0.
        click.echo(ctx.get_help())


class _Build(click.Command):
    """``image build``: its own options, with those the agents add (``--claude-version``)
    after ``--agents``. Those are read from the agents' modules only when ``build`` is
    parsed or its help is shown."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        at = [param.name for param in params].index("agents") + 1
        return [*params[:at], *image_build_options(), *params[at:]]


@command.command("build", cls=_Build)
@click.option("--base", metavar="IMAGE", default=None,
              help="Debian bookworm based image to build on ([docker] base_image).")
@click.option("--ca-bundle", metavar="FILE", default=None,
              type=click.Path(dir_okay=False),
              help="PEM CA bundle for downloads through a TLS-intercepting proxy "
                   "([docker] ca_bundle).")
@click.option("--agents", metavar="LIST", default=None,
              help="Agents to install, comma-separated ([docker] agents).")
@click.option("--no-cache", is_flag=True, help="Rebuild every step.")
@click.option("--tag", metavar="NAME", default=None,
              help="Image to create ([docker] image).")
def build(base: str | None, ca_bundle: str | None, agents: str | None, no_cache: bool,
          tag: str | None) -> None:
    """Build the sandbox image (and the project's .iterare/Dockerfile on top)."""
    from git_iterare.runner import image

    ctx = app()
    ctx.overrides.update({"docker.base_image": base, "docker.ca_bundle": ca_bundle,
                          "docker.agents": agents, "docker.image": tag})
    config = ctx.config
    for ref in image.build(ctx.optional_repo(), config, no_cache=no_cache,
                           progress=ui.progress,
                           announce=lambda line: click.echo(line, err=True)):
        click.echo(f"{ref.name} {ref.id}")


@command.command("status")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format.")
def status(fmt: str) -> None:
    """Show whether the sandbox image exists, its id, creation time and labels."""
    import json

    from git_iterare.errors import OperationFailed
    from git_iterare.runner import image
    from git_iterare.ui import sanitize

    report = image.status(app().config)
    info = report.image
    if report.note:
        click.echo(f"note: {report.note}", err=True)
    if fmt == "json":
        click.echo(json.dumps({"name": info.name, "present": info.present, "id": info.id,
                               "created": info.created, "labels": dict(info.labels),
                               "engine": report.engine}, indent=2))
    else:
        click.echo(f"engine: {sanitize(report.engine_label)}")
        click.echo(f"image: {info.name}")
        click.echo(f"present: {'yes' if info.present else 'no'}")
        if info.present:
            click.echo(f"id: {info.id}")
            click.echo(f"created: {info.created}")
            for key in sorted(info.labels):
                click.echo(f"label {key}: {info.labels[key]}")
    if not info.present:
        raise OperationFailed(f"image {info.name} is missing",
                              hint="run `git iterare image build`")


def _share_common_options() -> None:
    # --color and --verbose work after the subcommand too (git iterare image build
    # --verbose); --help stays on `image`, whose manual page covers both.
    from git_iterare.cli.main import common_options

    for sub in (build, status):
        sub.params.extend(p for p in common_options() if p.name in ("color", "verbose"))


_share_common_options()
