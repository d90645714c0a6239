"""Gemini CLI (``@google/gemini-cli``), run headless with stream-json output.

Command line (Gemini CLI 0.61): ``gemini --output-format stream-json --approval-mode yolo
--skip-trust [--model M]`` with the prompt on stdin (with stdin not a terminal and no
``--prompt``, the CLI runs non-interactively on what it reads there). ``yolo`` approves
every tool call (the sandbox is the boundary); ``--skip-trust`` trusts the worktree for
the session, without which the CLI drops yolo to ``default`` (asking, so no tool runs).

Configuration comes from a system settings file the install step writes
(:data:`SETTINGS_PATH`, named by ``GEMINI_CLI_SYSTEM_SETTINGS_PATH``; system settings
override a repository's ``.gemini/settings.json``, and the CLI reads the file only when it
and its folders are root's and not group- or world-writable, so the agent cannot change
it). :data:`SETTINGS` selects API-key authentication (``GEMINI_API_KEY``) and turns off
usage statistics, telemetry, update checks, the IDE link, terminal warnings and the CLI's
own tool sandbox (``GEMINI_SANDBOX=false`` too: the CLI must not try Docker or seatbelt
inside ours).

Base URL: ``[gemini] base_url`` or the host's GOOGLE_GEMINI_BASE_URL, passed on as
GOOGLE_GEMINI_BASE_URL. Gemini CLI 0.61 reads it for API-key authentication
(``createContentGenerator`` in its bundle); with that variable set and no auth type
selected it picks a ``gateway`` auth type that its non-interactive start then refuses
(``Invalid auth method selected.``), which is why :data:`SETTINGS` selects
``gemini-api-key``. Requests go to ``<base>/v1beta/models/<model>:streamGenerateContent
?alt=sse`` (the agent's turns) and ``:generateContent`` (model routing), with the key in
``x-goog-api-key``. Observed (tests/test_fakeapi_gemini.py): with :data:`SETTINGS` and a
base URL the CLI resolves no name at all; without them it also looks up
play.googleapis.com (usage statistics).

Output: one JSON object a line: ``init`` (session_id, model), ``message`` (role ``user``
for the prompt, ``assistant`` for the model's text, in streamed pieces marked
``delta``), ``tool_use`` (tool_name, tool_id, parameters), ``tool_result`` (tool_id,
status ``success``/``error``, output, error.message), ``error`` (severity, message: a
warning or a non-fatal error) and a closing ``result`` (status, error, stats: input and
output tokens, cached tokens, duration_ms, tool_calls, per-model figures). The CLI
reports no cost and no turn count (turns are counted from the stream, see
:meth:`Gemini.summarize`). Source: the CLI's ``JsonStreamEventType`` and
``StreamJsonFormatter`` (packages/core/src/output) and its output against
tests/fakeapi/gemini.py.

Image: Gemini CLI needs Node.js 20 or newer; the sandbox image's Node (Debian bookworm's
18, which Claude Code runs on) stays as it is. The install step (:func:`install_script`)
puts Node from the npm registry's ``node`` package and the CLI into :data:`INSTALL_DIR`
with a ``gemini`` wrapper, the one executable linked onto PATH.

Credentials: GEMINI_API_KEY from the host, else the key ``git iterare credentials
--agent gemini`` stored (:data:`STORE`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from git_iterare.agents.base import (
    Agent,
    Event,
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
from git_iterare.agents.credstore import KeyFileStore
from git_iterare.settings import Key, Settings

#: The Gemini API's host, reached when no base URL is set.
GEMINI_DOMAINS = ["generativelanguage.googleapis.com"]

#: Where the install step puts Node, the CLI, its wrapper and its settings.
INSTALL_DIR = "/opt/gemini"
#: The system settings file (root's, read-only to the agent).
SETTINGS_PATH = f"{INSTALL_DIR}/settings.json"
#: Major version of Node.js installed for the CLI (npm package ``node``).
NODE_VERSION = "22"

#: Gemini CLI settings for an unattended run in git-iterare's sandbox.
SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "tools": {"sandbox": False},
    "ide": {"enabled": False},
    "ui": {"showCompatibilityWarnings": False},  # no terminal warnings on a pipe
}

#: Starts of lines Gemini CLI 0.61 writes to stderr that say nothing about the task (on
#: every run; its start-up profiler's warning on some, depending on timing); the log shows
#: them at verbosity 2 only.
NOTICES = (
    "YOLO mode is enabled.",
    "Ripgrep is not available.",
    "[STARTUP] ",
)

#: The repository's own Gemini CLI settings: read from the worktree, which ``--skip-trust``
#: trusts (system settings override them key by key; servers and hooks merge in). Source:
#: https://geminicli.com/docs/get-started/configuration/.
SETTINGS_FILES = (".gemini/settings.json",)

#: Top-level keys of the workspace settings that start no program; every other counts:
#: ``mcpServers``, ``hooks``, ``tools`` (its discovery and call commands), ``mcp``,
#: ``extensions``, ``security``, ``advanced`` and keys added by later versions.
INERT_SETTINGS = frozenset({"$schema", "ui", "model", "context", "output", "privacy"})

#: Environment for every run: our settings, and never the CLI's own sandbox.
QUIET_ENV = {
    "GEMINI_CLI_SYSTEM_SETTINGS_PATH": SETTINGS_PATH,
    "GEMINI_SANDBOX": "false",
}

#: The keys the gemini agent reads.
KEYS = (
    Key("gemini.version", "str", "latest",
        "npm version of Gemini CLI installed in the sandbox image.", gated=True),
    Key("gemini.base_url", "str", "",
        "Route Gemini CLI through this URL (as GOOGLE_GEMINI_BASE_URL); its host is "
        "allowlisted.", gated=True),
    Key("gemini.model", "str", "", "Model Gemini CLI uses (default: its own choice)."),
)

#: The Gemini API key: kept in ``gemini-api-key``, handed over as GEMINI_API_KEY.
STORE = KeyFileStore("Gemini", "GEMINI_API_KEY", "gemini-api-key")

#: Tool input field that says best what a call does, by tool name.
_TOOL_SUMMARY_FIELD = {
    "run_shell_command": "command",
    "read_file": "file_path",
    "write_file": "file_path",
    "replace": "file_path",
    "list_directory": "dir_path",
    "glob": "pattern",
    "grep_search": "pattern",
    "search_file_content": "pattern",
    "web_fetch": "prompt",
    "google_web_search": "query",
}


def base_url(config: Settings, env: Mapping[str, str] | None = None) -> str:
    """The base URL: ``[gemini] base_url``, else GOOGLE_GEMINI_BASE_URL, else "".

    Raises:
        UserError: the value is not an http(s) URL with a host.
    """
    return gateway_url(config, "gemini.base_url", "GOOGLE_GEMINI_BASE_URL", env)


def install_script(version: str) -> str:
    """The install step (see :class:`~git_iterare.agents.base.Install`): Node.js
    :data:`NODE_VERSION` from the npm registry's ``node`` package into ``$PREFIX/node``,
    ``@google/gemini-cli@<version>`` into ``$PREFIX/cli`` (without install scripts: the
    CLI is a prebuilt bundle, its native extras are optional), a ``$PREFIX/bin/gemini``
    wrapper that runs the CLI on that Node, and :data:`SETTINGS` in
    ``$PREFIX/settings.json`` (``PREFIX`` is :data:`INSTALL_DIR`). Only ``bin/gemini``
    is linked onto PATH: the image's own ``node`` stays first.
    """
    # Single-quoted for the shell below (the settings hold no quote; a test checks).
    settings = json.dumps(SETTINGS, separators=(",", ":"), sort_keys=True)
    npm = "npm install --global --no-audit --no-fund --no-update-notifier"
    bundle = '"$PREFIX/cli/lib/node_modules/@google/gemini-cli/bundle/gemini.js"'
    return f"""\
{npm} --prefix "$PREFIX/node" "node@{NODE_VERSION}"
"$PREFIX/node/bin/node" --version
PATH="$PREFIX/node/bin:$PATH" {npm} --ignore-scripts --prefix "$PREFIX/cli" \\
    "@google/gemini-cli@{version}"
