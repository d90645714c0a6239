"""``execute``: from a prompt file to a running sandbox, in the order of the domain.

1. **Validate** the request (:func:`git_iterare.runner.request.validate`): everything that
   can be refused without the engine.
2. **Plan** the run (:func:`plan`): the engine's answers (its CPUs, the network, the
   image, built when needed) and what the record will hold.
3. **Launch** it (:func:`launch`): the record, the run's trees where its placement keeps
   them (:mod:`git_iterare.runner.placement`), and the sandbox, started while the trees
   are filled. Start-sooner work joins at four points, through one door
   (:mod:`git_iterare.runner.warmup`).

Nothing is created before the plan is complete, so a refused request leaves no record,
branch, worktree or container behind; a launch that fails before its agent starts is
undone whole, and one whose agent started is recorded and goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from git_iterare import ui
from git_iterare.agents.base import PROMPT_FILE
from git_iterare.config import Config
from git_iterare.git.repo import Repo
from git_iterare.runner.paths import state_dir
from git_iterare.runner.request import (
    Checked,
    ExecuteRequest,
    relative_path,
    sandbox_limits,
    validate,
)

__all__ = ["PROMPT_FILE", "ExecuteRequest", "LaunchPlan", "execute", "launch", "plan"]

if TYPE_CHECKING:
    from git_iterare.runner.interrupts import HeldInterrupts
    from git_iterare.runner.placement import Placement
    from git_iterare.runner.warmup import Plain
    from git_iterare.runs.extra import RunExtra
    from git_iterare.runs.record import RunRecord
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox.image import ImageRef
    from git_iterare.sandbox.policy import EgressPolicy
    from git_iterare.sandbox.spec import Limits



@dataclass(frozen=True)
class LaunchPlan:
    """Everything settled before the run's record exists.

    Attributes:
        checked: the validated request.
        image: the images to run (the agent's, and git-iterare's own for the sidecar).
        policy: the sandbox's egress policy, attached networks included.
        limits: CPU, memory and process limits.
        extra: the record's ``extra`` (timeout, budget, networks, origin, ...).
    """

    checked: Checked
    image: ImageRef
    policy: EgressPolicy
    limits: Limits
    extra: RunExtra

    @property
    def placement(self) -> Placement:
        """Where the run's trees live."""
        return self.checked.placement


def execute(repo: Repo, config: Config, request: ExecuteRequest,
            env: Mapping[str, str] | None = None,
            progress: Callable[[str], None] = lambda line: None) -> RunRecord:
    """Start a run and return its record (status ``running``) without waiting for it.

    Args:
        repo: the repository.
        config: effective configuration (``--timeout`` etc. already applied as flags).
        request: what to run.
        env: the host environment (``os.environ`` when None).
        progress: receives one line per step of long work (image builds).

    Returns:
        The :class:`git_iterare.runs.record.RunRecord` as stored after launch.

    Raises:
        UserError: see :func:`git_iterare.runner.request.validate`.
        OperationFailed: Docker unreachable, image build failed, launch failed (then the
            run is recorded as failed and its worktree kept, or undone when its agent
            never started).
        RunGoesOn: Ctrl-C once the agent started (the run is recorded and goes on).
    """
    from git_iterare import gcpause
    from git_iterare.timings import phase

    try:
        with phase("start.validate"):
            checked = validate(repo, config, request, os.environ if env is None else env)
        with phase("start.plan"):
            planned = plan(repo, config, checked, progress)
        return launch(repo, config, planned)
    finally:
        gcpause.resume()  # start-up is over: the caller may follow the run for hours


