"""The gemini agent: command line, network, environment, credentials, its install step,
and reading the real Gemini CLI's stream-json output (no Docker, no network)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from git_iterare import agents
from git_iterare.agents.base import Credentials, Event
from git_iterare.agents.gemini import INSTALL_DIR, QUIET_ENV, SETTINGS, SETTINGS_PATH
from git_iterare.agents.render import render_lines
from git_iterare.errors import UserError
from tests.test_agents import make_config

#: Real output of Gemini CLI 0.61.0 against tests/fakeapi/gemini.py: text and a shell
#: call that commits, a read_file of a missing file (a failed tool), then text.
GEMINI_STREAM = (Path(__file__).parent / "data" / "gemini-stream.jsonl").read_text().splitlines()

gemini = agents.get_agent("gemini")


@pytest.fixture(autouse=True)
def _no_host_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)


def test_command_reads_prompt_on_stdin(tmp_path: Path) -> None:
    argv = gemini.command(prompt_file=str(tmp_path / "p.md"),
                          config=make_config(gemini_model="gemini-2.5-pro"))
    assert argv[argv.index("gemini"):] == [
        "gemini", "--approval-mode", "yolo", "--skip-trust", "--model", "gemini-2.5-pro",
        "--output-format", "stream-json"]
    big = "a prompt\nwith 'quotes' and $VARS\n" + "x" * 300_000 + "\n"
    (tmp_path / "p.md").write_text(big)
    wrapper = argv[: argv.index("gemini")]
    out = subprocess.run([*wrapper, "cat"], capture_output=True, text=True, check=True)
    assert out.stdout == big
    assert gemini.interactive_command(make_config()) == [
        "gemini", "--approval-mode", "yolo", "--skip-trust"]


def test_network_and_environment_default() -> None:
    assert gemini.required_domains(make_config()) == ["generativelanguage.googleapis.com"]
    assert gemini.environment(make_config()) == {
        "GEMINI_CLI_SYSTEM_SETTINGS_PATH": "/opt/gemini/settings.json",
        "GEMINI_SANDBOX": "false"}


def test_base_url_from_config_replaces_the_api_host() -> None:
    cfg = make_config(gemini_base_url="https://llm.corp.example:8443/google")
    assert gemini.required_domains(cfg) == ["llm.corp.example:8443"]
    assert gemini.environment(cfg) == {
        **QUIET_ENV, "GOOGLE_GEMINI_BASE_URL": "https://llm.corp.example:8443/google"}


def test_base_url_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://gw.internal")
    assert gemini.required_domains(make_config()) == ["gw.internal"]


def test_bad_base_url() -> None:
    with pytest.raises(UserError, match=r"^gemini.base_url: 'gw:80' is not an http\(s\) URL$"):
        gemini.required_domains(make_config(gemini_base_url="gw:80"))


def test_credentials_from_the_environment_then_the_store() -> None:
    from git_iterare.settings import global_config_dir

    creds = gemini.credentials(make_config(), {"GEMINI_API_KEY": "AIza-test"})
    assert creds == Credentials(env={"GEMINI_API_KEY": "AIza-test"})
    cfg = make_config()
    with pytest.raises(UserError) as info:
        gemini.credentials(cfg, {"ANTHROPIC_API_KEY": "sk-ant"})
    assert info.value.render() == (
        "no Gemini credentials for agent gemini: run `git iterare credentials --agent "
        "gemini` or set GEMINI_API_KEY")
    assert gemini.credential_store is not None
    gemini.credential_store.store_token(cfg, "AIza-stored")
    assert (global_config_dir() / "gemini-api-key").stat().st_mode & 0o777 == 0o600
    assert gemini.credentials(cfg, {}) == Credentials(env={"GEMINI_API_KEY": "AIza-stored"})


def test_keys_are_declared_and_widening_ones_gated() -> None:
    keys = {k.name: k for k in gemini.config_keys}
    assert sorted(keys) == ["gemini.base_url", "gemini.model", "gemini.version"]
    assert [n for n, k in sorted(keys.items()) if k.gated] == ["gemini.base_url",
                                                              "gemini.version"]
    assert make_config()["gemini.version"] == "latest"


#: A stand-in for npm: installs a fake ``node`` package or Gemini CLI bundle under the
#: ``--prefix`` it is given, and logs the package and the ``node`` it would run on.
FAKE_NPM = """#!/bin/sh
prefix= last=
while [ $# -gt 0 ]; do
    case $1 in --prefix) prefix=$2; shift ;; esac
    last=$1; shift
