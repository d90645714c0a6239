"""A run that cannot reach what it needs says so: Claude Code's retries of its API show at
the default verbosity, and ``show`` lists the connections the firewall refused with the line
that allows each. Without Docker; the real Claude Code against a fake API answering 429 is
in tests/test_runs_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

from git_iterare.agents import get_agent
from git_iterare.agents.render import render_lines
from git_iterare.runs.status import RUNNING, SUCCEEDED
from git_iterare.runs.store import RunStore
from tests.conftest import iterare
from tests.runs_helpers import make_run


def _retry(attempt: int, status: int | None, error: str, delay_ms: float) -> str:
    # As Claude Code 2.1.197 writes them (tests/fakeapi answering 429, 401, or no server).
    return json.dumps({"type": "system", "subtype": "api_retry", "attempt": attempt,
                       "max_retries": 10, "retry_delay_ms": delay_ms, "error_status": status,
                       "error": error, "session_id": "s", "uuid": "u"})


def test_api_retries_show_at_the_default_verbosity() -> None:
    lines = [_retry(1, 429, "rate_limit", 1000), _retry(3, 429, "rate_limit", 8012.5),
             _retry(2, 401, "authentication_failed", 1192.6), _retry(4, None, "unknown", 4662.5)]
    shown = list(render_lines(lines, get_agent("claude")))
    assert shown[:-1] == [
        "waiting for the API: 429 rate_limit, retry 1 of 10 in 1 s",
        "waiting for the API: 429 rate_limit, retry 3 of 10 in 8 s",
        "waiting for the API: 401 authentication_failed, retry 2 of 10 in 1 s",
        "waiting for the API: cannot connect, retry 4 of 10 in 5 s",
    ]
    # What the agent put in the event is shown as text, never as escape sequences.
    hostile = json.dumps({"type": "system", "subtype": "api_retry", "error_status": None,
                          "error": "\x1b[2Jgone", "attempt": 1})
    assert next(iter(render_lines([hostile], get_agent("claude")))) == (
        "waiting for the API: cannot connect (^[[2Jgone), retry 1")


def test_show_lists_refused_connections_with_the_line_that_allows_each(repo: Path) -> None:
    store = RunStore(repo)
    rec = make_run(repo, "refused")
    store.transition(rec.id, RUNNING, container="c0ffee")
    store.transition(rec.id, SUCCEEDED, exit_code=0, egress={
        "allowed": {}, "blocked": {}, "refused_connections": {
            "ipv4": 4, "ipv6": 1, "recorded": True,
            "addresses": {"10.0.0.9": 3, "192.0.2.1": 1, "fd31:7::21": 1, "not an ip": 9}}})
    shown = iterare("show", rec.id, cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.endswith(
        "\nRefused connections: 5 packets; to allow an address, add its line to allowed_cidrs "
        "under [firewall] in .iterare/config.toml\n"
        '    10.0.0.9    "10.0.0.9/32",  # 3 packets\n'
        '    192.0.2.1   "192.0.2.1/32",  # 1 packet\n'
        '    fd31:7::21  "fd31:7::21/128",  # 1 packet\n')
    # A record from before addresses were kept still says that connections were refused.
    old = make_run(repo, "old")
    store.transition(old.id, RUNNING, container="c0ffee")
    store.transition(old.id, SUCCEEDED, exit_code=0, egress={
        "refused_connections": {"ipv4": 2, "ipv6": 0, "recorded": True}})
    assert iterare("show", old.id, cwd=repo).stdout.endswith(
        "\nRefused connections: 2 packets; to allow an address, add its line to allowed_cidrs "
        "under [firewall] in .iterare/config.toml\n    (the sandbox recorded no addresses)\n")
