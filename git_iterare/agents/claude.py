"""Claude Code (``@anthropic-ai/claude-code``), run headless with stream-json output.

Command line (Claude Code 2.1): ``claude --print --output-format stream-json --verbose
--dangerously-skip-permissions [--model M]`` with the prompt on stdin (``--print`` reads
it there when no prompt argument is given; stdin has no argv length limit). The CLI
refuses ``--dangerously-skip-permissions`` as root, so the sandbox runs it as a user.

Output: one JSON object a line (``--output-format stream-json``; ``--verbose`` is
required with it): ``system`` (subtype ``init``: model, cwd, tools; subtype ``api_retry``
before each retry of a failed API request: attempt, max_retries, retry_delay_ms,
error_status (the HTTP status, null when no answer came) and error, such as
``rate_limit``, ``authentication_failed`` or ``unknown`` for a refused connection, as
Claude Code 2.1.197 writes them against tests/fakeapi), ``assistant``
(``message.content`` blocks: text, thinking, tool_use), ``user`` (tool_result blocks)
and a closing ``result`` (``is_error``, ``total_cost_usd``, ``usage``, ``num_turns``,
``duration_ms``, ``result``). Source: https://docs.claude.com/en/docs/claude-code/sdk
and the CLI's own output.

Cost across rounds: from Claude Code 2.1.277 on, a process that continues a session
(``--continue``) starts from the totals the session saved at its last exit, so its
``total_cost_usd`` is the whole session's, while its ``usage`` and ``num_turns`` are still
its own and ``--max-budget-usd`` still holds its own spend; 2.1.276 and earlier start from
zero (observed against tests/fakeapi with 2.1.197, 2.1.276, 2.1.277 and 2.1.332). The
version is the ``claude_code_version`` of the ``system`` ``init`` event.

Network: the Messages API at api.anthropic.com, and platform.claude.com where OAuth
tokens are refreshed. Telemetry, error reporting and auto-update are turned off with the
variables in :data:`QUIET_ENV`. A gateway (``[claude] base_url`` or ANTHROPIC_BASE_URL)
replaces the Anthropic hosts. Observed with Claude Code 2.1.197 behind a gateway
(tests/test_fakeapi.py): with :data:`QUIET_ENV` it sends ``HEAD /`` then the
``POST /v1/messages?beta=true`` turns to the gateway and resolves no other name; without
it, it also looks up api.anthropic.com and sends one extra tool-less request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from git_iterare.agents.base import (
    Agent,
    Credentials,
    Event,
    ImageOption,
    Install,
    Part,
    RunResult,
    gateway_domains,
    gateway_url,
    json_settings,
    npm_install,
    parse_json_object,
    text_event,
)
from git_iterare.agents.claude_credentials import STORE
from git_iterare.errors import UserError
from git_iterare.settings import Key, Settings

#: The keys the claude agent reads. ``docker.claude_version`` keeps its name from before
#: agents declared their keys; the others are iterare's (``credentials_path``) or ours.
KEYS = (
    Key("docker.claude_version", "str", "latest",
        "npm version of Claude Code installed in the sandbox image.", gated=True),
    Key("claude.credentials_path", "str", "",
        "Directory holding Claude credentials (default: the global config directory).",
        gated=True),
    Key("claude.base_url", "str", "",
        "Route Claude through this gateway (ANTHROPIC_BASE_URL); its host is allowlisted.",
        gated=True),
    Key("claude.model", "str", "", "Model Claude Code uses (default: its own choice)."),
)

#: Hosts Claude Code needs without a gateway: the API, and the OAuth token endpoint.
ANTHROPIC_DOMAINS = ["api.anthropic.com", "platform.claude.com"]

#: Turn off everything that is not the model API (telemetry, error reports, updates).
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
}

#: Host variables that carry a credential, in the order Claude Code prefers them.
CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")

#: The repository's own Claude Code settings (project, local, MCP servers): Claude Code
#: reads them from the worktree at start. Source:
#: https://docs.claude.com/en/docs/claude-code/settings and .../claude-code/mcp.
SETTINGS_FILES = (".claude/settings.json", ".claude/settings.local.json", ".mcp.json")

#: Top-level keys of a settings file that start no program. Every other key counts: hooks,
#: statusLine, apiKeyHelper and the other helpers (programs Claude Code runs), env (what its
#: processes start with, NODE_OPTIONS for one), MCP server and plugin switches, and keys
#: added by later versions.
INERT_SETTINGS = frozenset({
    "$schema", "permissions", "model", "includeCoAuthoredBy", "cleanupPeriodDays",
    "outputStyle", "alwaysThinkingEnabled", "respectGitignore", "spinnerTipsEnabled",
    "disableAllHooks", "language",
})

#: The first Claude Code whose ``total_cost_usd`` counts a continued session's earlier
#: processes too (see the module docstring).
SESSION_COST_SINCE = (2, 1, 277)

#: Tool input field that says best what a call does, by tool name.
_TOOL_SUMMARY_FIELD = {
    "Bash": "command",
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
    "Glob": "pattern",
    "Grep": "pattern",
    "WebFetch": "url",
    "WebSearch": "query",
    "Task": "description",
}


def base_url(config: Settings, env: Mapping[str, str] | None = None) -> str:
    """The gateway URL: ``[claude] base_url``, else ANTHROPIC_BASE_URL, else "".

    Raises:
        UserError: the value is not an http(s) URL with a host.
    """
    return gateway_url(config, "claude.base_url", "ANTHROPIC_BASE_URL", env)


def tool_summary(name: str, tool_input: object) -> str:
    """One line saying what a tool call does (its command, file or pattern)."""
    if isinstance(tool_input, dict):
        value = tool_input.get(_TOOL_SUMMARY_FIELD.get(name, ""))
        if isinstance(value, str):
            return value
    return json.dumps(tool_input, ensure_ascii=False, separators=(",", ":"))


def _tool_result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(item.get("text", "")) if isinstance(item, dict) else str(item)
            for item in content
        )
    return "" if content is None else json.dumps(content)


def _parts(content: object) -> tuple[Part, ...]:
    if isinstance(content, str):
        return (Part("text", content),)
    parts = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(Part("text", str(block.get("text", ""))))
        elif kind == "thinking":
            parts.append(Part("thinking", str(block.get("thinking", ""))))
        elif kind == "tool_use":
            name = str(block.get("name", ""))
            tool_input = block.get("input", {})
            parts.append(Part("tool_use", tool_summary(name, tool_input), name=name,
                              detail=json.dumps(tool_input, ensure_ascii=False)))
        elif kind == "tool_result":
            parts.append(Part("tool_result", _tool_result_text(block.get("content")),
                              is_error=bool(block.get("is_error"))))
    return tuple(parts)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _version(text: object) -> tuple[int, ...] | None:
    """``2.1.332`` as ``(2, 1, 332)``; None when ``text`` is no such version."""
    import re

    found = re.match(r"(\d+)\.(\d+)\.(\d+)", text) if isinstance(text, str) else None
    return tuple(int(n) for n in found.groups()) if found else None


def session_totals(events: Iterable[Event]) -> frozenset[str]:
    """``{"cost_usd"}`` when the Claude Code of the ``init`` event among ``events`` is
    :data:`SESSION_COST_SINCE` or later (its ``total_cost_usd`` is the session's running
    total); else empty (the process's own, or the version is unknown)."""
    for event in events:
        data = event.data
        if event.kind == "system" and data is not None and data.get("subtype") == "init":
            version = _version(data.get("claude_code_version"))
            if version is not None and version >= SESSION_COST_SINCE:
                return frozenset({"cost_usd"})
            return frozenset()
    return frozenset()


def retry_line(data: Mapping[str, object]) -> str:
    """The line an ``api_retry`` event shows: ``waiting for the API: 429 rate_limit, retry 3
    of 10 in 8 s`` (``cannot connect`` when no answer came). Claude Code names no host in
    it: the API is api.anthropic.com, or the gateway of ``claude.base_url``."""
    status, error = data.get("error_status"), data.get("error")
    why = " ".join(str(x) for x in (status, error) if x not in (None, "", "unknown"))
    if status is None:
        why = "cannot connect" + (f" ({why})" if why else "")
    attempt, most = _int(data.get("attempt")), _int(data.get("max_retries"))
    delay = data.get("retry_delay_ms")
    retry = "retry" + (f" {attempt}" if attempt is not None else "") + (
        f" of {most}" if most is not None else "")
    if isinstance(delay, (int, float)) and not isinstance(delay, bool) and delay >= 0:
        retry += f" in {max(1, round(delay / 1000))} s"
    return f"waiting for the API: {why}, {retry}"


class Claude(Agent):
    """The Claude Code CLI."""

    name = "claude"
    config_keys = KEYS
    credential_store = STORE
    image_options = (ImageOption("--claude-version", "docker.claude_version",
                                 "npm version of Claude Code"),)

    def install(self, config: Settings) -> Install:
        return npm_install("@anthropic-ai/claude-code",
                           config["docker.claude_version"] or "latest", "claude")

    def required_domains(self, config: Settings) -> list[str]:
        url = base_url(config)
        if url:
            return gateway_domains(config, url, "claude.base_url", "ANTHROPIC_BASE_URL")
        return list(ANTHROPIC_DOMAINS)

    def command(self, *, prompt_file: str, config: Settings) -> list[str]:
        argv = ["claude", "--print", "--output-format", "stream-json", "--verbose",
                "--dangerously-skip-permissions"]
        if config["claude.model"]:
            argv += ["--model", config["claude.model"]]
        # The prompt goes in on stdin: no argv size limit, and it never shows in `ps`.
        return ["sh", "-c", 'f=$1; shift; exec "$@" < "$f"', "sh", prompt_file, *argv]

    continues_session = True

    def round_command(self, *, prompt_file: str, round_file: str, config: Settings
                      ) -> list[str]:
        """The round's prompt in the session the last round left (``--continue``: the
        most recent conversation in the worktree, kept in the agent's home)."""
        return [*self.command(prompt_file=round_file, config=config), "--continue"]

    own_limits = frozenset({"max_budget_usd", "max_turns"})
    reports_cost = True

    def limit_args(self, limits: Mapping[str, object]) -> list[str]:
        """Claude Code's ``--max-budget-usd`` and ``--max-turns`` (``--print`` only)."""
        argv = []
        budget, turns = limits.get("max_budget_usd"), limits.get("max_turns")
        if isinstance(budget, (int, float)) and budget:
            argv += ["--max-budget-usd", f"{float(budget):g}"]
        if isinstance(turns, (int, float)) and turns:
            argv += ["--max-turns", str(int(turns))]
        return argv

    def interactive_command(self, config: Settings) -> list[str] | None:
        argv = ["claude", "--dangerously-skip-permissions"]
        if config["claude.model"]:
            argv += ["--model", config["claude.model"]]
        return argv

    def environment(self, config: Settings) -> dict[str, str]:
        env = dict(QUIET_ENV)
        url = base_url(config)
        if url:
            env["ANTHROPIC_BASE_URL"] = url
        return env

    def credentials(self, config: Settings, env: Mapping[str, str]) -> Credentials:
        from git_iterare import proc

        for var in CREDENTIAL_VARS:
            if env.get(var):
                proc.register_secret(env[var])
                return Credentials(env={var: env[var]})
        found = STORE.load(config)
        if found is None:
            raise UserError("no Claude credentials: run `git iterare credentials`")
        return found

    settings_files = SETTINGS_FILES

    def repository_settings(self, files: Mapping[str, bytes]) -> dict[str, object]:
        """Every key of ``.claude/settings.json`` and ``.claude/settings.local.json`` but
        :data:`INERT_SETTINGS`, and ``.mcp.json`` whole (each server in it is a program,
        or a connection, Claude Code starts)."""
        items: dict[str, object] = {}
        for path, data in files.items():
            if path == ".mcp.json":
                items.update(json_settings(path, data, frozenset()))
            else:
                items.update(json_settings(path, data, INERT_SETTINGS))
        return items

    def parse_line(self, line: str) -> Event:
        line = line.rstrip("\r\n")
        data = parse_json_object(line)
        if data is None:
            return text_event(line)
        kind = data.get("type")
        if kind in ("assistant", "user"):
            message = data.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            return Event(kind=str(kind), parts=_parts(content), line=line, data=data)
        if kind == "system":
            facts = [f"{k} {data[k]}" for k in ("model", "cwd") if isinstance(data.get(k), str)]
            tools = data.get("tools")
            if isinstance(tools, list):
                facts.append(f"{len(tools)} tools")
            parts = (Part("text", ", ".join(facts)),) if facts else ()
            return Event(kind="system", parts=parts, line=line, data=data)
        if kind == "result":
            text = data.get("result")
            parts = (Part("text", text),) if isinstance(text, str) and text else ()
            return Event(kind="result", parts=parts, line=line, data=data)
        return Event(kind="other", line=line, data=data)

    def render(self, event: Event, verbosity: int) -> str | None:
        """As :meth:`Agent.render`; a retry of an API request shows at every verbosity
        (:func:`retry_line`): a run that cannot reach its API is waiting, not idle."""
        if event.kind == "system" and event.data and event.data.get("subtype") == "api_retry":
            from git_iterare.ui import paint, sanitize_line

            return paint(sanitize_line(retry_line(event.data)), "yellow")
        return super().render(event, verbosity)

    def summarize(self, events: Iterable[Event], *, exit_code: int | None = None) -> RunResult:
        result: Mapping[str, Any] | None = None
        last_text = ""
        events = list(events)
        for event in events:
            if event.kind == "result" and event.data is not None:
                result = event.data
            for part in event.parts:
                said = part.kind == "text" and event.kind in ("assistant", "text")
                if said and part.text.strip():
                    last_text = part.text.strip()
        failed_exit = exit_code not in (0, None)
        if result is None:
            return RunResult(is_error=True, summary=last_text)
        usage = result.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        tokens = {
            ours: count
            for ours, theirs in (("input", "input_tokens"), ("output", "output_tokens"),
                                 ("cache_read", "cache_read_input_tokens"),
                                 ("cache_creation", "cache_creation_input_tokens"))
            if (count := _int(usage.get(theirs))) is not None
        }
        cost = result.get("total_cost_usd")
        session = result.get("session_id")
        summary = result.get("result")
        if not isinstance(summary, str):
            errors = result.get("errors")
            summary = "; ".join(map(str, errors)) if isinstance(errors, list) else last_text
        return RunResult(
            is_error=bool(result.get("is_error")) or result.get("subtype") != "success"
            or failed_exit,
            cost_usd=float(cost) if isinstance(cost, (int, float)) else None,
            tokens=tokens,
            turns=_int(result.get("num_turns")),
            duration_ms=_int(result.get("duration_ms")),
            summary=summary.strip(),
            session=session if isinstance(session, str) else "",
            session_totals=session_totals(events),
        )


AGENT = Claude()
