"""``git iterare credentials [--agent NAME] [--force] [--api-key-env | --token-file FILE |
--login]``."""

from __future__ import annotations

import click

from git_iterare import ui
from git_iterare.cli.agent_options import LateHelpOption, agent_option
from git_iterare.cli.context import app
from git_iterare.runner import agent_list


@click.command("credentials")
@agent_option("--agent", "-a", what="Whose credentials",
              listed=agent_list.keeping_credentials)
@click.option("--force", "-f", is_flag=True, help="Replace credentials already stored.")
@click.option("--api-key-env", is_flag=True, cls=LateHelpOption,
              help="Store the API key in the agent's variable.",
              late_help=lambda: "Store the API key in the agent's variable "
                                f"({', '.join(agent_list.api_key_variables())}).")
@click.option("--token-file", type=click.Path(dir_okay=False, allow_dash=True),
              help="Read an API key or `claude setup-token` token from FILE (- for stdin).")
@click.option("--login", is_flag=True,
              help="Log in with the agent's CLI inside the sandbox (needs a terminal).")
@click.option("--image", "-i", metavar="IMAGE",
              help="Log in (as --login) in the sandbox image IMAGE; iterare's image "
                   "stands for git-iterare's own.")
def command(agent: str | None, force: bool, api_key_env: bool, token_file: str | None,
            login: bool, image: str | None) -> None:
    """Store an agent's credentials (0600) for runs to use.

    Without options: copy the login the agent's CLI keeps in your home (Claude Code's
    ~/.claude/.credentials.json) when there is one, else read a token (hidden when typed
    at a terminal, else from stdin).
    """
    import sys
    from pathlib import Path

    from git_iterare.errors import UserError
    from git_iterare.runner.credentials import CredentialsRequest, store_credentials

    if image is not None:  # iterare's `credentials --image` logged in inside that image
        login = True
        app().overrides["docker.image"] = image
    token = None
    if token_file == "-":
        token = (sys.stdin.read(), "stdin")
    elif token_file is not None:
        try:
            token = (Path(token_file).read_text(encoding="utf-8"), token_file)
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{token_file}: cannot read: {exc}") from None

    def ask_token(prompt: str) -> tuple[str, str]:
        if sys.stdin.isatty():
            return (click.prompt(prompt, hide_input=True, prompt_suffix=": ", err=True),
                    "the token")
        return sys.stdin.read(), "stdin"

    request = CredentialsRequest(agent=agent, force=force, api_key_env=api_key_env,
                                 token=token, login=login, terminal=sys.stdin.isatty())
    stored = store_credentials(app().optional_repo(), app().config, request, ask_token,
                               progress=ui.progress)
    click.echo(stored.describe())