done
echo "$last node=$(command -v node)" >> "$NPM_LOG"
case $last in
node@*)
    mkdir -p "$prefix/bin"
    printf '#!/bin/sh\\nif [ "$1" = --version ]; then echo v22.1.0; else shift; echo "$@"; fi\\n' \\
        > "$prefix/bin/node"
    chmod +x "$prefix/bin/node" ;;
@google/gemini-cli@*)
    mkdir -p "$prefix/lib/node_modules/@google/gemini-cli/bundle"
    : > "$prefix/lib/node_modules/@google/gemini-cli/bundle/gemini.js" ;;
esac
"""


def test_install_step_runs_the_cli_on_its_own_node(tmp_path: Path) -> None:
    """The install script, run by a real shell as the image build runs it (``sh -eu``,
    ``PREFIX``) with a stand-in npm: Node goes to $PREFIX/node, the CLI to $PREFIX/cli
    with that Node first on PATH, the ``gemini`` wrapper runs the CLI on it, and the
    settings file holds the agent's settings."""
    step = gemini.install(make_config(gemini_version="0.61.0"))
    assert step is not None and step.version == "0.61.0"
    assert '"@google/gemini-cli@0.61.0"' in step.script and '"node@22"' in step.script
    assert '--ignore-scripts --prefix "$PREFIX/cli"' in step.script
    with pytest.raises(UserError, match="bad version"):
        gemini.install(make_config(gemini_version="1.0; rm -rf /"))
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "npm").write_text(FAKE_NPM)
    (tools / "npm").chmod(0o755)
    prefix = tmp_path / "opt" / "gemini"
    (prefix / "bin").mkdir(parents=True)  # as the image build makes it
    log = tmp_path / "npm.log"
    env = {"PATH": f"{tools}:/usr/bin:/bin", "PREFIX": str(prefix), "NPM_LOG": str(log)}
    subprocess.run(["sh", "-eu", "-c", step.script], env=env, check=True)
    host_node = subprocess.run(["sh", "-c", "command -v node"], env=env, capture_output=True,
                               text=True, check=False).stdout.strip()
    assert log.read_text().splitlines() == [
        f"node@22 node={host_node}", f"@google/gemini-cli@0.61.0 node={prefix}/node/bin/node"]
    wrapper = prefix / "bin" / "gemini"
    assert wrapper.read_text() == (
        f"#!/bin/sh\nexec {prefix}/node/bin/node "
        f'{prefix}/cli/lib/node_modules/@google/gemini-cli/bundle/gemini.js "$@"\n')
    # The stand-in node echoes what follows the bundle: the wrapper passes ours on.
    ran = subprocess.run([str(wrapper), "-p", "hi there"], capture_output=True, text=True,
                         check=True).stdout
    assert ran == "-p hi there\n"
    assert json.loads((prefix / "settings.json").read_text()) == SETTINGS
    assert (prefix / "VERSION").read_text() == "--version\n"
    assert sorted(p.name for p in (prefix / "bin").iterdir()) == ["gemini"]  # no node on PATH
    assert f"{INSTALL_DIR}/settings.json" == SETTINGS_PATH


