"""``execute -n N``: N attempts at one prompt, from one base, at most J at a time.

The request is checked once (:func:`git_iterare.runner.request.validate`), so every
attempt starts from the same base commit and prompt even when a commit lands or the
prompt file changes meanwhile; each attempt is then planned and launched as any run
(:func:`git_iterare.runner.launch.plan`, :func:`~git_iterare.runner.launch.launch`), named
``<name>.<K>`` and recorded with ``extra.group`` and ``extra.attempt`` (K). Its sandbox gets
``ITERARE_ATTEMPT=K``.

A :class:`Queue` starts attempts while fewer than J run and finishes each one as it ends.
``execute -n N -f`` runs it in the command's process. Without ``-f`` the command starts
the first J and, when attempts are left, hands the queue to a process of its own session
(:func:`detach`: Ctrl-C and a closed terminal leave it alone) that starts the rest as slots
free; it gets the checked request through a pipe (never a file: it holds credentials),
writes what it says to ``state/groups/<group>.log`` and keeps ``<group>.queue`` (the
attempts still waiting, which ``list`` shows) while it holds ``<group>.lock``. Every
started attempt also gets the watcher of :mod:`git_iterare.runner.watch`, so a queue that
dies leaves no run unfinished for long.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import marks
from git_iterare.config import Config
from git_iterare.errors import IterareError, UserError
from git_iterare.git.repo import Repo
from git_iterare.runner.paths import state_root

if TYPE_CHECKING:
    from git_iterare.runner.request import Checked
    from git_iterare.runs.record import RunRecord

#: Seconds between two looks at the running attempts.
POLL_SECONDS = 1.0

#: The detached queue's program: :func:`_resume` in this interpreter (see
#: :data:`git_iterare.runner.watch._PROGRAM` for why ``sys.path[0]`` is replaced).
_PROGRAM = ("import sys; sys.path[0] = sys.argv[1]; "
            "from git_iterare.runner.attempts import _resume; sys.exit(_resume(int(sys.argv[2])))")


def default_jobs(config: Config) -> int:
    """How many attempts run at once when ``--jobs`` is not given: the engine's CPUs
    divided by each run's ``docker.cpus``, at least 1 and at most the engine's CPUs (a
    repository may narrow ``docker.cpus`` without approval, which must not make all of
    its attempts start at once).

    Raises:
        UserError: a bad ``[docker]`` limit. OperationFailed: the engine cannot be asked.
    """
    from git_iterare.runner.request import sandbox_limits
    from git_iterare.sandbox import engine_cpus

    cpus = engine_cpus()
    return max(1, min(cpus, int(cpus // sandbox_limits(config).cpus)))


def group_paths(repo: Repo, group: str) -> tuple[Path, Path, Path]:
    """``(queue, lock, log)`` files of ``group``'s detached queue under
    ``state/groups/``."""
    folder = state_root(repo) / "groups"
    return (folder / f"{group}.queue", folder / f"{group}.lock", folder / f"{group}.log")


def queued(repo: Repo, *, dead: bool = False) -> list[tuple[str, int, int]]:
    """The attempts waiting in a live queue: ``(group, attempt, size)`` each, by group and
    attempt. A queue whose process is gone waits for nothing, and is left out; with
    ``dead``, only such a queue's attempts are given (they were never started)."""
    folder = state_root(repo) / "groups"
    out: list[tuple[str, int, int]] = []
    for path in sorted(folder.glob("*.queue")) if folder.is_dir() else []:
        group = path.name[:-len(".queue")]
        if (marks.held(group_paths(repo, group)[1]) is True) == dead:
            continue
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(path.read_text())
            out.extend((group, int(k), int(data["size"])) for k in data["queued"])
    return out


def cancel_path(repo: Repo, group: str) -> Path:
    """``state/groups/<group>.cancel``: while there, ``group``'s queue starts nothing."""
    return state_root(repo) / "groups" / f"{group}.cancel"


def cancel(repo: Repo, group: str) -> int:
    """Tell ``group``'s queue to start none of the attempts still waiting (``cleanup
    GROUP``), and forget those of a queue whose process is gone; return how many waited.

    Raises:
        OSError: the state folder cannot be written.
    """
    live = [k for g, k, _ in queued(repo) if g == group]
    if live:
        cancel_path(repo, group).touch()
    gone = [k for g, k, _ in queued(repo, dead=True) if g == group]
    if gone:
        group_paths(repo, group)[0].unlink(missing_ok=True)
    return len(live) + len(gone)


@dataclass(frozen=True)
class Ended:
    """An attempt that ended, or could not start (``record`` None, ``error`` its
    message)."""

    attempt: int
    record: RunRecord | None
    error: str | None = None


