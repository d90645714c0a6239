"""``git iterare credentials [--force] [--api-key-env | --token-file FILE]``."""

from __future__ import annotations

import click

from git_iterare import ui
from git_iterare.cli.context import app


@click.command("credentials")
@click.option("--force", "-f", is_flag=True, help="Replace credentials already stored.")
@click.option("--api-key-env", is_flag=True,
              help="Store the API key in the ANTHROPIC_API_KEY environment variable.")
@click.option("--token-file", type=click.Path(dir_okay=False, allow_dash=True),
              help="Read an API key or `claude setup-token` token from FILE (- for stdin).")
@click.option("--login", is_flag=True,
              help="Log in to Claude with Claude Code inside the sandbox (needs a terminal).")
@click.option("--image", "-i", metavar="IMAGE",
              help="Log in (as --login) in the sandbox image IMAGE; iterare's image "
                   "stands for git-iterare's own.")
def command(force: bool, api_key_env: bool, token_file: str | None, login: bool,
            image: str | None) -> None:
    """Store Claude credentials (0600) for runs to use.

    Without options: copy the Claude Code login in ~/.claude/.credentials.json when there
    is one, else read a token (hidden when typed at a terminal, else from stdin).
    """
    import sys
    from pathlib import Path

    from git_iterare.errors import UserError
    from git_iterare.runner import credentials

    if image is not None:  # iterare's `credentials --image` logged in inside that image
        login = True
        app().overrides["docker.image"] = image
    if sum((api_key_env, token_file is not None, login)) > 1:
        raise UserError("give one of --api-key-env, --token-file and --login")

    def read_file() -> tuple[str, str]:
        if token_file == "-":
            return sys.stdin.read(), "stdin"
        try:
            return Path(str(token_file)).read_text(encoding="utf-8"), str(token_file)
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{token_file}: cannot read: {exc}") from None

    def ask() -> tuple[str, str]:
        if sys.stdin.isatty():
            return click.prompt("Paste an API key or `claude setup-token` token",
                                hide_input=True, prompt_suffix=": ", err=True), "the token"
        return sys.stdin.read(), "stdin"

    method: credentials.Method = ("login" if login else "env" if api_key_env
                                  else "token" if token_file is not None else "auto")
    stored = credentials.store(app().optional_repo(), app().config, method, force=force,
                               read_token=read_file if token_file is not None else ask,
                               progress=ui.progress)
    click.echo(stored.describe())
