"""Claude's credentials on the host, for runs to hand to the sandbox.

They live in the credentials directory: ``[claude] credentials_path`` when set (iterare
kept ``.credentials.json`` and ``.claude.json`` there, so its directory works as is),
else the global configuration directory (:func:`git_iterare.config.global_config_dir`).
Files are private and written atomically (:mod:`git_iterare.agents.credstore`). One kind
is stored at a time:

* ``anthropic-api-key``: an Anthropic API key (``sk-ant-api...``), given to Claude Code
  as ANTHROPIC_API_KEY;
* ``claude-oauth-token``: a long-lived token from ``claude setup-token``
  (``sk-ant-oat...``), given as CLAUDE_CODE_OAUTH_TOKEN;
* ``.credentials.json`` (and ``.claude.json`` when present): a Claude Code login,
  copied into the agent's ``~/.claude/`` and ``~``; ``git iterare credentials`` copies the
  one on the host, or makes one in the sandbox (``--login``: ``claude auth login``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import proc
from git_iterare.agents.credstore import (
    CredentialStore,
    Stored,
    read_secret,
    read_token,
    refuse_non_files,
    replace_files,
)
from git_iterare.errors import UserError
from git_iterare.settings import Settings, global_config_dir

if TYPE_CHECKING:
    from git_iterare.agents.base import Credentials

API_KEY_FILE = "anthropic-api-key"
OAUTH_TOKEN_FILE = "claude-oauth-token"
CREDENTIALS_JSON = ".credentials.json"
CLAUDE_JSON = ".claude.json"

#: Where Claude Code's login talks to, besides the agent's own API domains.
LOGIN_DOMAINS = ("claude.ai", "*.claude.ai", "console.anthropic.com", "platform.claude.com",
                 "api.anthropic.com", "statsig.anthropic.com")


def claude_login_files(home: Path) -> tuple[Path, Path]:
    """Where Claude Code keeps its login under ``home``: ``.claude/.credentials.json``,
    and its settings ``.claude.json``."""
    return home / ".claude" / CREDENTIALS_JSON, home / CLAUDE_JSON


def _register_login_secrets(login: bytes) -> None:
    """Register the tokens in a Claude Code login (``{"claudeAiOauth": {"accessToken":
    ..., "refreshToken": ...}}``) as secrets; other shapes are left as they are."""
    try:
        oauth = json.loads(login).get("claudeAiOauth", {})
    except (ValueError, AttributeError):
        return
    if isinstance(oauth, dict):
        for key in ("accessToken", "refreshToken"):
            if isinstance(oauth.get(key), str):
                proc.register_secret(oauth[key])


class ClaudeStore(CredentialStore):
    """Claude's store (see the module docstring)."""

    label = "Claude"
    files = (API_KEY_FILE, OAUTH_TOKEN_FILE, CREDENTIALS_JSON, CLAUDE_JSON)
    api_key_env = "ANTHROPIC_API_KEY"
    token_prompt = "Paste an API key or `claude setup-token` token"
    login_command = ("claude", "auth", "login")
    login_domains = LOGIN_DOMAINS
    location_keys = ("claude.credentials_path",)

    def directory(self, config: Settings) -> Path:
        custom = config["claude.credentials_path"]
        return Path(os.path.expanduser(custom)) if custom else global_config_dir()

    def load(self, config: Settings) -> Credentials | None:
        from git_iterare.agents.base import Credentials

        folder = self.directory(config)
        for filename, var in ((API_KEY_FILE, "ANTHROPIC_API_KEY"),
                              (OAUTH_TOKEN_FILE, "CLAUDE_CODE_OAUTH_TOKEN")):
            value = read_token(folder / filename)
            if value is not None:
                return Credentials(env={var: value})
        # iterare's runs may have left both as directories: name both at once.
        refuse_non_files([folder / CREDENTIALS_JSON, folder / CLAUDE_JSON])
        login = read_secret(folder / CREDENTIALS_JSON)
        if login is None:
            return None
        _register_login_secrets(login)
        files = {f".claude/{CREDENTIALS_JSON}": login}
        settings = read_secret(folder / CLAUDE_JSON)
        if settings is not None:
            files[CLAUDE_JSON] = settings
        return Credentials(files=files)

    def store_token(self, config: Settings, token: str, *, force: bool = False) -> Stored:
        """Store an API key (``sk-ant-api...``) or an OAuth token (anything else)."""
        proc.register_secret(token)
        is_api_key = token.startswith("sk-ant-api")
        paths = replace_files(self.directory(config), self.files,
                              {API_KEY_FILE if is_api_key else OAUTH_TOKEN_FILE:
                               token.encode() + b"\n"}, force, self.label)
        return Stored("Claude API key" if is_api_key else "Claude OAuth token", paths)

    def host_login(self, home: Path) -> Path | None:
        source = claude_login_files(home)[0]
        return source if source.is_file() else None

    def copy_login(self, config: Settings, home: Path, *, force: bool = False) -> Stored:
        """Copy a Claude Code login from ``home`` (``~/.claude/.credentials.json``, and
        ``~/.claude.json`` when present)."""
        source, settings = claude_login_files(home)
        try:
            data = source.read_bytes()
        except FileNotFoundError:
            raise UserError(f"no Claude Code login in {source}",
                            hint="log in with `claude`, or give a token") from None
        try:
            json.loads(data)
        except ValueError:
            raise UserError(f"{source}: not JSON; is it a Claude Code login?") from None
        new = {CREDENTIALS_JSON: data}
        if settings.is_file():
            new[CLAUDE_JSON] = settings.read_bytes()
        paths = replace_files(self.directory(config), self.files, new, force, self.label)
        return Stored("Claude Code login", paths)


#: The store of the claude agent.
STORE = ClaudeStore()