@dataclass
class Queue:
    """The attempts of one group: those waiting, running and ended.

    Attributes:
        repo: the repository.
        config: the effective configuration.
        checked: the request, checked once; each attempt gets a copy (:meth:`request_of`).
        group: the group id.
        size: N, how many attempts the group has.
        jobs: at most this many run at once.
        waiting: attempt numbers not started yet, in order.
        running: attempt number -> run id.
        ended: what ended, in the order it did.
    """

    repo: Repo
    config: Config
    checked: Checked
    group: str
    size: int
    jobs: int
    waiting: list[int]
    running: dict[int, str] = field(default_factory=dict)
    ended: list[Ended] = field(default_factory=list)

    def request_of(self, attempt: int) -> Checked:
        """The checked request of attempt ``attempt``: named ``<name>.<attempt>``, pinned
        to the group's base, recorded with the group."""
        checked = self.checked
        name = checked.request.name or checked.prompt.run_name
        request = dataclasses.replace(
            checked.request, name=f"{name}.{attempt}", group=self.group, attempt=attempt,
            base=(checked.base_commit, checked.base_branch))
        return dataclasses.replace(checked, request=request)

    def start_next(self, progress: Callable[[str], None] = lambda line: None) -> RunRecord:
        """Launch the next waiting attempt, with its watcher; return its record.

        Raises:
            UserError, OperationFailed: as :func:`git_iterare.runner.launch.execute`; the
                attempt is no longer waiting.
            RunGoesOn: Ctrl-C once its agent started (it is running, with its watcher).
        """
        from git_iterare.runner.interrupts import RunGoesOn
        from git_iterare.runner.launch import launch, plan
        from git_iterare.runner.watch import watch

        attempt = self.waiting.pop(0)
        try:
            record = launch(self.repo, self.config,
                            plan(self.repo, self.config, self.request_of(attempt), progress))
        except RunGoesOn as exc:
            self.running[attempt] = exc.run_id
            watch(self.repo, exc.run_id)
            raise
        self.running[attempt] = record.id
        watch(self.repo, record.id)
        return record

    def fill(self, started: Callable[[int, RunRecord], None],
             failed: Callable[[Ended], None]) -> None:
        """Start waiting attempts while fewer than :attr:`jobs` run; ``started`` hears of
        each, ``failed`` of each that could not start (the queue goes on)."""
        if self.waiting and cancel_path(self.repo, self.group).exists():
            for attempt in self.waiting:
                ended = Ended(attempt, None, "its group was cleaned up")
                self.ended.append(ended)
                failed(ended)
            self.waiting.clear()
        while self.waiting and len(self.running) < self.jobs:
            attempt = self.waiting[0]
            try:
                started(attempt, self.start_next())
            except IterareError as exc:
                ended = Ended(attempt, None, exc.render())
                self.ended.append(ended)
                failed(ended)

    def poll(self, done: Callable[[Ended], None]) -> None:
        """Finish the running attempts whose sandbox ended (as their watcher would) and
        tell ``done`` of each one that is no longer active."""
        from git_iterare.runner.finish import finish
        from git_iterare.runs.status import ACTIVE
        from git_iterare.runs.store import RunStore

        for attempt, run_id in list(self.running.items()):
            try:
                record = finish(self.repo, run_id, defer_to_stop=True)
            except IterareError:  # the engine did not answer: ask again next time
                record = RunStore(self.repo).get(run_id)
            if record.status not in ACTIVE:
                del self.running[attempt]
                ended = Ended(attempt, record)
                self.ended.append(ended)
                done(ended)

    def run(self, started: Callable[[int, RunRecord], None],
            done: Callable[[Ended], None], on_change: Callable[[], None] = lambda: None
            ) -> None:
        """Start and finish attempts until none waits or runs."""
        while True:
            before = len(self.waiting)
            self.fill(started, done)
            if len(self.waiting) != before:
                on_change()
            if not self.waiting and not self.running:
                return
            time.sleep(POLL_SECONDS)
            self.poll(done)


def check_counts(size: int, jobs: int | None) -> None:
    """Refuse a number of attempts outside 1 to :data:`~git_iterare.limits.MAX_ATTEMPTS`,
    or fewer than 1 at once.

    Raises:
        UserError: one line naming the option and what it takes.
    """
    from git_iterare.limits import MAX_ATTEMPTS

    if not 1 <= size <= MAX_ATTEMPTS:
        raise UserError(f"-n {size}: at most {MAX_ATTEMPTS} attempts (MAX_ATTEMPTS), and at "
                        "least 1", hint="more than the engine runs at once is fine: they queue")
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs {jobs}: at least 1 attempt at once")


