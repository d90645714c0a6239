"""Storing the credentials runs use (``git iterare credentials``): from a login in the
sandbox, an environment variable, a token, or the user's own Claude Code login.

The command line parses flags and reads what the user typed or named; every decision and
file written is here, over :mod:`git_iterare.credentials` (storage, 0600) and
:func:`git_iterare.runner.interactive.login_launcher` (the sandboxed login).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from git_iterare.config import Config
from git_iterare.credentials import Stored
from git_iterare.git.repo import Repo

__all__ = ["Method", "Stored", "TokenReader", "store"]

#: How to obtain credentials: ``login`` (Claude Code's login, in the sandbox, needs a
#: terminal), ``env`` (``ANTHROPIC_API_KEY``), ``token`` (what ``read_token`` returns) or
#: ``auto`` (copy the user's Claude Code login when there is one, else ``token``).
Method = Literal["login", "env", "token", "auto"]

#: Returns ``(text, source)``: a pasted or read API key or token, and where it came from
#: for messages (``stdin``, a file name).
TokenReader = Callable[[], tuple[str, str]]


def store(repo: Repo | None, config: Config, method: Method, *, force: bool = False,
          read_token: TokenReader | None = None,
          progress: Callable[[str], None] = lambda line: None) -> Stored:
    """Store credentials (0600) in the configured credentials folder.

    Args:
        repo: the repository, or None outside one; a repository's own
            ``claude.credentials_path`` acts only once approved (``git iterare trust``).
        config: the effective configuration.
        method: see :data:`Method`.
        force: replace credentials already stored.
        read_token: asked for the token (``token``, and ``auto`` without a Claude Code
            login); required for those methods.
        progress: receives progress lines of the sandbox's start (``login``).

    Returns:
        What was stored (:meth:`Stored.describe` says it without the secret).

    Raises:
        UserError: ``login`` without a terminal; credentials already stored and not
            ``force``; an empty or malformed token; the environment variable unset.
        OperationFailed: the repository's credentials path is not approved; the login in
            the sandbox failed.
    """
    import os
    import sys

    from git_iterare import credentials
    from git_iterare.errors import UserError

    if repo is not None and repo.main_work_tree is not None:
        from git_iterare.runner.trust import require_approval

        # A repository's claude.credentials_path would choose where tokens are written.
        require_approval(repo, config, only={"claude.credentials_path"})
    folder = credentials.credentials_dir(config)
    if method == "login":
        if not sys.stdin.isatty():
            raise UserError("--login needs a terminal", hint="use --token-file or "
                            "--api-key-env where there is none")
        return _login(repo, config, folder, force, progress)
    if method == "env":
        return credentials.store_api_key_from_env(folder, os.environ, force=force)
    if method == "auto" and credentials.claude_login_files(Path.home())[0].is_file():
        return credentials.copy_claude_login(folder, Path.home(), force=force)
    if method == "auto" and credentials.existing(folder) and not force:
        credentials.store_token(folder, "", force=False)  # raises: already stored
    if read_token is None:
        raise TypeError(f"method {method!r} needs read_token")
    text, source = read_token()
    return credentials.store_token(folder, credentials.clean_token(text, source), force=force)


def _login(repo: Repo | None, config: Config, folder: Path, force: bool,
           progress: Callable[[str], None]) -> Stored:
    import shutil
    import tempfile

    from git_iterare import credentials
    from git_iterare.runner.interactive import login_launcher

    scratch = Path(tempfile.mkdtemp(prefix="iterare-login-home-"))
    try:
        launch = login_launcher(repo, config, progress=progress)
        return credentials.login_in_sandbox(launch, folder, scratch, force=force)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
