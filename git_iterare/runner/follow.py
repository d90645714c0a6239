"""Showing a run's log: live from its sandbox while it runs, from its record afterwards."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from git_iterare.agents.tally import Tally
from git_iterare.git.repo import Repo
from git_iterare.loglimit import OWN_PREFIX, agent_line, agent_lines
from git_iterare.runs.loops import current_round, loop_of

if TYPE_CHECKING:
    from git_iterare.agents.base import Agent
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox.spec import ContainerInfo

Printer = Callable[[str], None]


def _render(lines: Iterable[str], agent: Agent, verbosity: int, raw: bool, emit: Printer,
            counted: Tally) -> None:
    """Print ``lines`` as they come; ``counted`` keeps what the closing summary needs
    (bounded memory, whatever the agent prints)."""
    from git_iterare import proc
    from git_iterare.ui import sanitize

    # Raw lines stay byte-exact into a pipe or file (but for redacted secrets); on a
    # terminal the agent's escape sequences are made visible like in the rendered log.
    clean = sanitize if raw and sys.stdout.isatty() else None
    redact = proc.redactor().redact_line
    for line in lines:
        # Redacted before anything shows invisible characters as text (<U+200B>); a JSON
        # line stays JSON, with the words of its format (redaction.Redactor.redact_line).
        line = redact(line)
        if raw:
            line = line.rstrip("\r\n")
            emit(clean(line) if clean else line)
            continue
        shown = agent.render(counted.feed(line), verbosity)
        if shown is not None:
            # What the agent made it say must not pass for git-iterare's own lines (the
            # log's were marked as it was read: agent_lines).
            own = line.startswith(OWN_PREFIX)
            emit(shown if own else "\n".join(map(agent_line, shown.split("\n"))))


def _watch_budget(repo: Repo, record: RunRecord, agent: Agent, container: str,
                  lines: Iterable[str]) -> Iterable[str]:
    """Pass ``lines`` on; for an agent that cannot hold the run's ``max_budget_usd``
    itself, stop the run once the highest cost it reported reaches it
    (:func:`git_iterare.runner.finish.stop_over_budget`): a lower figure printed later
    changes nothing."""
    from git_iterare.runner.finish import stop_over_budget

    if not record.extra.get("max_budget_usd") or "max_budget_usd" in agent.own_limits:
        yield from lines
        return
    from git_iterare.agents.tally import Tally

    counted = Tally(agent, keep=0)
    stopped = False
    for line in lines:
        yield line
        event = counted.feed(line)
        if not stopped and event.kind != "text":  # only structured events report cost
            stopped = stop_over_budget(repo, record, agent, counted.cost_usd, container)


def _summary(counted: Tally, record: RunRecord) -> str:
    """The closing line of a run's log: the agent's outcome, or how the run was ended
    from outside (timed out, stopped), as ``list`` and ``show`` say it."""
    from git_iterare.agents.render import format_summary
    from git_iterare.runs.status import LOST, STOPPED, TIMED_OUT

    ended = {TIMED_OUT: "timed out", STOPPED: "stopped", LOST: "lost"}.get(record.status)
    return format_summary(counted.result(exit_code=record.exit_code), ended=ended)


def _decode(chunks: Iterable[bytes]) -> Iterable[str]:
    for chunk in chunks:
        yield chunk.decode("utf-8", "replace")


#: How long following keeps trying to finish a run after the engine failed it (seconds):
#: an engine that restarts ends its containers and answers again within seconds.
FINISH_RETRY_SECONDS = 10.0


def _finish_after_failure(repo: Repo, run_id: str) -> RunRecord:
    """Try to finish ``run_id`` for up to :data:`FINISH_RETRY_SECONDS` once following
    it failed; its record afterwards (still active when the engine is unreachable or the
    sandbox still runs)."""
    import time

    from git_iterare.errors import OperationFailed
    from git_iterare.runner.finish import finish
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore

    deadline = time.monotonic() + FINISH_RETRY_SECONDS
    while True:
        with contextlib.suppress(OperationFailed):
            record = finish(repo, run_id)
            if record.status not in ACTIVE:
                return record
        if time.monotonic() >= deadline:
            return RunStore(repo).get(run_id)
        time.sleep(1.0)


def show_log(repo: Repo, run_id: str, *, follow: bool, verbosity: int = 0, raw: bool = False,
             emit: Printer = print) -> RunRecord:
    """Print a run's log and return its record.

    While the run is active: with ``follow``, stream the sandbox's output until it exits,
    then finish the run (see :func:`git_iterare.runner.finish.finish`); without, print
    what it wrote so far. Once the run has ended: render the stored ``log.jsonl``.
    Ctrl-C stops following (KeyboardInterrupt propagates); the run goes on.

    Args:
        repo: the repository.
        run_id: the run.
        follow: keep streaming until the run ends.
        verbosity: 0 (what the agent says), 1 (+ tool calls), 2 (everything).
        raw: print the lines as the agent wrote them.
        emit: receives each piece of text to print.

    Returns:
        The run's record at the end (finished when followed to the end).
    """
    from git_iterare import sandbox
    from git_iterare.agents import get_agent
    from git_iterare.runner.finish import finish
    from git_iterare.runner.ownership import container_of, engine_of
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox.engine import using

    store = RunStore(repo)
    record = store.get(run_id)
    agent = get_agent(record.agent or "shell")
    if record.status in ACTIVE:
        from git_iterare.runner.secrets import register_run_secrets

        register_run_secrets(repo, record, agent)  # the live stream is not redacted yet
    counted = Tally(agent)
    if record.status in ACTIVE and record.container:
        info = container_of(repo, record)
        if info is not None:
            from git_iterare.errors import OperationFailed

            try:
                with using(engine_of(record)):
                    while True:
                        if follow and loop_of(record) is not None:
                            emit(f"[git iterare: round {current_round(record)}]")
                        lines: Iterable[str] = _decode(agent_lines(
                            sandbox.output(info.id, follow=follow)))
                        if follow:
                            lines = _watch_budget(repo, record, agent, info.id, lines)
                        _render(lines, agent, verbosity, raw, emit, counted)
                        following = _next_round(repo, record, info.id) if follow else None
                        if following is None:
                            break
                        record, info = following
                if not follow:
                    return record
                record = finish(repo, run_id, wait=True)
            except OperationFailed as exc:
                if not follow:
                    raise
                record = _finish_after_failure(repo, run_id)
                if record.status in ACTIVE:
                    # The connection dropped: the sandbox goes on without us.
                    raise OperationFailed(exc.message, hint=f"the run goes on; follow it "
                                          f"again with `git iterare log -f {run_id}`") from None
        else:
            record = finish(repo, run_id)
        if record.status in ACTIVE:
            return record
        if not raw:
            emit(_summary(counted, record))
            _loop_summary(record, emit)
        return record
    if record.status in ACTIVE:
        return record  # created, not launched yet: nothing to show
    log = store.read_log(run_id).decode("utf-8", "replace").splitlines()
    _render(log, agent, verbosity, raw, emit, counted)
    if not raw:
        emit(_summary(counted, record))
        _loop_summary(record, emit)
    return record


def _next_round(repo: Repo, record: RunRecord, container: str
                ) -> tuple[RunRecord, ContainerInfo] | None:
    """For a loop, once the container ``container`` of its round ended: wait for its
    next round (:func:`git_iterare.runner.loop.wait_for_round`) and return the record and
    that round's container; None when there is none (the run ended, or is no loop)."""
    from git_iterare.runner.driver import wait_for_round
    from git_iterare.runner.ownership import container_of
    from git_iterare.runs.status import ACTIVE

    if loop_of(record) is None:
        return None
    record = wait_for_round(repo, record.id, record.container or container)
    info = container_of(repo, record) if record.status in ACTIVE else None
    if info is None or info.id == container:
        return None
    return record, info


def _loop_summary(record: RunRecord, emit: Printer) -> None:
    """A loop's closing line: how many rounds, why it ended, the last check's status."""
    from git_iterare.runs.loops import REASONS, rounds_of

    loop = loop_of(record)
    if loop is None:
        return
    rounds = rounds_of(record)
    why = REASONS.get(str(loop.get("reason")), "it ended")
    last = rounds[-1].get("check_exit") if rounds else None
    check = "" if last is None else f"; the last check exited {last}"
    emit(f"[git iterare: the loop ended after {len(rounds)} round"
         f"{'' if len(rounds) == 1 else 's'}: {why}{check}]")
