"""What a run came to, read from its agent's output in bounded memory, with the rule for
its closing reports.

The agent writes its own log, and so can everything it runs: a tool call, or a hook the
repository configured for the agent, can print a closing report of its own (an event of
kind ``result``) before or after the agent's. So the first report stands; each later one
marks the result :attr:`~git_iterare.agents.values.RunResult.disputed` instead of
replacing its figures, can only turn it into a failure (a budget stop the first report
says is never undone), and the cost is the highest any event reported: what a run has
spent never goes down within it.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Protocol

from git_iterare.agents.values import Event, RunResult
from git_iterare.limits import MAX_SUMMARY_EVENTS


class Summarizer(Protocol):
    """What a :class:`Tally` needs of an agent (:class:`git_iterare.agents.base.Agent`
    is one)."""

    def parse_line(self, line: str) -> Event:
        """One output line, understood."""

    def summarize(self, events: Iterable[Event], *, exit_code: int | None = None
                  ) -> RunResult:
        """The run's outcome as ``events`` report it."""


class Tally:
    """An agent's events, kept for its :meth:`~Summarizer.summarize`: the first closing
    report wherever it came, the first ``system`` event (where an agent says what it is:
    its version, its session), and the last ``keep`` other events (see the module
    docstring for the later reports).

    Args:
        agent: the agent whose output this is.
        keep: events kept besides the first report.

    Attributes:
        reports: closing reports seen.
        cost_usd: the highest cost any event reported alone (US dollars), or None.
    """

    def __init__(self, agent: Summarizer, keep: int = MAX_SUMMARY_EVENTS):
        self._agent = agent
        self._first: tuple[int, Event] | None = None
        self._opening: tuple[int, Event] | None = None
        self._tail: deque[tuple[int, Event]] = deque(maxlen=keep)
        self._seen = 0
        self._later_failed = False
        self.reports = 0
        self.cost_usd: float | None = None

    def add(self, event: Event) -> None:
        """Count one event, in the order the agent wrote it."""
        self._seen += 1
        if event.data is not None:  # only structured events report figures
            alone = self._agent.summarize([event])
            if alone.cost_usd is not None and (self.cost_usd is None
                                               or alone.cost_usd > self.cost_usd):
                self.cost_usd = alone.cost_usd
        if event.kind != "result":
            if event.kind == "system" and self._opening is None:
                self._opening = (self._seen, event)
            self._tail.append((self._seen, event))
            return
        self.reports += 1
        if self._first is None:
            self._first = (self._seen, event)
        else:  # never read as the run's report: only its failure counts
            self._later_failed |= self._agent.summarize([event]).is_error

    def feed(self, line: str) -> Event:
        """Parse one output line and :meth:`add` it; returns the event."""
        event = self._agent.parse_line(line)
        self.add(event)
        return event

    def events(self) -> list[Event]:
        """The kept events in the order they came (the first report and the first
        ``system`` event among them)."""
        kept = list(self._tail)
        for pinned in (self._opening, self._first):
            if pinned is not None and pinned not in kept:
                kept.append(pinned)
        kept.sort(key=lambda pair: pair[0])
        return [event for _, event in kept]

    def result(self, *, exit_code: int | None = None) -> RunResult:
        """What the run came to: the agent's own summary of :meth:`events`, disputed when
        it printed more than one closing report (see the module docstring).

        Args:
            exit_code: the agent's exit status when known.
        """
        result = self._agent.summarize(self.events(), exit_code=exit_code)
        costs = [c for c in (result.cost_usd, self.cost_usd) if c is not None]
        result = dataclasses.replace(result, cost_usd=max(costs) if costs else None)
        if self.reports <= 1:
            return result
        return dataclasses.replace(result, is_error=result.is_error or self._later_failed,
                                   disputed=self.reports)


def tally(agent: Summarizer, lines: Iterable[str]) -> Tally:
    """A :class:`Tally` of every line of ``lines``."""
    counted = Tally(agent)
    for line in lines:
        counted.feed(line)
    return counted


def tapped(lines: Iterable[bytes], counted: Tally) -> Iterator[bytes]:
    """``lines`` as they come, each also fed to ``counted`` (decoded as UTF-8, bad bytes
    replaced): the whole stream is counted while another reader keeps only part of it."""
    for line in lines:
        counted.feed(line.decode("utf-8", "replace"))
        yield line


def kept_log(lines: Iterable[bytes], counted: Tally) -> bytes:
    """The agent's output ``lines`` as a run's record keeps it: each line fed to
    ``counted`` (all of it, so no output can push the agent's own report out of what is
    read), the lines that could pass for git-iterare's own marked
    (:func:`~git_iterare.loglimit.agent_lines`), capped
    (:func:`~git_iterare.loglimit.capped`: the first and last ``LOG_*_BYTES``)."""
    from git_iterare.loglimit import agent_lines, capped

    return capped(agent_lines(tapped(lines, counted)))
