#!/usr/bin/env python3
"""A scripted stand-in for the Anthropic Messages API, standard library only.

It lets the real Claude Code CLI run end to end without the internet: on the host (tests
start it on 127.0.0.1) or inside a container (``python3 server.py ...``; no dependencies).

The script is a JSON file::

    {"turns": [
        {"content": [{"type": "text", "text": "I'll create it."},
                     {"type": "tool_use", "name": "Bash",
                      "input": {"command": "echo hi > f && git add f && git commit -m f"}}]},
        {"content": [{"type": "text", "text": "Done."}]}
    ]}

(a bare list of turns works too; a turn may also be a plain list of blocks). Each request
to ``POST /v1/messages`` that offers tools (the agent's own loop) takes the next turn; the
reply stops with ``tool_use`` when the turn has a tool_use block, else ``end_turn``. Requests
without tools (Claude Code's side queries: titles, topics, quota probes) and requests after
the script ran out get a short text answer and take no turn. Streaming (``"stream": true``,
server-sent events as the real API sends them: message_start, content_block_start,
content_block_delta with text_delta or input_json_delta, content_block_stop, message_delta
with usage and stop_reason, message_stop) and plain JSON replies are both spoken.

Usage is estimated from the text (4 characters a token); with ``input_tokens_per_turn``
(``--input-tokens-per-turn``) every reply that takes a turn reports that many input tokens
instead, so each turn costs the agent a known, large amount (a budget test's meter).

With ``failures`` (``--fail N``, ``--fail-status``), the first N requests to
``POST /v1/messages`` are answered with that status (429 by default) and an API-style error,
``retry-after: 1``, as the API answers a rate limit; they take no turn.

``POST /v1/messages/count_tokens`` answers an estimate (4 characters a token). Any other
GET or HEAD answers 200 with ``{}``; other POSTs 404 with an API-style error. Every request
is appended to the log file as one JSON line: method, path, headers (``x-api-key`` and
``authorization`` redacted), JSON body, and the turn it took (or null).

Message format source: https://docs.anthropic.com/en/api/messages-streaming

The scaffolding (:class:`Script`, :class:`BaseHandler`, :class:`FakeServer`, :func:`main`)
serves the other fake APIs too (:mod:`tests.fakeapi.gemini`,
:mod:`tests.fakeapi.openai_server`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

#: Answer to requests that take no turn.
SIDE_ANSWER = "ok"

_SECRET_HEADERS = {"x-api-key", "x-goog-api-key", "authorization", "proxy-authorization"}


def load_script(path: str | Path, kinds: tuple[str, ...] = ("text", "tool_use")
                ) -> list[list[dict[str, Any]]]:
    """Read a script file and return its turns, each a list of content blocks.

    Args:
        path: a JSON list of turns, or ``{"turns": [...]}``; a turn is a list of blocks,
            or ``{"content": [...]}``.
        kinds: the block types a turn may hold (each block is an object with ``type``).

    Raises:
        ValueError: the file is not a list of turns, or a block has a type not in
            ``kinds``.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    turns = data.get("turns") if isinstance(data, dict) else data
    if not isinstance(turns, list):
        raise ValueError(f"{path}: expected a list of turns or {{'turns': [...]}}")
    result = []
    for number, turn in enumerate(turns, 1):
        blocks = turn.get("content") if isinstance(turn, dict) else turn
        if not isinstance(blocks, list):
            raise ValueError(f"{path}: turn {number}: expected a list of content blocks")
        for block in blocks:
            if not isinstance(block, dict) or block.get("type") not in kinds:
                raise ValueError(f"{path}: turn {number}: blocks are {' or '.join(kinds)}")
        result.append(blocks)
    return result


