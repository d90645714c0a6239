"""The values an agent exchanges with the runner: credentials for the sandbox, its output
understood (:class:`Event`, :class:`Part`), the outcome it reports (:class:`RunResult`) and
how its program is installed (:class:`Install`, with the :class:`ImageOption` values
``git iterare image build`` takes for it).

Plain data with no behaviour, so the modules that read or render them
(:mod:`git_iterare.agents.render`, :mod:`git_iterare.agents.credstore`) need not import
:mod:`git_iterare.agents.base`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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
        disputed: how many closing reports the output held when it held more than one,
            else 0: the figures are the first report's, and another may be forged (see
            :mod:`git_iterare.agents.tally`).
        session: the agent's session (conversation, thread) id, when its output names
            it; "" when not.
        session_totals: which of ``cost_usd`` and ``tokens`` are ``session``'s running
            totals, what earlier processes that continued it spent included, rather than
            this process's own (Claude Code 2.1.277 and later: its cost; Codex: its
            tokens). A loop's round takes the earlier rounds of the same session off
            (:func:`git_iterare.runner.rounds.own_share`).
    """

    is_error: bool
    cost_usd: float | None = None
    tokens: Mapping[str, int] = field(default_factory=dict)
    turns: int | None = None
    duration_ms: int | None = None
    summary: str = ""
    disputed: int = 0
    session: str = ""
    session_totals: frozenset[str] = frozenset()


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


@dataclass(frozen=True)
class ImageOption:
    """An option an agent adds to ``git iterare image build``: it sets one of the agent's
    configuration keys for that build (``--claude-version V`` sets
    ``docker.claude_version``).

    Attributes:
        flag: the long option, ``--`` and lower-case words joined by ``-``
            (``--claude-version``).
        key: the configuration key it sets, one of the agent's keys (``section.name``).
        help: what the value is, without a full stop (``npm version of Claude Code``);
            the command's help adds the key as a configuration file spells it
            (``([docker] claude_version).``).
        metavar: the value's name in the help (``V``).
    """

    flag: str
    key: str
    help: str
    metavar: str = "V"
