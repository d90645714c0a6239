"""``execute``: from a prompt file to a running sandbox.

Everything that can be refused is checked before anything is created (prompt, agent,
``--env`` names, credentials, egress policy, the Docker engine and the image), so a bad
request leaves no record, branch, worktree or container behind. One thing starts before
the last of these checks: the network sidecar started ahead once the repository's
settings are admitted (:mod:`git_iterare.sandbox.headstart`), which a refused request
removes again.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import ui
from git_iterare.config import Config
from git_iterare.errors import OperationFailed, UserError
from git_iterare.git.repo import Repo
from git_iterare.runner.guard import (
    admit,
    check_network_on_engine,
    exclude_in_run,
    requested_networks,
    with_networks,
    workspace_mounts,
)
from git_iterare.runner.paths import state_dir

if TYPE_CHECKING:
    from concurrent.futures import Future

    from git_iterare.agents import ImageAgents
    from git_iterare.agents.base import Agent, Credentials
    from git_iterare.prompt import Prompt
    from git_iterare.runner.interrupts import HeldInterrupts
    from git_iterare.runs.record import RunRecord
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox.headstart import HeadStart
    from git_iterare.sandbox.image import ImageRef
    from git_iterare.sandbox.policy import EgressPolicy
    from git_iterare.sandbox.spec import Limits, Mount, SandboxSpec

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: In-sandbox path of the prompt body (read-only mount, outside the worktree).
PROMPT_FILE = "/run/iterare/prompt.md"

@dataclass(frozen=True)
class ExecuteRequest:
    """What the user asked ``git iterare execute`` for.

    Attributes:
        prompt: a prompt name under ``.iterare/prompts`` or a path to a prompt file; None
            for an interactive session, which has no prompt.
        env_names: host variables to pass through (``--env NAME``), by name.
        reuse: a run whose result the new run starts from (``--reuse RUN``).
        agent: agent name overriding frontmatter and ``run.agent``.
        branch: base branch or commit overriding frontmatter ``branch``.
        name: run name overriding frontmatter ``workspace`` and the prompt name.
        timeout: wall-clock limit in seconds overriding frontmatter and ``run.timeout``.
        max_budget_usd: spend limit in US dollars overriding frontmatter and
            ``run.max_budget_usd`` (0: none).
        max_turns: model turns overriding frontmatter and ``run.max_turns`` (0: none).
        tty: give the agent a terminal (``interactive``).
        command: argv to run instead of the agent's own (``interactive --shell``).
        networks: Docker networks to attach to besides the sandbox's own
            (``--docker-network``); their subnets are let through the firewall.
        compose: also attach the compose project's default network (``--docker-compose``).
    """

    prompt: str | None
    env_names: tuple[str, ...] = ()
    reuse: str | None = None
    agent: str | None = None
    branch: str | None = None
    name: str | None = None
    timeout: int | None = None
    max_budget_usd: float | None = None
    max_turns: int | None = None
    tty: bool = False
    command: tuple[str, ...] = ()
    networks: tuple[str, ...] = ()
    compose: bool = False


@dataclass(frozen=True)
class LaunchPlan:
    """Everything :func:`execute` settled before the run's record exists, for the launch.

    Attributes:
        record: the run's record as created (status ``created``).
        base_commit: the commit the run starts from (hex).
        image: the images to run (the agent's, and git-iterare's own for the sidecar).
        agent: the agent that runs.
        body: the prompt's body, written to the file the agent reads.
        timeout: wall-clock limit in seconds (0: none).
        policy: the sandbox's egress policy.
        limits: CPU, memory and process limits.
        more_mounts: ``[mounts] volumes``, admitted.
        secret_env: ``--env`` values by name.
        credentials: the agent's secrets.
        request: what the user asked for.
        head_start: the sidecar being made for the run ahead (:mod:`git_iterare.sandbox.headstart`),
            or None.
    """

    record: RunRecord
    base_commit: str
    image: ImageRef
    agent: Agent
    body: str
    timeout: int
    policy: EgressPolicy
    limits: Limits
    more_mounts: tuple[Mount, ...]
    secret_env: Mapping[str, str]
    credentials: Credentials
    request: ExecuteRequest
    head_start: HeadStart | None = None


class _Import:
    """The docker SDK being imported in a thread, with Ctrl-C held back meanwhile."""

    def __init__(self) -> None:
        from git_iterare.runner.interrupts import HeldInterrupts

        self.done = threading.Event()
        self.held = HeldInterrupts()

    def release(self, *, raise_pending: bool = True) -> None:
        """Wait for the import to end, then let Ctrl-C through again.

        Raises:
            KeyboardInterrupt: one came meanwhile (with ``raise_pending``).
        """
        self.done.wait()
        self.held.release(raise_pending=raise_pending)


def _warm_up_docker() -> _Import:
    """Import the docker SDK in a background thread, holding Ctrl-C back until the caller
    calls ``release()`` on the result (it waits for the import to end).

    Importing it (and requests) is the largest part of ``execute``'s start-up; meanwhile
    this thread reads the prompt, config and records, which mostly wait on git. The main
    thread's own import later simply waits for this one to finish.
    """
    importing = _Import()

    def load() -> None:
        from git_iterare.sandbox.docker_errors import import_docker
        from git_iterare.sandbox.engine import current

        try:
            with contextlib.suppress(Exception):  # the main thread reports what is wrong
                import_docker(current())
        finally:
            importing.done.set()

    importing.held.hold()
    threading.Thread(target=load, daemon=True, name="import-docker").start()
    return importing


def _head_start(repo: Repo, config: Config, request: ExecuteRequest,
                networks: tuple[str, ...], held: ImageAgents, spares: int) -> HeadStart | None:
    """Start making the run's network sidecar ahead, where that can be done (see
    :mod:`git_iterare.sandbox.headstart`): not for a terminal session (which never takes
    a spare) nor with more networks; None otherwise.

    ``held`` is what the image must hold (:func:`git_iterare.agents.image_agents`) and
    ``spares`` is ``docker.spare_seconds``.

    Raises:
        UserError: ``.iterare`` or its ``worktrees`` is a symlink.
    """
    from git_iterare.runner import workspace as wsp
    from git_iterare.sandbox import EgressPolicy, SandboxSpec, headstart
    from git_iterare.sandbox.docker_errors import engine_facts
    from git_iterare.sandbox.engine import current
    from git_iterare.sandbox.image import StatusOf, ready_sidecar_image

    if request.tty or networks or repo.main_work_tree is None:
        return None
    wsp.check_run_dirs(repo)  # the sidecar mounts the folders the trees go in
    engine = current()
    # A run's shape, for what a sidecar shares with it: ids and names are not known yet.
    placeholder = "ahead"
    template = SandboxSpec(
        image="-", sidecar_image="-", name=f"iterare-{placeholder}", command=("start",),
        policy=EgressPolicy(), out_dir=state_dir(repo, placeholder) / "out",
        repo_path=str(repo.main_work_tree), network=config["docker.network"],
        owned=(wsp.worktree_path(repo, placeholder), wsp.gitdir_path(repo, placeholder)))

    def image_of(status_of: StatusOf) -> str | None:
        return ready_sidecar_image(config, status_of, agents=held.agents,
                                   installs=held.installs)

    return headstart.start(template, engine.url, engine_facts(engine).get("api_version"),
                           image_of, spares=spares > 0)


def spare_seconds(config: Config) -> int:
    """``docker.spare_seconds``, checked (see :mod:`git_iterare.sandbox.spare`).

    Raises:
        UserError: it is neither 0 nor 10 seconds to an hour.
    """
    from git_iterare.sandbox.spare import MAX_SECONDS, MIN_SECONDS

    seconds = int(config["docker.spare_seconds"])
    if seconds != 0 and not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise UserError(f"docker.spare_seconds must be 0 (none) or {MIN_SECONDS} to "
                        f"{MAX_SECONDS} seconds, not {seconds}",
                        hint="fix it with `git iterare config`, or set 0")
    return seconds


def passthrough_env(names: tuple[str, ...], env: Mapping[str, str]) -> dict[str, str]:
    """Values of the host variables named by ``--env`` (and frontmatter ``env``).

    Raises:
        UserError: a name is not a valid variable name, or the variable is not set.
    """
    values = {}
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise UserError(f"--env {name!r}: not a variable name",
                            hint="use letters, digits and _, not starting with a digit")
        if name not in env:
            raise UserError(f"--env {name}: not set in your environment",
                            hint=f"export {name}=... or drop --env {name}")
        values[name] = env[name]
    return values


def sandbox_limits(config: Config) -> Limits:
    """The run's :class:`~git_iterare.sandbox.Limits` from ``[docker]`` cpus, memory, pids.

    Checked before anything is created, including the CPU count against the engine's
    (Docker would refuse it only when starting the sandbox).

    Raises:
        UserError: a limit out of range.
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare.sandbox import Limits, engine_cpus

    limits = Limits(cpus=config["docker.cpus"], memory=config["docker.memory"],
                    pids=config["docker.pids"])
    if limits.cpus > 1:  # every engine has one CPU; more are asked for (or remembered)
        try:
            limits.check_engine_cpus(engine_cpus())
        except UserError:  # the remembered count may be old: the engine's word decides
            limits.check_engine_cpus(engine_cpus(fresh=True))
    return limits


