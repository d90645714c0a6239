"""The fake Gemini API (tests/fakeapi/gemini.py), alone and driving the real Gemini CLI."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from git_iterare import agents, config
from tests.fakeapi import client
from tests.fakeapi.gemini import FakeGemini, schema_example
from tests.fakeapi.gemini_cli import install_gemini, system_settings

TOOLS = [{"functionDeclarations": [{"name": "run_shell_command"}]}]
TURNS: list[list[dict[str, Any]]] = [
    [{"type": "text", "text": "Running it."},
     {"type": "tool_use", "name": "run_shell_command", "input": {"command": "echo hi"}}],
    [{"type": "text", "text": "All done."}],
]
MODEL = "/v1beta/models/gemini-x"


#: What the agent sends as its key (the fake logs it redacted).
KEY_HEADER = {"x-goog-api-key": "AIza-secret"}
post = functools.partial(client.post, headers=KEY_HEADER)


def sse(payload: bytes) -> list[dict[str, Any]]:
    chunks = payload.decode().strip().split("\r\n\r\n")
    assert all(chunk.startswith("data: ") for chunk in chunks)
    return [json.loads(chunk.removeprefix("data: ")) for chunk in chunks]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGemini]:
    with FakeGemini(TURNS, tmp_path / "requests.jsonl") as server:
        yield server


def test_streamed_turns(fake: FakeGemini, tmp_path: Path) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}], "tools": TOOLS}
    kind, payload = post(fake.url + MODEL + ":streamGenerateContent?alt=sse", body)
    assert kind == "text/event-stream"
    chunks = sse(payload)
    assert [c["candidates"][0]["content"]["parts"] for c in chunks] == [
        [{"text": "Running it."}],
        [{"functionCall": {"name": "run_shell_command", "args": {"command": "echo hi"}}}]]
    assert "finishReason" not in chunks[0]["candidates"][0]
    assert "usageMetadata" not in chunks[0]
    last = chunks[1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["modelVersion"] == "gemini-x"
    usage = last["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert usage["candidatesTokenCount"] > 0

    _, plain = post(fake.url + MODEL + ":generateContent", body)
    reply = json.loads(plain)
    assert reply["candidates"][0]["content"] == {"role": "model",
                                                 "parts": [{"text": "All done."}]}

    log = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [(e["path"], e["turn"]) for e in log] == [
        (MODEL + ":streamGenerateContent?alt=sse", 0), (MODEL + ":generateContent", 1)]
    assert log[0]["headers"]["x-goog-api-key"] == "***"
    assert log[0]["body"] == body


def test_side_queries_take_no_turn_and_meet_their_schema(fake: FakeGemini) -> None:
    schema = {"type": "OBJECT", "properties": {
        "complexity_reasoning": {"type": "STRING"}, "complexity_score": {"type": "INTEGER"}},
        "required": ["complexity_reasoning", "complexity_score"]}
    body = {"contents": [], "generationConfig": {"responseMimeType": "application/json",
                                                 "responseJsonSchema": schema}}
    _, payload = post(fake.url + MODEL + ":generateContent", body)
    text = json.loads(payload)["candidates"][0]["content"]["parts"][0]["text"]
    assert json.loads(text) == {"complexity_reasoning": "fake", "complexity_score": 1}
    _, payload = post(fake.url + MODEL + ":generateContent", {"contents": []})
    assert json.loads(payload)["candidates"][0]["content"]["parts"] == [{"text": "ok"}]
    # The script's first turn is still there for the agent's loop.
    _, payload = post(fake.url + MODEL + ":generateContent", {"contents": [], "tools": TOOLS})
    assert json.loads(payload)["candidates"][0]["content"]["parts"][0] == {"text": "Running it."}


def test_count_tokens_probes_and_unknown_paths(fake: FakeGemini) -> None:
    _, payload = post(fake.url + MODEL + ":countTokens", {"contents": [{"text": "x" * 400}]})
    assert json.loads(payload)["totalTokens"] >= 100
    with urllib.request.urlopen(fake.url + "/v1beta/models") as reply:
        assert reply.status == 200
    with pytest.raises(urllib.error.HTTPError) as info:
        post(fake.url + "/v1beta/other", {})
    assert info.value.code == 404
    assert json.loads(info.value.read())["error"]["status"] == "NOT_FOUND"


def test_schema_example() -> None:
    assert schema_example({"type": "string", "enum": ["user", "model"]}) == "user"
    assert schema_example({"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "number"}}, "b": {"type": "boolean"}}}) == {
        "a": [1], "b": False}
    assert schema_example(None) == "fake"


def test_command_line(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([TURNS[1]]))
    root = Path(__file__).parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakeapi.gemini", "--script",
                             str(script)], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        _, payload = post(url + MODEL + ":generateContent", {"contents": [], "tools": TOOLS})
        assert json.loads(payload)["candidates"][0]["content"]["parts"] == [
            {"text": "All done."}]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- the real Gemini CLI behind a base URL ----------------------------------------------
# (It commits through the fake API in the contract test, tests/test_agent_clis.py.)

@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a network namespace")
@pytest.mark.parametrize("quiet", [True, False], ids=["our-settings", "auth-only"])
def test_real_gemini_looks_up_no_name_behind_a_base_url(tmp_path: Path, quiet: bool) -> None:
    """With the agent's settings and a base URL on 127.0.0.1, Gemini CLI resolves no name
    at all and sends nothing but model requests there, so the base URL's host is the only
    domain a run needs (what required_domains says). With only the auth setting it also
    looks up play.googleapis.com for usage statistics and sends an installation id (which
    also shows the resolver log sees lookups)."""
    from git_iterare.agents.gemini import SETTINGS
    from tests.fakeapi.netwatch import API_PORT

    gemini_bin = install_gemini()
    settings = system_settings(None if quiet else {"security": SETTINGS["security"]})
    (tmp_path / "home").mkdir()
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Say hello.\n")
    gemini = agents.get_agent("gemini")
    cfg = config.load(None, {"gemini.base_url": f"http://127.0.0.1:{API_PORT}",
                             "firewall.allowed_cidrs": ["127.0.0.1/32"]},
                      env={}, git_entries=[])
    # A gateway by address needs no allowlisted name: the CIDR lets it through.
    assert gemini.required_domains(cfg) == []
    env = {"HOME": str(tmp_path / "home"), "PATH": f"{gemini_bin.parent}:/usr/bin:/bin",
           **gemini.environment(cfg), **gemini.credentials(cfg, {"GEMINI_API_KEY": "k"}).env,
           "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(settings)}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "api": "gemini", "turns": [[{"type": "text", "text": "Hello."}]], "env": env,
        "cwd": str(tmp_path), "argv": gemini.command(prompt_file=str(prompt), config=cfg)}))
    root = Path(__file__).parent.parent
    done = subprocess.run(["unshare", "--net", "--mount", sys.executable, "-m",
                           "tests.fakeapi.netwatch", str(spec)], cwd=root, capture_output=True,
                          text=True, timeout=300, check=True)
    seen = json.loads(done.stdout)
    assert seen["returncode"] == 0, seen["stderr"]
    events = [gemini.parse_line(line) for line in seen["stdout"].splitlines()]
    assert gemini.summarize(events).summary == "Hello."
    requests = seen["requests"]
    assert {(r["method"], r["path"].split(":")[-1]) for r in requests} <= {
        ("POST", "generateContent"), ("POST", "streamGenerateContent?alt=sse")}
    assert [r["turn"] for r in requests if r["turn"] is not None] == [0]
    if quiet:
        assert seen["dns"] == []
        assert all("x-gemini-api-privileged-user-id" not in r["headers"] for r in requests)
    else:
        assert set(seen["dns"]) == {"play.googleapis.com"}
        assert all("x-gemini-api-privileged-user-id" in r["headers"] for r in requests)
