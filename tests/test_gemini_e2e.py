"""The gemini agent end to end, for real: the real Gemini CLI, installed into the sandbox
image by the agent's install step when a run asks for it, in the real sandbox, talking to
the local fake Gemini API on the escape suite's local internet through the allowlist; its
commits on the run's branch, its tokens in the record, its events in ``git iterare log``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, iterare
from tests.fakeapi.gemini import FakeGemini
from tests.fakeapi.gemini_cli import GEMINI_VERSION
from tests.sandbox_fixtures import CA_BUNDLE, NET
from tests.test_runs_e2e import project, prompt, record, run_id

pytestmark = pytest.mark.docker

__all__ = ["project"]  # the fixture, shared with the other end-to-end tests

GEMINI_TURNS: list[list[dict[str, Any]]] = [
    [{"type": "text", "text": "I will add the notes file."},
     {"type": "tool_use", "name": "run_shell_command",
      "input": {"command": "echo 'made by gemini' > notes.txt && git add notes.txt && "
                           "git commit -qm 'Add notes' && git log --format=%s -1",
                "description": "Commit notes.txt"}}],
    [{"type": "tool_use", "name": "write_file",
      "input": {"file_path": "/workspace/second.txt", "content": "second file\n"}}],
    [{"type": "text", "text": "Added notes.txt and second.txt."}],
]

API_KEY = "AIzaSy-test-key-not-real-0123456789"


def test_gemini_cli_end_to_end(project: Path, tmp_path: Path, own_image: str) -> None:
    requests = tmp_path / "requests.jsonl"
    with FakeGemini(GEMINI_TURNS, requests, host=NET["GATEWAY_V4"]) as api:
        port = api.url.rsplit(":", 1)[1]
        with (project / ".iterare" / "config.toml").open("a") as config:
            # fakeapi.test answers the gateway's address: only a CIDR entry opens it.
            config.write(f'[gemini]\nbase_url = "http://fakeapi.test:{port}"\n'
                         f'version = "{GEMINI_VERSION}"\n'
                         f'[firewall]\nallowed_cidrs = ["{NET["GATEWAY_V4"]}/32"]\n')
        git("commit", "-qam", "gemini base URL", cwd=project)
        assert iterare("trust", "--yes", cwd=project).returncode == 0
        prompt(project, "notes", "Add a notes file and commit it.\n", front="agent: gemini\n")
        # The CA bundle (the user's setting) lets npm through this machine's
        # TLS-intercepting proxy when the Gemini layer is built.
        env = {"GEMINI_API_KEY": API_KEY, "ITERARE_DOCKER_CA_BUNDLE": CA_BUNDLE,
               "ITERARE_DOCKER_IMAGE": own_image}
        started = iterare("execute", "notes", "-f", "-v", "1", cwd=project, env=env)
        assert started.returncode == 0, started.stdout + started.stderr
    rid = run_id(started.stdout)
    out = started.stdout
    assert "I will add the notes file." in out
    assert "> run_shell_command: echo 'made by gemini' > notes.txt" in out
    assert "> write_file: /workspace/second.txt" in out
    assert "Added notes.txt and second.txt." in out

    # The agent's commit and the file it left (committed for it) are on the branch.
    assert git("show", f"iterare/{rid}:notes.txt", cwd=project).stdout == "made by gemini\n"
    assert git("show", f"iterare/{rid}:second.txt", cwd=project).stdout == "second file\n"
    subjects = git("log", "--format=%s", f"main..iterare/{rid}", cwd=project).stdout
    assert subjects.splitlines() == [f"iterare: work left uncommitted by run {rid}",
                                     "Add notes"]

    rec = record(project, rid)
    assert (rec["status"], rec["agent"], rec["exit_code"]) == ("succeeded", "gemini", 0)
    # The run's image was built with Gemini CLI in it, at the version asked for.
    labels = json.loads(subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", rec["image"]],
        capture_output=True, text=True, check=True).stdout)
    assert labels["dev.iterare.gemini-version"] == GEMINI_VERSION
    assert rec["turns"] == 3
    assert rec["cost_usd"] is None
    assert rec["tokens"]["input"] > 0 and rec["tokens"]["output"] > 0

    # Every request went to the fake API's Gemini endpoints with the key, which the
    # log never shows.
    log = [json.loads(line) for line in requests.read_text().splitlines()]
    assert [r["turn"] for r in log if r["turn"] is not None] == [0, 1, 2]
    assert {r["path"].split(":")[-1] for r in log} <= {"generateContent",
                                                       "streamGenerateContent?alt=sse"}
    assert all(r["headers"]["x-goog-api-key"] == "***" for r in log)
    # The tokens recorded are the fake API's figures over all its requests.
    from tests.fakeapi.server import estimate_tokens
    assert rec["tokens"]["input"] == sum(estimate_tokens(r["body"]["contents"]) for r in log)
    raw = iterare("log", rid, "--raw", cwd=project).stdout
    assert API_KEY not in raw
    assert json.loads(raw.splitlines()[-1])["type"] == "result"

    rendered = iterare("log", rid, cwd=project).stdout.splitlines()
    assert rendered == ["I will add the notes file.", "Added notes.txt and second.txt.",
                        rendered[-1]]
    assert rendered[-1].startswith("done: ") and "3 turns" in rendered[-1]
    everything = iterare("log", rid, "-v", "2", cwd=project).stdout
    assert "    Add notes" in everything  # the shell call's output

    # Claude Code in the same image still runs on the image's own Node; Gemini CLI on
    # its own, newer one.
    shown = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "sh", rec["image"], "-c",
         "command -v node; node --version; /opt/gemini/node/bin/node --version; "
         "claude --version; gemini --version"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    assert shown[0] == "/usr/bin/node"  # the image's, not /opt/gemini's
    assert int(shown[2].lstrip("v").split(".")[0]) >= 20
    assert shown[3].endswith("(Claude Code)")
    assert shown[4] == GEMINI_VERSION

    assert iterare("merge", rid, cwd=project).returncode == 0
    assert (project / "notes.txt").read_text() == "made by gemini\n"
    assert iterare("cleanup", "-y", rid, cwd=project).returncode == 0

