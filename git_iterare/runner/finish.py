"""Finishing runs: whoever sees a run end first records its result.

:func:`finish` is idempotent and serialized per run (a lock, then a check of the status
under it), so the process following a run and any later ``git iterare`` command can both
try; one result is recorded. The order of writes makes a crash mid-way harmless: the log,
then the work (commit and import), then the status, then the container is removed; a
later :func:`reconcile` redoes whatever did not happen.
"""

from __future__ import annotations

import datetime as _dt
import shutil
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from git_iterare import ui
from git_iterare.errors import OperationFailed
from git_iterare.git.repo import Repo
from git_iterare.runner.ownership import container_of, engine_of, is_local, ran_elsewhere
from git_iterare.runner.paths import run_lock, state_dir

if TYPE_CHECKING:
    from git_iterare.agents.base import Agent, RunResult
    from git_iterare.git.safegit import Skipped
    from git_iterare.runner.importer import FinishResult
    from git_iterare.runner.workspace import RunWorkspace
    from git_iterare.runs.extra import Loop, Unfinished
    from git_iterare.runs.record import RunRecord
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox.spec import ContainerInfo

#: Seconds a run may stay ``created``/``starting`` without a container before it is
#: considered lost (its ``execute`` process died before launching).
LAUNCH_GRACE = 300

#: Seconds past its timeout after which a still-running sandbox is stopped by whoever
#: notices (the sandbox's own ``timeout`` normally ends it first).
TIMEOUT_GRACE = 60

#: Seconds by which a container's recorded run time may fall short of its limit when
#: ``timeout`` ended it (see :func:`_outcome`).
START_SLACK = 1.0

#: Exit status of coreutils ``timeout`` when the limit was reached.
TIMEOUT_EXIT = 124

#: Exit status of ``timeout --kill-after`` when it had to kill the agent (128 + SIGKILL):
#: the kill goes to its whole process group, itself included.
TIMEOUT_KILLED = 137

#: How the error line of a run stopped at its budget (``max_budget_usd``, ``max_turns``)
#: begins; its record's ``extra.stop_reason`` is then ``budget``.
BUDGET_STOP = "stopped at its budget"

#: Container states that mean the sandbox has not ended yet.
LIVE_STATES = frozenset({"created", "running", "restarting", "paused"})


def launch_pending(repo: Repo, record: RunRecord) -> bool:
    """Whether ``record``'s run, which has no container yet, may still be being launched:
    its ``execute`` process on this machine still runs (:func:`paths.launch_in_progress`),
    or, when that cannot be told (no mark), the record is younger than
    :data:`LAUNCH_GRACE`. A launch whose process died is not pending, unless the record
    names a container by now (it got that far)."""
    from git_iterare.runner.paths import launch_in_progress
    from git_iterare.runs.store import RunStore

    alive = launch_in_progress(repo, record.id)
    if alive is None:
        return age_seconds(record.created) < LAUNCH_GRACE
    if alive:
        return True
    try:
        return bool(RunStore(repo).get(record.id).container)
    except Exception:  # undone meanwhile: nothing to finish
        return True


def age_seconds(timestamp: str | None) -> float:
    """Seconds since a record timestamp (see :func:`git_iterare.runs.status.parse_iso`);
    0 when it is missing or unreadable."""
    from git_iterare.runs.status import parse_iso

    then = parse_iso(timestamp)
    if then is None:
        return 0.0
    return (_dt.datetime.now(_dt.timezone.utc) - then).total_seconds()


