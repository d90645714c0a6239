"""The fake Anthropic API (tests/fakeapi/server.py), alone and driving the real Claude Code."""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from git_iterare import agents, config
from tests.fakeapi import client
from tests.fakeapi.claude_cli import install_claude
from tests.fakeapi.server import FakeAnthropic, load_script

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]
TURNS: list[list[dict[str, Any]]] = [
    [{"type": "text", "text": "Running it."},
     {"type": "tool_use", "name": "Bash", "input": {"command": "echo 'hi \"there\"'"}}],
    [{"type": "text", "text": "All done."}],
]


#: What the agent sends as its key (the fake logs it redacted).
KEY_HEADER = {"x-api-key": "sk-secret"}
post = functools.partial(client.post, headers=KEY_HEADER)


def sse(payload: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in payload.decode().strip().split("\n\n"):
        name, data = chunk.split("\n")
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeAnthropic]:
    with FakeAnthropic(TURNS, tmp_path / "requests.jsonl") as server:
        yield server


def test_streaming_turns(fake: FakeAnthropic, tmp_path: Path) -> None:
    body = {"model": "claude-x", "stream": True, "tools": TOOLS,
            "messages": [{"role": "user", "content": "go"}]}
    kind, payload = post(fake.url + "/v1/messages?beta=true", body)
    assert kind == "text/event-stream"
    events = sse(payload)
    assert [name for name, _ in events] == [
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    assert events[0][1]["message"]["model"] == "claude-x"
    assert events[3][1]["delta"] == {"type": "text_delta", "text": "Running it."}
    assert events[5][1]["content_block"]["name"] == "Bash"
    assert json.loads(events[6][1]["delta"]["partial_json"]) == {"command": "echo 'hi \"there\"'"}
    assert events[8][1]["delta"]["stop_reason"] == "tool_use"
    assert events[8][1]["usage"]["output_tokens"] > 0

    _, second = post(fake.url + "/v1/messages", body)
    assert sse(second)[3][1]["delta"]["text"] == "All done."
    assert sse(second)[-2][1]["delta"]["stop_reason"] == "end_turn"

    log = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [(e["method"], e["path"], e["turn"]) for e in log] == [
        ("POST", "/v1/messages?beta=true", 0), ("POST", "/v1/messages", 1)]
    assert log[0]["headers"]["x-api-key"] == "***"
    assert log[0]["body"] == body


def test_plain_json_and_side_requests(fake: FakeAnthropic) -> None:
    # No tools offered: a side query, answered without taking a turn.
    kind, payload = post(fake.url + "/v1/messages", {"model": "m", "max_tokens": 1,
                                                     "messages": []})
    message = json.loads(payload)
    assert (kind, message["content"], message["stop_reason"]) == (
        "application/json", [{"type": "text", "text": "ok"}], "end_turn")
    _, payload = post(fake.url + "/v1/messages", {"model": "m", "tools": TOOLS, "messages": []})
    message = json.loads(payload)
    assert message["stop_reason"] == "tool_use"
    assert message["content"][1]["id"].startswith("toolu_")


def test_count_tokens_and_probes(fake: FakeAnthropic) -> None:
    body = {"messages": [{"content": "x" * 400}]}
    _, payload = post(fake.url + "/v1/messages/count_tokens", body)
    assert json.loads(payload)["input_tokens"] >= 100
    with urllib.request.urlopen(urllib.request.Request(fake.url + "/", method="HEAD")) as reply:
        assert reply.status == 200
    with pytest.raises(urllib.error.HTTPError) as info:
        post(fake.url + "/v1/other", {})
    assert info.value.code == 404


def test_script_file_and_command_line(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"content": TURNS[1]}]}))
    assert load_script(script) == [TURNS[1]]
    script.write_text(json.dumps([[{"type": "image"}]]))
    with pytest.raises(ValueError, match="blocks are text or tool_use"):
        load_script(script)
    script.write_text(json.dumps([TURNS[1]]))
    server = Path(__file__).parent / "fakeapi" / "server.py"
    proc = subprocess.Popen(["python3", str(server), "--script", str(script)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        _, payload = post(url + "/v1/messages", {"tools": TOOLS, "messages": []})
        assert json.loads(payload)["content"] == TURNS[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# --- the real Claude Code against the fake API ----------------------------------------

AGENT_USER = "itr-agents-claude"


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    return install_claude()


@pytest.fixture(scope="session")
def agent_user() -> Iterator[str | None]:
    """A non-root user to run Claude as (it refuses to skip permissions as root)."""
    if os.geteuid() != 0:
        yield None  # already not root: run as ourselves
        return
    try:
        pwd.getpwnam(AGENT_USER)
        created = False
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh",
                        AGENT_USER], check=True)
        created = True
    yield AGENT_USER
    if created:
        subprocess.run(["userdel", AGENT_USER], check=False)


@pytest.fixture
def shared_dir(agent_user: str | None) -> Iterator[Path]:
    """A temp dir the agent user owns (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="itr-agents-claude-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a network namespace")
@pytest.mark.parametrize("quiet", [True, False], ids=["quiet-env", "default-env"])
def test_real_claude_names_looked_up_behind_a_gateway(
        claude_bin: Path, agent_user: str | None, shared_dir: Path, quiet: bool) -> None:
    """With our environment and a gateway, Claude Code looks up no host at all, so a
    gateway given by address needs no allowlisted name (what required_domains says). Without it,
    it resolves api.anthropic.com even though every request goes to the gateway (which
    also shows the resolver log sees lookups)."""
    from git_iterare.agents.claude import QUIET_ENV
    from tests.fakeapi.netwatch import API_PORT

    (shared_dir / "home").mkdir()
    prompt = shared_dir / "prompt.md"
    prompt.write_text("Say hello.\n")
    subprocess.run(["chown", "-R", str(agent_user), str(shared_dir)], check=True)
    claude = agents.get_agent("claude")
    gateway = f"http://127.0.0.1:{API_PORT}"
    cfg = config.load(None, {"claude.base_url": gateway,
                             "firewall.allowed_cidrs": ["127.0.0.1/32"]},
                      env={}, git_entries=[])
    # A gateway by address needs no allowlisted name: the CIDR lets it through.
    assert claude.required_domains(cfg) == []
    env = {"HOME": str(shared_dir / "home"), "PATH": f"{claude_bin.parent}:/usr/bin:/bin",
           **claude.environment(cfg), **claude.credentials(cfg, {"ANTHROPIC_API_KEY": "k"}).env}
    if not quiet:
        env = {k: v for k, v in env.items() if k not in QUIET_ENV}
    spec = shared_dir / "spec.json"
    spec.write_text(json.dumps({
        "turns": [[{"type": "text", "text": "Hello."}]], "user": agent_user, "env": env,
        "cwd": str(shared_dir), "argv": claude.command(prompt_file=str(prompt), config=cfg)}))
    root = Path(__file__).parent.parent
    done = subprocess.run(["unshare", "--net", "--mount", sys.executable, "-m",
                           "tests.fakeapi.netwatch", str(spec)], cwd=root, capture_output=True,
                          text=True, timeout=300, check=True)
    seen = json.loads(done.stdout)
    assert seen["returncode"] == 0, seen["stderr"]
    events = [claude.parse_line(line) for line in seen["stdout"].splitlines()]
    assert claude.summarize(events).summary == "Hello."
    if quiet:
        assert seen["dns"] == []
        assert {(r["method"], r["path"].split("?")[0]) for r in seen["requests"]} == {
            ("HEAD", "/"), ("POST", "/v1/messages")}
    else:
        assert set(seen["dns"]) == {"api.anthropic.com"}
