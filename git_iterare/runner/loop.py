"""Loops: ``execute --until CHECK`` runs the agent in rounds until a check passes.

A round is the agent's container running to its end. The check (a shell command) then
runs in a container of its own in the same sandbox (:func:`git_iterare.sandbox.again`:
the file system the agent left, its uid, the run's trees, limits and firewall), and the
engine reports its exit status: nothing the agent left behind can answer for it, since
every process of the agent's container ended with it. Exit 0 ends the run
``succeeded`` (reason ``passed``). Otherwise the round's work is committed on the run's
branch, with a note naming the round; unless a limit ends the loop (``rounds``,
``stalled``, ``budget``, the run's timeout, a stop), the next round starts in the same
sandbox, told what the check said (:mod:`git_iterare.runner.rounds`).

One process at a time drives a run's loop: the watcher ``execute`` leaves
(:mod:`git_iterare.runner.watch`, :mod:`git_iterare.runner.driver`). Any other command
that finds the agent's container ended leaves the run to its driver while it lives, and
finishes it itself, its work kept, once none does.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from git_iterare.agents.base import PROMPT_FILE
from git_iterare.errors import IterareError
from git_iterare.git.repo import Repo
from git_iterare.runner.driver import DRIVING, hold_driver, inherited
from git_iterare.runner.rounds import (
    ROUND_FILE,
    check_name,
    joined_log,
    left_of,
    over_budget,
    own_share,
    round_entry,
    round_prompt,
    so_far,
    stall_reason,
)
from git_iterare.runs.loops import current_round, loop_of, rounds_of

if TYPE_CHECKING:
    from git_iterare.agents.base import Agent
    from git_iterare.runs.extra import Round
    from git_iterare.runs.record import RunRecord
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox.spec import ContainerInfo
    from git_iterare.settings import Settings



def drive(repo: Repo, config: Settings, run_id: str) -> RunRecord:
    """Drive run ``run_id``'s loop to its end (or wait for the process that drives it);
    return its record then.

    Raises:
        OperationFailed: the engine cannot be reached, or the records failed (the run
            stays active: the next command finishes it, its work kept).
    """
    import os

    from git_iterare.runner.finish import finish
    from git_iterare.runs.store import RunStore

    fd = inherited(repo, run_id)
    if fd is None:
        fd = hold_driver(repo, run_id)
    if fd is None:
        return finish(repo, run_id, wait=True)
    DRIVING.add(run_id)
    try:
        return _drive(repo, config, RunStore(repo), run_id)
    finally:
        DRIVING.discard(run_id)
        os.close(fd)


def _drive(repo: Repo, config: Settings, store: RunStore, run_id: str) -> RunRecord:
    from git_iterare import sandbox
    from git_iterare.agents import get_agent
    from git_iterare.runner.finish import LIVE_STATES, finish, held_wait
    from git_iterare.runner.ownership import container_of, engine_of
    from git_iterare.runner.secrets import register_run_secrets
    from git_iterare.runs.status import ACTIVE
    from git_iterare.sandbox.engine import using

    while True:
        record = store.get(run_id)
        if record.status not in ACTIVE or loop_of(record) is None:
            return finish(repo, run_id, wait=True)
        with using(engine_of(record)):
            info = container_of(repo, record)
            while info is not None and info.state in LIVE_STATES:
                if info.state == "created" and store.get(run_id).extra.get("stop_requested"):
                    break
                held_wait(store, record, info.id)
                info = sandbox.inspect(info.id)
            if info is None:
                return finish(repo, run_id)  # its sandbox is gone: finished as lost
            agent = get_agent(record.agent or "shell")
            register_run_secrets(repo, record, agent)
            try:
                going = _next_round(repo, config, store, store.get(run_id), agent, info)
            except IterareError as exc:
                # The engine refused the check or the next round: the loop cannot go on,
                # and says why; the finish keeps the work of every round.
                _cannot_go_on(store, run_id, exc.message)
                going = False
            if not going:
                return finish(repo, run_id)


def _next_round(repo: Repo, config: Settings, store: RunStore, record: RunRecord,
                agent: Agent, info: ContainerInfo) -> bool:
    """After the agent's container ``info`` of the round under way ended: its check, the
    round recorded and (unless the check passed) committed, and the next round started.
    Returns False when the loop is over (``extra.loop.reason`` says why): the run is then
    to be finished."""
    from git_iterare.agents.tally import Tally, kept_log
    from git_iterare.runner.finish import START_SLACK, TIMEOUT_EXIT, TIMEOUT_KILLED, _outcome
    from git_iterare.runner.spec import with_timeout
    from git_iterare.runs import status as st
    from git_iterare.runs.extra import Loop

    loop = Loop(**(loop_of(record) or Loop(until="")))
    number = current_round(record)
    counted = Tally(agent)
    from git_iterare import sandbox

    log = kept_log(sandbox.output(info.id), counted)
    before = rounds_of(record)
    result = own_share(counted.result(exit_code=info.exit_code), before)
    ended_as, _ = _outcome(record, info.exit_code, so_far(result, before), False,
                           info.ran_seconds)
    stopping = {st.STOPPED: "budget" if not record.extra.get("stop_requested") else "stopped",
                st.TIMED_OUT: "timed-out"}.get(ended_as)
    remaining = _seconds_left(record)
    if stopping is None and remaining is not None and (
            remaining <= 0 or (info.exit_code in (TIMEOUT_EXIT, TIMEOUT_KILLED)
                               and remaining <= START_SLACK + 1)):
        # Its `timeout` was given what was left of the run's (in whole seconds), and
        # ended it there.
        stopping = "timed-out"
    check: tuple[int | None, float | None, str] = (None, None, "")
    if stopping is None:
        check = _check(repo, record, info, str(loop["until"]), number, remaining)
        if store.get(record.id).extra.get("stop_requested"):
            stopping = "stopped"
    started, ended = _round_times(record, info)
    entry = round_entry(number, result, started=started, ended=ended,
                        exit_code=info.exit_code, check_exit=check[0],
                        check_seconds=check[1], check_tail=check[2])
    rounds = [*before, entry]
    reason = stopping or ("passed" if check[0] == 0 else None)
    if reason is None and number >= (loop.get("max_rounds") or 1):
        reason = "rounds"
    _keep_log(store, record, number, log)
    if reason is None:
        from git_iterare.runner.paths import run_lock

        with run_lock(repo, record.id):
            head, tree = _commit_round(repo, store, record, info, entry)
        entry["head"] = head
        trees = [*_round_trees(repo, rounds[:-1]), tree]
        stalled = stall_reason(rounds, trees, loop.get("stall_after") or 0)
        if stalled:
            reason, loop["stalled"] = "stalled", stalled
        elif over_budget(record.extra, rounds):
            reason = "budget"
        elif store.get(record.id).extra.get("stop_requested"):  # asked during the commit
            reason = "stopped"
        elif (remaining := _seconds_left(record)) is not None and remaining <= 0:
            reason = "timed-out"  # the check and the commit took the rest
    if reason is not None:
        loop["reason"] = reason
        store.update(record.id, lambda r: r.with_extra(loop=loop, rounds=rounds),
                     f"{record.id} round {number}: {reason}")
        return False
    loop["round"] = number + 1
    record = store.update(record.id, lambda r: r.with_extra(loop=loop, rounds=rounds),
                          f"{record.id} round {number} ended")
    task = store.read_prompt(record.id)
    prompt = round_prompt(task=task, until=str(loop["until"]), entry=entry,
                          continues=agent.continues_session)
    command = [*agent.round_command(prompt_file=PROMPT_FILE, round_file=ROUND_FILE,
                                    config=config), *agent.limit_args(left_of(record.extra,
                                                                              rounds))]
    if remaining is not None:
        command = with_timeout(command, remaining)
    from git_iterare.sandbox.spec import sandbox_name

    new = sandbox.again(info.id, name=sandbox_name(record.id), role="agent", command=command,
                        env=_round_env(number + 1, entry), files={ROUND_FILE: prompt.encode()})
    store.update(record.id, lambda r: r.replace(container=new),
                 f"{record.id} round {number + 1} started")
    return True


def _cannot_go_on(store: RunStore, run_id: str, error: str) -> None:
    """Record that run ``run_id``'s loop ended ``failed`` with ``error``."""
    from git_iterare.runs.extra import Loop

    def fn(r: RunRecord) -> RunRecord:
        return r.with_extra(loop=Loop(**(loop_of(r) or Loop(until="")), reason="failed",
                                      error=error))

    store.update(run_id, fn, f"{run_id} loop failed")


