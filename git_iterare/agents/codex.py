"""OpenAI Codex CLI (``@openai/codex``), run headless with JSON events.

Command line (Codex CLI 0.171): ``codex exec --json --color never --skip-git-repo-check
--dangerously-bypass-approvals-and-sandbox -c <provider> ... -`` with the prompt on stdin
(``-``). The sandbox is git-iterare's: Codex's own (Landlock/seccomp, or bubblewrap) needs
privileges the agent's container does not have, and its approval prompts would wait for
nobody, so both are bypassed.

The model provider is always a custom one (``model_provider = "iterare"``) with
``base_url`` the gateway (``[codex] base_url``, else the host's OPENAI_BASE_URL, else
https://api.openai.com/v1), ``env_key = "OPENAI_API_KEY"``, ``wire_api = "responses"`` and
``supports_websockets = false``. Observed with 0.171.0 against tests/fakeapi: Codex's
built-in ``openai`` provider ignores OPENAI_BASE_URL and never sends OPENAI_API_KEY in
``exec`` (only CODEX_API_KEY or a stored login), and tries the Responses API over a
WebSocket five times (about seven seconds) before falling back to HTTPS; the custom provider
sends the key as a bearer token and streams over HTTPS (server-sent events) at once.
``analytics.enabled = false`` and ``features.plugins = false`` stop the lookups of
ab.chatgpt.com, chatgpt.com, github.com and api.github.com: with them Codex resolves no
name but the gateway's. ``features.unbounded_connection_retries = false`` ends a run whose
gateway cannot be reached (``turn.failed`` after five tries, about half a minute) instead of
waiting for the network until the run's timeout.

Output (``--json``): one JSON object a line: ``thread.started`` (``thread_id``),
``turn.started``, ``item.started`` / ``item.updated`` / ``item.completed`` (``item``:
``agent_message`` text, ``reasoning`` text, ``command_execution`` command,
aggregated_output, exit_code; ``file_change`` changes; ``mcp_tool_call``; ``web_search``;
``todo_list``; ``error``), ``turn.completed`` (``usage``: input_tokens,
cached_input_tokens, cache_write_input_tokens, output_tokens, reasoning_output_tokens),
``turn.failed`` (``error.message``), and ``error`` (``message``: retries). Codex reports
no cost and no count of model requests: a record holds its tokens only. A resumed thread
(``exec resume``) reports the thread's tokens so far in its ``turn.completed``, the earlier
``exec`` processes' included (observed with 0.171.0 against tests/fakeapi). Source:
https://developers.openai.com/codex/noninteractive and the CLI's own output
(tests/test_fakeapi_openai.py).
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
    npm_install,
    parse_json_object,
    text_event,
)
from git_iterare.agents.credstore import KeyFileStore
from git_iterare.settings import Key, Settings

#: The Responses API without a gateway.
DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: The keys the codex agent reads.
KEYS = (
    Key("codex.version", "str", "latest",
        "npm version of the Codex CLI installed in the sandbox image.", gated=True),
    Key("codex.base_url", "str", "",
        "Route Codex through this Responses API gateway (as OPENAI_BASE_URL); its host is "
        "allowlisted.", gated=True),
    Key("codex.model", "str", "", "Model Codex uses (default: its own choice)."),
)

#: The OpenAI API key: kept in ``openai-api-key``, handed over as OPENAI_API_KEY.
STORE = KeyFileStore("OpenAI", "OPENAI_API_KEY", "openai-api-key")

#: The repository's own Codex layer: MCP servers, hooks (``[hooks]`` or ``hooks.json``),
#: ``notify`` and profiles that start programs. Codex 0.169 and later read it only in a
#: project trusted in ``$CODEX_HOME/config.toml``, which git-iterare never writes (older
#: versions trusted the folder of a ``--dangerously-bypass-approvals-and-sandbox`` run
#: themselves), and each hook needs its own trust besides; the files count whole anyway, so
#: that no version runs them unapproved. Source: https://developers.openai.com/codex/hooks
#: and https://developers.openai.com/codex/mcp.
SETTINGS_FILES = (".codex/config.toml", ".codex/hooks.json")

#: Our model provider's name in Codex's configuration.
PROVIDER = "iterare"


def base_url(config: Settings, env: Mapping[str, str] | None = None) -> str:
    """The Responses API root: ``[codex] base_url``, else OPENAI_BASE_URL, else
    :data:`DEFAULT_BASE_URL`.

    Raises:
        UserError: the value is not an http(s) URL with a host, or holds quotes,
            backslashes, spaces or control characters.
    """
    url = gateway_url(config, "codex.base_url", "OPENAI_BASE_URL", env, plain=True,
                      hint="e.g. https://gateway.example.com/v1")
    return url or DEFAULT_BASE_URL


def config_args(config: Settings) -> list[str]:
    """The ``-c`` overrides every Codex command gets (see the module docstring)."""
    provider = ("{name = \"OpenAI\", base_url = " + json.dumps(base_url(config))
                + ", env_key = \"OPENAI_API_KEY\", wire_api = \"responses\", "
                "supports_websockets = false}")
    argv = ["-c", f"model_provider={json.dumps(PROVIDER)}",
            "-c", f"model_providers.{PROVIDER}={provider}",
            "-c", "analytics.enabled=false", "-c", "features.plugins=false",
            "-c", "features.unbounded_connection_retries=false",
            "-c", "check_for_update_on_startup=false"]
    if config["codex.model"]:
        argv += ["--model", str(config["codex.model"])]
    return argv


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _item_parts(phase: str, item: Mapping[str, object]) -> tuple[str, tuple[Part, ...]]:
    """The event kind and parts of one ``item.*`` event (``phase``: started, updated or
    completed); ``("other", ())`` for what shows only at the highest verbosity."""
    kind = item.get("type")
    done = phase == "completed"
    if kind == "agent_message" and done:
        return "assistant", (Part("text", _str(item.get("text"))),)
    if kind == "reasoning" and done:
        return "assistant", (Part("thinking", _str(item.get("text"))),)
    if kind == "command_execution":
        if phase == "started":
            command = _str(item.get("command"))
            return "assistant", (Part("tool_use", command, name="shell",
                                      detail=json.dumps({"command": command})),)
        if done:
            code = item.get("exit_code")
            return "user", (Part("tool_result", _str(item.get("aggregated_output")),
                                 is_error=code not in (0, None)
                                 or item.get("status") == "failed"),)
    if kind == "file_change" and done:
        found = item.get("changes")
        changes: list[Any] = found if isinstance(found, list) else []
        text = ", ".join(f"{_str(c.get('kind'))} {_str(c.get('path'))}".strip()
                         for c in changes if isinstance(c, dict))
        parts = [Part("tool_use", text, name="apply_patch", detail=json.dumps(changes))]
        if item.get("status") == "failed":
            parts.append(Part("tool_result", "patch failed", is_error=True))
        return "assistant", tuple(parts)
    if kind == "mcp_tool_call":
        name = f"{_str(item.get('server'))}.{_str(item.get('tool'))}"
        if phase == "started":
            arguments = item.get("arguments")
            return "assistant", (Part("tool_use", json.dumps(arguments), name=name,
                                      detail=json.dumps(arguments)),)
        if done:
            failed = item.get("status") == "failed" or bool(item.get("error"))
            return "user", (Part("tool_result", json.dumps(item.get("result")
                                                           or item.get("error")),
                                 is_error=failed),)
    if kind == "web_search" and done:
        query = _str(item.get("query"))
        return "assistant", (Part("tool_use", query, name="web_search",
                                  detail=json.dumps({"query": query})),)
    if kind == "todo_list":
        listed = item.get("items")
        todos: list[Any] = listed if isinstance(listed, list) else []
        text = "\n".join(f"[{'x' if t.get('completed') else ' '}] {_str(t.get('text'))}"
                         for t in todos if isinstance(t, dict))
        return "assistant", (Part("thinking", text),)
    if kind == "error":
        return "system", (Part("text", _str(item.get("message"))),)
    return "other", ()


class Codex(Agent):
    """The OpenAI Codex CLI."""

    name = "codex"
    config_keys = KEYS
    credential_store = STORE

    def install(self, config: Settings) -> Install:
        return npm_install("@openai/codex", config["codex.version"] or "latest", "codex")

    def required_domains(self, config: Settings) -> list[str]:
        return gateway_domains(config, base_url(config), "codex.base_url", "OPENAI_BASE_URL")

    def command(self, *, prompt_file: str, config: Settings) -> list[str]:
        argv = ["codex", "exec", "--json", "--color", "never", "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox", *config_args(config), "-"]
        # The prompt goes in on stdin: no argv size limit, and it never shows in `ps`.
        return ["sh", "-c", 'f=$1; shift; exec "$@" < "$f"', "sh", prompt_file, *argv]

    continues_session = True

    def round_command(self, *, prompt_file: str, round_file: str, config: Settings
                      ) -> list[str]:
        """The round's prompt in the last session (``codex exec resume --last -``)."""
        argv = ["codex", "exec", "--json", "--color", "never", "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox", *config_args(config),
                "resume", "--last", "-"]
        return ["sh", "-c", 'f=$1; shift; exec "$@" < "$f"', "sh", round_file, *argv]

    def interactive_command(self, config: Settings) -> list[str] | None:
        return ["codex", "--dangerously-bypass-approvals-and-sandbox", *config_args(config)]

    settings_files = SETTINGS_FILES

    def repository_settings(self, files: Mapping[str, bytes]) -> dict[str, object]:
        """Each of :data:`SETTINGS_FILES` the tree holds, whole (as text)."""
        return {path: data.decode("utf-8", "surrogateescape") for path, data in files.items()}

    def parse_line(self, line: str) -> Event:
        line = line.rstrip("\r\n")
        data = parse_json_object(line)
        if data is None:
            return text_event(line)
        kind = str(data.get("type", ""))
        item = data.get("item")
        if kind.startswith("item.") and isinstance(item, dict):
            event_kind, parts = _item_parts(kind[len("item."):], item)
            return Event(kind=event_kind, parts=parts, line=line, data=data)
        if kind == "thread.started":
            return Event(kind="system", parts=(Part("text", f"thread {data.get('thread_id')}"),),
                         line=line, data=data)
        if kind in ("turn.completed", "turn.failed"):
            error = data.get("error")
            message = _str(error.get("message")) if isinstance(error, dict) else ""
            parts = (Part("text", message),) if message else ()
            return Event(kind="result", parts=parts, line=line, data=data)
        if kind == "error":
            return Event(kind="system", parts=(Part("text", _str(data.get("message"))),),
                         line=line, data=data)
        return Event(kind="other", line=line, data=data)

    def render(self, event: Event, verbosity: int) -> str | None:
        """As :meth:`Agent.render`; a failed turn's error shows at every verbosity."""
        if event.kind == "result" and event.data and event.data.get("type") == "turn.failed":
            from git_iterare.ui import paint, sanitize

            text = "; ".join(p.text for p in event.parts) or "the turn failed"
            return paint(sanitize(f"error: {text}"), "red")
        return super().render(event, verbosity)

    def summarize(self, events: Iterable[Event], *, exit_code: int | None = None) -> RunResult:
        tokens: dict[str, int] = {}
        said = ""
        failure = ""
        thread = ""
        completed = False
        for event in events:
            data = event.data or {}
            if data.get("type") == "thread.started" and not thread:
                thread = _str(data.get("thread_id"))
            elif event.kind == "assistant":
                for part in event.parts:
                    if part.kind == "text" and part.text.strip():
                        said = part.text.strip()
            elif data.get("type") == "turn.failed":
                failure = "; ".join(p.text for p in event.parts) or "the turn failed"
            elif data.get("type") == "turn.completed":
                completed = True
                reported = data.get("usage")
                usage: Mapping[str, Any] = reported if isinstance(reported, dict) else {}
                for ours, theirs in (("input", "input_tokens"), ("output", "output_tokens"),
                                     ("cache_read", "cached_input_tokens"),
                                     ("cache_creation", "cache_write_input_tokens"),
                                     ("reasoning", "reasoning_output_tokens")):
                    count = _int(usage.get(theirs))
                    if count is not None:
                        tokens[ours] = tokens.get(ours, 0) + count
        failed = bool(failure) or not completed or exit_code not in (0, None)
        return RunResult(is_error=failed, tokens=tokens, summary=failure or said,
                         session=thread, session_totals=frozenset({"tokens"}))


AGENT = Codex()
