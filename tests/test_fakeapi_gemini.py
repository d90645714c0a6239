"""The fake Gemini API (tests/fakeapi/gemini.py), alone and driving the real Gemini CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from git_iterare import agents, config
from tests.fakeapi.gemini import FakeGemini, schema_example
from tests.fakeapi.gemini_cli import install_gemini
from tests.fakeapi.server import estimate_tokens

TOOLS = [{"functionDeclarations": [{"name": "run_shell_command"}]}]
TURNS: list[list[dict[str, Any]]] = [
    [{"type": "text", "text": "Running it."},
     {"type": "tool_use", "name": "run_shell_command", "input": {"command": "echo hi"}}],
    [{"type": "text", "text": "All done."}],
]
MODEL = "/v1beta/models/gemini-x"


def post(url: str, body: dict[str, Any]) -> tuple[str, bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json",
                                              "x-goog-api-key": "AIza-secret"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["content-type"], response.read()


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


# --- the real Gemini CLI against the fake API ------------------------------------------

@pytest.fixture(scope="session")
def gemini_bin() -> Path:
    return install_gemini()


@pytest.fixture
def secure_dir() -> Iterator[Path]:
    """A directory of root's that nobody else may write (Gemini CLI reads its system
    settings only from such a place; pytest's temp dirs sit below world-writable /tmp)."""
    path = Path(tempfile.mkdtemp(prefix="itr-gemini-", dir="/run"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a network namespace")
@pytest.mark.parametrize("quiet", [True, False], ids=["our-settings", "auth-only"])
def test_real_gemini_commits_through_the_fake_api_and_looks_up_no_name(
        gemini_bin: Path, secure_dir: Path, tmp_path: Path, quiet: bool) -> None:
    """The real CLI with the agent's command line, environment and settings: it runs the
    shell call that commits, ends with the script's text, sends every request to the base
    URL, and resolves no name (what required_domains says). With only the auth setting
    it also looks up play.googleapis.com for usage statistics (which also shows the
    resolver log sees lookups)."""
    from git_iterare.agents.gemini import SETTINGS
    from tests.fakeapi.netwatch import API_PORT

    repo, home = tmp_path / "repo", tmp_path / "home"
    repo.mkdir()
    home.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("Create notes.txt saying 'made by gemini' and commit it.\n")
    settings = secure_dir / "settings.json"
    settings.write_text(json.dumps(SETTINGS if quiet else {"security": SETTINGS["security"]}))
    settings.chmod(0o644)

    command = ("echo 'made by gemini' > notes.txt && git add notes.txt && "
               "git commit -q -m 'Add notes' && git log --format=%s -1")
    turns = [
        [{"type": "text", "text": "I'll write and commit the file."},
         {"type": "tool_use", "name": "run_shell_command",
          "input": {"command": command, "description": "Commit notes.txt"}}],
        [{"type": "text", "text": "Created notes.txt and committed it."}],
    ]
    gemini = agents.get_agent("gemini")
    cfg = config.load(None, {"gemini.base_url": f"http://127.0.0.1:{API_PORT}"}, env={},
                      git_entries=[])
    assert gemini.required_domains(cfg) == [f"127.0.0.1:{API_PORT}"]
    env = {"HOME": str(home), "PATH": f"{gemini_bin.parent}:/usr/bin:/bin",
           "GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.com",
           "GIT_COMMITTER_NAME": "Agent", "GIT_COMMITTER_EMAIL": "agent@example.com",
           **gemini.environment(cfg), **gemini.credentials(cfg, {"GEMINI_API_KEY": "k"}).env,
           "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(settings)}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "api": "gemini", "turns": turns, "env": env, "cwd": str(repo),
        "argv": gemini.command(prompt_file=str(prompt), config=cfg)}))
    root = Path(__file__).parent.parent
    done = subprocess.run(["unshare", "--net", "--mount", sys.executable, "-m",
                           "tests.fakeapi.netwatch", str(spec)], cwd=root, capture_output=True,
                          text=True, timeout=300, check=True)
    seen = json.loads(done.stdout)
    assert seen["returncode"] == 0, seen["stderr"]

    log = subprocess.run(["git", "log", "--format=%s %an"], cwd=repo, capture_output=True,
                         text=True, check=True).stdout
    assert log == "Add notes Agent\ninitial Test Author\n"
    assert (repo / "notes.txt").read_text() == "made by gemini\n"

    events = [gemini.parse_line(line) for line in seen["stdout"].splitlines()]
    result = gemini.summarize(events, exit_code=seen["returncode"])
    assert result.is_error is False
    assert result.summary == "Created notes.txt and committed it."
    tool_results = [p for e in events for p in e.parts if p.kind == "tool_result"]
    assert [(p.text, p.is_error) for p in tool_results] == [("Add notes", False)]

    requests = seen["requests"]
    assert {(r["method"], r["path"].split(":")[-1]) for r in requests} <= {
        ("POST", "generateContent"), ("POST", "streamGenerateContent?alt=sse")}
    agent_turns = [r for r in requests if r["turn"] is not None]
    assert [r["turn"] for r in agent_turns] == [0, 1]
    assert result.turns == 2
    assert all(r["headers"]["x-goog-api-key"] == "***" for r in requests)
    # The tokens the CLI reports are what the fake API said, over all its requests.
    assert result.tokens["input"] == sum(estimate_tokens(r["body"]["contents"])
                                         for r in requests)
    assert result.tokens["output"] > 0 and result.tokens["cache_read"] == 0
    second = agent_turns[1]["body"]["contents"][-1]["parts"][0]["functionResponse"]
    assert second["name"] == "run_shell_command"
    if quiet:
        assert seen["dns"] == []
        assert all("x-gemini-api-privileged-user-id" not in r["headers"] for r in requests)
    else:
        assert set(seen["dns"]) == {"play.googleapis.com"}
