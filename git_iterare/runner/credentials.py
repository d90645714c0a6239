"""``git iterare credentials``: storing an agent's credentials, the way its store says.

The command parses options and reads what the user types; this module picks the agent
and its :class:`~git_iterare.agents.credstore.CredentialStore`, checks that the
repository may choose where they go, and stores them: a token, the API key in the
environment, the login the agent's CLI left on the host, or a login made inside the
sandbox.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from git_iterare.agents.credstore import Stored, clean_token
from git_iterare.config import Config
from git_iterare.errors import UserError
from git_iterare.git.repo import Repo

#: Asks the user for a token: called with the prompt text, returns ``(text, source)``
#: where ``source`` names it in errors (``stdin``, ``the token``).
AskToken = Callable[[str], tuple[str, str]]


@dataclass(frozen=True)
class CredentialsRequest:
    """What ``git iterare credentials`` was asked to do.

    Attributes:
        agent: whose credentials; None for ``run.agent``.
        force: replace credentials already stored.
        api_key_env: store the key in the agent's API key variable.
        token: ``(text, source)`` read from ``--token-file``, or None.
        login: log in inside the sandbox (needs a terminal: ``terminal``).
        terminal: stdin is a terminal.
    """

    agent: str | None = None
    force: bool = False
    api_key_env: bool = False
    token: tuple[str, str] | None = None
    login: bool = False
    terminal: bool = False


def store_credentials(repo: Repo | None, config: Config, request: CredentialsRequest,
                      ask_token: AskToken,
                      progress: Callable[[str], None] = lambda line: None) -> Stored:
    """Store credentials for an agent as ``request`` says; without a token, login or
    variable, copy the login its CLI left in the user's home, else ``ask_token``.

    Raises:
        UserError: an unknown agent, or one needing no credentials; conflicting options;
            ``--login`` without a terminal; a repository's unapproved setting choosing
            where credentials go; credentials already stored without ``force``; a bad
            token or an unset variable.
        OperationFailed: the login in the sandbox failed.
    """
    from git_iterare.agents import get_agent

    if sum((request.api_key_env, request.token is not None, request.login)) > 1:
        raise UserError("give one of --api-key-env, --token-file and --login")
    try:
        agent = get_agent(request.agent or config["run.agent"])
    except UserError as exc:
        if request.agent:  # the name came from --agent, not from run.agent
            raise UserError(exc.message, hint="give --agent one of them: "
                            "`git iterare credentials --agent NAME`") from None
        raise
    store = agent.credential_store
    if store is None:
        raise UserError(f"agent {agent.name} needs no credentials",
                        hint="give --agent with an agent that talks to a model")
    if repo is not None and repo.main_work_tree is not None and store.location_keys:
        from git_iterare.runner.trust import require_approval

        # A repository's choice of credentials directory would choose where tokens go.
        require_approval(repo, config, only=set(store.location_keys))
    if request.login:
        import shutil
        import tempfile

        from git_iterare.runner.interactive import login_launcher

        if not request.terminal:
            raise UserError("--login needs a terminal", hint="use --token-file or "
                            "--api-key-env where there is none")
        scratch = Path(tempfile.mkdtemp(prefix="iterare-login-home-"))
        try:
            launch = login_launcher(repo, config, agent, progress=progress)
            return store.login_in_sandbox(launch, config, scratch, force=request.force)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if request.api_key_env:
        return store.store_api_key_from_env(config, os.environ, force=request.force)
    if request.token is not None:
        text, source = request.token
        return store.store_token(config, clean_token(text, source), force=request.force)
    home = Path.home()
    if store.host_login(home) is not None:
        return store.copy_login(config, home, force=request.force)
    if not request.force:
        store.refuse_existing(config)
    text, source = ask_token(store.token_prompt)
    return store.store_token(config, clean_token(text, source), force=request.force)