def _outcome(record: RunRecord, exit_code: int | None, result: RunResult, vanished: bool,
             ran_seconds: float | None = None, *, oom_killed: bool = False,
             memory_bytes: int | None = None, reason: str | None = None
             ) -> tuple[str, str | None]:
    """The final status and error line of a run.

    ``exit_code`` is the agent container's, which is always the agent's own: the sandbox's
    set-up runs in its sidecar, and a failure there stops the launch before the agent's
    container starts. The agent runs under ``timeout --kill-after=10 N``: when the limit
    is reached it exits :data:`TIMEOUT_EXIT` (the agent stopped on SIGTERM) or
    :data:`TIMEOUT_KILLED` (SIGKILL 10 s later, which kills ``timeout`` too). Those codes
    mean a timeout only when the container ran that long (``ran_seconds``, the engine's
    clock): an agent may exit 124 or be killed on its own, and one that ended in time is
    judged by its own exit status however late the run is finished, also when processes
    it left behind (a fork bomb) ended with its container. An agent that failed in a
    container the kernel killed a process of for memory (``oom_killed``; the limit
    ``memory_bytes``) ran out of memory: the error names ``docker.memory``. A container
    the engine ended without an exit status of its own (``reason``, a rejected swarm
    task) did not run: the error gives the engine's reason.
    """
    from git_iterare.runs import status as st

    if vanished:
        return st.LOST, "the sandbox container disappeared before the run was recorded"
    if record.extra.get("stop_requested"):
        return st.STOPPED, "stopped by `git iterare stop`"
    if oom_killed and exit_code not in (0, None) and not record.extra.get("timed_out"):
        return st.FAILED, (f"the agent ran out of memory (exit status {exit_code}; the "
                           f"limit is docker.memory = {_size(memory_bytes)}); raise "
                           "docker.memory in the config")
    timeout = record.extra.get("timeout") or 0
    # The engine notes a container's start a moment after its process began: a run whose
    # limit was reached at once (its sidecar ready ahead) may have "run" a little less.
    limit_reached = bool(timeout) and exit_code in (TIMEOUT_EXIT, TIMEOUT_KILLED) and (
        ran_seconds is None or ran_seconds + START_SLACK >= timeout)
    if record.extra.get("timed_out") or limit_reached:
        forced = exit_code == TIMEOUT_KILLED and not record.extra.get("timed_out")
        return st.TIMED_OUT, (f"killed after the {timeout} s timeout"
                              + (" (it ignored SIGTERM; SIGKILL 10 s later)" if forced
                                 else ""))
    limit = over_limits(record.extra, result, ended_badly=exit_code != 0 or result.is_error)
    if limit:
        return st.STOPPED, limit
    if exit_code == 0 and not result.is_error:
        return st.SUCCEEDED, None
    if exit_code == 0:
        return st.FAILED, result.summary or "the agent reported an error"
    if reason:
        return st.FAILED, f"the agent's container did not run: {reason}"
    return st.FAILED, f"the agent exited with status {exit_code}"


def _size(n: int | None) -> str:
    """A memory limit in bytes as ``docker.memory`` spells it (``4g``, ``512m``)."""
    if not n:
        return "unlimited"
    for unit, scale in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n} bytes"


def over_limits(extra: Mapping[str, object], result: RunResult, *, ended_badly: bool = True
                ) -> str | None:
    """Why a run was stopped at its budget, or None.

    Args:
        extra: the run record's ``extra``: ``max_budget_usd`` (US dollars), ``max_turns``
            (None: no limit) and ``budget_exceeded`` (git-iterare stopped it, see
            :func:`stop_over_budget`).
        result: the agent's :class:`~git_iterare.agents.base.RunResult` so far.
        ended_badly: the agent failed or reported an error; an agent that reached a limit
            on its last turn and succeeded is not stopped.

    Returns:
        The run's error line (``stopped at its budget: ...``) when a limit was reached.
    """
    budget, turns = _limit(extra.get("max_budget_usd")), _limit(extra.get("max_turns"))
    spent = result.cost_usd
    over_budget = budget is not None and spent is not None and spent >= budget
    over_turns = turns is not None and result.turns is not None and result.turns >= turns
    if not (extra.get("budget_exceeded") or (ended_badly and (over_budget or over_turns))):
        return None
    if over_turns and not over_budget:
        return f"{BUDGET_STOP}: {result.turns} turns of {turns}"
    shown = "unknown" if spent is None else ui.usd(spent)
    return f"{BUDGET_STOP}: {shown} of {ui.usd(budget)}" if budget else f"{BUDGET_STOP}: {shown}"


