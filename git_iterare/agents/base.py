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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from git_iterare.config import Config, Key
from git_iterare.errors import UserError

if TYPE_CHECKING:
    from git_iterare.agents.credstore import CredentialStore

#: Where the runner mounts the prompt body inside the sandbox (read-only, outside the
#: worktree). Agents receive it as ``prompt_file``; this is only the conventional value.
PROMPT_FILE = "/run/iterare/prompt.md"


@dataclass(frozen=True)
class Credentials:
    """Secrets an agent needs inside the sandbox.

    Attributes:
        env: secret environment variables (name -> value); never logged or recorded.
        files: files to create under the agent user's home, path relative to the home
            (``.claude/.credentials.json``) -> content; the runner writes them 0600.
    """

    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, bytes] = field(default_factory=dict)

    def secrets(self) -> list[str]:
        """Every secret value, for :func:`git_iterare.proc.register_secret`."""
        return [v for v in self.env.values() if v]


@dataclass(frozen=True)
class Part:
    """One piece of an agent's message.

    Attributes:
        kind: ``text``, ``thinking``, ``tool_use`` or ``tool_result``.
        text: the text; for tool_use a one-line summary of the input (the command, the
            file); for tool_result the tool's output.
        name: the tool's name (tool_use), empty otherwise.
        detail: the full tool input as JSON (tool_use), empty otherwise.
        is_error: a tool_result that reports a failure.
    """

    kind: str
    text: str
    name: str = ""
    detail: str = ""
    is_error: bool = False


@dataclass(frozen=True)
class Event:
    """One output line of an agent, understood.

    Attributes:
        kind: ``text`` (a plain line), ``system``, ``assistant``, ``user`` (tool results
            fed back), ``result`` (the agent's final report) or ``other`` (JSON we do not
            know; shown at the highest verbosity).
        parts: message pieces (assistant and user events).
        line: the line as read, without its newline.
        data: the parsed JSON object, or None for a text line.
    """

    kind: str
    parts: tuple[Part, ...] = ()
    line: str = ""
    data: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RunResult:
    """What a run came to, as far as the agent's output tells.

    Attributes:
        is_error: the agent failed (or stopped without a final report).
        cost_usd: what the run cost, in US dollars, when the agent reports it.
        tokens: token counts by kind (``input``, ``output``, ``cache_read``,
            ``cache_creation``); empty when unknown.
        turns: model turns, when known.
        duration_ms: the agent's own wall-clock time, milliseconds, when known.
        summary: the agent's closing words (or the last output line), possibly empty.
    """

    is_error: bool
    cost_usd: float | None = None
    tokens: Mapping[str, int] = field(default_factory=dict)
    turns: int | None = None
    duration_ms: int | None = None
    summary: str = ""


@dataclass(frozen=True)
class Install:
    """How an agent's program gets into git-iterare's sandbox image.

    Attributes:
        script: POSIX shell run as root (``set -eu``) in a build stage of its own that
            starts from the image's system stage (Debian bookworm with git, curl, Node.js
            and npm). It installs everything under ``$PREFIX`` (``/opt/<agent name>``),
            executables in ``$PREFIX/bin``: the final image copies ``$PREFIX`` alone and
            links ``$PREFIX/bin/*`` into ``/usr/local/bin``. ``NODE_EXTRA_CA_CERTS`` and
            ``SSL_CERT_FILE`` name the build's CA bundle when one was given (downloads
            through a TLS-intercepting proxy); nothing else of the stage is kept.
        version: the version asked for (``latest`` or a version number), shown as the
            image label ``dev.iterare.<agent name>-version``.
    """

    script: str
    version: str


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


def text_event(line: str) -> Event:
    """A plain output line."""
    return Event(kind="text", parts=(Part("text", line),), line=line)


def parse_json_object(line: str) -> dict[str, Any] | None:
    """``line`` parsed as a JSON object, or None when it is not one."""
    stripped = line.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class Agent:
    """Base of the agent adapters; subclasses set :attr:`name` and :meth:`command`.

    Methods take the effective :class:`~git_iterare.config.Config`; ``env`` is the host
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

    def install(self, config: Config) -> Install | None:
        """How the agent's program is installed into the sandbox image, or None when the
        image needs nothing for it.

        Raises:
            UserError: a configured version is malformed.
        """
        return None

    def required_domains(self, config: Config) -> list[str]:
        """Domains the sandbox must let this agent reach (wildcards ``*.x.com`` allowed)."""
        return []

    def command(self, *, prompt_file: str, config: Config) -> list[str]:
        """The argv the sandbox runs as the agent user, in the worktree.

        Args:
            prompt_file: in-sandbox path of a read-only file holding the prompt body (the
                text after the frontmatter, as :attr:`git_iterare.prompt.Prompt.body`);
                it is never inside the worktree.
            config: the effective configuration.
        """
        raise NotImplementedError

    #: Run limits (``max_budget_usd``, ``max_turns``) the agent enforces itself given
    #: :meth:`limit_args`; git-iterare watches the reported cost for the others.
    own_limits: frozenset[str] = frozenset()

    def limit_args(self, limits: Mapping[str, Any]) -> list[str]:
        """Arguments appended to :meth:`command` so the agent stops itself at the run's
        limits.

        Args:
            limits: the run record's ``extra``: ``max_budget_usd`` (US dollars) and
                ``max_turns``, each None or absent for no limit.

        Returns:
            Extra argv items; none by default (the agent has no such flags).
        """
        return []

    def interactive_command(self, config: Config) -> list[str] | None:
        """The argv of a terminal session with this agent, or None when it has none
        (``git iterare interactive`` then needs ``--shell``)."""
        return None

    def environment(self, config: Config) -> dict[str, str]:
        """Non-secret environment variables for the agent process."""
        return {}

    def credentials(self, config: Config, env: Mapping[str, str]) -> Credentials:
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