def plan(repo: Repo, config: Config, checked: Checked,
         progress: Callable[[str], None] = lambda line: None) -> LaunchPlan:
    """What the engine must say before anything is made: its CPU count against the run's
    limits, the network, and the image (built when it is missing or out of date).

    Raises:
        UserError: a limit or network the engine cannot give; a bad image setting.
        OperationFailed: the engine cannot be reached, or the image build failed.
    """
    from git_iterare.runner.guard import check_network_on_engine, with_networks, workspace_mounts
    from git_iterare.runner.ownership import origin
    from git_iterare.sandbox.image import ensure_image

    limits = sandbox_limits(config)
    check_network_on_engine(checked.admitted.network)
    policy = with_networks(checked.policy, checked.networks)
    image = ensure_image(config, repo, progress, **checked.held._asdict())
    request = checked.request
    extra: RunExtra = {
        "timeout": checked.timeout, **checked.budget, "env": list(checked.secret_env),
        "interactive": request.tty, "networks": list(checked.networks),
        "workspace_mounts": list(workspace_mounts(repo, checked.admitted.mounts,
                                                  checked.base_commit)),
        "sidecar_image": image.sidecar, **origin(repo)}
    if checked.loop is not None:
        extra["loop"] = {**checked.loop, "round": 1}
        extra["rounds"] = []
    if request.group is not None and request.attempt is not None:
        extra["group"], extra["attempt"] = request.group, request.attempt
    return LaunchPlan(checked=checked, image=image, policy=policy, limits=limits, extra=extra)


def launch(repo: Repo, config: Config, planned: LaunchPlan) -> RunRecord:
    """Create the run's record, then its trees and sandbox; return the record as
    ``running``.

    Raises:
        OperationFailed: the launch failed: the run is undone when its agent never
            started, else recorded (``failed``, or ``running`` when it goes on).
        RunGoesOn: Ctrl-C once the agent started.
    """
    import json

    from git_iterare.runner.interrupts import RunGoesOn, uninterrupted
    from git_iterare.runner.paths import launching
    from git_iterare.runner.warmup import door
    from git_iterare.runs.store import RunStore

    checked, placement = planned.checked, planned.placement
    request, prompt = checked.request, checked.prompt
    warm = door(config, placement.kind, tty=request.tty)
    extra = {**planned.extra, **warm.reserve(repo)}
    store = RunStore(repo)
    try:
        record = store.create(
            request.name or prompt.run_name,
            prompt_name=prompt.name,
            prompt_path=relative_path(repo, prompt.path) if request.prompt is not None else None,
            prompt_text=prompt.body, base_commit=checked.base_commit,
            base_branch=checked.base_branch, agent=checked.agent.name,
            image=planned.image.name, image_digest=planned.image.id,
            policy=json.loads(planned.policy.to_json()), placement=placement.kind,
            extra=extra)
    except BaseException:
        warm.unreserve(extra)
        raise
    with launching(repo, record.id):  # others can tell when this process died (kill -9)
        try:
            return _launch(repo, config, store, planned, record, warm)
        except RunGoesOn:  # recorded as running: the caller says it goes on
            raise
        except BaseException as exc:
            # A failed or interrupted launch leaves nothing on the engine (unless its
            # agent started), so the record can go too; else the failure is recorded.
            uninterrupted(functools.partial(_undo_or_record, repo, store, record,
                                            placement, exc))
            raise


def _launch(repo: Repo, config: Config, store: RunStore, planned: LaunchPlan,
            record: RunRecord, warm: Plain) -> RunRecord:
    """Start the run's sandbox. Once its agent's container started, Ctrl-C is held back
    until the run is recorded as running, then raised as
    :class:`~git_iterare.runner.interrupts.RunGoesOn` (the run goes on)."""
    from git_iterare.runner.interrupts import HeldInterrupts, RunGoesOn

    interrupts = HeldInterrupts()
    try:
        running = _start(repo, config, store, planned, record, warm, interrupts)
    except BaseException:
        interrupts.release(raise_pending=False)
        raise
    try:
        interrupts.release()
    except KeyboardInterrupt:
        raise RunGoesOn(running.id) from None
    return running


