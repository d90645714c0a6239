"""The fake OpenAI Responses API (tests/fakeapi/openai_server.py) alone; the real Codex CLI
drives it in tests/test_agent_clis.py and tests/test_runs_e2e.py."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakeapi import client, openai_server
from tests.fakeapi.openai_server import USAGE, FakeOpenAI
from tests.fakeapi.server import BaseHandler, FakeServer, Script

TURNS: list[list[dict[str, Any]]] = [
    [{"type": "message", "text": "Running it."}, {"type": "shell", "command": "echo hi"}],
    [{"type": "message", "text": "All done."}],
]
#: Codex 0.17x offers a custom tool ``exec`` inside a namespace.
CODE_MODE = [{"type": "namespace", "tools": [{"type": "custom", "name": "exec"}]}]


#: What the agent sends as its key (the fake logs it redacted).
KEY_HEADER = {"authorization": "Bearer sk-secret"}
post = functools.partial(client.post, headers=KEY_HEADER)


def sse(payload: bytes) -> list[dict[str, Any]]:
    events = []
    for chunk in payload.decode().strip().split("\n\n"):
        name, data = chunk.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        events.append(event)
    return events


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeOpenAI]:
    with FakeOpenAI(TURNS, tmp_path / "requests.jsonl") as server:
        yield server


def test_it_stands_on_the_shared_scaffolding() -> None:
    assert issubclass(FakeOpenAI, FakeServer)
    assert issubclass(FakeOpenAI.handler, BaseHandler)
    assert issubclass(FakeOpenAI.script_class, Script)


def test_streamed_turns_call_the_offered_tool(fake: FakeOpenAI, tmp_path: Path) -> None:
    assert fake.url.endswith("/v1")
    body = {"model": "gpt-x", "stream": True, "tools": CODE_MODE, "input": []}
    kind, payload = post(fake.url + "/responses", body)
    assert kind == "text/event-stream"
    events = sse(payload)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.output_item.done",
        "response.output_item.added", "response.output_item.done",
        "response.completed"]
    assert events[3]["delta"] == "Running it."
    call = events[7]["item"]
    assert (call["type"], call["name"]) == ("custom_tool_call", "exec")
    assert 'tools.exec_command({cmd: "echo hi"})' in call["input"]
    completed = events[-1]["response"]
    assert (completed["model"], completed["usage"]) == ("gpt-x", USAGE)

    # A function tool offered as an additional_tools input item; then the script's end.
    body = {"stream": False, "input": [{"type": "additional_tools", "tools": [
        {"type": "function", "name": "shell"}]}]}
    first = json.loads(post(fake.url + "/responses", body)[1])
    assert first["output"][0]["content"][0]["text"] == "All done."
    after = json.loads(post(fake.url + "/responses", body)[1])
    assert after["output"][0]["content"][0]["text"] == openai_server.SIDE_ANSWER

    log = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [(e["method"], e["path"], e["turn"]) for e in log] == [
        ("POST", "/v1/responses", 0), ("POST", "/v1/responses", 1),
        ("POST", "/v1/responses", None)]
    assert log[0]["headers"]["authorization"] == "***"
    assert log[0]["body"] == body | {"model": "gpt-x", "stream": True, "tools": CODE_MODE,
                                     "input": []}


def test_function_shapes_and_errors(fake: FakeOpenAI) -> None:
    tools = {"exec_command": "function"}
    assert json.loads(openai_server.shell_call("ls", tools, "c1")["arguments"]) == {"cmd": "ls"}
    shell = openai_server.shell_call("ls", {"shell": "function"}, "c1")
    assert json.loads(shell["arguments"]) == {"command": ["bash", "-lc", "ls"]}
    with pytest.raises(urllib.error.HTTPError) as info:  # a shell step, no tool offered
        post(fake.url + "/responses", {"input": []})
    assert info.value.code == 400
    assert "offers no tool to run commands" in json.loads(info.value.read())["error"]["message"]
    with pytest.raises(urllib.error.HTTPError) as info:
        post(fake.url + "/chat/completions", {})
    assert info.value.code == 404
    with urllib.request.urlopen(fake.url + "/models", timeout=10) as reply:
        assert json.loads(reply.read()) == {"object": "list", "data": []}
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(fake.url + "/realtime", timeout=10)
    assert info.value.code == 404


def test_script_file_and_command_line(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([[{"type": "tool_use"}]]))
    proc = subprocess.run([sys.executable, "-m", "tests.fakeapi.openai_server", "--script",
                           str(script)], cwd=Path(__file__).parent.parent,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "are message or shell" in proc.stderr
    script.write_text(json.dumps({"turns": [TURNS[1]]}))
    server = subprocess.Popen([sys.executable, "-m", "tests.fakeapi.openai_server",
                               "--script", str(script)], cwd=Path(__file__).parent.parent,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[-1]
        assert url.endswith("/v1")
        reply = json.loads(post(url + "/responses", {"stream": False, "input": []})[1])
        assert reply["output"][0]["content"][0]["text"] == "All done."
    finally:
        server.terminate()
        server.wait(timeout=10)