def test_parse_real_stream() -> None:
    events = [gemini.parse_line(line + "\n") for line in GEMINI_STREAM]
    assert [e.kind for e in events] == ["system", "system", "assistant", "assistant", "user",
                                        "assistant", "user", "assistant", "result"]
    assert events[0].parts[0].text.startswith("model auto, session_id ")
    assert events[1].parts[0].text == "Add a notes file and commit it.\n"
    assert events[2].parts[0].text == "I'll add the notes file."
    call = events[3].parts[0]
    assert (call.kind, call.name) == ("tool_use", "run_shell_command")
    assert call.text.startswith("echo 'made by gemini' > notes.txt && git add notes.txt")
    assert json.loads(call.detail)["description"] == "Commit notes.txt"
    assert (events[4].parts[0].text, events[4].parts[0].is_error) == ("Add notes", False)
    assert events[5].parts[0].text == "missing.txt"
    failed = events[6].parts[0]
    assert failed.is_error and failed.text.splitlines() == [
        "File not found.", "File not found: /tmp/gprobe2/ws/missing.txt"]

    result = gemini.summarize(events, exit_code=0)
    assert result.is_error is False
    assert result.summary == "Added notes.txt."
    assert result.cost_usd is None
    assert result.turns == 3  # the fake API's log shows three agent requests
    assert result.tokens == {"input": 1125, "output": 116, "cache_read": 0}
    assert result.duration_ms == 2902
    assert gemini.summarize(events, exit_code=1).is_error


def test_render_real_stream_at_each_verbosity() -> None:
    def shown(verbosity: int) -> list[str]:
        return "\n".join(render_lines(GEMINI_STREAM, gemini, verbosity)).splitlines()

    assert shown(0) == ["I'll add the notes file.", "Added notes.txt.",
                        "done: 2.9s, 3 turns (reported by the agent)"]
    tools = shown(1)
    assert tools[1].startswith("> run_shell_command: echo 'made by gemini' > notes.txt")
    assert tools[2] == "> read_file: missing.txt"
    everything = shown(2)
    assert "    Add notes" in everything
    assert "    File not found: /tmp/gprobe2/ws/missing.txt" in everything
    assert any(line.startswith("[init] model auto") for line in everything)


def test_streamed_text_pieces_join_in_the_summary() -> None:
    lines = [
        '{"type":"message","role":"assistant","content":"Fixed the ","delta":true}',
        '{"type":"message","role":"assistant","content":"tests.","delta":true}',
        '{"type":"result","status":"success","stats":{"input_tokens":10,"output_tokens":2,'
        '"cached":4,"duration_ms":5}}',
    ]
    result = gemini.summarize([gemini.parse_line(line) for line in lines], exit_code=0)
    assert (result.summary, result.turns) == ("Fixed the tests.", 1)
    # No "input" figure: input tokens less the cached ones.
    assert result.tokens == {"input": 6, "output": 2, "cache_read": 4}


def test_error_events_and_a_failed_result() -> None:
    warning = gemini.parse_line('{"type":"error","severity":"warning","message":"Loop '
                                'detected, stopping execution"}')
    assert (warning.kind, warning.parts[0].text) == (
        "system", "warning: Loop detected, stopping execution")
    failed = gemini.parse_line('{"type":"result","status":"error","error":{"type":"Error",'
                               '"message":"[API Error: quota exceeded]"},"stats":{}}')
    result = gemini.summarize([warning, failed], exit_code=1)
    assert (result.is_error, result.summary, result.tokens) == (
        True, "[API Error: quota exceeded]", {})
    # Killed before the result: failed, with the last words kept.
    said = gemini.parse_line('{"type":"message","role":"assistant","content":"Working"}')
    assert gemini.summarize([said]).is_error
    assert gemini.summarize([said]).summary == "Working"
    unknown = gemini.parse_line('{"type":"future_event"}')
    assert unknown == Event(kind="other", line='{"type":"future_event"}',
                            data={"type": "future_event"})


def test_routine_notices_show_at_verbosity_2_and_errors_always() -> None:
    """Gemini CLI's stderr joins its output in the sandbox's log: its routine notices are
    hidden below verbosity 2; any other plain line (its own errors) shows, and is the
    summary of a run that ended without a result."""
    lines = ["YOLO mode is enabled. All tool calls will be automatically approved.",
             "Ripgrep is not available. Falling back to GrepTool.",
             "[STARTUP] Phase 'cleanup_ops' was started but never ended. Skipping metrics.",
             "Invalid auth method selected."]
    assert list(render_lines(lines, gemini, 1)) == [
        "Invalid auth method selected.", "failed"]
    assert list(render_lines(lines, gemini, 2))[:3] == lines[:3]
    events = [gemini.parse_line(line) for line in lines]
    assert [e.kind for e in events] == ["system", "system", "system", "text"]
    assert gemini.summarize(events, exit_code=41).summary == "Invalid auth method selected."
