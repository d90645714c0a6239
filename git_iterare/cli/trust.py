"""``git iterare trust [--show | --revoke | --yes] [PROMPT...]``."""

from __future__ import annotations

import click

from git_iterare.cli.context import app


@click.command("trust")
@click.argument("prompts", nargs=-1, metavar="[PROMPT]...")
@click.option("--show", is_flag=True, help="Only show what the repository asks for.")
@click.option("--yes", "-y", is_flag=True, help="Approve without asking.")
@click.option("--revoke", is_flag=True, help="Forget the approval of this repository.")
def command(prompts: tuple[str, ...], show: bool, yes: bool, revoke: bool) -> None:
    """Review and approve the sandbox settings this repository asks for.

    Shows the .iterare/config.toml keys that widen the sandbox, the .iterare/Dockerfile,
    the variables prompts pass in and the agent settings that start programs (hooks, MCP
    servers), with what changed since the last approval, and approves their exact content
    (kept in your config directory, never in the repository).
    """
    import sys

    from git_iterare.errors import UserError
    from git_iterare.runner import trust

    if sum((show, yes, revoke)) > 1:
        raise UserError("give one of --show, --yes and --revoke")
    repo = app().repo
    if revoke:
        key = trust.repo_key(repo)
        if trust.revoke(repo):
            click.echo(f"revoked the approval of {key}")
        else:
            click.echo(f"nothing was approved for {key}")
        return
    current = trust.state(repo, app().config, trust.prompts_env(repo, prompts))
    click.echo(trust.render(current))
    checks = trust.prompt_checks(repo, app().config)
    if checks:
        from git_iterare.ui import sanitize_line

        click.echo("loop checks (`until`: they run in the sandbox only, no approval needed):")
        for where, check in checks:
            click.echo(sanitize_line(f"  {where}: {check}"))
    if show or current.request.empty or not current.missing:
        return
    if not yes:
        if not sys.stdin.isatty():
            raise UserError("not approved: answer on a terminal",
                            hint="or rerun with --yes to approve what is shown above")
        if not click.confirm("Approve this for the repository?", default=False, err=True):
            raise UserError("not approved", hint="nothing was changed")
    trust.approve(current)
    click.echo(f"approved for {current.repo}")
