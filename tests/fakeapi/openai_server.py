#!/usr/bin/env python3
"""A scripted stand-in for the OpenAI Responses API, standard library only.

It lets the real Codex CLI (``codex exec``) run end to end without the internet: tests
start it on 127.0.0.1 or on a test network's gateway address. It is built on the
scaffolding of :mod:`tests.fakeapi.server` (script, request log, JSON replies, the server
thread, the command line). Run alone: ``python3 -m tests.fakeapi.openai_server --script
turns.json [--port N]``.

The script is a list of turns, each a list of steps::

    [
      [{"type": "message", "text": "I'll create it."},
       {"type": "shell", "command": "echo hi > f && git add f && git commit -m f"}],
      [{"type": "message", "text": "Done."}]
    ]

Each ``POST /v1/responses`` takes the next turn (requests after the script ran out get
a short message). A ``shell`` step becomes the tool call the request offers for running
a command, whichever of the shapes Codex has used:

* Codex 0.17x "code mode": a custom tool ``exec`` (JavaScript; in the request's
  ``tools`` or in an ``additional_tools`` input item): a ``custom_tool_call`` whose input
  is ``const r = await tools.exec_command({cmd: ...}); text(r.output);``;
* a function ``exec_command`` (``{"cmd": ...}``) or ``shell`` (``{"command": ["bash",
  "-lc", ...]}``): a ``function_call`` with those arguments.

Replies are streamed as server-sent events as the real API sends them
(``response.created``, ``response.output_item.added``, ``response.output_text.delta``,
``response.output_item.done`` per item, then ``response.completed`` with ``usage``:
``input_tokens`` (``input_tokens_details.cached_tokens``), ``output_tokens``
(``output_tokens_details.reasoning_tokens``), ``total_tokens``). Usage is fixed per turn
(:data:`USAGE`) so tests can check the sums. A request with ``"stream": false`` gets the
response object as JSON.

``GET /v1/models`` answers an empty list; other GETs (a WebSocket upgrade) 404; HEAD
answers 200 ``{}``; other POSTs 404 with an API-style error. Every request is logged as in
the Anthropic fake (``authorization`` redacted).

Format source: https://platform.openai.com/docs/api-reference/responses-streaming and
the requests of Codex CLI 0.171.0 (tests/test_fakeapi_openai.py).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.fakeapi.server import SIDE_ANSWER, BaseHandler, FakeServer, Script, main

#: Usage every reply reports.
USAGE: dict[str, Any] = {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 100},
         "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 5},
         "total_tokens": 1050}
#: The step types of a script.
KINDS = ("message", "shell")


def offered_tools(body: dict[str, Any]) -> dict[str, str]:
    """The tools a request offers: name -> type (``custom`` or ``function``), from its
    ``tools`` and from ``additional_tools`` input items, namespaces flattened."""
    found: dict[str, str] = {}

    def walk(tools: Any) -> None:
        for tool in tools if isinstance(tools, list) else []:
            if not isinstance(tool, dict):
                continue
            if tool.get("type") == "namespace":
                walk(tool.get("tools"))
            elif isinstance(tool.get("name"), str):
                found.setdefault(tool["name"], str(tool.get("type")))

    walk(body.get("tools"))
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            walk(item.get("tools"))
    return found


def shell_call(command: str, tools: dict[str, str], call_id: str) -> dict[str, Any]:
    """The output item calling the offered tool that runs ``command``.

    Raises:
        ValueError: the request offers no tool that runs commands.
    """
    if tools.get("exec") == "custom":
        code = (f"const r = await tools.exec_command({{cmd: {json.dumps(command)}}});\n"
                "text(r.output);")
        return {"type": "custom_tool_call", "call_id": call_id, "name": "exec",
                "input": code, "status": "completed"}
    if "exec_command" in tools:
        return {"type": "function_call", "call_id": call_id, "name": "exec_command",
                "arguments": json.dumps({"cmd": command}), "status": "completed"}
    if "shell" in tools:
        return {"type": "function_call", "call_id": call_id, "name": "shell",
                "arguments": json.dumps({"command": ["bash", "-lc", command]}),
                "status": "completed"}
    raise ValueError(f"the request offers no tool to run commands: {sorted(tools)}")


class ResponsesScript(Script):
    """The turns left to play: every Responses request takes one (Codex sends no side
    queries), until the script runs out."""

    def take(self, body: dict[str, Any]) -> tuple[int | None, list[dict[str, Any]]]:
        """The turn number (0-based; None when the script ran out) and its steps."""
        with self._lock:
            if self.next_turn < len(self.turns):
                number = self.next_turn
                self.next_turn += 1
                return number, self.turns[number]
            return None, [{"type": "message", "text": SIDE_ANSWER}]


def _sse(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def stream_events(response: dict[str, Any]) -> list[bytes]:
    """The server-sent events that stream ``response`` (a complete response object)."""
    events = [_sse({"type": "response.created",
                    "response": dict(response, status="in_progress", output=[])})]
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events += [
                _sse({"type": "response.output_item.added", "output_index": index,
                      "item": dict(item, status="in_progress", content=[])}),
                _sse({"type": "response.content_part.added", "item_id": item["id"],
                      "output_index": index, "content_index": 0,
                      "part": {"type": "output_text", "text": "", "annotations": []}}),
                _sse({"type": "response.output_text.delta", "item_id": item["id"],
                      "output_index": index, "content_index": 0, "delta": text}),
                _sse({"type": "response.output_text.done", "item_id": item["id"],
                      "output_index": index, "content_index": 0, "text": text}),
            ]
        else:
            events.append(_sse({"type": "response.output_item.added", "output_index": index,
                                "item": item}))
        events.append(_sse({"type": "response.output_item.done", "output_index": index,
                            "item": item}))
    events.append(_sse({"type": "response.completed", "response": response}))
    return events


class ResponsesHandler(BaseHandler):
    """Speaks the OpenAI Responses API (``POST /v1/responses``) and ``GET /v1/models``."""

    server_version = "fake-openai/1"
    request_id_header = "x-request-id"

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message, "type": "invalid_request_error",
                                      "code": None, "param": None}})

    def do_GET(self) -> None:
        self._record(None)
        if self.path.split("?", 1)[0].endswith("/models"):
            self._json(200, {"object": "list", "data": []})
        else:
            self._error(404, f"fake API: no GET {self.path}")

    def do_POST(self) -> None:
        body = self._read_body()
        if not self.path.split("?", 1)[0].endswith("/responses") or not isinstance(body, dict):
            self._record(body)
            self._error(404, f"fake API: no POST {self.path}")
            return
        turn, steps = self.script.take(body)
        self._record(body, turn)
        tools = offered_tools(body)
        output = []
        for step in steps:
            if step["type"] == "message":
                output.append({"type": "message", "id": self.script.new_id("msg"),
                               "role": "assistant", "status": "completed",
                               "content": [{"type": "output_text", "text": step["text"],
                                            "annotations": []}]})
            else:
                try:
                    call = shell_call(step["command"], tools, self.script.new_id("call"))
                except ValueError as exc:
                    self._error(400, str(exc))
                    return
                output.append(dict(call, id=self.script.new_id("ctc")))
        response = {"id": self.script.new_id("resp"), "object": "response",
                    "created_at": 0, "status": "completed",
                    "model": body.get("model") or "gpt-fake", "output": output,
                    "usage": USAGE}
        if body.get("stream") is False:
            self._json(200, response)
            return
        self._start_event_stream()
        for event in stream_events(response):
            self.wfile.write(event)
            self.wfile.flush()


class FakeOpenAI(FakeServer):
    """The fake Responses API in a background thread (see :class:`FakeServer`); its
    :attr:`url` ends in ``/v1``, the value for ``[codex] base_url``."""

    handler = ResponsesHandler
    script_class = ResponsesScript
    kinds = KINDS

    @property
    def url(self) -> str:
        """``http://host:port/v1``."""
        return f"{super().url}/v1"


if __name__ == "__main__":
    sys.exit(main(server_class=FakeOpenAI, description="Fake OpenAI Responses API for tests."))
