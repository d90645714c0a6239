"""Agent adapters: a contract every registered agent meets, then each agent's specifics."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from git_iterare import agents, config
from git_iterare.agents.base import Agent, Credentials, Event, Part, RunResult
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
    from git_iterare.git.repo import discover

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
    assert info.value.render() == ("unknown agent 'gpt' (valid: claude, codex, gemini, "
                                   "shell) (set run.agent or the prompt's `agent:` to one "
                                   "of them)")


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


@pytest.mark.parametrize("name, url, cidr", [
    ("claude", "http://198.18.7.1:8080/v1", "198.18.7.0/24"),
    ("gemini", "https://[fd00::7]/google", "fd00::/64"),
    ("codex", "http://10.2.3.4/v1", "10.2.3.4/32")])
def test_a_gateway_given_by_address_is_reached_through_allowed_cidrs(
        monkeypatch: pytest.MonkeyPatch, name: str, url: str, cidr: str) -> None:
    for var in ("ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    agent = agents.get_agent(name)
    key = f"{name}_base_url"
    # An address is no allowlist entry: the CIDR the user allowed lets it through.
    allowed = make_config(**{key: url, "firewall_allowed_cidrs": ["192.0.2.0/24", cidr]})
    assert agent.required_domains(allowed) == []
    address = url.split("/")[2].rsplit(":", 1)[0].strip("[]") if "[" not in url else "fd00::7"
    with pytest.raises(UserError) as refused:
        agent.required_domains(make_config(**{key: url}))
    suffix = "128" if ":" in address else "32"
    assert refused.value.render() == (
        f"{name}.base_url: the gateway's host {address} is an address, which the sandbox "
        f"reaches only when firewall.allowed_cidrs holds it (add \"{address}/{suffix}\" to "
        f"allowed_cidrs under [firewall], or name the gateway by its host name)")


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
        turns=2, duration_ms=465, summary="Created hello.txt and committed it.",
        session="c235949d-f9c7-49a1-ba62-a51a347df8e7")  # 2.1.197: its cost is its own


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


# --- codex -----------------------------------------------------------------------------

#: Real output of Codex CLI 0.171.0 against tests/fakeapi/openai_server.py (a message, a
#: shell command that commits, a closing message).
CODEX_STREAM = (DATA / "codex-stream.jsonl").read_text().splitlines()


def test_codex_command_runs_without_its_own_sandbox_or_prompts() -> None:
    argv = agents.get_agent("codex").command(prompt_file="/run/iterare/prompt.md",
                                             config=make_config(codex_model="gpt-x"))
    assert argv[:5] == ["sh", "-c", 'f=$1; shift; exec "$@" < "$f"', "sh",
                        "/run/iterare/prompt.md"]
    codex = argv[5:]
    assert codex[:2] == ["codex", "exec"] and codex[-1] == "-"  # the prompt from stdin
    assert {"--json", "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check"} <= set(codex)
    assert codex[codex.index("--model") + 1] == "gpt-x"
    settings = [codex[i + 1] for i, a in enumerate(codex) if a == "-c"]
    assert settings[:2] == [
        'model_provider="iterare"',
        'model_providers.iterare={name = "OpenAI", base_url = "https://api.openai.com/v1", '
        'env_key = "OPENAI_API_KEY", wire_api = "responses", supports_websockets = false}']
    assert {"analytics.enabled=false", "features.plugins=false",
            "features.unbounded_connection_retries=false"} <= set(settings)


def test_codex_network_default_and_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    codex = agents.get_agent("codex")
    assert codex.required_domains(make_config()) == ["api.openai.com"]
    cfg = make_config(codex_base_url="http://gw.example:8080/v1")
    assert codex.required_domains(cfg) == ["gw.example:8080"]
    monkeypatch.setenv("OPENAI_BASE_URL", "https://llm.corp.example/openai/v1")
    assert codex.required_domains(make_config()) == ["llm.corp.example"]
    assert 'base_url = "https://llm.corp.example/openai/v1"' in " ".join(
        codex.command(prompt_file="/p", config=make_config()))


@pytest.mark.parametrize("url", ["ftp://x", "http://", 'http://x/"] evil', "http://x/\n"])
def test_codex_bad_gateway(url: str) -> None:
    with pytest.raises(UserError, match=r"^codex.base_url: .* is not an http\(s\) URL"):
        agents.get_agent("codex").required_domains(make_config(codex_base_url=url))


def test_codex_parses_real_stream() -> None:
    codex = agents.get_agent("codex")
    events = [codex.parse_line(line) for line in CODEX_STREAM]
    assert [e.kind for e in events] == ["system", "other", "assistant", "assistant", "user",
                                        "assistant", "result"]
    use = events[3].parts[0]
    assert (use.kind, use.name) == ("tool_use", "shell")
    assert "git commit -q -m 'Add notes'" in use.text
    assert events[4].parts[0].text.endswith(" Add notes\n")
    assert not events[4].parts[0].is_error
    result = codex.summarize(events, exit_code=0)
    assert result == RunResult(is_error=False, tokens={
        "input": 2000, "cache_read": 200, "cache_creation": 0, "output": 100,
        "reasoning": 10}, summary="Created notes.txt and committed it.",
        session="01a22da6-cb01-7462-9c84-8b3dd112de8e", session_totals=frozenset({"tokens"}))
    shown = [codex.render(e, 1) for e in events]
    assert shown[2] == "I will add the notes file."
    assert shown[3] is not None and "shell: " in shown[3]
    assert shown[6] is None  # the closing summary line stands for it


def test_codex_failed_turn_is_an_error_shown_at_every_verbosity() -> None:
    codex = agents.get_agent("codex")
    lines = ['{"type":"thread.started","thread_id":"t"}', '{"type":"turn.started"}',
             '{"type":"error","message":"Reconnecting... 1/5"}',
             '{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}']
    events = [codex.parse_line(line) for line in lines]
    result = codex.summarize(events, exit_code=1)
    assert (result.is_error, result.summary) == (True, "unexpected status 401 Unauthorized")
    assert codex.render(events[3], 0) == "error: unexpected status 401 Unauthorized"
    assert codex.render(events[2], 0) is None and codex.render(events[2], 2) is not None
    # Cut short (no turn.completed): failed, whatever the exit status.
    assert codex.summarize(events[:2], exit_code=0).is_error


def test_codex_other_items() -> None:
    codex = agents.get_agent("codex")
    change = codex.parse_line(json.dumps({"type": "item.completed", "item": {
        "type": "file_change", "status": "completed",
        "changes": [{"path": "a.py", "kind": "update"}, {"path": "b.py", "kind": "add"}]}}))
    assert change.parts[0].text == "update a.py, add b.py"
    todo = codex.parse_line(json.dumps({"type": "item.updated", "item": {
        "type": "todo_list", "items": [{"text": "x", "completed": True},
                                       {"text": "y", "completed": False}]}}))
    assert todo.parts[0] == Part("thinking", "[x] x\n[ ] y")
    failed = codex.parse_line(json.dumps({"type": "item.completed", "item": {
        "type": "command_execution", "command": "false", "aggregated_output": "",
        "exit_code": 1, "status": "failed"}}))
    assert failed.parts[0].is_error


def test_image_holds_the_agents_asked_for() -> None:
    from git_iterare.sandbox.image import context_files, dockerfile

    plan = agents.image_agents(make_config(), ["codex", "shell"])
    assert plan.agents == ["claude", "codex"]  # shell installs nothing
    assert set(plan.installs) == {"claude", "codex", "gemini"}
    assert '"@openai/codex@latest"' in plan.installs["codex"].script
    files = context_files(plan.agents, plan.installs)
    text = files["Dockerfile"].decode()
    assert "FROM system AS agent-codex" in text
    assert "COPY --from=agent-codex /opt/codex /opt/codex" in text
    assert files["install-codex.sh"] == plan.installs["codex"].script.encode()
    with pytest.raises(ValueError, match="bad agent name"):
        dockerfile(b"# @agent-stages\n# @agent-copies\n", ["Bad Name"])
    with pytest.raises(UserError, match=r"docker.agents: unknown agent 'gpt'"):
        agents.image_agents(make_config(docker_agents="claude,gpt"))
    with pytest.raises(UserError, match=r"bad version"):
        agents.image_agents(make_config(codex_version="1.0; rm -rf /"))
