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
    import os
    import sys
    from pathlib import Path

    from git_iterare import credentials
    from git_iterare.errors import UserError

    if image is not None:  # iterare's `credentials --image` logged in inside that image
        login = True
        app().overrides["docker.image"] = image
    if sum((api_key_env, token_file is not None, login)) > 1:
        raise UserError("give one of --api-key-env, --token-file and --login")
    repo = app().optional_repo()
    if repo is not None and repo.main_work_tree is not None:
        from git_iterare.runner.trust import require_approval

        # A repository's claude.credentials_path would choose where tokens are written.
        require_approval(repo, app().config, only={"claude.credentials_path"})
    folder = credentials.credentials_dir(app().config)
    if login:
        import shutil
        import tempfile

        from git_iterare.runner.interactive import login_launcher

        if not sys.stdin.isatty():
            raise UserError("--login needs a terminal", hint="use --token-file or "
                            "--api-key-env where there is none")
        scratch = Path(tempfile.mkdtemp(prefix="iterare-login-home-"))
        try:
            launch = login_launcher(app().optional_repo(), app().config,
                                    progress=ui.progress)
            stored = credentials.login_in_sandbox(launch, folder, scratch, force=force)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    elif api_key_env:
        stored = credentials.store_api_key_from_env(folder, os.environ, force=force)
    elif token_file is not None:
        if token_file == "-":
            text, source = sys.stdin.read(), "stdin"
        else:
            try:
                text, source = Path(token_file).read_text(encoding="utf-8"), token_file
            except (OSError, UnicodeDecodeError) as exc:
                raise UserError(f"{token_file}: cannot read: {exc}") from None
        stored = credentials.store_token(folder, credentials.clean_token(text, source),
                                         force=force)
    elif credentials.claude_login_files(Path.home())[0].is_file():
        stored = credentials.copy_claude_login(folder, Path.home(), force=force)
    else:
        if credentials.existing(folder) and not force:
            credentials.store_token(folder, "", force=False)  # raises: already stored
        if sys.stdin.isatty():
            text = click.prompt("Paste an API key or `claude setup-token` token",
                                hide_input=True, prompt_suffix=": ", err=True)
            source = "the token"
        else:
            text, source = sys.stdin.read(), "stdin"
        stored = credentials.store_token(folder, credentials.clean_token(text, source),
                                         force=force)
    click.echo(stored.describe())