def _start(repo: Repo, config: Config, store: RunStore, planned: LaunchPlan,
           record: RunRecord, warm: Plain, interrupts: HeldInterrupts) -> RunRecord:
    from git_iterare import proc
    from git_iterare.runner import workspace as wsp
    from git_iterare.runner.guard import exclude_in_run
    from git_iterare.runner.secrets import remember_secrets
    from git_iterare.runner.spec import sandbox_spec, with_timeout
    from git_iterare.runs.groups import attempt_env
    from git_iterare.runs.status import RUNNING
    from git_iterare.timings import phase

    checked = planned.checked
    request, agent, secret_env = checked.request, checked.agent, checked.secret_env
    for secret in (*secret_env.values(), *checked.credentials.secrets()):
        proc.register_secret(secret)
    remember_secrets(repo, record.id, secret_env.values())  # for whoever finishes the run
    out_dir = state_dir(repo, record.id) / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    command = list(request.command) or [
        *agent.command(prompt_file=PROMPT_FILE, config=config), *agent.limit_args(record.extra)]
    if checked.timeout and not request.tty:
        # The limit holds inside the sandbox even when nobody follows the run.
        command = with_timeout(command, checked.timeout)
    wsp.make_run_dirs(repo)
    worktree, gitdir = wsp.live_path(repo, record.id), wsp.gitdir_path(repo, record.id)
    # The sandbox as the run's trees will make it (a local run's worktree where it is
    # while live): a spare sidecar waiting for runs like it takes the place of those trees
    # before they exist.
    template = sandbox_spec(
        config, session=record.id, repo=repo, image=planned.image, agent=agent,
        command=command, policy=planned.policy, out_dir=out_dir, mounts=(),
        agent_ids=wsp.agent_ids(None), credentials=checked.credentials,
        secret_env=secret_env, owned=(worktree, gitdir, gitdir.with_name(f"{record.id}.gitfile")),
        limits=planned.limits, networks=checked.networks, tty=request.tty)
    taken = warm.take(template)
    try:
        with phase("start.make"):
            trees = planned.placement.make(repo, record,
                                           {PROMPT_FILE: checked.prompt.body.encode()})
        more_mounts = checked.admitted.mounts
        exclude_in_run(trees.workspace.gitdir, more_mounts)  # mounts below /workspace
        spec = dataclasses.replace(
            template, command=(*trees.wrapper, *command), mounts=(*trees.mounts, *more_mounts),
            env={**template.env, **attempt_env(record),
                 **({"ITERARE_ROUND": "1"} if checked.loop else {})},
            owned=trees.owned, volumes=trees.volumes,
            agent_uid=trees.workspace.agent_uid, agent_gid=trees.workspace.agent_gid)
        with phase("start.sandbox"):
            started = warm.start(spec, _timed("start.fill", trees.fill), taken)
        interrupts.hold()  # the agent runs: it is recorded before Ctrl-C acts
    except BaseException:
        warm.drop(taken)
        raise
    # What crossed the wire and where its sidecar came from, for `show` and benchmarks.
    extra: RunExtra = {**record.extra, **trees.facts, "sidecar": started.sidecar}
    running = store.transition(record.id, RUNNING, container=started.container,
                               worktree=str(trees.workspace.worktree), extra=extra)
    warm.after(repo, running, spec, taken is not None)
    return running


def _timed(name: str, fn: Callable[[], object]) -> Callable[[], None]:
    """``fn``, timed as the phase ``name`` (:mod:`git_iterare.timings`)."""
    from git_iterare.timings import phase

    def timed() -> None:
        with phase(name):
            fn()

    return timed


def _undo_or_record(repo: Repo, store: RunStore, record: RunRecord, placement: Placement,
                    exc: BaseException) -> None:
    """After a launch failed with ``exc``: remove every trace of the run when its agent
    never started (:func:`_discard_on_engine`, :func:`_undo_launch`), else record the
    failure (:func:`_record_launch_failure`)."""
    if not (_discard_on_engine(repo, record, placement)
            and _undo_launch(repo, store, record.id, placement)):
        _record_launch_failure(repo, store, record.id, exc)


def _agent_started(repo: Repo, run_id: str) -> bool | None:
    """Whether the run's agent container (found by its name, checked by its labels)
    was ever started; None when there is none."""
    from git_iterare import sandbox
    from git_iterare.sandbox.spec import LABEL_REPO, LABEL_RUN, sandbox_name

    info = sandbox.inspect(sandbox_name(run_id))
    if info is None or info.labels.get(LABEL_RUN) != run_id \
            or info.labels.get(LABEL_REPO) != str(repo.main_work_tree):
        return None
    return info.started