def _limit(value: object) -> float | None:
    """A positive number from a record's ``extra`` (a budget, a turn count), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return value
    return None


def stop_over_budget(repo: Repo, record: RunRecord, agent: Agent, spent: float | None,
                     container: str) -> bool:
    """Stop a run whose agent cannot hold its own budget once its reported cost reaches it.

    Only for agents without their own ``max_budget_usd`` (:attr:`Agent.own_limits`).
    Marks the record ``budget_exceeded`` first, so whoever finishes the run records it
    ``stopped`` (reason ``budget``) with its work kept, whatever the agent prints later.

    Args:
        spent: the highest cost the agent's output reported so far, US dollars
            (:attr:`git_iterare.agents.tally.Tally.cost_usd`), or None.

    Returns:
        True when the run was over its budget and its sandbox was told to stop.

    Raises:
        OperationFailed: the records could not be updated or the engine refused.
    """
    from git_iterare import sandbox
    from git_iterare.runs.store import RunStore

    budget = record.extra.get("max_budget_usd")
    if not budget or "max_budget_usd" in agent.own_limits:
        return False
    if spent is None or spent < budget:
        return False
    RunStore(repo).update(record.id, lambda r: r.with_extra(budget_exceeded=True),
                          f"{record.id} over its budget")
    sandbox.stop(container)
    return True


#: In a run's ``extra`` when its log held more than one closing report:
#: ``{"reports": n}`` (see :mod:`git_iterare.agents.tally`).
DISPUTED = "disputed"


#: In a remote run's ``extra`` once its end removed its container and volumes from the
#: engine (``cleanup`` then needs no connection to it).
ENGINE_CLEARED = "engine_cleared"


def finish(repo: Repo, run_id: str, *, wait: bool = False, defer_to_stop: bool = False
           ) -> RunRecord:
    """Record the end of a run whose sandbox has exited or vanished.

    Commits what the agent left uncommitted (with ``Iterare-*`` trailers), imports the
    run's commits into the repository, stores the log, result (status, exit code, times,
    cost, tokens, turns), egress report and notes, then removes the container.

    Args:
        repo: the repository.
        run_id: the run.
        wait: when the sandbox is still running, wait for it (else return at once).
        defer_to_stop: leave a run someone asked to stop (``extra.stop_requested``) to the
            ``stop`` that asked, which finishes it and tells its user how it went (the
            watcher of :mod:`git_iterare.runner.watch`).

    Returns:
        The run's record afterwards (unchanged when it is still running, or was already
        finished by someone else).

    Raises:
        OperationFailed / ExternalError: the records or git failed.
    """
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore

    store = RunStore(repo)
    record = store.get(run_id)
    if record.status not in ACTIVE or not is_local(repo, record):
        return record  # ended, or running on another machine: not ours to finish
    from git_iterare.sandbox.engine import using

    with using(engine_of(record)):  # every sandbox call below goes to the run's engine
        return _finish_active(repo, store, record, wait, defer_to_stop)


def held_wait(store: RunStore, record: RunRecord, container: str) -> None:
    """Wait for run ``record``'s container ``container`` once (until it ends, or until
    the engine's connection times out: the caller looks again); past the run's timeout
    and :data:`TIMEOUT_GRACE` (seconds), record it timed out and stop it, whatever the
    ``timeout`` wrapper inside did (it runs as the agent's uid, which can freeze it).

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare import sandbox

    timeout = record.extra.get("timeout") or 0
    if not timeout:
        sandbox.wait(container)
        return

    def left() -> float:
        return timeout + TIMEOUT_GRACE - age_seconds(record.started or record.created)

    if left() > 0 and (sandbox.wait(container, timeout=left()) is not None or left() > 0):
        return
    store.update(record.id, lambda r: r.with_extra(timed_out=True), f"{record.id} timed out")
    sandbox.stop(container)


def _finish_active(repo: Repo, store: RunStore, record: RunRecord, wait: bool,
                   defer_to_stop: bool = False) -> RunRecord:
    from git_iterare import sandbox
    from git_iterare.runner.driver import left_to_driver, wait_for_round
    from git_iterare.runs.status import ACTIVE

    run_id = record.id
    while True:
        info = container_of(repo, record)
        while info is not None and info.state in LIVE_STATES:
            if not wait:
                return record
            if info.state == "created" and record.extra.get("stop_requested"):
                break  # never started (its attach failed, say): stopping cannot end it
            held_wait(store, record, info.id)
            info = sandbox.inspect(info.id)
        if not left_to_driver(repo, record):
            break
        if not wait:  # between two rounds of a loop: its driver's
            return record
        record = wait_for_round(repo, run_id, record.container or "")
        if record.status not in ACTIVE:
            return record
    if info is None and record.container is None and launch_pending(repo, record):
        return record  # still being launched by its execute process
    if defer_to_stop and store.get(run_id).extra.get("stop_requested"):
        return record
    from git_iterare.timings import phase

    with run_lock(repo, run_id), phase("finish"):
        record = store.get(run_id)
        if record.status not in ACTIVE:
            return record
        return _finish_locked(repo, store, record, info)


def _finish_locked(repo: Repo, store: RunStore, record: RunRecord, info: ContainerInfo | None
                   ) -> RunRecord:
    from git_iterare import sandbox
    from git_iterare.agents import get_agent
    from git_iterare.runner.secrets import register_run_secrets
    from git_iterare.runner.workspace import open_run

    vanished = info is None
    head_before = record.head  # a loop's rounds annotated the commits up to it
    exit_code = None if info is None else info.exit_code
    from git_iterare.agents.tally import Tally, kept_log
    from git_iterare.sandbox.spec import sandbox_name
    from git_iterare.timings import phase

    # The sandbox the trees are given back in: when the agent's container vanished, its
    # sidecar may be left, found by name -- unless that name is now another container's.
    given_in: str | None = info.id if info is not None else sandbox_name(record.id)
    if info is None and record.container and sandbox.inspect(sandbox_name(record.id)) is not None:
        given_in = None
    log = b""
    agent = get_agent(record.agent or "shell")
    # Redacted from the agent's fields of every record write below, and from the log as
    # it is stored; the outcome is read from the output as the agent printed it.
    register_run_secrets(repo, record, agent)
    counted = Tally(agent)
    if info is not None:
        # Streamed and capped: the agent decides how much it prints.
        with phase("finish.log"):
            log = kept_log(sandbox.output(info.id), counted)
            store.set_log(record.id, _with_rounds(store, record, log))
    result = counted.result(exit_code=exit_code)
    if result.disputed:
        store.update(record.id, lambda r: r.with_extra(
            disputed={"reports": result.disputed}),
            f"{record.id} result disputed")
    status, error = _outcome(record, exit_code, result, vanished,
                             None if info is None else info.ran_seconds,
                             oom_killed=info is not None and info.oom_killed,
                             memory_bytes=None if info is None else info.memory_bytes,
                             reason=None if info is None else info.reason)
    from git_iterare.runner.placement import placement_of

    placement = placement_of(record)
    if not vanished and placement.ended_by_engine(record):
        from git_iterare.runs.status import LOST

        status, error = LOST, ("the Docker engine ended the sandbox (it restarted, or the "
                               "sandbox was killed there); its work so far is kept")
    from git_iterare.runs.loops import loop_of

    loop = loop_of(record)
    if loop is not None:
        record = _unchecked_round(store, record, status, result, info)
        loop = loop_of(record) or loop
        status, error, result = _loop_outcome(record, loop, status, error, result)
    if error and error.startswith(BUDGET_STOP):
        store.update(record.id, lambda r: r.with_extra(stop_reason="budget"),
                     f"{record.id} stopped at its budget")
    if record.base_commit and has_worktree(repo, record):
        # Where the sandbox did not work on the host's trees, they come back now. When that
        # fails (the connection dropped), the run stays active: the next command does it.
        for note in placement.fetch(repo, record, open_run(repo, record.id,
                                                           record.base_commit)):
            ui.warn(f"run {record.id}: {note}")
    head = None
    changes = None
    commits: tuple[str, ...] = ()
    bug: Exception | None = None
    if record.base_commit and has_worktree(repo, record):
        try:
            ws = workspace_of(repo, record)
            placement.give_back(repo, record, ws, given_in)
            work = commit_work(repo, store, record, ws)
            head, commits, changes = work.head, work.commits, changes_of(work)
        except expected_errors() as exc:
            status, error = _unfinished(repo, store, record, status, error, exc)
            ui.warn(f"run {record.id}: {error}")
        except Exception as exc:
            # A bug of git-iterare's: the run still ends failed with its work kept (and
            # `git iterare finish` to commit it), then the bug shows as one.
            status, error = _unfinished(repo, store, record, status, error, exc)
            bug = exc
    if head:
        store.set_head(record.id, head, changes)
        if loop is not None:
            _round_head(store, record.id, head)
    egress = _egress(repo, record.id)
    record = store.transition(
        record.id, status, exit_code=exit_code, error=error, cost_usd=result.cost_usd,
        tokens=dict(result.tokens), turns=result.turns, egress=egress,
        **_ended_at(record, info))
    # Counted and recorded (redacted): the resolver's log, which holds every name the
    # agent looked up in plain text (a secret as a DNS name too), goes now; when it
    # cannot yet (not the user's), with the run's state folder at cleanup.
    sandbox.drop_dns_log(state_dir(repo, record.id) / "out")
    commits = unannotated(repo, head_before, head, commits)
    if commits:
        store.add_note(commits, note_entry(record, status))
    try:
        with phase("finish.remove"):
            sandbox.remove(record.id, str(repo.main_work_tree))
        if placement.clear(record):
            # Nothing of it is left there: cleanup need not reach that engine again.
            record = store.update(record.id, lambda r: r.with_extra(engine_cleared=True),
                                  f"{record.id} engine cleared")
    except Exception as exc:  # the result is recorded; a leftover container is minor
        ui.warn(f"run {record.id}: could not remove its container: {exc}")
    shutil.rmtree(state_dir(repo, record.id) / "secrets", ignore_errors=True)
    if bug is not None:
        raise bug
    return record


def workspace_of(repo: Repo, record: RunRecord) -> RunWorkspace:
    """The run's workspace as its commits see it: mount points below ``/workspace``
    (``extra.workspace_mounts``, see :func:`git_iterare.runner.guard.workspace_mounts`)
    are no work of the agent's."""
    from git_iterare.runner.workspace import open_run

    return open_run(repo, record.id, str(record.base_commit),
                    included=tuple(p for p in record.extra.get("workspace_mounts") or ()
                                   if isinstance(p, str)))


def commit_work(repo: Repo, store: RunStore, record: RunRecord, ws: RunWorkspace
                ) -> FinishResult:
    """Commit what the run's agent left in ``ws`` (its trees given back already): its
    commits imported and the rest committed (:func:`commit_words`), and the record told
    what the commit left out (``extra.skipped``) and how the agent's commits came back
    (``extra.warnings``). The record's head is the caller's to set.

    Raises:
        as :func:`git_iterare.runner.importer.finish_run`.
    """
    from git_iterare.runner.importer import finish_run
    from git_iterare.timings import phase

    with phase("finish.commit-work"):
        work = finish_run(repo, ws, *commit_words(record))
    if work.skipped:
        _note_skipped(store, record.id, work.skipped)
    _note_history(store, record.id, work)
    return work


def changes_of(work: FinishResult) -> dict[str, int]:
    """What the record keeps of ``work``'s change against the run's base."""
    return {"files": work.changes.files, "insertions": work.changes.insertions,
            "deletions": work.changes.deletions, "binary": work.changes.binary}


def commit_words(record: RunRecord) -> tuple[dict[str, str], str]:
    """The trailers and message of the commit of what a run's agent left uncommitted
    (:func:`git_iterare.runner.importer.finish_run`'s ``trailers`` and ``message``): for
    a loop, naming the round (``Iterare-Round``)."""
    from git_iterare.runs.loops import current_round, loop_of

    trailers = {"Iterare-Run": record.id, "Iterare-Agent": record.agent or "",
                "Iterare-Prompt": record.prompt_name or ""}
    if loop_of(record) is None:
        return trailers, f"iterare: work left uncommitted by run {record.id}"
    number = current_round(record)
    return ({**trailers, "Iterare-Round": str(number)},
            f"iterare: round {number} of run {record.id}")


def _with_rounds(store: RunStore, record: RunRecord, log: bytes) -> bytes:
    """The log to store for a run whose last container printed ``log``: for a loop, the
    rounds before it first (:func:`git_iterare.runner.loop.joined_log`)."""
    from git_iterare.runner.rounds import joined_log
    from git_iterare.runs.loops import current_round, loop_of, rounds_of

    if loop_of(record) is None:
        return log
    number, before = current_round(record), store.read_log(record.id)
    if any(r.get("round") == number for r in rounds_of(record)):
        return before  # its driver kept this round's output too
    return joined_log(before, number, log)


def _unchecked_round(store: RunStore, record: RunRecord, status: str, result: RunResult,
                     info: ContainerInfo | None) -> RunRecord:
    """For a loop whose last round its driver did not record (the process that drove it
    ended first, the engine refused the round's check, or the round was stopped or timed
    out with none): that round recorded unchecked, and the loop's reason when it has none
    (``stopped``, ``timed-out``, else ``unchecked``). Returns the record, unchanged for a
    loop whose driver recorded its last round."""
    from git_iterare.runner.rounds import own_share, round_entry
    from git_iterare.runs.loops import current_round, loop_of, rounds_of
    from git_iterare.runs.status import STOPPED, TIMED_OUT

    loop, rounds, number = loop_of(record), rounds_of(record), current_round(record)
    if loop is None or any(r.get("round") == number for r in rounds):
        return record
    entry = round_entry(number, own_share(result, rounds), started=None,
                        ended=info.ended_at if info else None,
                        exit_code=info.exit_code if info else None, check_exit=None,
                        check_seconds=None, check_tail="")
    reason = loop.get("reason") or {STOPPED: "stopped",
                                     TIMED_OUT: "timed-out"}.get(status, "unchecked")
    return store.update(record.id, lambda r: r.with_extra(
        loop={**loop, "reason": reason}, rounds=[*rounds, entry]),
        f"{record.id} round {number}: {reason}")


def _loop_outcome(record: RunRecord, loop: Loop, status: str, error: str | None,
                  result: RunResult) -> tuple[str, str | None, RunResult]:
    """A loop's status and error (:func:`git_iterare.runner.rounds.outcome`) and what its
    rounds cost together: the rounds its driver recorded, and the last one when it did
    not record it (it ended first)."""
    import dataclasses

    from git_iterare.runner.rounds import outcome, own_share, totals
    from git_iterare.runs.loops import current_round, rounds_of

    rounds = rounds_of(record)
    counted = list(rounds)
    if not any(r.get("round") == current_round(record) for r in rounds):
        from git_iterare.runs.extra import Round

        counted.append(Round(cost_usd=own_share(result, rounds).cost_usd,
                             tokens=dict(result.tokens), turns=result.turns))
    cost, tokens, turns = totals(counted)
    status, error = outcome(loop, rounds, status, error, record.extra)
    return status, error, dataclasses.replace(result, cost_usd=cost, tokens=tokens,
                                              turns=turns)


def _round_head(store: RunStore, run_id: str, head: str) -> None:
    """Record ``head`` as the last round's (its driver recorded the round before the
    finish committed its work)."""
    from git_iterare.runs.loops import current_round, rounds_of

    def fn(r: RunRecord) -> RunRecord:
        from git_iterare.runs.extra import Round

        number = current_round(r)
        rounds = [Round(**x) for x in rounds_of(r)]
        for entry in rounds:
            if entry.get("round") == number:
                entry["head"] = head
        return r.with_extra(rounds=rounds)

    store.update(run_id, fn, f"{run_id} last round's head")


def _round_note(record: RunRecord) -> dict[str, object]:
    """What the notes of a loop's last commits say of its last round."""
    from git_iterare.runs.loops import current_round, loop_of, rounds_of

    if loop_of(record) is None:
        return {}
    number = current_round(record)
    entry = next((r for r in rounds_of(record) if r.get("round") == number), None)
    note: dict[str, object] = {"round": number}
    if entry is not None:
        note.update(check_exit=entry.get("check_exit"), check_seconds=entry.get("check_seconds"),
                    cost_usd=entry.get("cost_usd"))
    return note


def _ended_at(record: RunRecord, info: ContainerInfo | None) -> dict[str, str]:
    """``{"finished": ...}``: when the agent's container exited, by the engine's clock,
    for a run finished later than that (nobody followed it); nothing when that time is
    unknown or not after the run's record was made (an engine whose clock is off), and the
    run's end is then when it is recorded. (Not its start: a quick agent can exit before
    the launch has recorded that it started.)"""
    from git_iterare.runs.status import parse_iso

    ended, created = parse_iso(info.ended_at if info else None), parse_iso(record.created)
    if info is None or info.ended_at is None or ended is None or created is None \
            or ended < created or ended > _dt.datetime.now(_dt.timezone.utc):
        return {}
    return {"finished": info.ended_at}


def expected_errors() -> tuple[type[Exception], ...]:
    """The errors committing and importing a run's work may meet that are not bugs:
    git-iterare's own (:class:`~git_iterare.errors.IterareError`), the filesystem's
    (:class:`OSError`), and dulwich's (every class in :mod:`dulwich.errors`, a held lock
    file (``dulwich.file.FileLocked``), and :class:`zlib.error`: the agent's objects may
    be corrupt or hostile). Anything else is a bug and is let through after the run is
    recorded."""
    import inspect
    import zlib

    import dulwich.errors
    from dulwich.file import FileLocked

    from git_iterare.errors import IterareError

    dulwich_errors = tuple(cls for _, cls in inspect.getmembers(dulwich.errors, inspect.isclass)
                           if issubclass(cls, Exception) and cls.__module__ == "dulwich.errors")
    return (IterareError, OSError, zlib.error, FileLocked, *dulwich_errors)


def _unfinished(repo: Repo, store: RunStore, record: RunRecord, status: str,
                error: str | None, exc: Exception) -> tuple[str, str]:
    """A run whose work could not be committed fails, whatever the agent did; its work
    stays on disk, and ``extra.unfinished`` (the agent's outcome, its error and why the
    commit failed) tells ``merge``, ``cleanup`` and ``execute --reuse`` to send the user to
    ``git iterare finish`` (:func:`finish_later`). Returns the status and error to record.
    """
    from git_iterare.errors import IterareError
    from git_iterare.runner.workspace import live_path
    from git_iterare.runs.status import FAILED

    reason = exc.message if isinstance(exc, IterareError) else f"{type(exc).__name__}: {exc}"
    info: Unfinished = {"outcome": status, "error": error, "reason": reason}
    store.update(record.id, lambda r: r.with_extra(unfinished=info),
                 f"{record.id} unfinished")
    live = live_path(repo, record.id)  # when it could not be brought into the checkout
    kept = ui.elide_path(str(live)) if live.exists() else f".iterare/worktrees/{record.id}"
    return FAILED, (f"{error + '; ' if error else ''}its work could not be committed "
                    f"({reason}); it is kept in {kept}, and "
                    f"`git iterare finish {record.id}` commits it")


def _note_skipped(store: RunStore, run_id: str, skipped: Sequence[Skipped]) -> None:
    """Warn about worktree paths the automatic commit left out (FIFOs, sockets, devices,
    files over the limits) and keep them in the record's ``extra.skipped``: at most
    :data:`~git_iterare.limits.MAX_SKIPPED_NAMED` paths, the rest counted."""
    from git_iterare.limits import MAX_SKIPPED_NAMED
    from git_iterare.runs.extra import SkippedPath
    from git_iterare.ui import elide_path
    from git_iterare.ui import sanitize_line as sanitize

    named = [SkippedPath(path=s.path.encode("utf-8", "surrogateescape").decode("utf-8",
                                                                            "replace"),
                         reason=s.reason) for s in skipped[:MAX_SKIPPED_NAMED]]
    more = max(0, len(skipped) - MAX_SKIPPED_NAMED)
    shown = ", ".join(f"{elide_path(sanitize(s['path']))} ({s['reason']})"
                      for s in named[:5])
    rest = len(skipped) - min(5, len(named))
    ui.warn(f"run {run_id}: not committed: {shown}" + (f" and {rest} more" if rest else "")
            + f" (listed by `git iterare show {run_id}`)")
    store.update(run_id, lambda r: r.with_extra(skipped={"paths": named, "more": more}),
                 f"{run_id} skipped")


def _note_history(store: RunStore, run_id: str, work: FinishResult) -> None:
    """Warn about each unusual way the agent's commits came back (``work.notes``, and why
    its branch was not imported: the agent rewrote history, say by a reset and a new
    commit, or diverged from it, and its files were committed on top instead), and keep
    those lines in the record's ``extra.warnings`` (``show`` and ``merge`` repeat them)."""
    lines = list(work.notes)
    if work.rejected_head:
        lines.append(f"the agent's branch was not imported ({work.rejected_head}); its "
                     "files were committed instead")
    for line in lines:
        ui.warn(f"run {run_id}: {line}")
    if not lines:
        return

    def add(r: RunRecord) -> RunRecord:
        found = r.extra.get("warnings")
        kept = [w for w in found if isinstance(w, str)] if isinstance(found, list) else []
        return r.with_extra(warnings=kept + [line for line in lines if line not in kept])

    store.update(run_id, add, f"{run_id} warnings")


def has_worktree(repo: Repo, record: RunRecord) -> bool:
    """Whether the run has a worktree here (also when it failed before the record said
    so, and while it is live: :func:`~git_iterare.runner.workspace.live_path`); the path
    comes from the run id, never from the record, which may be foreign."""
    from git_iterare.runner.workspace import live_path, worktree_path

    return worktree_path(repo, record.id).exists() or live_path(repo, record.id).exists()


def _egress(repo: Repo, run_id: str) -> dict[str, object] | None:
    """The egress report for the record, from the sidecar's output folder."""
    from git_iterare.sandbox import read_egress_report

    out = state_dir(repo, run_id) / "out"
    if not out.is_dir():
        return None
    report = read_egress_report(out)
    egress: dict[str, object] = {
        "allowed": dict(report.allowed),
        "blocked": dict(report.blocked),
        "refused_connections": {"ipv4": report.refused_connections.ipv4,
                                "ipv6": report.refused_connections.ipv6,
                                "addresses": dict(report.refused_connections.addresses),
                                "recorded": report.refused_connections.recorded},
    }
    if report.more_allowed or report.more_blocked or report.log_truncated:
        # the lists are capped (MAX_EGRESS_NAMES): lookups of names not listed
        egress["more"] = {"allowed": report.more_allowed, "blocked": report.more_blocked,
                          "log_truncated": report.log_truncated}
    return egress


def _check_budget(repo: Repo, record: RunRecord) -> None:
    """Stop a live run whose agent reported spending its budget so far (agents without
    their own budget flag; see :func:`stop_over_budget`)."""
    from git_iterare import sandbox
    from git_iterare.agents import get_agent
    from git_iterare.sandbox.engine import using

    agent = get_agent(record.agent or "shell")
    if "max_budget_usd" in agent.own_limits:
        return
    info = container_of(repo, record)
    if info is None or info.state not in LIVE_STATES:
        return
    from git_iterare.agents.tally import Tally, tapped

    counted = Tally(agent)
    with using(engine_of(record)):
        for _ in tapped(sandbox.output(info.id), counted):
            pass
        stop_over_budget(repo, record, agent, counted.cost_usd, info.id)


def unannotated(repo: Repo, before: str | None, head: str | None,
                commits: tuple[str, ...]) -> tuple[str, ...]:
    """Of a run's ``commits`` (hex, oldest first, up to ``head``), those after the head it
    had (``before``), whose commits got their notes then: all when it had none."""
    if not before or not head:
        return commits
    from git_iterare.git.repo import common_git

    return tuple(common_git(repo, "rev-list", "--reverse", f"{before}..{head}").stdout.split())


def note_entry(record: RunRecord, status: str) -> dict[str, object]:
    """The note a run's commits get (gititerare-records(5)): its id, prompt, agent and
    ``status``, the group it is an attempt of (``execute -n``) when it is one, and for a
    loop its round (:func:`_round_note`)."""
    entry: dict[str, object] = {"run": record.id, "prompt": record.prompt_name,
                                "agent": record.agent, "status": status}
    if isinstance(group := record.extra.get("group"), str):
        entry["group"] = group
    entry.update(_round_note(record))
    return entry


def reconcile(repo: Repo, records: Iterable[RunRecord] | None = None) -> list[RunRecord]:
    """Finish every active run whose sandbox ended or vanished; stop overdue ones; note
    where the others are (:meth:`~git_iterare.runner.placement.Placement.note_where`).

    Args:
        repo: the repository.
        records: the runs to look at; all active runs when None.

    Returns:
        The records of the runs that were finished now.
    """
    from git_iterare import sandbox
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox.engine import using

    store = RunStore(repo)
    active = [r for r in (records if records is not None else store.list(statuses=ACTIVE))
              if r.status in ACTIVE]
    finished = []
    for record in active:
        if not is_local(repo, record):
            continue
        timeout = record.extra.get("timeout") or 0
        if record.container and timeout and age_seconds(record.started) > timeout + TIMEOUT_GRACE:
            info = container_of(repo, record)
            if info is not None and info.state in LIVE_STATES:
                store.update(record.id, lambda r: r.with_extra(timed_out=True), "timed out")
                with using(engine_of(record)):
                    sandbox.stop(info.id)
        elif record.container and record.extra.get("max_budget_usd"):
            _check_budget(repo, record)
        after = observe(repo, record.id)
        if after.status not in ACTIVE:
            finished.append(after)
    return finished


def observe(repo: Repo, run_id: str) -> RunRecord:
    """:func:`finish` the run if its sandbox ended; else note where it is now
    (:meth:`~git_iterare.runner.placement.Placement.note_where`: a swarm's queue or
    node). Returns the record as it is then.

    Raises:
        as :func:`finish`.
    """
    from git_iterare.runner.placement import placement_of
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox.engine import using

    after = finish(repo, run_id)
    if after.status in ACTIVE and after.container:
        with using(engine_of(after)):
            placement_of(after).note_where(repo, after)
        after = RunStore(repo).get(run_id)
    return after


def finish_later(repo: Repo, run_id: str, *, wait: bool = False, defer_to_stop: bool = False
                 ) -> tuple[RunRecord, FinishResult | None]:
    """``git iterare finish``: commit the work a run left on disk, after the fact.

    For a run whose work could not be committed when it ended (``extra.unfinished``, see
    :func:`_unfinished`), or any ended run of this repository whose worktree or gitdir
    holds work not on its branch: the run's trees are reclaimed again, its commits
    imported and what is left committed (as at the end of a run), its result recorded and
    ``extra.unfinished`` cleared. The status stays what it is (``failed`` for a run whose
    commit failed: its error says the work was committed later). A run still active is
    finished first when its sandbox has ended.

    Args:
        repo: the repository.
        run_id: the run.
        wait: wait for an active run's sandbox to end first (else an active run whose
            sandbox still runs is refused).
        defer_to_stop: as for :func:`finish` (the watcher); such a run is returned as it is,
            and a run whose commit failed is left for a later ``finish``.

    Returns:
        ``(record afterwards, importer.FinishResult or None when nothing was left)``.

    Raises:
        OperationFailed: the run is still running, ran on another machine, or its work
            still cannot be committed (then nothing changed).
    """
    from git_iterare.runner.teardown import unfinished_work
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore

    store = RunStore(repo)
    record = store.get(run_id)
    if ran_elsewhere(repo, record):
        raise OperationFailed(f"run {run_id} ran on another machine or repository",
                              hint="finish it where it ran")
    if record.status in ACTIVE:
        record = finish(repo, run_id, wait=wait, defer_to_stop=defer_to_stop)
        if defer_to_stop:
            # The watcher records the end, no more: a second try at a commit that failed
            # would race the user who is fixing what made it fail.
            return record, None
        if record.status in ACTIVE:
            raise OperationFailed(f"run {run_id} is still {record.status}",
                                  hint=f"wait for it (`git iterare log -f {run_id}`) or stop it")
        if not record.extra.get("unfinished"):
            return record, None
    if not record.base_commit or not has_worktree(repo, record):
        if record.extra.get("unfinished"):
            raise OperationFailed(f"run {run_id}'s worktree is gone; its uncommitted work "
                                  "cannot be recovered")
        return record, None
    with run_lock(repo, run_id):
        record = store.get(run_id)
        ws = workspace_of(repo, record)
        unfinished = record.extra.get("unfinished")
        head = record.head
        if not unfinished and head and not unfinished_work(repo, ws, head):
            return record, None
        from git_iterare.runner.placement import placement_of

        placement_of(record).give_back(repo, record, ws)
        try:
            work = commit_work(repo, store, record, ws)
        except expected_errors() as exc:
            from git_iterare.errors import IterareError

            reason = exc.message if isinstance(exc, IterareError) else str(exc)
            raise OperationFailed(f"run {run_id}: its work still cannot be committed: "
                                  f"{reason}") from None
        if work.head != record.head:
            store.set_head(record.id, work.head, changes_of(work))
        # those up to the recorded head were annotated when the run ended
        new = unannotated(repo, head, work.head, work.commits)
        if new:
            store.add_note(new, note_entry(record, record.status))

        def settled(r: RunRecord) -> RunRecord:
            extra = {k: v for k, v in r.extra.items() if k != "unfinished"}
            if not unfinished:
                return r.replace(extra=extra)
            before = unfinished.get("error")
            return r.replace(extra=extra, error=(f"{before}; " if before else "")
                             + "its work was committed later by `git iterare finish`")

        return store.update(record.id, settled, f"{record.id} finished later"), work

