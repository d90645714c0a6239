#!/usr/bin/env python3
"""A scripted stand-in for the OpenAI Responses API, standard library only.

It lets the real Codex CLI (``codex exec``) run end to end without the internet: on the
host (tests start it on 127.0.0.1 or on a test network's gateway address) or inside a
container (``python3 openai_server.py ...``; no dependencies).

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

``GET /v1/models`` answers an empty list; other GETs (a WebSocket upgrade) 404; other
POSTs 404 with an API-style error. Every request is appended to the log file as one JSON
line: method, path, headers (``authorization`` redacted), JSON body, and the turn it took.

Format source: https://platform.openai.com/docs/api-reference/responses-streaming and
the requests of Codex CLI 0.171.0 (tests/test_fakeapi_openai.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: Usage every reply reports.
USAGE: dict[str, Any] = {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 100},
         "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 5},
         "total_tokens": 1050}

#: Answer to requests after the script ran out.
SIDE_ANSWER = "ok"

_SECRET_HEADERS = {"authorization", "proxy-authorization", "x-api-key"}


def load_script(path: str | Path) -> list[list[dict[str, Any]]]:
    """Read a script file: a list of turns (or ``{"turns": [...]}``).

    Raises:
        ValueError: not a list of turns, or a step is not a message or shell step.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    turns = data.get("turns") if isinstance(data, dict) else data
    if not isinstance(turns, list):
        raise ValueError(f"{path}: expected a list of turns")
    for number, turn in enumerate(turns, 1):
        if not isinstance(turn, list) or not all(
                isinstance(s, dict) and s.get("type") in ("message", "shell") for s in turn):
            raise ValueError(f"{path}: turn {number}: steps are message or shell")
    return turns


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


class Script:
    """The turns left to play, shared by the server's threads.

    Args:
        turns: from :func:`load_script`.
        log_path: file the requests are appended to as JSON lines, or None.
    """

    def __init__(self, turns: list[list[dict[str, Any]]], log_path: str | Path | None = None):
        self.turns = turns
        self.next_turn = 0
        self.log_path = Path(log_path) if log_path else None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def take(self) -> tuple[int | None, list[dict[str, Any]]]:
        """The turn number (0-based; None when the script ran out) and its steps."""
        with self._lock:
            if self.next_turn < len(self.turns):
                number = self.next_turn
                self.next_turn += 1
                return number, self.turns[number]
            return None, [{"type": "message", "text": SIDE_ANSWER}]

    def new_id(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}_fake{next(self._ids):04d}"

    def log(self, entry: dict[str, Any]) -> None:
        if self.log_path is None:
            return
        with self._lock, self.log_path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")


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


class Handler(BaseHTTPRequestHandler):
    """Answers one request; ``server.script`` holds the shared :class:`Script`."""

    protocol_version = "HTTP/1.1"
    server_version = "fake-openai/1"

    @property
    def script(self) -> Script:
        return self.server.script  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the JSON log is the record; keep stderr quiet

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _record(self, body: Any, turn: int | None = None) -> None:
        headers = {k.lower(): ("***" if k.lower() in _SECRET_HEADERS else v)
                   for k, v in self.headers.items()}
        self.script.log({"method": self.command, "path": self.path, "headers": headers,
                         "body": body, "turn": turn})

    def _json(self, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

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
        turn, steps = self.script.take()
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
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the body ends when the connection does
        self.end_headers()
        self.close_connection = True
        for event in stream_events(response):
            self.wfile.write(event)
            self.wfile.flush()


class FakeOpenAI:
    """The server in a background thread, for tests.

    Args:
        turns: from :func:`load_script`.
        log_path: request log (JSON lines), or None.
        host: address to listen on.
        port: 0 picks a free one.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, turns: list[list[dict[str, Any]]], log_path: str | Path | None = None,
                 host: str = "127.0.0.1", port: int = 0):
        self.script = Script(turns, log_path)
        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.httpd.script = self.script  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def url(self) -> str:
        """``http://host:port/v1``, the value for ``[codex] base_url``."""
        host, port = self.httpd.socket.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fake OpenAI Responses API for tests.")
    parser.add_argument("--script", required=True, help="JSON file of turns")
    parser.add_argument("--log", help="append every request to this file (JSON lines)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    server = FakeOpenAI(load_script(args.script), args.log, args.host, args.port)
    print(f"listening on {server.url}", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
