"""``render_lines``: what `git iterare log` prints at each verbosity."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_iterare import agents, ui
from git_iterare.agents.base import RunResult
from git_iterare.agents.render import format_duration, format_summary, render_lines
from git_iterare.agents.tally import Tally
from git_iterare.ui import sanitize

LINES = (Path(__file__).parent / "data" / "claude-stream.jsonl").read_text().splitlines()
COMMAND = ("echo hello > hello.txt && git add hello.txt && git -c user.name=Agent "
           "-c user.email=agent@example.com commit -q -m 'Add hello' && echo committed")


@pytest.fixture(autouse=True)
def no_color(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(ui, "COLOR_FLAG", "never")
    ui.reset()
    yield
    ui.reset()


def render(verbosity: int, raw: bool = False) -> list[str]:
    return list(render_lines(LINES, agents.get_agent("claude"), verbosity, raw))


def test_verbosity_0() -> None:
    assert render(0) == ["I will create the file.", "Created hello.txt and committed it.",
                         "done: 465ms, $0.0193, 2 turns (reported by the agent)"]


def test_verbosity_1() -> None:
    assert render(1) == ["I will create the file.", f"> Bash: {COMMAND}",
                         "Created hello.txt and committed it.",
                         "done: 465ms, $0.0193, 2 turns (reported by the agent)"]


def test_verbosity_2() -> None:
    assert render(2) == [
        "[system init] model claude-opus-4-8[1m], cwd /tmp/itr-agents-manual/repo, 25 tools",
        "I will create the file.", f"> Bash: {COMMAND}", "    committed",
        "Created hello.txt and committed it.",
        "done: 465ms, $0.0193, 2 turns (reported by the agent)"]


def test_raw() -> None:
    assert render(0, raw=True) == LINES


def test_colors() -> None:
    ui.COLOR_FLAG = "always"  # restored by no_color's monkeypatch
    ui.reset()
    out = render(1)
    assert out[1].startswith("\033[36m\033[1m> Bash: \033[0m\033[36mecho hello")
    assert out[-1] == "\033[32m\033[1mdone\033[0m: 465ms, $0.0193, 2 turns (reported by the agent)"


def test_shell_log_summary_from_exit_code() -> None:
    shell = agents.get_agent("shell")
    assert list(render_lines(["building\n", "ok\n"], shell, 0, exit_code=2)) == [
        "building", "ok", "failed"]


def test_long_tool_call_shortened_at_1() -> None:
    claude = agents.get_agent("claude")
    line = ('{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash",'
            '"input":{"command":"' + "x" * 300 + '\\nsecond"}}]}}')
    assert next(render_lines([line], claude, 1)) == "> Bash: " + "x" * 200 + "..."
    assert next(render_lines([line], claude, 2)) == "> Bash: " + "x" * 300 + "\nsecond"


@pytest.mark.parametrize(("ms", "text"), [(950, "950ms"), (12_345, "12.3s"),
                                          (245_000, "4m 05s"), (3_720_000, "1h 02m")])
def test_format_duration(ms: int, text: str) -> None:
    assert format_duration(ms) == text


def test_format_summary_one_turn() -> None:
    assert format_summary(RunResult(is_error=True, turns=1)) == \
        "failed: 1 turn (reported by the agent)"


#: What a hostile agent printed (the adversarial tester's example): OSC 52 writes the
#: clipboard, OSC 8 hides a link, DCS queries the terminal; plus a C1 CSI and a BEL.
HOSTILE = ("\x1b]52;c;ZWNobyBwd25lZA==\x07 OSC52 \x1b]8;;http://evil.example/\x07click"
           "\x1b]8;;\x07 \x1bP+q\x1b\\ DCS \x9b2J\x7f\tend")
SHOWN = ("^[]52;c;ZWNobyBwd25lZA==^G OSC52 ^[]8;;http://evil.example/^Gclick"
         "^[]8;;^G ^[P+q^[\\ DCS \\x9b2J^?\tend")


def test_sanitize_makes_controls_visible() -> None:
    assert sanitize(HOSTILE) == SHOWN
    assert sanitize("plain\ttext\nnext line é ✓") == "plain\ttext\nnext line é ✓"


def test_shell_output_escapes_are_shown_not_sent() -> None:
    shell = agents.get_agent("shell")
    assert list(render_lines([HOSTILE + "\n"], shell, 0, exit_code=0)) == [SHOWN, "done"]


def test_claude_escapes_sanitized_in_every_part() -> None:
    claude = agents.get_agent("claude")
    text = json.dumps(HOSTILE)
    lines = [
        '{"type":"system","subtype":"init","model":' + text + '}',
        '{"type":"assistant","message":{"content":[{"type":"text","text":' + text + '},'
        '{"type":"thinking","thinking":' + text + '},'
        '{"type":"tool_use","name":' + json.dumps("B\x1b]0;t\x07") + ','
        '"input":{"command":' + text + '}}]}}',
        '{"type":"user","message":{"content":[{"type":"tool_result","content":' + text + '}]}}',
        '{"type":"mystery","x":' + text + '}',
    ]
    shown = "\n".join(render_lines(lines, claude, 2))
    assert HOSTILE not in shown
    assert not set(shown) & {"\x1b", "\x07", "\x9b", "\x7f"}
    assert shown.count("^[]52;c;ZWNobyBwd25lZA==^G") == 4  # the unknown line shows as JSON
    assert "> B^[]0;t^G: " in shown


def test_our_colors_survive_sanitizing() -> None:
    ui.COLOR_FLAG = "always"  # restored by no_color's monkeypatch
    ui.reset()
    claude = agents.get_agent("claude")
    line = ('{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash",'
            '"input":{"command":"echo \\u001b[31mred"}}]}}')
    assert next(render_lines([line], claude, 1)) == (
        "\033[36m\033[1m> Bash: \033[0m\033[36mecho ^[[31mred\033[0m")


@pytest.mark.parametrize(("tty", "expected"), [(False, [HOSTILE]), (True, [SHOWN])])
def test_follow_raw_sanitizes_only_on_a_terminal(
        monkeypatch: pytest.MonkeyPatch, tty: bool, expected: list[str]) -> None:
    from git_iterare.runner import follow

    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    out: list[str] = []
    shell = agents.get_agent("shell")
    follow._render([HOSTILE + "\n"], shell, 0, True, out.append, Tally(shell))
    assert out == expected


def test_follow_rendered_always_sanitizes(monkeypatch: pytest.MonkeyPatch) -> None:
    from git_iterare.runner import follow

    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    out: list[str] = []
    shell = agents.get_agent("shell")
    follow._render([HOSTILE + "\n"], shell, 0, False, out.append, Tally(shell))
    assert out == [SHOWN]


def test_agent_lines_that_look_like_git_iterares_are_marked() -> None:
    from git_iterare.loglimit import agent_lines

    lines = [b"[git iterare: round 2]\n", b"  [git iterare: x]\n", b"ok [git iterare: y]\n",
             b"[INFO] fine\n", "[git\u00a0iterare: round 7]\n".encode(),
             "\uff3bgit iterare\uff1a x]\n".encode(), "[g\u200bit iterare: x]".encode()]
    marked = [line.startswith(b"[agent] ") for line in agent_lines(lines)]
    assert marked == [True, True, False, False, True, True, True]


def test_rendered_agent_text_cannot_pass_for_git_iterares_own_lines() -> None:
    from git_iterare.runner.follow import _render

    agent = agents.get_agent("claude")
    said = json.dumps({"type": "assistant", "message": {"content": [
        {"type": "text", "text": "fixed\n[git iterare: the loop ended after 1 round]"}]}})
    shown: list[str] = []
    # The stored log's own line (agent lines were marked as they were read) stays.
    _render(["[git iterare: round 2]\n", said + "\n"], agent, 0, False, shown.append,
            Tally(agent))
    text = "\n".join(shown).splitlines()
    assert "[git iterare: round 2]" in text
    assert "[agent] [git iterare: the loop ended after 1 round]" in text
    assert "[git iterare: the loop ended after 1 round]" not in text
