"""How the contract test drives each registered agent's real program against a fake of
its API: one :class:`Harness` per agent in :data:`HARNESSES` (a new agent adds its own).

Every harness plays the same task: the model (or the shell script) says a first line,
runs one shell command that writes ``notes.txt`` and commits it as ``Add notes``, then
says :data:`CLOSING`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git_iterare.agents.base import RunResult

#: The command every task runs.
COMMAND = ("echo 'made by the agent' > notes.txt && git add notes.txt && "
           "git commit -q -m 'Add notes' && git log --oneline -1")
OPENING = "I will add the notes file."
CLOSING = "Created notes.txt and committed it."


@dataclass(frozen=True)
class Harness:
    """One agent's side of the contract test.

    Attributes:
        install: the directory holding the agent's executable (installed when missing),
            or None when it needs none.
        fake: ``fake(log_path)`` -> a context manager yielding a server with ``url`` (and
            appending its requests to ``log_path`` as JSON lines), or None for no API.
        overrides: ``overrides(url)`` -> configuration that points the agent at the fake.
        key_env: the variable the agent's credentials come from ("" for none).
        prompt: the prompt body.
        check: agent-specific checks of the result and the fake's request log.
        host_env: environment added on the host for what the image provides there (a
            file the install step writes), after the agent's own.
    """

    install: Callable[[], Path | None]
    fake: Callable[[Path], Any] | None
    overrides: Callable[[str], dict[str, str]]
    key_env: str
    prompt: str
    check: Callable[[RunResult, list[dict[str, Any]]], None] = field(
        default=lambda result, requests: None)
    host_env: Callable[[], dict[str, str]] = field(default=lambda: {})


def _claude_bin() -> Path:
    from tests.fakeapi.claude_cli import install_claude

    return install_claude().parent


def _codex_bin() -> Path:
    from tests.fakeapi.codex_cli import install_codex

    return install_codex().parent


def _gemini_bin() -> Path:
    from tests.fakeapi.gemini_cli import install_gemini

    return install_gemini().parent


def _gemini_env() -> dict[str, str]:
    """The agent's system settings, which the image has in /opt/gemini (root only: the CLI
    reads them only from a folder of root's)."""
    import pytest

    from tests.fakeapi.gemini_cli import system_settings

    try:
        return {"GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(system_settings())}
    except PermissionError as exc:
        pytest.skip(str(exc))


@contextmanager
def _anthropic(log: Path) -> Iterator[Any]:
    from tests.fakeapi.server import FakeAnthropic

    turns: list[list[dict[str, Any]]] = [
        [{"type": "text", "text": OPENING},
         {"type": "tool_use", "name": "Bash", "input": {"command": COMMAND}}],
        [{"type": "text", "text": CLOSING}]]
    with FakeAnthropic(turns, log) as server:
        yield server


@contextmanager
def _openai(log: Path) -> Iterator[Any]:
    from tests.fakeapi.openai_server import FakeOpenAI

    turns: list[list[dict[str, Any]]] = [
        [{"type": "message", "text": OPENING}, {"type": "shell", "command": COMMAND}],
        [{"type": "message", "text": CLOSING}]]
    with FakeOpenAI(turns, log) as server:
        yield server


@contextmanager
def _google(log: Path) -> Iterator[Any]:
    from tests.fakeapi.gemini import FakeGemini

    turns: list[list[dict[str, Any]]] = [
        [{"type": "text", "text": OPENING},
         {"type": "tool_use", "name": "run_shell_command", "input": {"command": COMMAND}}],
        [{"type": "text", "text": CLOSING}]]
    with FakeGemini(turns, log) as server:
        yield server


def _check_claude(result: RunResult, requests: list[dict[str, Any]]) -> None:
    assert result.turns == 2
    assert result.cost_usd is not None and result.cost_usd > 0
    assert result.tokens["output"] > 0
    assert [r["turn"] for r in requests if r["turn"] is not None] == [0, 1]
    assert all(r["headers"].get("x-api-key") in (None, "***") for r in requests)


def _check_codex(result: RunResult, requests: list[dict[str, Any]]) -> None:
    from tests.fakeapi.openai_server import USAGE

    # Codex reports tokens (summed over its model requests), no cost and no turns.
    assert (result.cost_usd, result.turns) == (None, None)
    assert result.tokens == {"input": 2 * USAGE["input_tokens"],
                             "cache_read": 2 * USAGE["input_tokens_details"]["cached_tokens"],
                             "output": 2 * USAGE["output_tokens"],
                             "reasoning": 2 * USAGE["output_tokens_details"]["reasoning_tokens"],
                             "cache_creation": 0}
    # Over HTTPS at once (no WebSocket tries), with the key as a bearer token.
    assert [(r["method"], r["path"], r["turn"]) for r in requests] == [
        ("POST", "/v1/responses", 0), ("POST", "/v1/responses", 1)]
    assert all(r["headers"]["authorization"] == "***" for r in requests)
    assert requests[0]["body"]["stream"] is True
    outputs = [i for i in requests[1]["body"]["input"]
               if isinstance(i, dict) and i.get("type", "").endswith("_call_output")]
    assert outputs and "Add notes" in json.dumps(outputs)


def _check_gemini(result: RunResult, requests: list[dict[str, Any]]) -> None:
    from tests.fakeapi.server import estimate_tokens

    # Gemini CLI reports tokens (over all its requests, model routing included), no cost;
    # turns are its replies.
    assert (result.cost_usd, result.turns) == (None, 2)
    assert result.tokens["input"] == sum(estimate_tokens(r["body"]["contents"])
                                         for r in requests)
    assert result.tokens["output"] > 0
    assert [r["turn"] for r in requests if r["turn"] is not None] == [0, 1]
    assert {r["path"].split(":")[-1] for r in requests} <= {
        "generateContent", "streamGenerateContent?alt=sse"}
    assert all(r["headers"]["x-goog-api-key"] == "***" for r in requests)


HARNESSES: dict[str, Harness] = {
    "claude": Harness(install=_claude_bin, fake=_anthropic,
                      overrides=lambda url: {"claude.base_url": url},
                      key_env="ANTHROPIC_API_KEY",
                      prompt="Create notes.txt and commit it.\n", check=_check_claude),
    "codex": Harness(install=_codex_bin, fake=_openai,
                     overrides=lambda url: {"codex.base_url": url},
                     key_env="OPENAI_API_KEY",
                     prompt="Create notes.txt and commit it.\n", check=_check_codex),
    "gemini": Harness(install=_gemini_bin, fake=_google,
                      overrides=lambda url: {"gemini.base_url": url},
                      key_env="GEMINI_API_KEY",
                      prompt="Create notes.txt and commit it.\n", check=_check_gemini,
                      host_env=_gemini_env),
    "shell": Harness(install=lambda: None, fake=None, overrides=lambda url: {}, key_env="",
                     prompt=f"echo '{OPENING}'\n{COMMAND}\necho '{CLOSING}'\n"),
}


def no_fake(log: Path) -> Any:
    """A stand-in for agents without an API (its ``url`` is empty)."""
    return nullcontext(type("NoServer", (), {"url": ""})())
