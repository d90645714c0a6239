"""The gemini agent: command line, network, environment, credentials, its install step,
and reading the real Gemini CLI's stream-json output (no Docker, no network)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from git_iterare import agents
from git_iterare.agents.base import Credentials, Event
from git_iterare.agents.gemini import QUIET_ENV, SETTINGS, SETTINGS_PATH, install_dockerfile
from git_iterare.errors import UserError
from git_iterare.logrender import render_lines
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


def test_credentials_from_the_environment_only() -> None:
    creds = gemini.credentials(make_config(), {"GEMINI_API_KEY": " AIza-test \n"})
    assert creds == Credentials(env={"GEMINI_API_KEY": "AIza-test"})
    with pytest.raises(UserError) as info:
        gemini.credentials(make_config(), {"ANTHROPIC_API_KEY": "sk-ant"})
    assert info.value.render() == (
        "no Gemini API key: set GEMINI_API_KEY (export GEMINI_API_KEY=... (from Google AI "
        "Studio), then run `git iterare execute` again)")


def test_install_step_is_a_self_contained_two_stage_build() -> None:
    layer = gemini.image_layer(make_config(gemini_version="0.61.0"))
    assert layer is not None
    assert (layer.name, dict(layer.build_args)) == ("gemini", {"GEMINI_CLI_VERSION": "0.61.0"})
    assert gemini.image_layer(make_config()).build_args == {  # type: ignore[union-attr]
        "GEMINI_CLI_VERSION": "latest"}
    text = install_dockerfile()
    assert layer.dockerfile == text
    froms = re.findall(r"^FROM .*$", text, re.MULTILINE)
    assert froms == ["FROM ${BUILDER_IMAGE} AS gemini-install", "FROM ${BASE_IMAGE}"]
    builder, final = text.split("\nFROM ${BASE_IMAGE}\n")
    # The CA bundle is used by npm in the builder only; the result copies /opt/gemini.
    assert "COPY ca.pem" in builder and "ca.pem" not in final
    assert final.splitlines()[1:3] == ["COPY --from=gemini-install /opt/gemini /opt/gemini",
                                       "ENV PATH=${PATH}:/opt/gemini/bin"]
    assert '"node@22"' in builder and '"@google/gemini-cli@${GEMINI_CLI_VERSION}"' in builder
    # The settings go in single-quoted: they must hold no quote, and come out as written.
    quoted = re.search(r"printf '%s\\n' '([^']*)' > (\S+);", builder)
    assert quoted is not None and quoted.group(2) == SETTINGS_PATH
    assert json.loads(quoted.group(1)) == SETTINGS
    assert SETTINGS["security"]["auth"]["selectedType"] == "gemini-api-key"


def test_install_step_wrapper_and_settings_come_out_as_meant(tmp_path: Path) -> None:
    """The RUN line's printf commands, run by a real shell, write the wrapper and the
    settings file the agent relies on."""
    run = install_dockerfile().split("RUN set -eux; \\\n", 1)[1].split("\n\n", 1)[0]
    commands = [c.strip() for c in run.replace("\\\n", "").split(";")]
    wanted = [c for c in commands if c.startswith("printf")]
    assert len(wanted) == 2
    (tmp_path / "bin").mkdir()
    script = "; ".join(c.replace("/opt/gemini", str(tmp_path)) for c in wanted)
    subprocess.run(["sh", "-c", script], check=True)
    assert (tmp_path / "bin" / "gemini").read_text() == (
        f"#!/bin/sh\nexec {tmp_path}/node/bin/node "
        f'{tmp_path}/cli/lib/node_modules/@google/gemini-cli/bundle/gemini.js "$@"\n')
    assert json.loads((tmp_path / "settings.json").read_text()) == SETTINGS


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
             "Invalid auth method selected."]
    assert list(render_lines(lines, gemini, 1)) == [
        "Invalid auth method selected.", "failed"]
    assert list(render_lines(lines, gemini, 2))[:2] == lines[:2]
    events = [gemini.parse_line(line) for line in lines]
    assert [e.kind for e in events] == ["system", "system", "text"]
    assert gemini.summarize(events, exit_code=41).summary == "Invalid auth method selected."
