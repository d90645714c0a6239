"""Agent adapters: a contract every registered agent meets, then each agent's specifics."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from git_iterare import agents, config
from git_iterare.agents.base import Agent, Credentials, Event, RunResult
from git_iterare.agents.claude import QUIET_ENV
from git_iterare.errors import UserError

DATA = Path(__file__).parent / "data"
#: Real output of Claude Code 2.1.197 against tests/fakeapi (a Bash call, then text).
CLAUDE_STREAM = (DATA / "claude-stream.jsonl").read_text().splitlines()


def make_config(**overrides: Any) -> config.Config:
    """Configuration from defaults and ``overrides`` (``claude_model`` -> ``claude.model``)."""
    values = {k.replace("_", ".", 1): v for k, v in overrides.items()}
    return config.load(None, values, env={}, git_entries=[])


@pytest.fixture(params=agents.names())
def agent(request: pytest.FixtureRequest) -> Agent:
    return agents.get_agent(request.param)


# --- the contract --------------------------------------------------------------------

def test_contract(agent: Agent) -> None:
    cfg = make_config()
    assert agent.name in agents.names()
    argv = agent.command(prompt_file="/run/iterare/prompt.md", config=cfg)
    assert argv and all(isinstance(a, str) for a in argv)
    assert "/run/iterare/prompt.md" in argv  # the prompt is handed over by path
    domains = agent.required_domains(cfg)
    assert all(isinstance(d, str) and d and "/" not in d for d in domains)
    env = agent.environment(cfg)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    text = agent.parse_line("plain words\n")
    assert (text.kind, text.line) == ("text", "plain words")
    assert agent.render(text, 0) == "plain words"
    result = agent.summarize([text], exit_code=0)
    assert isinstance(result, RunResult)
    assert agent.summarize([], exit_code=3).is_error


def test_contract_credentials_are_secret_env_or_home_files(agent: Agent) -> None:
    store = agent.credential_store
    env = {store.api_key_env: "sk-test-key"} if store is not None else {}
    try:
        creds = agent.credentials(make_config(), env)
    except UserError:
        pytest.fail("credentials in the environment must be enough")
    assert isinstance(creds, Credentials)
    assert set(creds.env.values()) <= {"sk-test-key"}
    for path in creds.files:
        assert not path.startswith("/") and ".." not in path.split("/")


def test_contract_keys_and_install(agent: Agent) -> None:
    cfg = make_config()
    for key in agent.config_keys:
        assert config.KEYS[key.name] is key  # accepted by the configuration
        assert cfg[key.name] == key.default
    step = agent.install(cfg)
    if step is not None:
        assert "$PREFIX" in step.script and step.version
    assert agent.name in agents.image_agents(cfg, [agent.name]).agents or step is None


def test_agent_keys_work_in_every_layer(repo: Path) -> None:
    (repo / ".iterare").mkdir()
    (repo / ".iterare" / "config.toml").write_text('[codex]\nmodel = "gpt-x"\n')
    cfg = config.load(None, None, env={"ITERARE_CLAUDE_MODEL": "opus"}, git_entries=[])
    assert cfg["claude.model"] == "opus"
    from git_iterare.repo import discover

    cfg = config.load(discover(repo), None, env={}, git_entries=[])
    assert (cfg["codex.model"], cfg.warnings) == ("gpt-x", ())


def test_without_credentials_the_agent_names_the_command() -> None:
    with pytest.raises(UserError) as info:
        agents.get_agent("codex").credentials(make_config(), {})
    assert info.value.render() == (
        "no OpenAI credentials for agent codex: run `git iterare credentials --agent codex` "
        "or set OPENAI_API_KEY")


def test_unknown_agent_lists_valid_names() -> None:
    with pytest.raises(UserError) as info:
        agents.get_agent("gpt")
    assert info.value.render() == ("unknown agent 'gpt' (valid: claude, codex, shell) "
                                   "(set run.agent or the prompt's `agent:` to one of them)")


# --- claude ----------------------------------------------------------------------------

def test_claude_command_reads_prompt_on_stdin(tmp_path: Path) -> None:
    claude = agents.get_agent("claude")
    cfg = make_config(claude_model="opus")
    argv = claude.command(prompt_file=str(tmp_path / "p.md"), config=cfg)
    assert argv[argv.index("claude"):] == [
        "claude", "--print", "--output-format", "stream-json", "--verbose",
        "--dangerously-skip-permissions", "--model", "opus"]
    # The wrapper really feeds the file to the program's stdin: run it with `cat` instead.
    big = "a prompt\nwith 'quotes' and $VARS\n" + "x" * 300_000 + "\n"  # > one argv string
    (tmp_path / "p.md").write_text(big)
    wrapper = argv[: argv.index("claude")]
    out = subprocess.run([*wrapper, "cat"], capture_output=True, text=True, check=True)
    assert out.stdout == big


def test_claude_network_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    claude = agents.get_agent("claude")
    assert claude.required_domains(make_config()) == ["api.anthropic.com", "platform.claude.com"]
    assert claude.environment(make_config()) == QUIET_ENV


def test_claude_gateway_from_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    claude = agents.get_agent("claude")
    cfg = make_config(claude_base_url="https://llm.corp.example:8443/anthropic")
    # The firewall opens 80 and 443 for a name, or only the port it names.
    assert claude.required_domains(cfg) == ["llm.corp.example:8443"]
    assert claude.environment(cfg)["ANTHROPIC_BASE_URL"] == "https://llm.corp.example:8443/anthropic"


def test_claude_gateway_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://gw.internal")
    assert agents.get_agent("claude").required_domains(make_config()) == ["gw.internal"]


def test_claude_bad_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(UserError, match=r"^claude.base_url: 'gw:80' is not an http\(s\) URL$"):
        agents.get_agent("claude").required_domains(make_config(claude_base_url="gw:80"))


def test_claude_credentials_from_env_first() -> None:
    creds = agents.get_agent("claude").credentials(
        make_config(), {"CLAUDE_CODE_OAUTH_TOKEN": "oat", "ANTHROPIC_API_KEY": "key"})
    assert creds == Credentials(env={"ANTHROPIC_API_KEY": "key"})


def test_claude_credentials_missing() -> None:
    with pytest.raises(UserError) as info:
        agents.get_agent("claude").credentials(make_config(), {})
    assert info.value.render() == "no Claude credentials: run `git iterare credentials`"


def test_claude_parses_real_stream() -> None:
    claude = agents.get_agent("claude")
    events = [claude.parse_line(line) for line in CLAUDE_STREAM]
    assert [e.kind for e in events] == ["system", "assistant", "assistant", "user", "assistant",
                                        "result"]
    tool = events[2].parts[0]
    assert (tool.kind, tool.name) == ("tool_use", "Bash")
    assert tool.text.startswith("echo hello > hello.txt && git add hello.txt")
    assert json.loads(tool.detail)["description"] == "create and commit"
    assert [(p.kind, p.text, p.is_error) for p in events[3].parts] == [
        ("tool_result", "committed", False)]
    assert claude.summarize(events, exit_code=0) == RunResult(
        is_error=False, cost_usd=0.01927,
        tokens={"input": 3470, "output": 65, "cache_read": 0, "cache_creation": 0},
        turns=2, duration_ms=465, summary="Created hello.txt and committed it.")


def test_claude_error_result() -> None:
    claude = agents.get_agent("claude")
    line = json.dumps({"type": "result", "subtype": "error_max_turns", "is_error": True,
                       "num_turns": 9, "total_cost_usd": 1.5, "errors": ["max turns"]})
    result = claude.summarize([claude.parse_line(line)])
    assert (result.is_error, result.turns, result.cost_usd, result.summary) == (
        True, 9, 1.5, "max turns")


def test_claude_without_result_failed() -> None:
    claude = agents.get_agent("claude")
    events = [claude.parse_line(CLAUDE_STREAM[1]), claude.parse_line("Killed")]
    assert claude.summarize(events, exit_code=137) == RunResult(is_error=True, summary="Killed")


def test_claude_odd_json_lines() -> None:
    claude = agents.get_agent("claude")
    assert claude.parse_line('{"type": "stream_event"}').kind == "other"
    assert claude.parse_line("[1, 2]").kind == "text"
    assert claude.parse_line('{"type": "assistant", "message": null}').parts == ()


# --- shell -----------------------------------------------------------------------------

def test_shell_runs_prompt_body_with_bash(tmp_path: Path) -> None:
    shell = agents.get_agent("shell")
    (tmp_path / "p.md").write_text("echo one\nfalse\necho never\n")
    argv = shell.command(prompt_file=str(tmp_path / "p.md"), config=make_config())
    assert argv == ["bash", "-eu", str(tmp_path / "p.md")]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    events = [shell.parse_line(line) for line in done.stdout.splitlines()]
    assert shell.summarize(events, exit_code=done.returncode) == RunResult(
        is_error=True, summary="one")


def test_shell_needs_nothing() -> None:
    shell = agents.get_agent("shell")
    assert shell.required_domains(make_config()) == []
    assert shell.credentials(make_config(), {}) == Credentials()
    assert shell.parse_line('{"type": "result"}') == Event(
        kind="text", parts=shell.parse_line('{"type": "result"}').parts, line='{"type": "result"}')
