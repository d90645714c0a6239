"""What every agent adapter provides, and the values it exchanges with the runner.

An agent knows how to start itself inside the sandbox (argv, environment, credentials,
the domains it must reach) and how to read its own output (one line at a time, into
:class:`Event` values, then a :class:`RunResult`). It knows nothing about Docker: the
runner mounts the prompt file, writes credential files into the agent's home, and feeds
output lines back.

:class:`Agent` gives defaults (no domains, no environment, no credentials, every line a
text event) so a trivial agent only says how to start; see ``shell.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from git_iterare.config import Config

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
class ImageLayer:
    """An agent's install step: a Dockerfile built on top of the run's image when the
    agent runs (its program is not in git-iterare's image).

    The build context holds the Dockerfile and ``ca.pem`` (the CA bundle of
    ``docker.ca_bundle``, or an empty file). Build arguments given besides
    :attr:`build_args`: ``BASE_IMAGE`` (the run's image id, which the result must be
    ``FROM``) and ``BUILDER_IMAGE`` (git-iterare's own image id, which has ``npm``, for a
    builder stage).

    Attributes:
        name: short name for the built image's tag (``gemini``).
        dockerfile: the Dockerfile text.
        build_args: further build arguments (name -> value).
    """

    name: str
    dockerfile: str
    build_args: Mapping[str, str] = field(default_factory=dict)


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

    def image_layer(self, config: Config) -> ImageLayer | None:
        """The install step to build on top of the run's image, or None (the default:
        the agent's program is in the image already, or needs nothing)."""
        return None

    def credentials(self, config: Config, env: Mapping[str, str]) -> Credentials:
        """Secrets for the sandbox.

        Raises:
            UserError: the agent needs credentials and none are stored (naming the
                command that stores them).
        """
        return Credentials()

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
        :func:`git_iterare.logrender.render_lines`).
        """
        from git_iterare.logrender import render_event

        return render_event(event, verbosity)