def _discard_on_engine(repo: Repo, record: RunRecord, placement: Placement) -> bool:
    """Remove what the launch of ``record`` left on the engine when its agent never
    started: every container of the run (sidecar, agent made but not started, porters)
    and what its placement keeps there (a remote run's volumes). An interrupted launch
    can leave each of these (the engine completes a request the client stopped waiting
    for).

    Returns:
        True when nothing of the run is left there; False when its agent started (then
        all is kept, for ``stop``/``cleanup``) or the engine failed to answer.
    """
    from git_iterare import sandbox
    from git_iterare.sandbox.engine_client import forget_client

    for attempt in (1, 2):
        try:
            if _agent_started(repo, record.id):
                return False
            sandbox.remove(record.id, str(repo.main_work_tree))
            placement.clear(record)
            return True
        except Exception as exc:  # the launch's own error matters more
            if attempt == 1:  # Ctrl-C may have cut the connection (an ssh session) short
                forget_client()
                continue
            ui.warn(f"could not remove what run {record.id} left on the Docker engine: {exc}")
    return False


def _undo_launch(repo: Repo, store: RunStore, run_id: str, placement: Placement) -> bool:
    """Remove every trace of a run whose agent never started: its worktree, run gitdir,
    branch, host-side state and record, so a launch the engine refused (a name, a
    network, a mount) leaves the repository as it was.

    Nothing is removed, and False returned, when the agent may have started (a container
    of the run exists or is recorded, or the engine cannot be asked) or when the run's
    trees hold anything but its base (:func:`git_iterare.runner.teardown.cleanup_run`
    refuses); the caller then records the failure instead.

    Returns:
        Whether the run was removed.
    """
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref

    from git_iterare.runner.finish import has_worktree
    from git_iterare.runner.teardown import cleanup_run
    from git_iterare.runner.workspace import open_run
    from git_iterare.runs.cas import IDENTITY
    from git_iterare.runs.ids import run_ref

    try:
        snap = store.snapshot(run_id)
        record = snap.record
        if record.container or _agent_started(repo, run_id) is not None:
            return False
        if record.base_commit and has_worktree(repo, record):
            ws = open_run(repo, run_id, record.base_commit)
            placement.release(repo, record)  # the sidecar may have given them to the agent
            cleanup_run(repo, ws, merged=True)
        shutil.rmtree(state_dir(repo, run_id), ignore_errors=True)
        return bool(store.repo.refs.remove_if_equals(
            Ref(run_ref(run_id).encode()), ObjectID(snap.commit),
            message=f"iterare: remove run {run_id}, which never started".encode(),
            committer=IDENTITY))  # as the record's other moves (runs/cas.py)
    except Exception:  # keep the run and record its failure instead
        return False


def _record_launch_failure(repo: Repo, store: RunStore, run_id: str, exc: BaseException
                           ) -> None:
    """Record how a launch that did not complete ended: a run whose agent's container
    started goes on (``running``, its container recorded: follow, stop and finish it as
    any other); else ``failed`` (``stopped`` on Ctrl-C), keeping the error."""
    from git_iterare import sandbox
    from git_iterare.errors import IterareError
    from git_iterare.runner.interrupts import caused_by_interrupt
    from git_iterare.runner.workspace import worktree_path
    from git_iterare.runs.status import ACTIVE, FAILED, RUNNING, STOPPED
    from git_iterare.sandbox.spec import sandbox_name

    interrupted = caused_by_interrupt(exc)
    message = exc.render() if isinstance(exc, IterareError) else (
        "interrupted (Ctrl-C) while it was launched" if interrupted
        else f"{type(exc).__name__}: {exc}")
    status = STOPPED if interrupted else FAILED
    found = None
    with contextlib.suppress(Exception):
        found = sandbox.inspect(sandbox_name(run_id))
    try:
        record = store.get(run_id)
        if found is not None and found.started:
            if record.status in ACTIVE and record.status != RUNNING:
                store.transition(run_id, RUNNING, container=found.id,
                                 worktree=str(worktree_path(repo, run_id)))
            ui.warn(f"run {run_id} had started and goes on: follow it with `git iterare log "
                    f"-f {run_id}`, or stop it with `git iterare stop {run_id}`")
            return
        if record.status in ACTIVE:
            store.transition(run_id, status, error=message,
                             **({"container": found.id} if found is not None else {}))
            # Kept, not undone: its worktree holds more than its base, or the engine could
            # not be asked whether its agent started.
            ui.warn(f"run {run_id} is kept as {status} (`git iterare show {run_id}`; "
                    f"`git iterare cleanup {run_id}` removes it)")
    except Exception as inner:  # the original error matters more than this one
        ui.warn(f"could not record the failure of run {run_id}: {inner}")
    shutil.rmtree(state_dir(repo, run_id) / "secrets", ignore_errors=True)