mkdir -p "$PREFIX/bin"
printf '#!/bin/sh\\nexec %s %s "$@"\\n' "$PREFIX/node/bin/node" {bundle} > "$PREFIX/bin/gemini"
chmod 0755 "$PREFIX/bin/gemini"
printf '%s\\n' '{settings}' > "$PREFIX/settings.json"
chmod 0644 "$PREFIX/settings.json"
"$PREFIX/bin/gemini" --version > "$PREFIX/VERSION"
"""


def tool_summary(name: str, parameters: object) -> str:
    """One line saying what a tool call does (its command, file or pattern)."""
    if isinstance(parameters, dict):
        value = parameters.get(_TOOL_SUMMARY_FIELD.get(name, ""))
        if isinstance(value, str):
            return value
    return json.dumps(parameters, ensure_ascii=False, separators=(",", ":"))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


class Gemini(Agent):
    """The Gemini CLI."""

    name = "gemini"
    config_keys = KEYS
    credential_store = STORE

    def install(self, config: Settings) -> Install:
        version = str(config["gemini.version"] or "latest")
        npm_install("@google/gemini-cli", version, "gemini")  # refuses a bad version
        return Install(script=install_script(version), version=version)

    def required_domains(self, config: Settings) -> list[str]:
        url = base_url(config)
        if url:
            return gateway_domains(config, url, "gemini.base_url", "GOOGLE_GEMINI_BASE_URL")
        return list(GEMINI_DOMAINS)

    def _argv(self, config: Settings) -> list[str]:
        argv = ["gemini", "--approval-mode", "yolo", "--skip-trust"]
        if config["gemini.model"]:
            argv += ["--model", config["gemini.model"]]
        return argv

    def command(self, *, prompt_file: str, config: Settings) -> list[str]:
        argv = [*self._argv(config), "--output-format", "stream-json"]
        # The prompt goes in on stdin: no argv size limit, and it never shows in `ps`.
        return ["sh", "-c", 'f=$1; shift; exec "$@" < "$f"', "sh", prompt_file, *argv]

    def interactive_command(self, config: Settings) -> list[str] | None:
        return self._argv(config)

    def environment(self, config: Settings) -> dict[str, str]:
        env = dict(QUIET_ENV)
        url = base_url(config)
        if url:
            env["GOOGLE_GEMINI_BASE_URL"] = url
        return env

    settings_files = SETTINGS_FILES

    def repository_settings(self, files: Mapping[str, bytes]) -> dict[str, object]:
        """Every key of ``.gemini/settings.json`` but :data:`INERT_SETTINGS`."""
        items: dict[str, object] = {}
        for path, data in files.items():
            items.update(json_settings(path, data, INERT_SETTINGS))
        return items

    def parse_line(self, line: str) -> Event:
        line = line.rstrip("\r\n")
        data = parse_json_object(line)
        if data is None:
            if line.startswith(NOTICES):
                return Event(kind="system", parts=(Part("text", line),), line=line)
            return text_event(line)
        kind = data.get("type")
        if kind == "message":
            role = "assistant" if data.get("role") == "assistant" else "user"
            content = _str(data.get("content"))
            # The prompt, echoed as a user message, is shown like a system event.
            return Event(kind=role if role == "assistant" else "system",
                         parts=(Part("text", content),) if content else (),
                         line=line, data=data)
        if kind == "tool_use":
            name = _str(data.get("tool_name"))
            parameters = data.get("parameters", {})
            return Event(kind="assistant", parts=(Part(
                "tool_use", tool_summary(name, parameters), name=name,
                detail=json.dumps(parameters, ensure_ascii=False)),), line=line, data=data)
        if kind == "tool_result":
            error = data.get("error")
            message = _str(error.get("message")) if isinstance(error, dict) else ""
            output = _str(data.get("output"))
            text = "\n".join(t for t in (output, message) if t)
            return Event(kind="user", parts=(Part(
                "tool_result", text, is_error=data.get("status") != "success"),),
                line=line, data=data)
        if kind == "init":
            facts = [f"{k} {data[k]}" for k in ("model", "session_id")
                     if isinstance(data.get(k), str)]
            return Event(kind="system", parts=(Part("text", ", ".join(facts)),) if facts
                         else (), line=line, data=data)
        if kind == "error":
            message = f"{_str(data.get('severity')) or 'error'}: {_str(data.get('message'))}"
            return Event(kind="system", parts=(Part("text", message),), line=line, data=data)
        if kind == "result":
            error = data.get("error")
            message = _str(error.get("message")) if isinstance(error, dict) else ""
            return Event(kind="result", parts=(Part("text", message),) if message else (),
                         line=line, data=data)
        return Event(kind="other", line=line, data=data)

    def summarize(self, events: Iterable[Event], *, exit_code: int | None = None) -> RunResult:
        """The run's outcome from the closing ``result`` event: failed without one, when
        its status is not ``success`` or the exit status is not 0; tokens from its stats
        (``input`` without cached tokens, ``output``, ``cache_read``); turns counted as
        the model's replies in the stream (a reply ends when tool results go back); the
        summary is the model's last words (its streamed pieces joined) or the error."""
        result: Mapping[str, Any] | None = None
        said: list[str] = []
        printed = ""  # the last plain output line (the CLI's own errors are plain)
        closed = True  # the last assistant text ended (a tool call or result came since)
        turns = 0
        replying = False  # inside a model reply (its text and tool calls)
        for event in events:
            if event.kind == "result" and event.data is not None:
                result = event.data
                continue
            if event.kind == "text" and event.line.strip():
                printed = event.line.strip()
            if event.kind == "assistant" and not replying:
                turns, replying = turns + 1, True
            elif event.kind == "user":
                replying = False  # tool results go back: the next reply is a new turn
            if event.kind == "assistant" and event.data is not None \
                    and event.data.get("type") == "message":
                text = "".join(p.text for p in event.parts)
                if closed:
                    said = []
                said.append(text)
                closed = not event.data.get("delta")
            elif event.kind in ("assistant", "user"):
                closed = True
        last_text = "".join(said).strip()
        failed_exit = exit_code not in (0, None)
        if result is None:
            return RunResult(is_error=True, summary=last_text or printed)
        stats = result.get("stats")
        stats = stats if isinstance(stats, dict) else {}
        tokens: dict[str, int] = {}
        cached = _int(stats.get("cached"))
        fresh = _int(stats.get("input"))
        if fresh is None and _int(stats.get("input_tokens")) is not None:
            fresh = stats["input_tokens"] - (cached or 0)
        for ours, count in (("input", fresh), ("output", _int(stats.get("output_tokens"))),
                            ("cache_read", cached)):
            if count is not None:
                tokens[ours] = count
        error = result.get("error")
        message = _str(error.get("message")) if isinstance(error, dict) else ""
        return RunResult(
            is_error=result.get("status") != "success" or failed_exit,
            tokens=tokens,
            turns=turns or None,
            duration_ms=_int(stats.get("duration_ms")),
            summary=(message or last_text).strip(),
        )


    def render(self, event: Event, verbosity: int) -> str | None:
        """As :meth:`Agent.render`; the CLI's routine notices (:data:`NOTICES`) show at
        verbosity 2 only, dimmed."""
        if event.kind == "system" and event.data is None:
            from git_iterare.ui import paint, sanitize

            return paint(sanitize(event.line), "dim") if verbosity >= 2 else None
        return super().render(event, verbosity)


AGENT = Gemini()
