#!/usr/bin/env python3
"""A scripted stand-in for the Gemini API (``generativelanguage.googleapis.com``), for
tests: the real Gemini CLI runs against it end to end without the internet.

It is built on the scaffolding of :mod:`tests.fakeapi.server` and plays the same script
(:func:`tests.fakeapi.server.load_script`): turns of ``text`` and ``tool_use`` blocks, in
Anthropic's shape so one script serves both fakes. A ``tool_use`` block
``{"name": "run_shell_command", "input": {"command": "..."}}`` becomes the Gemini part
``{"functionCall": {"name": ..., "args": ...}}``.

Requests (as Gemini CLI 0.61 sends them through the google-genai SDK; see
tests/test_fakeapi_gemini.py):

- ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` and ``...:generateContent``:
  a request that offers ``tools`` (the agent's own loop) takes the next turn. Requests
  without tools (the CLI's side queries: model routing, next-speaker checks, titles) take
  none; when they ask for JSON (``generationConfig.responseJsonSchema`` or
  ``responseSchema``) the answer is an object that satisfies the schema (strings
  ``"fake"``, numbers 1, an enum's first value), else the text ``ok``. Streamed replies are
  server-sent events, one ``data: <GenerateContentResponse>`` per part; the last carries
  ``finishReason`` and ``usageMetadata`` (promptTokenCount, candidatesTokenCount,
  totalTokenCount).
- ``POST ...:countTokens`` answers an estimate (4 characters a token).
- GET and HEAD answer 200 ``{}``; other POSTs 404 with a Google-style error.

Every request is logged as in the Anthropic fake (``x-goog-api-key`` redacted).

Run alone: ``python3 -m tests.fakeapi.gemini --script turns.json [--port N]``.
Format source: https://ai.google.dev/api/generate-content
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tests.fakeapi.server import (
    SIDE_ANSWER,
    BaseHandler,
    FakeServer,
    estimate_tokens,
    main,
)


def schema_example(schema: Any) -> Any:
    """A value that satisfies a JSON schema (OpenAPI-style upper-case types too).

    Objects get their required properties (all of them when none is listed), strings
    ``"fake"`` (or the enum's first value), numbers 1, booleans false, arrays one item.
    """
    if not isinstance(schema, dict):
        return "fake"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        found = schema.get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        required = schema.get("required")
        wanted = required if isinstance(required, list) else list(props)
        return {name: schema_example(props.get(name)) for name in wanted}
    if kind == "array":
        return [schema_example(schema.get("items"))]
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    return "fake"


def gemini_parts(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Script blocks as Gemini content parts (text, or a functionCall)."""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if block["type"] == "text":
            parts.append({"text": block["text"]})
        else:
            parts.append({"functionCall": {"name": block["name"], "args": block["input"]}})
    return parts


class GeminiHandler(BaseHandler):
    """Speaks the Gemini API's generateContent, streamGenerateContent and countTokens."""

    server_version = "fake-gemini/1"
    request_id_header = "x-goog-request-id"

    def do_POST(self) -> None:
        body = self._read_body()
        path = self.path.split("?", 1)[0]
        method = path.rsplit(":", 1)[-1] if ":" in path else ""
        if method == "countTokens":
            self._record(body)
            self._json(200, {"totalTokens": estimate_tokens(body)})
        elif method in ("generateContent", "streamGenerateContent") and isinstance(body, dict):
            self._generate(body, path, stream=method == "streamGenerateContent")
        else:
            self._record(body)
            self._json(404, {"error": {"code": 404, "status": "NOT_FOUND",
                                       "message": f"fake API: no {path}"}})

    def _generate(self, body: dict[str, Any], path: str, *, stream: bool) -> None:
        turn, blocks = self.script.take(body)
        self._record(body, turn)
        if turn is None:
            config = body.get("generationConfig")
            config = config if isinstance(config, dict) else {}
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            text = json.dumps(schema_example(schema)) if schema else SIDE_ANSWER
            blocks = [{"type": "text", "text": text}]
        parts = gemini_parts(blocks)
        model = path.rsplit("/", 1)[-1].split(":", 1)[0] or "gemini-fake"
        prompt = (self.script.input_tokens_per_turn
                  if turn is not None and self.script.input_tokens_per_turn
                  else estimate_tokens(body.get("contents", [])))
        output = estimate_tokens(parts)
        usage = {"promptTokenCount": prompt, "candidatesTokenCount": output,
                 "totalTokenCount": prompt + output}
        response_id = self.script.new_id()

        def reply(chunk: list[dict[str, Any]], last: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": chunk},
                                         "index": 0}
            message: dict[str, Any] = {"candidates": [candidate], "modelVersion": model,
                                       "responseId": response_id}
            if last:
                candidate["finishReason"] = "STOP"
                message["usageMetadata"] = usage
            return message

        if not stream:
            self._json(200, reply(parts, True))
            return
        self._start_event_stream()
        for index, part in enumerate(parts):
            event = reply([part], index == len(parts) - 1)
            self.wfile.write(f"data: {json.dumps(event)}\r\n\r\n".encode())
            self.wfile.flush()


class FakeGemini(FakeServer):
    """The fake Gemini API in a background thread (see :class:`FakeServer`); its
    :attr:`url` is the value for ``GOOGLE_GEMINI_BASE_URL``."""

    handler = GeminiHandler


if __name__ == "__main__":
    sys.exit(main(server_class=FakeGemini, description="Fake Gemini API for tests."))