def _round_env(number: int, entry: Round) -> dict[str, str]:
    """The environment a round's container adds: its number and, from the second, what
    the last check said (for the shell agent's scripts)."""
    env = {"ITERARE_ROUND": str(number)}
    if number > 1:
        env["ITERARE_CHECK_EXIT"] = str(entry.get("check_exit"))
        env["ITERARE_CHECK_OUTPUT"] = entry.get("check_tail") or ""
    return env


def _seconds_left(record: RunRecord) -> float | None:
    """Seconds of the run's ``timeout`` left (it counts from the run's start, across its
    rounds), or None without one."""
    from git_iterare.runner.finish import age_seconds

    timeout = record.extra.get("timeout") or 0
    if not timeout:
        return None
    return timeout - age_seconds(record.started or record.created)


def _round_times(record: RunRecord, info: ContainerInfo) -> tuple[str | None, str | None]:
    """When the round's agent started and ended (ISO 8601 UTC, the engine's clock)."""
    import datetime as dt

    from git_iterare.runs.status import parse_iso

    ended = parse_iso(info.ended_at)
    if ended is None or info.ran_seconds is None:
        return None, info.ended_at
    started = ended - dt.timedelta(seconds=info.ran_seconds)
    return started.strftime("%Y-%m-%dT%H:%M:%SZ"), info.ended_at


