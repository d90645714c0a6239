"""What an imported iterare (iterare-llm) run came to, and the files of iterare's own in
its worktree.

iterare recorded no outcome: its ``list`` called a run "finished" once its container had
stopped and its worktree remained. Its container tee'd Claude Code's stream-json output
into the run's log, whose last ``result`` event is Claude Code's own report of the end
(``"subtype": "success"`` or an error, with the cost, tokens and turns): the report a run
of git iterare's claude agent ends with, read the same way (and labelled "reported by the
agent" by every command). A log without one (the container was killed, or there is no
log) leaves the run ``lost``: nobody saw its end.

iterare's ``execute`` wrote two files into the run's worktree before starting Claude Code
(``iterare_llm.workspace.prepare_workspace``): ``.claude-auto-config.json`` (Claude Code
settings) and ``.claude-prompt.md`` (the prompt text Claude Code got). They are iterare's,
not the run's work: :data:`PREDECESSOR_FILES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from git_iterare.runs.status import FAILED, LOST, SUCCEEDED

#: Where iterare kept the prompt text Claude Code got, in the run's worktree.
PROMPT_FILE = ".claude-prompt.md"

#: The files iterare's ``execute`` wrote at the top of a run's worktree.
PREDECESSOR_FILES = (".claude-auto-config.json", PROMPT_FILE)


@dataclass(frozen=True)
class Outcome:
    """An imported run's end as its log tells it.

    Attributes:
        status: ``succeeded``, ``failed``, or ``lost`` (no final report in the log).
        error: why it failed (the agent's closing words), or None.
        cost_usd: US dollars, as the agent reported.
        tokens: token counts by kind (see :class:`git_iterare.agents.values.RunResult`).
        turns: model turns, as the agent reported.
    """

    status: str
    error: str | None = None
    cost_usd: float | None = None
    tokens: Mapping[str, int] = field(default_factory=dict)
    turns: int | None = None

    def fields(self) -> dict[str, object]:
        """The record fields to set (:meth:`git_iterare.runs.store.RunStore.create`)."""
        return {"status": self.status, "error": self.error, "cost_usd": self.cost_usd,
                "tokens": dict(self.tokens), "turns": self.turns}


def outcome(log: bytes | None) -> Outcome:
    """The outcome of a run of Claude Code from iterare's log of it (None: no log).

    Only the last :data:`~git_iterare.limits.MAX_SUMMARY_EVENTS` lines are read.
    """
    from git_iterare.agents import get_agent
    from git_iterare.runs.render import tail_events

    events = tail_events(log or b"", "claude")
    if not any(event.kind == "result" for event in events):
        return Outcome(LOST)
    result = get_agent("claude").summarize(events)
    error = (result.summary or "the agent reported an error") if result.is_error else None
    return Outcome(FAILED if result.is_error else SUCCEEDED, error, result.cost_usd,
                   result.tokens, result.turns)


def prompt_text(worktree: Path) -> str:
    """The prompt text iterare gave Claude Code (:data:`PROMPT_FILE` in the run's
    worktree), or "" when it is gone, not a regular file (a symlink, a FIFO), larger than
    :data:`~git_iterare.limits.MAX_PROMPT_BYTES` or unreadable: the worktree was the
    agent's to write."""
    from git_iterare.boundedfs import read_regular
    from git_iterare.errors import OperationFailed
    from git_iterare.limits import MAX_PROMPT_BYTES

    try:
        data = read_regular(worktree / PROMPT_FILE, MAX_PROMPT_BYTES)
    except (OSError, OperationFailed):
        return ""
    return data.decode("utf-8", "replace")
