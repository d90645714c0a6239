"""Loops (``execute --until``) with the real model CLIs, end to end: Claude Code against
the fake Messages API and Codex against the fake Responses API, in the real sandbox, on
the escape suite's local internet; a later round continues the agent's own session in
the container made from the last round's (its home, and the session in it, kept)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, iterare
from tests.fakeapi.server import FakeAnthropic
from tests.sandbox_fixtures import NET
from tests.test_runs_e2e import _claude_project, project, prompt, record, run_id

pytestmark = pytest.mark.docker

__all__ = ["project"]  # the fixture, shared with the other end-to-end tests

CLAUDE_KEY = {"ANTHROPIC_API_KEY": "sk-ant-api03-test-key-not-real"}

#: The check: passes once ``fixed.txt`` is there, which only round 2 writes.
CHECK = "test -f fixed.txt || { echo 'fixed.txt is missing'; exit 3; }"

#: Two turns a round: a tool call, then the closing text.
LOOP_TURNS: list[list[dict[str, Any]]] = [
    [{"type": "text", "text": "Round one: adding notes."},
     {"type": "tool_use", "name": "Bash",
      "input": {"command": "echo 'round one' > notes.txt && git add notes.txt && "
                           "git commit -qm 'Add notes' && git log --oneline -1"}}],
    [{"type": "text", "text": "Round one done."}],
    [{"type": "text", "text": "Round two: adding the missing file."},
     {"type": "tool_use", "name": "Bash", "input": {"command": "echo fixed > fixed.txt"}}],
    [{"type": "text", "text": "Round two done."}],
]

TASK = "Add a notes file and commit it.\n"


def _requests(log: Path) -> list[dict[str, Any]]:
    """The fake's requests that took a turn, in order."""
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in lines if r["turn"] is not None]


def _text(message: dict[str, Any]) -> str:
    """All the text of one Messages API message (its content string or blocks)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text") or b.get("content") or "") for b in content or []
                     if isinstance(b, dict))


def _loop(project: Path, log: Path, tokens_per_turn: int, front: str = ""
          ) -> subprocess.CompletedProcess[str]:
    """``execute -f --until CHECK`` of :data:`TASK` with Claude Code against the fake
    playing :data:`LOOP_TURNS`, each turn reporting ``tokens_per_turn`` input tokens."""
    with FakeAnthropic(LOOP_TURNS, log, host=NET["GATEWAY_V4"],
                       input_tokens_per_turn=tokens_per_turn) as api:
        _claude_project(project, api.url.rsplit(":", 1)[1])
        prompt(project, "notes", TASK, front=f"agent: claude\n{front}")
        return iterare("execute", "notes", "-f", "--until", CHECK, cwd=project,
                       env=CLAUDE_KEY)


def test_claude_loop_continues_its_session(project: Path, tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    # Every turn reports the same input tokens, so each round (two turns) costs the same.
    started = _loop(project, log, 1000)
    assert started.returncode == 0, started.stdout + started.stderr
    rid = run_id(started.stdout)
    assert "Round one done." in started.stdout and "Round two done." in started.stdout

    taken = _requests(log)
    assert [r["turn"] for r in taken] == [0, 1, 2, 3]
    # Round 2's first request carries round 1's conversation, then the round's prompt.
    messages = taken[2]["body"]["messages"]
    said = [(m["role"], _text(m)) for m in messages]
    assert said[0][0] == "user" and TASK.strip() in said[0][1], said
    assert any(role == "assistant" and "Round one: adding notes." in text
               for role, text in said), said
    assert any(role == "assistant" and "Round one done." in text for role, text in said), said
    last = said[-1]
    assert last[0] == "user", said
    assert f"The check `{CHECK}` failed after round 1 (exit status 3)" in last[1], last
    assert "fixed.txt is missing" in last[1], last

    rec = record(project, rid)
    assert rec["status"] == "succeeded", rec
    assert rec["extra"]["loop"]["reason"] == "passed", rec["extra"]["loop"]
    rounds = rec["extra"]["rounds"]
    assert [(r["round"], r["check_exit"]) for r in rounds] == [(1, 3), (2, 0)]
    costs = [r["cost_usd"] for r in rounds]
    assert all(c and c > 0 for c in costs), costs
    # Each round's own cost (Claude Code's total is the session's process's, not the
    # conversation's so far), and the record's is their sum.
    assert costs[0] == pytest.approx(costs[1], rel=0.2), costs
    assert rec["cost_usd"] == pytest.approx(sum(costs)), (rec["cost_usd"], costs)
    assert rec["turns"] == sum(r["turns"] for r in rounds) == 4, rec

    # Round 1's work is a round commit on the branch; round 2's file is there too.
    assert git("show", f"iterare/{rid}:notes.txt", cwd=project).stdout == "round one\n"
    assert git("show", f"iterare/{rid}:fixed.txt", cwd=project).stdout == "fixed\n"


def test_claude_loop_ends_at_its_budget_with_round_one_kept(project: Path,
                                                            tmp_path: Path) -> None:
    # Every turn reports 100,000 input tokens (about $0.40 at the price Claude Code uses
    # for the fake's model): round 1 (two turns, about $0.80) stays under the $1.00
    # budget; round 2 is given the $0.20 left, and Claude Code stops itself after its
    # first reply, before that turn's tool runs.
    log = tmp_path / "requests.jsonl"
    started = _loop(project, log, 100_000, front="max_budget_usd: 1\n")
    rid = run_id(started.stdout)
    rec = record(project, rid)
    assert rec["extra"]["loop"]["reason"] == "budget", (rec, started.stdout, started.stderr)
    rounds = rec["extra"]["rounds"]
    assert [r["round"] for r in rounds] == [1, 2], rounds
    assert 0 < rounds[0]["cost_usd"] < 1 <= sum(r["cost_usd"] for r in rounds), rounds
    assert rec["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in rounds))
    assert [r["turn"] for r in _requests(log)] == [0, 1, 2]  # no turn past the budget
    assert (rec["status"], started.returncode) == ("stopped", 1), (rec, started.stderr)
    assert rec["error"] == (f"stopped at its budget: 2 rounds spent "
                            f"${rec['cost_usd']:.2f} of $1.00"), rec["error"]
    assert rec["extra"]["stop_reason"] == "budget"
    assert started.stderr.splitlines()[-1].startswith(f"run {rid} stopped"), started.stderr
    # Round 1's work is on the branch, under its round commit, and nothing is lost.
    assert git("show", f"iterare/{rid}:notes.txt", cwd=project).stdout == "round one\n"
    assert rounds[0]["head"] and git(
        "merge-base", "--is-ancestor", rounds[0]["head"], f"iterare/{rid}",
        cwd=project).returncode == 0