def _check(repo: Repo, record: RunRecord, info: ContainerInfo, until: str, number: int,
           remaining: float | None) -> tuple[int | None, float | None, str]:
    """Run the loop's check in the sandbox after round ``number``: its exit status (None
    when it never ended: stopped), seconds, and the end of its output
    (:data:`~git_iterare.limits.MAX_CHECK_TAIL_BYTES`, secrets redacted, control
    characters made visible)."""
    from git_iterare import proc, sandbox
    from git_iterare.limits import MAX_CHECK_TAIL_BYTES
    from git_iterare.runner.spec import with_timeout
    from git_iterare.ui import sanitize

    command = ["/bin/sh", "-c", until]
    if remaining is not None:
        command = with_timeout(command, remaining)
    # From the sandbox's image, not from what the agent left: nothing of the agent's but
    # the run's trees can answer for the check (a wrapper in its home, a secret variable).
    check = sandbox.again(info.id, name=check_name(record.id, number), role="check",
                          command=command, env={"ITERARE_ROUND": str(number)}, files={},
                          pristine=True)
    code = _wait_check(check, remaining)
    ended = sandbox.inspect(check)
    kept: collections.deque[bytes] = collections.deque()
    size = 0
    for line in sandbox.output(check):
        kept.append(line)
        size += len(line)
        while size > MAX_CHECK_TAIL_BYTES and len(kept) > 1:
            size -= len(kept.popleft())
    data = b"".join(kept)[-MAX_CHECK_TAIL_BYTES:].decode("utf-8", "replace")
    redact = proc.redactor().redact_line
    tail = sanitize("".join(redact(line) for line in data.splitlines(keepends=True)))
    return code, ended.ran_seconds if ended is not None else None, tail.rstrip("\n")


def _wait_check(check: str, remaining: float | None) -> int | None:
    """The exit status of the check container ``check``; one that outlives the run's
    ``remaining`` seconds (and the grace its ``timeout`` wrapper gives) is stopped from
    here, whatever its image's ``timeout`` did. None when it ended without a status."""
    import time

    from git_iterare import sandbox

    deadline = None if remaining is None else time.monotonic() + max(remaining, 0) + 15
    while True:
        wait = None if deadline is None else max(deadline - time.monotonic(), 0.1)
        code = sandbox.wait(check, timeout=wait)
        if code is not None:
            return code
        if deadline is not None and time.monotonic() >= deadline:
            sandbox.stop(check, grace_seconds=0)
            return sandbox.wait(check, timeout=30)


def _keep_log(store: RunStore, record: RunRecord, number: int, log: bytes) -> None:
    """Add round ``number``'s output to the run's stored log, under a line naming the
    round (the last round's is added by the finish: :func:`joined_log`)."""
    store.set_log(record.id, joined_log(store.read_log(record.id), number, log))


def _commit_round(repo: Repo, store: RunStore, record: RunRecord, info: ContainerInfo,
                  entry: Round) -> tuple[str | None, str | None]:
    """Commit what round ``entry`` left (the trees brought and given back first, then
    given to the agent again at the round's head for the next round): the agent's commits
    imported, the rest committed with an ``Iterare-Round`` trailer, the commits annotated
    with the round. Returns the round's head commit and its tree (hex), None when
    unknown."""
    from git_iterare import ui
    from git_iterare.runner.finish import (
        changes_of,
        commit_work,
        note_entry,
        unannotated,
        workspace_of,
    )
    from git_iterare.runner.placement import placement_of

    placement = placement_of(record)
    ws = workspace_of(repo, record)
    for note in placement.fetch(repo, record, ws):
        ui.warn(f"run {record.id}: {note}")
    placement.give_back(repo, record, ws, info.id)
    work = commit_work(repo, store, record, ws)
    if work.head and work.head != record.head:
        store.set_head(record.id, work.head, changes_of(work))
    commits = unannotated(repo, record.head, work.head, work.commits)
    if commits:
        store.add_note(commits, {
            **note_entry(record, record.status), "check_exit": entry.get("check_exit"),
            "check_seconds": entry.get("check_seconds"), "cost_usd": entry.get("cost_usd")})
    # At the round's head: the next round's commits build on this one.
    placement.give_again(repo, record, ws, info.id, work.head)
    return work.head, _tree_of(repo, work.head)


def _tree_of(repo: Repo, commit: str | None) -> str | None:
    """The tree id (hex) of ``commit``, None when unknown."""
    from git_iterare.git.repo import rev

    return rev(repo, f"{commit}^{{tree}}") if commit else None


def _round_trees(repo: Repo, rounds: list[Round]) -> list[str | None]:
    return [_tree_of(repo, r.get("head")) for r in rounds]


