"""Redaction of secrets and their common encodings (:mod:`git_iterare.redaction`), in the
store's record fields and log, and its cost on a large log."""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from pathlib import Path

import pytest

from git_iterare import proc
from git_iterare.redaction import MIN_ENCODED, MIN_MASKED, Redactor
from git_iterare.runs.store import RunStore
from tests.conftest import git
from tests.runs_helpers import make_run

TOKEN = "npm_Ab3dEfGhIjKlMnOpQrStUvWxYz0123456789"
RAW = TOKEN.encode()


def encodings(secret: str) -> dict[str, str]:
    raw = secret.encode()
    return {
        "plain": secret,
        "base64": base64.b64encode(raw).decode(),
        "base64 after 1 byte": base64.b64encode(b"x" + raw).decode(),
        "base64 after 2 bytes": base64.b64encode(b"xy" + raw + b"tail").decode(),
        "base64 url-safe": base64.urlsafe_b64encode(b"\xfb" + raw).decode(),
        "base64 wrapped at 76": base64.encodebytes(b"z" * 40 + raw).decode(),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
        "reversed": secret[::-1],
        "url-encoded": urllib.parse.quote(f"k={secret}/", safe=""),
        "dns, case-folded": f"{secret.lower()}.example.org",
        "dns, split across labels": f"{secret[:13]}.{secret[13:26]}.{secret[26:]}.evil.org",
        "dashes between chunks": f"{secret[:7]}-{secret[7:]}",
        "base32": base64.b32encode(raw).decode().lower().rstrip("="),
        "hex in dns labels": f"{raw.hex()[:40]}.{raw.hex()[40:]}.example.org",
    }


@pytest.mark.parametrize("kind", list(encodings(TOKEN)))
def test_each_encoding_is_redacted(kind: str) -> None:
    text = encodings(TOKEN)[kind]
    out = Redactor([TOKEN]).redact(f"before {text} after")
    assert "***" in out
    assert out.startswith("before ") and out.endswith(" after")
    # Whatever is left is too little to rebuild the secret: no 12 characters in a row of
    # it, reversed, in hex or in base64.
    folded = out.casefold()
    for form in (TOKEN, TOKEN[::-1], RAW.hex(), base64.b64encode(RAW).decode()[:-4]):
        for i in range(len(form) - 12):
            assert form[i:i + 12].casefold() not in folded, (kind, out)


def test_secrets_with_json_and_url_specials() -> None:
    secret = "p@ss/w0rd+more=="
    text = json.dumps({"q": urllib.parse.quote_plus(secret), "b": secret})
    assert Redactor([secret]).redact(text) == '{"q": "***", "b": "***"}'


def test_short_secrets_only_as_they_are_and_as_whole_words() -> None:
    short = "abc1234"
    assert MIN_MASKED <= len(short) < MIN_ENCODED
    redactor = Redactor([short])
    assert redactor.redact(f"x {short}, ABC1234 {short[::-1]} x{short} {short}9 "
                           f"k={short}&") == "x ***, ABC1234 4321cba xabc1234 abc12349 k=***&"


@pytest.mark.parametrize("value", ["1", "e", "on"])
def test_values_shorter_than_min_masked_are_never_masked(value: str) -> None:
    """``DEBUG=1 git iterare execute t -e DEBUG``: masking every 1 destroyed the text."""
    assert len(value) < MIN_MASKED
    text = '{"type":"result","subtype":"success","total_cost_usd":0.01,"on":1} e'
    redactor = Redactor([value])
    assert redactor.redact(text) == text
    assert redactor.redact_value({"agent": "shell", value: [value]}) == {
        "agent": "shell", value: [value]}


SEPARATED = {
    "spaces": " ".join(TOKEN),
    "underscores": "_".join(TOKEN),
    "several separators": " -_ ".join(TOKEN),
    "zero-width spaces": "\u200b".join(TOKEN),
    "zero-width joiners and word joiners": "\u200d\u2060".join(TOKEN),
    "soft hyphens": "\u00ad".join(TOKEN),
    "byte order marks": "\ufeff".join(TOKEN),
    "combining marks": "\u0301".join(TOKEN),
    "Hangul fillers": "\u3164".join(TOKEN),
    "line breaks, upper case": "\n".join(TOKEN.upper()),
    "JSON escapes": json.dumps("\u200b\t".join(TOKEN))[1:-1],
    "reversed with dots": ".".join(TOKEN[::-1]),
    "hex with spaces": " ".join(RAW.hex()),
    "DNS labels and underscores": f"{'_'.join(TOKEN[:20])}.{TOKEN[20:]}.example.org",
}


@pytest.mark.parametrize("kind", list(SEPARATED))
def test_separators_between_the_characters_are_dropped(kind: str) -> None:
    out = Redactor([TOKEN]).redact(f"before {SEPARATED[kind]} after")
    assert out.startswith("before ***") and out.endswith(" after"), out
    # Read as a person would, separators dropped: no 12 characters of it are left.
    left = "".join(c for c in out if c.isalnum() and c != "\u3164").casefold()
    for form in (TOKEN, TOKEN[::-1], RAW.hex()):
        form = "".join(c for c in form if c.isalnum()).casefold()
        for i in range(len(form) - 12):
            assert form[i:i + 12] not in left, (kind, out)