def run_budget(config: Config, prompt: Prompt, request: ExecuteRequest
               ) -> dict[str, float | int | None]:
    """The run's spend and turn limits for its record's ``extra``: ``max_budget_usd``
    (US dollars) and ``max_turns``, each from the request (flags), else the prompt's
    frontmatter, else ``run.max_budget_usd`` / ``run.max_turns``; 0 means no limit, and
    a terminal session (``request.tty``) has none.

    Raises:
        UserError: a negative or non-finite limit.
    """
    import math

    def pick(asked: float | None, front: float | None, key: str) -> float:
        if asked is not None:
            return asked
        return front if front is not None else float(config[key])

    budget = float(pick(request.max_budget_usd, prompt.max_budget_usd, "run.max_budget_usd"))
    turns = int(pick(request.max_turns, prompt.max_turns, "run.max_turns"))
    if budget < 0 or not math.isfinite(budget):
        raise UserError(f"max_budget_usd must be 0 (none) or a number of dollars, not {budget}",
                        hint="fix --max-budget-usd, the prompt's max_budget_usd or "
                             "`git iterare config run.max_budget_usd`")
    if turns < 0:
        raise UserError(f"max_turns must be 0 (none) or a number of turns, not {turns}",
                        hint="fix --max-turns, the prompt's max_turns or "
                             "`git iterare config run.max_turns`")
    if request.tty:
        return {}
    return {"max_budget_usd": budget or None, "max_turns": turns or None}


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
        UserError: bad prompt, agent, ``--env``, credentials missing, bad policy; a
            dangerous network or mount; settings of the repository the user has not
            approved (see :func:`git_iterare.runner.guard.admit`).
        OperationFailed: Docker unreachable, image build failed, launch failed (then the
            run is recorded as failed and its worktree kept).
    """
    from git_iterare import gcpause

    try:
        with contextlib.ExitStack() as undo:  # what the launch leaves unless it uses it
            return _execute(repo, config, request, os.environ if env is None else env,
                            progress, undo)
    finally:
        gcpause.resume()  # start-up is over: the caller may follow the run for hours


def _execute(repo: Repo, config: Config, request: ExecuteRequest, env: Mapping[str, str],
             progress: Callable[[str], None], undo: contextlib.ExitStack) -> RunRecord:
    from git_iterare.agents import get_agent
    from git_iterare.agents import names as agent_names
    from git_iterare.prompt import Prompt, load_prompt

    if request.prompt is None:
        prompt = Prompt(name="interactive", path=Path(""), body="")
    else:
        prompt = load_prompt(request.prompt, repo.iterare_dir / "prompts", Path.cwd())
    for line in prompt.warnings:
        ui.warn(line)
    if not request.agent and prompt.agent and prompt.agent not in agent_names():
        raise UserError(f"{prompt.path}: agent {prompt.agent!r} is unknown (valid: "
                        f"{', '.join(agent_names())})", hint="fix the prompt's `agent:`")
    agent = get_agent(request.agent or prompt.agent or config["run.agent"])
    # Dangerous values are refused and the repository's requests need approval before
    # anything else is looked at: the engine is not contacted before this.
    admitted = admit(repo, config,
                     prompt_env=[n for n in prompt.env if n not in request.env_names])
    networks = requested_networks(repo, request.networks, request.compose, env)
    from git_iterare.agents import image_agents

    held = image_agents(config, [agent.name])
    spares = spare_seconds(config)
    # The sidecar starts now, while the rest is checked and made (sandbox.headstart).
    head = _head_start(repo, config, request, networks, held, spares)
    if head is not None:
        from git_iterare.runner.interrupts import uninterrupted

        undo.callback(uninterrupted, head.discard)
    # Once the sidecar's request is on its way (both want the CPU). Ctrl-C waits until the
    # docker SDK is loaded: one that lands in the import machinery while the main thread
    # imports too can leave the interpreter's import lock taken, and both threads wait.
    imported = _warm_up_docker()
    undo.callback(imported.release)  # a Ctrl-C held meanwhile wins over any error
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox import policy_from_config
    from git_iterare.sandbox.image import ensure_image

    secret_env = passthrough_env(tuple(dict.fromkeys((*prompt.env, *request.env_names))), env)
    credentials = agent.credentials(config, env)
    policy = policy_from_config(config, agent.required_domains(config))
    timeout = request.timeout if request.timeout is not None else (
        prompt.timeout if prompt.timeout is not None else config["run.timeout"])
    if request.tty:
        timeout = 0  # a terminal session lasts as long as its user wants
    if timeout < 0:
        raise UserError(f"timeout must be 0 (none) or a number of seconds, not {timeout}")
    budget = run_budget(config, prompt, request)
    from git_iterare.runner.spec import ca_bundle_path

    ca_bundle_path(config)  # a missing CA bundle is refused before anything exists
    more_mounts = list(admitted.mounts)
    store = RunStore(repo)
    if request.reuse:
        previous = store.resolve(request.reuse)
        if previous.extra.get("unfinished"):
            raise UserError(f"run {previous.id} has work that was never committed; starting "
                            "from its result would leave it out",
                            hint=f"commit it first with `git iterare finish {previous.id}`")
        if not previous.head:
            raise UserError(f"run {previous.id} has no result to start from "
                            f"(status {previous.status})")
        base_commit, base_branch = previous.head, previous.branch
    else:
        base_branch = request.branch or prompt.branch
        base_commit = _base_commit(repo, request.branch, prompt)
        if base_branch is None:
            base_branch = _current_branch(repo)
    from git_iterare.runner.workspace import check_run_dirs, include_paths
    from git_iterare.runs.ids import validate_name

    validate_name(request.name or prompt.run_name)
    check_run_dirs(repo)
    include_paths(repo)  # a bad .iterare/include line is refused before anything exists
    from git_iterare.sandbox.remote import shares_filesystem

    remote = not shares_filesystem()
    if remote:  # what a remote engine cannot do is refused now
        from git_iterare.runner.ship import check_request

        check_request(repo, base_commit, more_mounts)
    if unheld := agent.unheld_limits(budget):
        ui.warn(f"the {agent.name} agent cannot enforce {' or '.join(unheld)}: this run "
                f"goes on without {'that limit' if len(unheld) == 1 else 'these limits'}")
    # The first questions to the engine come last, so the docker SDK has been imported in
    # the background meanwhile; both still come before anything is created.
    limits = sandbox_limits(config)
    check_network_on_engine(admitted.network)
    policy = with_networks(policy, networks)
    imported.release()  # raises a Ctrl-C held meanwhile
    image = ensure_image(config, repo, progress, **held._asdict())
    from git_iterare.runner.ownership import origin

    extra = {"timeout": timeout, **budget, "env": list(secret_env), "interactive": request.tty,
             "networks": list(networks),
             "workspace_mounts": list(workspace_mounts(repo, more_mounts, base_commit)),
             "sidecar_image": image.sidecar, **origin(repo)}
    spare = None
    if remote:  # a worktree checked out ahead on the engine (runner.ship), recorded first
        from git_iterare.runner.ship import claim_spare

        spare = claim_spare(repo)
        if spare is not None:
            extra["spare"] = spare.to_json()
    try:
        record = store.create(
            request.name or prompt.run_name,
            prompt_name=prompt.name,
            prompt_path=_relative(repo, prompt.path) if request.prompt is not None else None,
            prompt_text=prompt.body,
            base_commit=base_commit,
            base_branch=base_branch,
            agent=agent.name,
            image=image.name,
            image_digest=image.id,
            policy=_policy_dict(policy),
            extra=extra)
    except BaseException:
        if spare is not None:  # no record names it: nothing else would remove it
            from git_iterare.runner.ship import drop_spare

            drop_spare(spare)
        raise
    from git_iterare.runner.interrupts import RunGoesOn
    from git_iterare.runner.paths import launching

    with launching(repo, record.id):  # others can tell when this process died (kill -9)
        try:
            return _launch(repo, config, store, LaunchPlan(
                record=record, base_commit=base_commit, image=image, agent=agent,
                body=prompt.body, timeout=timeout, policy=policy,
                limits=limits, more_mounts=tuple(more_mounts),
                secret_env=secret_env, credentials=credentials, request=request,
                head_start=head))
        except RunGoesOn:  # recorded as running: the caller says it goes on
            raise
        except BaseException as exc:
            # A failed or interrupted launch leaves nothing on the engine (unless its
            # agent started), so the record can go too; else the failure is recorded.
            import functools

            from git_iterare.runner.interrupts import uninterrupted

            uninterrupted(functools.partial(_undo_or_record, repo, store, record, exc))
            raise


def _launch(repo: Repo, config: Config, store: RunStore, plan: LaunchPlan) -> RunRecord:
    """Launch the planned run. Once its agent's container started, Ctrl-C is held back
    until the run is recorded as running, then raised as
    :class:`~git_iterare.runner.interrupts.RunGoesOn` (the run goes on)."""
    from git_iterare.runner.interrupts import HeldInterrupts, RunGoesOn

    interrupts = HeldInterrupts()
    try:
        running = _launch_steps(repo, config, store, plan, interrupts)
    except BaseException:
        interrupts.release(raise_pending=False)
        raise
    try:
        interrupts.release()
    except KeyboardInterrupt:
        raise RunGoesOn(running.id) from None
    return running


def _launch_steps(repo: Repo, config: Config, store: RunStore, plan: LaunchPlan,
                  interrupts: HeldInterrupts) -> RunRecord:
    from concurrent.futures import ThreadPoolExecutor

    from git_iterare import proc, sandbox
    from git_iterare.runner import workspace as wsp
    from git_iterare.runner.secrets import remember_secrets
    from git_iterare.runner.spec import sandbox_spec
    from git_iterare.runs.status import RUNNING
    from git_iterare.sandbox import spare

    record, agent, request, secret_env = plan.record, plan.agent, plan.request, plan.secret_env
    spares = 0 if request.tty else spare_seconds(config)
    credentials, timeout, more_mounts = plan.credentials, plan.timeout, plan.more_mounts
    for secret in (*secret_env.values(), *credentials.secrets()):
        proc.register_secret(secret)
    remember_secrets(repo, record.id, secret_env.values())  # for whoever finishes the run
    # The run's paths are known before they exist: the sandbox's sidecar starts (and sets
    # up the firewall) while the worktree is made.
    worktree, gitdir = wsp.worktree_path(repo, record.id), wsp.gitdir_path(repo, record.id)
    gitfile = gitdir.with_name(record.id + ".gitfile")
    uid, gid = wsp.agent_ids(None)
    wsp.make_run_dirs(repo)
    state = state_dir(repo, record.id)
    state.mkdir(parents=True, exist_ok=True)
    prompt_file = state / "prompt.md"
    prompt_file.write_text(plan.body, encoding="utf-8")
    os.chmod(prompt_file, 0o644)
    out_dir = state / "out"
    out_dir.mkdir(exist_ok=True)
    command = list(request.command) or [*agent.command(prompt_file=PROMPT_FILE, config=config),
                                        *agent.limit_args(record.extra)]
    if timeout and not request.tty:
        # The limit holds inside the sandbox even when nobody follows the run.
        command = ["timeout", "--kill-after=10", str(timeout), *command]
    mounts = list(wsp.mounts_for(worktree, gitdir, gitfile, repo.common_dir / "objects"))
    mounts.append(sandbox.Mount(prompt_file, PROMPT_FILE, True))
    remote = None
    from git_iterare.sandbox.remote import shares_filesystem

    if not shares_filesystem():  # the engine sees none of these files: see runner.ship
        from git_iterare.runner import ship

        remote = ship.remote_trees(repo, record, {PROMPT_FILE: plan.body.encode("utf-8")})
        command, mounts = ship.wrap_command(command), []
    spec = sandbox_spec(
        config, session=record.id, repo=repo, image=plan.image, agent=agent, command=command,
        policy=plan.policy, out_dir=out_dir, mounts=(*mounts, *more_mounts),
        agent_ids=(uid, gid), credentials=credentials, secret_env=secret_env,
        owned=(worktree, gitdir, gitfile), limits=plan.limits,
        networks=tuple(record.extra.get("networks") or ()), tty=request.tty, remote=remote)
    if remote is not None:
        from git_iterare.runner import ship

        ship.make_volumes(repo, remote, spec.all_labels())
    shipped = shipping = None
    creating: Future[str] | None = None
    container: str | None = None
    with ThreadPoolExecutor(3, thread_name_prefix="sidecar") as pool:
        if remote is not None:  # a remote engine gets the run's files meanwhile, first
            from git_iterare.runner import ship

            shipping = pool.submit(ship.ship, repo, record.id, plan.base_commit, remote,
                                   spec.sidecar_image, spec.all_labels(), (uid, gid))
        ahead = plan.head_start.sidecar_for(spec) if plan.head_start is not None else None
        try:
            # A spare sidecar left by the run before (sandbox.spare) has started already.
            claimed = sandbox.claim_spare(spec) if remote is None and spares and not ahead \
                else None
            sidecar = ahead or claimed or sandbox.begin(spec, start=False)
        except BaseException:
            if shipping is not None:
                with contextlib.suppress(BaseException):
                    shipping.exception()
            raise
        # The sidecar starts (and sets up the firewall) while the worktree and the agent's
        # container are made; the agent's container starts only after both.
        if ahead:  # started, or starting: claimed once it runs
            started = pool.submit(_claim_ahead, plan.head_start, spec)
        elif claimed:  # running, and named as the run's already
            started = None
        else:
            started = pool.submit(sandbox.start_sidecar, sidecar)

        def trees_made() -> None:  # the agent's container is made during the checkout
            nonlocal creating
            creating = pool.submit(sandbox.create_agent, spec, sidecar)

        try:
            # A remote engine checks the base out itself (runner.ship): none here.
            ws = wsp.prepare_run(repo, record.id, plan.base_commit, uid,
                                 fill=remote is None, made=trees_made)
            exclude_in_run(ws.gitdir, more_mounts)  # mounts below /workspace: not the agent's
            # The agent's container was made while a remote run's files still go in.
            container = sandbox.launch(spec, sidecar, started,
                                       shipping.result if shipping is not None else None,
                                       agent_id=_made(creating))
            interrupts.hold()  # the agent runs: it is recorded before Ctrl-C acts
            shipped = shipping.result() if shipping is not None else None
        except BaseException:
            # Also on Ctrl-C while the sidecar is still starting: wait for that, then
            # remove it (launch removes what it made itself; twice is harmless).
            for pending in (started, creating):  # what they make the caller removes
                if pending is not None:
                    with contextlib.suppress(BaseException):
                        pending.exception()
            if shipping is not None:
                with contextlib.suppress(BaseException):
                    shipping.exception()
            if container is None:  # else its agent runs in it: the run goes on
                if remote is None:  # it may have given them to the agent already
                    from git_iterare.runner.finish import reclaim_if_foreign

                    with contextlib.suppress(BaseException):
                        reclaim_if_foreign(record, spec.owned, out_dir, spec.name)
                with contextlib.suppress(BaseException):
                    sandbox.remove_sidecar(sidecar)
            raise
    if shipped is not None:  # what crossed the wire, for `show` and the benchmarks
        record = store.update(record.id, lambda r: r.replace(
            extra={**r.extra, "shipped": shipped.to_json()}), f"{record.id} shipped")
    # Where its sidecar came from, for `show` and the benchmarks.
    how = "ahead" if ahead else "spare" if claimed else "own"
    running = store.transition(record.id, RUNNING, container=container,
                               worktree=str(ws.worktree), extra={**record.extra, "sidecar": how})
    if remote is None and spare.wanted(spec, spares, claimed is not None):
        _leave_spare(spec, spares)
    if remote is not None:  # the next run's worktree, checked out while this one runs
        from git_iterare.runner import ship

        try:
            ship.make_spare(repo, plan.base_commit, spec.sidecar_image, (uid, gid))
        except (OperationFailed, UserError, OSError) as exc:
            ui.warn(f"no worktree was prepared on the Docker engine for the next run: {exc}")
    return running


def _claim_ahead(head: HeadStart | None, spec: SandboxSpec) -> None:
    """Claim the sidecar made ahead for ``spec``'s run once it runs (see
    :mod:`git_iterare.sandbox.headstart`)."""
    from git_iterare.sandbox.docker_backend import claim_texts

    assert head is not None
    head.claim(spec, lambda: claim_texts(spec))


def _made(creating: Future[str] | None) -> str | None:
    """The id of the agent's container made during the checkout (None when it was not
    asked for). What its creation raised is raised: the launch then removes the sidecar,
    and the caller whatever of the run is left on the engine."""
    return creating.result() if creating is not None else None


def _leave_spare(spec: SandboxSpec, seconds: int) -> None:
    """Start a spare sidecar for the next run in a thread the process waits for at exit
    (``execute`` returns, or follows the run, meanwhile). Failing to is not the run's
    failure: the next run starts a sidecar of its own."""
    import threading

    from git_iterare import sandbox

    def make() -> None:
        with contextlib.suppress(Exception):
            sandbox.make_spare(spec, seconds)

    threading.Thread(target=make, name="spare-sidecar").start()


def _undo_or_record(repo: Repo, store: RunStore, record: RunRecord, exc: BaseException
                    ) -> None:
    """After a launch failed with ``exc``: remove every trace of the run when its agent
    never started (see :func:`_discard_on_engine`, :func:`_undo_launch`), else record the
    failure (:func:`_record_launch_failure`)."""
    if not (_discard_on_engine(record) and _undo_launch(repo, store, record.id)):
        _record_launch_failure(repo, store, record.id, exc)


def _discard_on_engine(record: RunRecord) -> bool:
    """Remove what the launch of ``record`` left on the current engine when its agent
    never started: every container labelled as the run's (sidecar, agent made but not
    started, porters) and, on a remote engine, the run's volumes (its own or the spare it
    took over) with whatever still mounts them. An interrupted launch can leave each of
    these (the engine completes a request the client stopped waiting for).

    Returns:
        True when nothing of the run is left there; False when its agent started (then
        all is kept, for ``stop``/``cleanup``) or the engine failed to answer.
    """
    from git_iterare.runner import ship
    from git_iterare.sandbox import remote
    from git_iterare.sandbox.docker_errors import forget_client

    for attempt in (1, 2):
        try:
            found = remote.run_containers(record.id, str((record.extra or {}).get("repo")))
            agent = next((c for c in found if c.name == f"iterare-{record.id}"), None)
            if agent is not None and not remote.never_started(agent):
                return False
            for container in found:
                remote.remove_container(container)
            if ship.is_remote(record):
                ship.drop_volumes(record)
            return True
        except Exception as exc:  # the launch's own error matters more
            if attempt == 1:  # Ctrl-C may have cut the connection (an ssh session) short
                forget_client()
                continue
            ui.warn(f"could not remove what run {record.id} left on the Docker engine: {exc}")
    return False


def _undo_launch(repo: Repo, store: RunStore, run_id: str) -> bool:
    """Remove every trace of a run whose agent never started: its worktree, run gitdir,
    branch, host-side state and record, so a launch the engine refused (a name, a
    network, a mount) leaves the repository as it was.

    Nothing is removed, and False returned, when the agent may have started (a container
    of the run exists or is recorded, or the engine cannot be asked) or when the run's
    trees hold anything but its base (:func:`git_iterare.runner.workspace.cleanup_run` refuses);
    the caller then records the failure instead.

    Returns:
        Whether the run was removed.
    """
    from dulwich.objects import ObjectID
    from dulwich.refs import Ref

    from git_iterare import sandbox
    from git_iterare.runner.finish import has_worktree, reclaim_if_foreign
    from git_iterare.runner.ship import is_remote
    from git_iterare.runner.workspace import cleanup_run, open_run
    from git_iterare.runs.cas import IDENTITY
    from git_iterare.runs.ids import run_ref

    try:
        snap = store.snapshot(run_id)
        record = snap.record
        if record.container or sandbox.inspect(f"iterare-{run_id}") is not None:
            return False
        if record.base_commit and has_worktree(repo, record):
            ws = open_run(repo, run_id, record.base_commit)
            if not is_remote(record):  # the sidecar may have given them to the agent
                reclaim_if_foreign(record, (ws.worktree, ws.gitdir, ws.gitfile),
                                   state_dir(repo, run_id) / "out")
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
    from git_iterare.errors import IterareError
    from git_iterare.runner.interrupts import caused_by_interrupt
    from git_iterare.runner.workspace import worktree_path
    from git_iterare.runs.status import ACTIVE, FAILED, RUNNING, STOPPED
    from git_iterare.sandbox import remote

    interrupted = caused_by_interrupt(exc)
    message = exc.render() if isinstance(exc, IterareError) else (
        "interrupted (Ctrl-C) while it was launched" if interrupted
        else f"{type(exc).__name__}: {exc}")
    status = STOPPED if interrupted else FAILED
    found = None
    with contextlib.suppress(Exception):
        found = remote.find_container(f"iterare-{run_id}")
    try:
        record = store.get(run_id)
        if found is not None and not remote.never_started(found):
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


def _policy_dict(policy: EgressPolicy) -> dict[str, object]:
    import json

    data: dict[str, object] = json.loads(policy.to_json())
    return data


def _relative(repo: Repo, path: Path) -> str:
    top = repo.main_work_tree
    try:
        return str(path.resolve().relative_to(top)) if top else str(path)
    except ValueError:
        return str(path)


def resolve_here(repo: Repo, commitish: str) -> str:
    """The hex id of ``commitish`` as the worktree the command runs in sees it.

    ``HEAD``, ``@{-1}`` and ``HEAD~2`` are per worktree: in a linked worktree they are its
    own, not the main worktree's, so git runs on the current worktree's gitdir
    (``.git/worktrees/<name>``), which shares refs and objects with the others.

    Raises:
        UserError: it names no commit.
    """
    from git_iterare import proc

    result = proc.git("--git-dir", str(repo.git_dir), "rev-parse", "--verify", "--quiet",
                      "--end-of-options", f"{commitish}^{{commit}}", scrub_git_env=True,
                      check=False)
    if result.returncode != 0:
        raise UserError(f"{commitish!r} is not a commit in this repository")
    return str(result.stdout.strip())


def _base_commit(repo: Repo, flag: str | None, prompt: Prompt) -> str:
    """The hex id of the commit a run starts from: ``--branch`` (``flag``), else the
    prompt's frontmatter ``branch``, else HEAD.

    Raises:
        UserError: it names no commit; one line naming where the name came from and what
            to do.
    """
    try:
        return resolve_here(repo, flag or prompt.branch or "HEAD")
    except UserError:
        pass
    listing = "choose one `git branch -a` lists, or `git fetch` it from its remote first"
    if flag:
        raise UserError(f"--branch {flag}: no such branch or commit in this repository",
                        hint=listing)
    if prompt.branch:
        raise UserError(f"{_relative(repo, prompt.path)}: branch {prompt.branch!r} "
                        "(frontmatter) does not exist in this repository",
                        hint=f"fix its `branch:` or give --branch; {listing}")
    raise UserError("HEAD is no commit yet: the current branch has no commits",
                    hint="make a first commit, or give --branch")


def _current_branch(repo: Repo) -> str | None:
    """The branch checked out in the worktree the command runs in; None when detached."""
    from git_iterare import proc

    result = proc.git("--git-dir", str(repo.git_dir), "symbolic-ref", "--quiet", "--short",
                      "HEAD", scrub_git_env=True, check=False)
    return result.stdout.strip() or None