def prepare(repo: Repo, config: Config, checked: Checked, size: int, jobs: int | None
            ) -> Queue:
    """The queue of ``size`` attempts at ``checked`` (a new group), before any starts.

    Raises:
        UserError: ``size`` or ``jobs`` out of range, or a name too long for ``.<size>``.
        OperationFailed: ``jobs`` is None and the engine cannot be asked for its CPUs.
    """
    from git_iterare.runs.groups import new_group_id
    from git_iterare.runs.ids import validate_name

    check_counts(size, jobs)
    name = checked.request.name or checked.prompt.run_name
    validate_name(f"{name}.{size}")  # the longest name an attempt gets
    return Queue(repo=repo, config=config, checked=checked, group=new_group_id(name),
                 size=size, jobs=jobs if jobs is not None else default_jobs(config),
                 waiting=list(range(1, size + 1)))


def save_waiting(queue: Queue) -> None:
    """Write ``queue``'s waiting attempts to its ``.queue`` file (replaced whole), or
    remove the file when none waits."""
    path = group_paths(queue.repo, queue.group)[0]
    if not queue.waiting:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"size": queue.size, "jobs": queue.jobs,
                                     "queued": queue.waiting}))
    temporary.replace(path)


def detach(queue: Queue) -> Path | None:
    """Hand ``queue`` (attempts still waiting) to a process of its own session that
    starts them as slots free and finishes them (:func:`_resume`); return the file its
    output goes to, or None when it could not be started (the waiting attempts are not
    started then)."""
    import pickle

    queue_file, lock, log = group_paths(queue.repo, queue.group)
    lock.parent.mkdir(parents=True, exist_ok=True)
    save_waiting(queue)
    fd = marks.hold(lock)  # handed to the child: `list` sees a live queue from now on
    try:
        data = pickle.dumps(queue)
        with open(log, "ab") as out:
            child = subprocess.Popen(
                [sys.executable, "-c", _PROGRAM, _import_root(), str(fd)],
                stdin=subprocess.PIPE, stdout=out, stderr=out, start_new_session=True,
                pass_fds=(fd,), env={**os.environ, "NO_COLOR": "1"})
        assert child.stdin is not None
        with child.stdin:
            child.stdin.write(data)
    except (OSError, pickle.PicklingError):
        queue_file.unlink(missing_ok=True)
        return None
    finally:
        os.close(fd)  # the child's copy holds the lock
    return log


def _import_root() -> str:
    from git_iterare.runner.watch import _IMPORT_ROOT

    return _IMPORT_ROOT


def _resume(lock_fd: int) -> int:
    """The detached queue: read the :class:`Queue` from stdin, start and finish its
    attempts, saying one line for each; exit 0 when one succeeded, else 1. Holds the
    group's lock (``lock_fd``, inherited) until it ends."""
    import pickle

    queue: Queue = pickle.loads(sys.stdin.buffer.read())

    def say(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    try:
        queue.run(started=lambda k, record: say("started " + started_line(queue, k, record)),
                  done=lambda ended: say(ended_line(queue, ended)),
                  on_change=lambda: save_waiting(queue))
    finally:
        queue.waiting.clear()
        save_waiting(queue)
        cancel_path(queue.repo, queue.group).unlink(missing_ok=True)
        os.close(lock_fd)
    return 0 if any(succeeded(e) for e in queue.ended) else 1


def succeeded(ended: Ended) -> bool:
    """Whether the attempt ended ``succeeded``."""
    from git_iterare.runs.status import SUCCEEDED

    return ended.record is not None and ended.record.status == SUCCEEDED


def started_line(queue: Queue, attempt: int, record: RunRecord) -> str:
    """``attempt 2/3: run ID on branch B`` (what started)."""
    from git_iterare.ui import sanitize_line

    return (f"attempt {attempt}/{queue.size}: run {sanitize_line(record.id)} "
            f"on branch {sanitize_line(record.branch or '-')}")


def ended_line(queue: Queue, ended: Ended) -> str:
    """``attempt 2/3: run ID succeeded (exit 0, 12s, $0.01)``, or why it could not
    start."""
    from git_iterare.runs.render import cost_text, duration_seconds, human_span
    from git_iterare.runs.status import now_iso, parse_iso
    from git_iterare.ui import sanitize_line

    head = f"attempt {ended.attempt}/{queue.size}"
    record = ended.record
    if record is None:
        return f"{head}: could not start: {sanitize_line(ended.error or '?')}"
    now = parse_iso(now_iso())
    assert now is not None
    loop = record.extra.get("loop")
    reason = loop.get("reason") if isinstance(loop, dict) else None
    facts = [f"exit {record.exit_code}" if record.exit_code is not None else None,
             f"reason {reason}" if isinstance(reason, str) else None,
             human_span(duration_seconds(record, now)),
             cost_text(record.cost_usd) if record.cost_usd is not None else None]
    return (f"{head}: run {sanitize_line(record.id)} {sanitize_line(record.status)} "
            f"({sanitize_line(', '.join(f for f in facts if f))})")
