"""Rendering an agent's output log for ``git iterare log``.

Verbosity levels (``-v`` counts):

* 0 -- what the agent says (assistant text, plain output lines) and a closing summary;
* 1 -- also each tool call, one line (``> Bash: make test``);
* 2 -- also tool results, thinking, system events and JSON lines we do not know.

Colors go through :func:`git_iterare.ui.paint`, so ``--color`` and ``NO_COLOR`` apply; every
piece of the agent's text goes through :func:`git_iterare.ui.sanitize` first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from git_iterare.agents.labels import REPORTED, disputed
from git_iterare.agents.values import Event, RunResult
from git_iterare.ui import paint, sanitize, sanitize_line


class LogReader(Protocol):
    """What :func:`render_lines` needs of an agent
    (:class:`git_iterare.agents.base.Agent` is one): it reads its own log."""

    def parse_line(self, line: str) -> Event:
        """One output line, understood."""

    def render(self, event: Event, verbosity: int) -> str | None:
        """The text shown for ``event`` at ``verbosity``, or None for nothing."""

    def summarize(self, events: Iterable[Event], *, exit_code: int | None = None
                  ) -> RunResult:
        """The run's outcome as the events report it."""

#: Longest tool-call summary shown at verbosity 1 (characters); 2 shows all of it.
TOOL_LINE_LIMIT = 200


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines() or [""])


def _shorten(text: str, limit: int) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    more = len(first) > limit or "\n" in text.strip()
    return (first[:limit] + "...") if more else first


def render_event(event: Event, verbosity: int) -> str | None:
    """The default rendering of one event (see the module docstring), or None to hide it."""
    if event.kind == "result":
        return None  # the summary line stands for it
    if event.kind == "text":
        return sanitize(event.line)
    if event.kind in ("system", "other"):
        if verbosity < 2:
            return None
        data = event.data or {}
        label = f"{data.get('type', '?')}" + (f" {data['subtype']}" if "subtype" in data else "")
        text = "; ".join(p.text for p in event.parts) or event.line
        return paint(sanitize(f"[{label}] {text}"), "dim")
    lines = []
    for part in event.parts:
        body = sanitize(part.text)
        if part.kind == "text" and event.kind == "assistant":
            lines.append(body)
        elif part.kind == "tool_use" and verbosity >= 1:
            text = body if verbosity >= 2 else _shorten(body, TOOL_LINE_LIMIT)
            name = sanitize_line(part.name)
            lines.append(paint(f"> {name}: ", "cyan", "bold") + paint(text, "cyan"))
        elif part.kind == "thinking" and verbosity >= 2:
            lines.append(paint(_indent(body, "  ~ "), "dim"))
        elif part.kind == "tool_result" and verbosity >= 2:
            style = "red" if part.is_error else "dim"
            lines.append(paint(_indent(body), style))
        elif part.kind == "text" and verbosity >= 2:
            lines.append(paint(_indent(body), "dim"))
    return "\n".join(lines) if lines else None


def format_duration(ms: int) -> str:
    """``950ms``, ``12.3s``, ``4m 05s`` or ``1h 02m``."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def format_summary(result: RunResult, *, ended: str | None = None) -> str:
    """The closing line: outcome, then duration, cost and turns (what is known of them),
    labelled as reported by the agent: the agent writes its own log, so a tool it ran may
    have forged them (``done: 465ms, $0.0193, 2 turns (reported by the agent)``), and as
    disputed when the log held more than one closing report.

    Args:
        result: what the agent's log says of the run.
        ended: how the run was ended from outside when it was (``"timed out"``,
            ``"stopped"``, ``"lost"``): the outcome shown instead of the agent's ``failed``, which
            only says that it was killed.
    """
    facts = []
    if result.duration_ms is not None:
        facts.append(format_duration(result.duration_ms))
    if result.cost_usd is not None:
        facts.append(f"${result.cost_usd:.4f}")
    if result.turns is not None:
        facts.append(f"{result.turns} turn" + ("" if result.turns == 1 else "s"))
    if ended:
        head = paint(ended, "red", "bold")
    elif result.is_error:
        head = paint("failed", "red", "bold")
    else:
        head = paint("done", "green", "bold")
    label = disputed(result.disputed) if result.disputed else REPORTED
    return head + (": " + ", ".join(facts) + " " + label if facts else "")


def render_lines(lines: Iterable[str], agent: LogReader, verbosity: int = 0, raw: bool = False,
                 *, exit_code: int | None = None) -> Iterator[str]:
    """Render an agent's output log, one string per shown event, then a summary line.

    Args:
        lines: the log as stored (``log.jsonl``: one output line each, newlines optional).
        agent: the agent that wrote it (it parses and renders its own lines).
        verbosity: 0, 1 or 2 (more counts as 2).
        raw: yield the lines unchanged, without a summary.
        exit_code: the agent's exit status when known (the shell agent's outcome).

    Yields:
        Text to print, each possibly several lines, without a trailing newline.
    """
    from git_iterare.agents.tally import Tally

    counted = Tally(agent)
    for line in lines:
        if raw:
            yield line.rstrip("\r\n")
            continue
        shown = agent.render(counted.feed(line), verbosity)
        if shown is not None:
            yield shown
    if not raw:
        yield format_summary(counted.result(exit_code=exit_code))