def test_json_lines_are_redacted_value_by_value_and_stay_json() -> None:
    redactor = Redactor([TOKEN, "text", "true"])
    line = json.dumps({"type": "assistant", "message": {"content": [
        {"type": "text", "text": f"the key is {' '.join(TOKEN)}, mode text, is true"}]},
        "is_error": True, "text": 1}) + "\n"
    out = redactor.redact_line(line)
    assert out.endswith("\n")
    assert json.loads(out) == {"type": "assistant", "message": {"content": [
        {"type": "text", "text": "the key is ***, mode ***, is ***"}]},
        "is_error": True, "text": 1}
    plain = "the key is " + "_".join(TOKEN) + " and true\n"
    assert redactor.redact_line(plain) == "the key is *** and ***\n"
    assert redactor.redact_line('{"a": 1} true\n') == '{"a": 1} ***\n'  # not JSON
    untouched = '{"type": "text",  "x": 1}\n'
    assert redactor.redact_line(untouched) is untouched
    log = (line + plain).encode()
    assert redactor.redact_log(log) == (out + "the key is *** and ***\n").encode()


def test_ordinary_text_is_untouched() -> None:
    text = Path(__file__).with_name("data").joinpath("claude-stream.jsonl").read_text()
    assert Redactor([TOKEN, "ghp_0123456789abcdefABCDEF0123456789abcd"]).redact(text) == text
    assert Redactor([]).redact(text) is text


def test_values_and_keys_of_records() -> None:
    value = {"blocked": {f"{TOKEN.lower()}.example.org": 2}, "list": [TOKEN, 3, None]}
    assert Redactor([TOKEN]).redact_value(value) == {
        "blocked": {"***.example.org": 2}, "list": ["***", 3, None]}


def test_a_large_log_is_redacted_in_one_pass() -> None:
    line = Path(__file__).with_name("data").joinpath("claude-stream.jsonl").read_text()
    big = line * (10_000_000 // len(line))
    secret_line = base64.b64encode(RAW).decode() + "\n"
    redactor = Redactor([TOKEN])
    started = time.monotonic()
    out = redactor.redact(big + secret_line)
    assert time.monotonic() - started < 5  # about 0.5 s on a laptop core
    assert out.endswith("***Q==\n")


def test_the_store_redacts_every_field_and_the_log(repo: Path) -> None:
    rec = make_run(repo, "leak")
    proc.register_secret(TOKEN)
    store = RunStore(repo)
    store.transition(rec.id, "running")
    store.set_log(rec.id, f"{base64.b64encode(RAW).decode()}\n{TOKEN[::-1]}\n".encode())
    store.transition(rec.id, "failed", error=f"the agent said {TOKEN}",
                     egress={"blocked": {f"{TOKEN}.example.org": 1},
                             "allowed": {RAW.hex(): 1}})
    stored = git("show", f"refs/iterare/runs/{rec.id}:run.json", cwd=repo).stdout
    log = git("show", f"refs/iterare/runs/{rec.id}:log.jsonl", cwd=repo).stdout
    for text in (stored, log):
        assert TOKEN not in text and TOKEN[::-1] not in text and RAW.hex() not in text
        assert base64.b64encode(RAW).decode()[:-4] not in text
    data = json.loads(stored)
    assert data["error"] == "the agent said ***"
    assert data["egress"] == {"blocked": {"***.example.org": 1}, "allowed": {"***": 1}}
    assert data["id"] == rec.id


@pytest.mark.parametrize("secret", ["e", "shell", "main", "2026", "running",
                                    "iterare/", "succeeded", "deadbeefcafe"])
def test_git_iterare_s_own_fields_are_never_masked(repo: Path, secret: str) -> None:
    """Issue 22: with ``--env FOO=e`` every field was masked, keys too (``"sh***ll"``):
    the record's status, dates, branch and container no longer parsed, and the run stayed
    ``running`` forever. Only what the agent printed or made is redacted."""
    rec = make_run(repo, "own", container="deadbeefcafe" * 5, worktree=str(repo / "w"),
                   extra={"host": "main-host", "sidecar_image": "sha256:2026"})
    proc.register_secret(secret)
    proc.register_secret(TOKEN)
    store = RunStore(repo)
    store.transition(rec.id, "running", started="2026-01-01T00:00:00Z")
    store.transition(rec.id, "succeeded", error=f"the agent said {secret} and {TOKEN}",
                     egress={"blocked": {f"{secret}.example.org": 1}})
    stored = json.loads(git("show", f"refs/iterare/runs/{rec.id}:run.json", cwd=repo).stdout)
    expected = {**json.loads(rec.to_json()), "status": "succeeded",
                "started": "2026-01-01T00:00:00Z"}
    for key in ("id", "name", "status", "agent", "branch", "base_commit", "base_branch",
                "container", "worktree", "created", "started", "prompt_name", "extra"):
        assert stored[key] == expected[key], key
    shown = secret if len(secret) < MIN_MASKED else "***"
    assert stored["error"] == f"the agent said {shown} and ***"
    assert stored["egress"] == {"blocked": {f"{shown}.example.org": 1}}
    assert store.get(rec.id).status == "succeeded"
