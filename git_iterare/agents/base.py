"""What every agent adapter provides, and the values it exchanges with the runner.

An agent knows its configuration keys, how its program is installed into the image, how
to start itself inside the sandbox (argv, environment, credentials, the domains it must
reach), how its credentials are kept on the host, and how to read its own output (one
line at a time, into :class:`Event` values, then a :class:`RunResult`). It knows nothing
about Docker: the runner mounts the prompt file, writes credential files into the agent's
home, and feeds output lines back; the image build runs its install script.

:class:`Agent` gives defaults (no keys, nothing to install, no domains, no environment, no
credentials, every line a text event) so a trivial agent only says how to start; see
``shell.py``. The list of what an agent declares is in :mod:`git_iterare.agents`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from git_iterare.agents.values import Credentials, Event, ImageOption, Install, Part, RunResult
from git_iterare.errors import UserError
from git_iterare.settings import Key, Settings

__all__ = ["PROMPT_FILE", "Agent", "Credentials", "Event", "ImageOption", "Install", "Part",
           "RunResult", "json_settings", "npm_install", "parse_json_object", "text_event"]

if TYPE_CHECKING:
    from git_iterare.agents.credstore import CredentialStore

#: Where the runner mounts the prompt body inside the sandbox (read-only, outside the
#: worktree). Agents receive it as ``prompt_file``; this is only the conventional value.
PROMPT_FILE = "/run/iterare/prompt.md"


def npm_install(package: str, version: str, executable: str) -> Install:
    """The :class:`Install` of an npm package (``@openai/codex``) at ``version``, with a
    check that ``executable`` runs (its ``--version`` is kept in ``$PREFIX/VERSION``).

    Raises:
        UserError: ``version`` is not an npm version or tag (letters, digits, ``.-_+~^``).
    """
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+~^-]{0,63}", version):
        raise UserError(f"{package}: bad version {version!r}",
                        hint="use `latest` or a version number such as 1.2.3")
    return Install(
        script=(f'npm install --global --prefix "$PREFIX" --no-audit --no-fund '
                f'--no-update-notifier "{package}@{version}"\n'
                f'"$PREFIX/bin/{executable}" --version > "$PREFIX/VERSION"\n'),
        version=version)


def gateway_url(config: Settings, key: str, env_var: str,
                env: Mapping[str, str] | None = None, *, plain: bool = False,
                hint: str = "e.g. https://gateway.example.com") -> str:
    """An agent's API gateway: the setting ``key``, else the host variable ``env_var``,
    else "".

    Args:
        config: the effective configuration.
        key: the agent's setting (``claude.base_url``).
        env_var: the variable its program reads (``ANTHROPIC_BASE_URL``).
        env: the host environment; ``os.environ`` when None.
        plain: also refuse quotes, backslashes, spaces and control characters (for a
            URL written into a command line or a config file).
        hint: the example shown with the error.

    Raises:
        UserError: the value is not an http(s) URL with a host (naming where it came from).
    """
    import os
    from urllib.parse import urlsplit

    env = os.environ if env is None else env
    url = str(config[key] or env.get(env_var, ""))
    if not url:
        return url
    parts = urlsplit(url)
    bad = plain and (any(c in url for c in "\"'\\ ")
                     or any(ord(c) < 32 or ord(c) == 127 for c in url))
    if parts.scheme not in ("http", "https") or not parts.hostname or bad:
        raise UserError(f"{key if config[key] else env_var}: {url!r} is not an http(s) URL",
                        hint=hint)
    return url


def gateway_domains(config: Settings, url: str, key: str, env_var: str) -> list[str]:
    """The allowlist entries an agent's gateway ``url`` needs: its host name, with the port
    the URL names (the firewall opens 80 and 443 for a name, or only the port given); none
    for an address, which the sandbox reaches through ``firewall.allowed_cidrs`` alone (an
    allowlist entry is a name the resolver answers).

    Args:
        config: the effective configuration (``firewall.allowed_cidrs`` is read).
        url: the gateway, an http(s) URL (:func:`gateway_url`), or "" for none.
        key, env_var: the agent's setting and variable, naming where ``url`` came from.

    Raises:
        UserError: the host is an address no ``firewall.allowed_cidrs`` entry holds.
    """
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return []
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return [f"{host}:{parts.port}" if parts.port else host]
    for entry in config["firewall.allowed_cidrs"]:
        try:
            if address in ipaddress.ip_network(str(entry), strict=False):
                return []
        except ValueError:
            continue  # the policy names a bad entry with its origin
    where = key if config[key] else env_var
    raise UserError(f"{where}: the gateway's host {address} is an address, which the "
                    "sandbox reaches only when firewall.allowed_cidrs holds it",
                    hint=f'add "{address}/{address.max_prefixlen}" to allowed_cidrs under '
                         "[firewall], or name the gateway by its host name")


def text_event(line: str) -> Event:
    """A plain output line."""
    return Event(kind="text", parts=(Part("text", line),), line=line)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is no JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise ValueError(f"{text} is no finite number")
    return value


def parse_json_object(line: str) -> dict[str, object] | None:
    """``line`` parsed as a JSON object, or None when it is not one: RFC 8259 JSON only,
    so a line holding ``NaN``, ``Infinity`` or a number too large for a float (which a
    cost or budget would compare wrongly with) is plain text."""
    stripped = line.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = json.loads(stripped, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def json_settings(path: str, data: bytes, inert: frozenset[str]) -> dict[str, object]:
    """The items of a repository's JSON settings file for an agent that
    :meth:`Agent.repository_settings` gives: ``"<path> <key>"`` -> value for every
    top-level key not in ``inert``, or ``path`` -> the whole text when the file is not a
    JSON object (the agent may still read it; it is shown as it is).

    Args:
        path: the file, relative to the worktree's top (``.claude/settings.json``).
        data: its content.
        inert: top-level keys that start no program (an allowlist: a key the agent
            learns later counts until it is known to be harmless).
    """
    text = data.decode("utf-8", "surrogateescape")
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        return {path: text}
    return {f"{path} {key}": value for key, value in parsed.items() if key not in inert}


class Agent:
    """Base of the agent adapters; subclasses set :attr:`name` and :meth:`command`.

    Methods take the effective :class:`~git_iterare.settings.Settings`; ``env`` is the host
    environment (``os.environ`` in production).
    """

    #: Registry name, as in ``run.agent`` and frontmatter ``agent:``.
    name: str = ""

    #: Configuration keys this agent reads (its ``[<name>]`` section by convention), with
    #: their defaults; git-iterare's configuration accepts them in every layer.
    config_keys: tuple[Key, ...] = ()

    #: Where its credentials are kept on the host and how ``git iterare credentials``
    #: stores them; None for an agent that needs none.
    credential_store: CredentialStore | None = None

    #: Options this agent adds to ``git iterare image build``, each setting one of its
    #: :attr:`config_keys` for the build (the version :meth:`install` reads, say).
    image_options: tuple[ImageOption, ...] = ()

    def install(self, config: Settings) -> Install | None:
        """How the agent's program is installed into the sandbox image, or None when the
        image needs nothing for it.

        Raises:
            UserError: a configured version is malformed.
        """
        return None

    def required_domains(self, config: Settings) -> list[str]:
        """Domains the sandbox must let this agent reach (wildcards ``*.x.com`` allowed)."""
        return []

    def command(self, *, prompt_file: str, config: Settings) -> list[str]:
        """The argv the sandbox runs as the agent user, in the worktree.

        Args:
            prompt_file: in-sandbox path of a read-only file holding the prompt body (the
                text after the frontmatter, as :attr:`git_iterare.prompt.Prompt.body`);
                it is never inside the worktree.
            config: the effective configuration.
        """
        raise NotImplementedError

    #: Whether a later round of a loop (``execute --until``) continues the agent's own
    #: session: its round prompt then says only what the check reported. Else each round
    #: is a fresh session, given the task again with that report.
    continues_session: bool = False

    def round_command(self, *, prompt_file: str, round_file: str, config: Settings
                      ) -> list[str]:
        """The argv of a later round of a loop, as :meth:`command` is the first's.

        Args:
            prompt_file: in-sandbox path of the task (the prompt body), as for
                :meth:`command`.
            round_file: in-sandbox path of a read-only file holding the round's prompt
                (see :attr:`continues_session`).
            config: the effective configuration.

        Returns:
            By default a fresh session on the round's prompt.
        """
        return self.command(prompt_file=round_file, config=config)

    #: Run limits (``max_budget_usd``, ``max_turns``) the agent enforces itself given
    #: :meth:`limit_args`; git-iterare watches the reported cost for the others.
    own_limits: frozenset[str] = frozenset()
    #: Whether the agent's output reports what it has spent as it goes (read by
    #: :meth:`summarize`): then git-iterare holds a ``max_budget_usd`` the agent does not
    #: (:func:`git_iterare.runner.finish.stop_over_budget`).
    reports_cost: bool = False

    def unheld_limits(self, limits: Mapping[str, object]) -> list[str]:
        """The run limits set in ``limits`` that nothing can hold for this agent: neither
        the agent itself (:attr:`own_limits`) nor git-iterare from the cost it reports
        (:attr:`reports_cost`; a budget only).

        Args:
            limits: ``max_budget_usd`` (US dollars) and ``max_turns``, each None, 0 or
                absent for no limit (a run record's ``extra``).

        Returns:
            The names of those limits, ``max_budget_usd`` first; empty when all hold.
        """
        held = self.own_limits | ({"max_budget_usd"} if self.reports_cost else set())
        return [key for key in ("max_budget_usd", "max_turns")
                if limits.get(key) and key not in held]

    def limit_args(self, limits: Mapping[str, object]) -> list[str]:
        """Arguments appended to :meth:`command` so the agent stops itself at the run's
        limits.

        Args:
            limits: the run record's ``extra``: ``max_budget_usd`` (US dollars) and
                ``max_turns``, each None or absent for no limit.

        Returns:
            Extra argv items; none by default (the agent has no such flags).
        """
        return []

    def interactive_command(self, config: Settings) -> list[str] | None:
        """The argv of a terminal session with this agent, or None when it has none
        (``git iterare interactive`` then needs ``--shell``)."""
        return None

    def environment(self, config: Settings) -> dict[str, str]:
        """Non-secret environment variables for the agent process."""
        return {}

    def credentials(self, config: Settings, env: Mapping[str, str]) -> Credentials:
        """Secrets for the sandbox: by default the host's :attr:`~CredentialStore.api_key_env`
        when set, else what :attr:`credential_store` keeps; none without a store.

        Raises:
            UserError: the agent needs credentials and none are stored (naming the
                command that stores them).
        """
        from git_iterare import proc

        store = self.credential_store
        if store is None:
            return Credentials()
        value = env.get(store.api_key_env, "") if store.api_key_env else ""
        if value:
            proc.register_secret(value)
            return Credentials(env={store.api_key_env: value})
        found = store.load(config)
        if found is None:
            raise UserError(f"no {store.label} credentials for agent {self.name}: run "
                            f"`git iterare credentials --agent {self.name}` or set "
                            f"{store.api_key_env}")
        return found

    #: Files of the repository, relative to the worktree's top, that configure this agent
    #: to start programs of the repository's choosing (hooks, MCP servers); read by
    #: :meth:`repository_settings`.
    settings_files: tuple[str, ...] = ()

    def repository_settings(self, files: Mapping[str, bytes]) -> dict[str, object]:
        """What the repository's own configuration of this agent asks for that would start
        programs: repository config like any other, acting only once approved
        (``git iterare trust``, :mod:`git_iterare.runner.trust`).

        Args:
            files: those of :attr:`settings_files` the run's tree holds -> their content.

        Returns:
            Item name (the file, a space and a key; or the file alone) -> its value
            (anything JSON can hold); empty when nothing starts a program.
        """
        return {}

    def parse_line(self, line: str) -> Event:
        """Turn one output line (newline stripped or not) into an :class:`Event`."""
        return text_event(line.rstrip("\r\n"))

    def summarize(self, events: Iterable[Event], *, exit_code: int | None = None) -> RunResult:
        """The :class:`RunResult` of a run from its events and the process exit status.

        The default: failed when the exit status is non-zero; the summary is the last
        non-blank text line.
        """
        last = ""
        for event in events:
            if event.kind == "text" and event.line.strip():
                last = event.line.strip()
        return RunResult(is_error=exit_code not in (0, None), summary=last)

    def render(self, event: Event, verbosity: int) -> str | None:
        """One event as text for ``git iterare log``, or None to hide it.

        Verbosity 0 shows what the agent says; 1 adds tool calls; 2 adds tool results,
        system events and unknown lines. Colors come from :func:`git_iterare.ui.paint`.
        The closing summary line is not rendered here (see
        :func:`git_iterare.agents.render.render_lines`).
        """
        from git_iterare.agents.render import render_event

        return render_event(event, verbosity)