def estimate_tokens(value: Any) -> int:
    """A rough token count of a JSON value: one token per 4 characters, at least 1."""
    text = value if isinstance(value, str) else json.dumps(value)
    return max(1, len(text) // 4)


class Script:
    """The turns left to play, shared by the server's threads.

    Args:
        turns: from :func:`load_script`.
        log_path: file the requests are appended to as JSON lines, or None.
        input_tokens_per_turn: input tokens every turn taken reports (None: estimated).
    """

    def __init__(self, turns: list[list[dict[str, Any]]], log_path: str | Path | None = None,
                 input_tokens_per_turn: int | None = None, failures: int = 0,
                 fail_status: int = 429):
        self.turns = turns
        self.input_tokens_per_turn = input_tokens_per_turn
        self.failures = failures
        self.fail_status = fail_status
        self.next_turn = 0
        self.log_path = Path(log_path) if log_path else None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def take(self, body: dict[str, Any]) -> tuple[int | None, list[dict[str, Any]]]:
        """The turn number (0-based; None when none is taken) and the blocks to answer."""
        with self._lock:
            if body.get("tools") and self.next_turn < len(self.turns):
                number = self.next_turn
                self.next_turn += 1
                blocks = [dict(b) for b in self.turns[number]]
            else:
                number, blocks = None, [{"type": "text", "text": SIDE_ANSWER}]
            for block in blocks:
                if block["type"] == "tool_use":
                    block.setdefault("id", f"toolu_fake{next(self._ids):04d}")
                    block.setdefault("input", {})
            return number, blocks

    def fail(self) -> int | None:
        """The status to answer this request with while failures are left, else None."""
        with self._lock:
            if self.failures <= 0:
                return None
            self.failures -= 1
            return self.fail_status

    def new_id(self, prefix: str = "msg") -> str:
        """A fresh id, ``<prefix>_fake0001`` and on."""
        with self._lock:
            return f"{prefix}_fake{next(self._ids):04d}"

    def log(self, entry: dict[str, Any]) -> None:
        if self.log_path is None:
            return
        with self._lock, self.log_path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def stream_events(message: dict[str, Any]) -> list[bytes]:
    """The server-sent events that stream ``message`` (a complete Messages API reply)."""
    start = dict(message, content=[], stop_reason=None, stop_sequence=None,
                 usage=dict(message["usage"], output_tokens=1))
    events = [_sse("message_start", {"type": "message_start", "message": start}),
              _sse("ping", {"type": "ping"})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            _sse("content_block_start",
                 {"type": "content_block_start", "index": index, "content_block": first}),
            _sse("content_block_delta",
                 {"type": "content_block_delta", "index": index, "delta": delta}),
            _sse("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    events += [
        _sse("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        }),
        _sse("message_stop", {"type": "message_stop"}),
    ]
    return events


class BaseHandler(BaseHTTPRequestHandler):
    """What every fake API's handler shares: the request log, JSON replies, a 200 ``{}``
    to GET and HEAD, and the opening of a server-sent event stream.

    ``server.script`` holds the shared :class:`Script`; subclasses define ``do_POST``.
    """

    protocol_version = "HTTP/1.1"
    server_version = "fake-api/1"
    #: Header carrying the request id in replies.
    request_id_header = "request-id"

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

    def _json(self, status: int, data: Any, *, head: bool = False,
              headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header(self.request_id_header, "req_fake")
        self.end_headers()
        if not head:
            self.wfile.write(payload)

    def _start_event_stream(self) -> None:
        """Send the headers of a ``text/event-stream`` reply whose body ends when the
        connection does (the caller then writes the events)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header(self.request_id_header, "req_fake")
        self.send_header("Connection", "close")  # the body ends when the connection does
        self.end_headers()
        self.close_connection = True

    def do_GET(self) -> None:
        self._record(None)
        self._json(200, {})

    def do_HEAD(self) -> None:
        self._record(None)
        self._json(200, {}, head=True)


class Handler(BaseHandler):
    """Speaks the Anthropic Messages API."""

    server_version = "fake-anthropic/1"

    def do_POST(self) -> None:
        body = self._read_body()
        path = self.path.split("?", 1)[0]
        if path.endswith("/v1/messages/count_tokens"):
            self._record(body)
            self._json(200, {"input_tokens": estimate_tokens(body)})
        elif path.endswith("/v1/messages") and isinstance(body, dict):
            self._messages(body)
        else:
            self._record(body)
            self._json(404, {"type": "error", "error": {
                "type": "not_found_error", "message": f"fake API: no {path}"}})

    def _messages(self, body: dict[str, Any]) -> None:
        status = self.script.fail()
        if status is not None:
            self._record(body)
            kind = "rate_limit_error" if status == 429 else "api_error"
            self._json(status, {"type": "error", "error": {
                "type": kind, "message": f"fake API: answering {status}"}},
                headers={"retry-after": "1"})
            return
        turn, blocks = self.script.take(body)
        self._record(body, turn)
        output = [b["text"] if b["type"] == "text" else b["input"] for b in blocks]
        message = {
            "id": self.script.new_id(),
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or "claude-fake",
            "content": blocks,
            "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in blocks)
            else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": self.script.input_tokens_per_turn
                      if turn is not None and self.script.input_tokens_per_turn
                      else estimate_tokens(body.get("messages", [])),
                      "output_tokens": estimate_tokens(output),
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }
        if not body.get("stream"):
            self._json(200, message)
            return
        self._start_event_stream()
        for event in stream_events(message):
            self.wfile.write(event)
            self.wfile.flush()


_S = TypeVar("_S", bound="FakeServer")


class FakeServer:
    """A fake API in a background thread, for tests; subclasses set :attr:`handler`.

    Args:
        turns: from :func:`load_script`.
        log_path: request log (JSON lines), or None.
        host: address to listen on.
        port: 0 picks a free one.
        input_tokens_per_turn: input tokens reported for every turn taken (None: an
            estimate from the request).
        failures: the first this many message requests are answered ``fail_status``.
        fail_status: the HTTP status of those answers.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    #: The request handler speaking the API.
    handler: type[BaseHandler] = BaseHandler
    #: What plays the turns (a subclass decides differently which requests take one).
    script_class: type[Script] = Script
    #: The block types of this API's scripts (see :func:`load_script`).
    kinds: tuple[str, ...] = ("text", "tool_use")

    def __init__(self, turns: list[list[dict[str, Any]]], log_path: str | Path | None = None,
                 host: str = "127.0.0.1", port: int = 0,
                 input_tokens_per_turn: int | None = None, failures: int = 0,
                 fail_status: int = 429):
        self.script = self.script_class(turns, log_path, input_tokens_per_turn, failures,
                                        fail_status)
        self.httpd = ThreadingHTTPServer((host, port), self.handler)
        self.httpd.daemon_threads = True
        self.httpd.script = self.script  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def url(self) -> str:
        """``http://host:port``, the value for the agent's base URL setting."""
        host, port = self.httpd.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self: _S) -> _S:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeAnthropic(FakeServer):
    """The fake Anthropic Messages API (see the module docstring)."""

    handler = Handler


def main(argv: list[str] | None = None, server_class: type[FakeServer] = FakeAnthropic,
         description: str = "Fake Anthropic Messages API for tests.") -> int:
    """The command line of a fake API server (``--script``, ``--log``, ``--host``, ...)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--script", required=True, help="JSON file of turns")
    parser.add_argument("--log", help="append every request to this file (JSON lines)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--input-tokens-per-turn", type=int, default=None,
                        help="report this many input tokens for every turn taken")
    parser.add_argument("--fail", type=int, default=0,
                        help="answer the first N message requests with --fail-status")
    parser.add_argument("--fail-status", type=int, default=429)
    args = parser.parse_args(argv)
    server = server_class(load_script(args.script, server_class.kinds), args.log, args.host,
                          args.port, args.input_tokens_per_turn, args.fail, args.fail_status)
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
