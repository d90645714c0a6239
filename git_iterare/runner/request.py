"""``execute``'s first step: the request checked, before the engine is asked anything.

:func:`validate` refuses what can be refused from the request, the prompt, the
configuration and the repository alone (the agent, ``--env`` names, credentials, the
egress policy, approvals of the repository's settings, the base, the run's name, what
the run's placement cannot do) and returns a :class:`Checked` request; nothing is created
before it returns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare import ui
from git_iterare.config import Config
from git_iterare.errors import UserError
from git_iterare.git.repo import Repo, commit_of, current_branch, rev

if TYPE_CHECKING:
    from git_iterare.agents import ImageAgents
    from git_iterare.agents.base import Agent, Credentials
    from git_iterare.prompt import Prompt
    from git_iterare.runner.guard import Admitted
    from git_iterare.runner.placement import Placement
    from git_iterare.runs.extra import Loop, RunExtra
    from git_iterare.sandbox.policy import EgressPolicy
    from git_iterare.sandbox.spec import Limits

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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
        until: the loop's check (``--until``) overriding frontmatter ``until`` and
            ``run.until``; ``""`` is refused.
        max_rounds: rounds of a loop at most (``--max-rounds``; default ``run.max_rounds``).
        stall_after: ``--stall-after`` (default ``run.stall_after``; 0: never).
        base: ``(commit hex, branch or None)`` to start from, resolved once for all the
            attempts of ``execute -n`` (:mod:`git_iterare.runner.attempts`); None: from
            ``reuse``, ``branch``, the prompt or HEAD.
        group: the group of attempts this run is one of (``extra.group``), or None.
        attempt: its number in the group, 1 for the first (``extra.attempt``).
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
    until: str | None = None
    max_rounds: int | None = None
    stall_after: int | None = None
    base: tuple[str, str | None] | None = None
    group: str | None = None
    attempt: int | None = None


@dataclass(frozen=True)
class Checked:
    """A request that passed every check that needs no engine (:func:`validate`).

    Attributes:
        request: what the user asked for.
        prompt: the prompt (an empty one for a terminal session).
        agent: the agent that runs.
        admitted: the repository's approved settings (mounts, network).
        networks: Docker networks the run joins (``--docker-network``, compose).
        held: what the image must hold for the agent.
        secret_env: ``--env`` (and frontmatter ``env``) values by name.
        credentials: the agent's secrets.
        policy: the egress policy (without the attached networks yet).
        timeout: wall-clock limit in seconds (0: none).
        budget: ``max_budget_usd`` and ``max_turns`` for the record's ``extra``.
        base_commit: hex id of the commit the run starts from.
        base_branch: the branch it was named by, or None.
        placement: where the run's trees will live.
        loop: the loop ``--until`` asks for (``extra.loop``), or None for one round.
    """

    request: ExecuteRequest
    prompt: Prompt
    agent: Agent
    admitted: Admitted
    networks: tuple[str, ...]
    held: ImageAgents
    secret_env: Mapping[str, str]
    credentials: Credentials
    policy: EgressPolicy
    timeout: int
    budget: RunExtra
    base_commit: str
    base_branch: str | None
    placement: Placement
    loop: Loop | None = None


def validate(repo: Repo, config: Config, request: ExecuteRequest,
             env: Mapping[str, str]) -> Checked:
    """Check everything about ``request`` that can be checked without the engine.

    Args:
        repo: the repository.
        config: effective configuration (flags applied).
        request: what to run.
        env: the host environment.

    Raises:
        UserError: bad prompt, agent, ``--env``, credentials missing, bad policy; a
            dangerous network or mount; settings of the repository the user has not
            approved (see :func:`git_iterare.runner.guard.admit`); a base that is no
            commit; what the placement cannot do.
        OperationFailed: a run to ``--reuse`` has no result.
    """
    from git_iterare.agents import get_agent, image_agents
    from git_iterare.agents import names as agent_names
    from git_iterare.prompt import Prompt, load_prompt
    from git_iterare.runner.guard import admit, requested_networks
    from git_iterare.runner.placement import placement_for
    from git_iterare.runner.spec import ca_bundle_path
    from git_iterare.runner.warmup import spare_seconds
    from git_iterare.runner.workspace import check_run_dirs, include_paths
    from git_iterare.runs.ids import validate_name
    from git_iterare.sandbox import policy_from_config
    from git_iterare.sandbox.engine import current

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
    # anything else is looked at.
    prompt_env = [n for n in prompt.env if n not in request.env_names]
    configured_limits(config)  # a malformed one is refused before approval is asked for it
    admitted = admit(repo, config, prompt_env=prompt_env, agent=agent.name)
    networks = requested_networks(repo, request.networks, request.compose, env)
    spare_seconds(config)  # a bad value is refused before anything exists
    secret_env = passthrough_env(tuple(dict.fromkeys((*prompt.env, *request.env_names))), env)
    credentials = agent.credentials(config, env)
    policy = policy_from_config(config, agent.required_domains(config))
    timeout = int(within_limit(request.timeout, prompt.timeout, config["run.timeout"],
                               "timeout", "run.timeout"))
    if request.tty:
        timeout = 0  # a terminal session lasts as long as its user wants
    if timeout < 0:
        raise UserError(f"timeout must be 0 (none) or a number of seconds, not {timeout}")
    budget = run_budget(config, prompt, request)
    loop = run_loop(config, prompt, request)
    ca_bundle_path(config)  # a missing CA bundle is refused before anything exists
    base_commit, base_branch = _base(repo, request, prompt)
    # admit() saw the agent settings of HEAD; a run from elsewhere gets those of its base.
    if base_commit != rev(repo, "HEAD^{commit}", here=True):
        from git_iterare.runner.trust import require_approval

        require_approval(repo, config, prompt_env, base=base_commit, agents=[agent.name])
    validate_name(request.name or prompt.run_name)
    check_run_dirs(repo)
    include_paths(repo)  # a bad .iterare/include line is refused before anything exists
    placement = placement_for(current())
    placement.check(repo, base_commit, admitted.mounts)
    if unheld := agent.unheld_limits(budget):
        ui.warn(f"the {agent.name} agent cannot enforce {' or '.join(unheld)}: this run "
                f"goes on without {'that limit' if len(unheld) == 1 else 'these limits'}")
    return Checked(request=request, prompt=prompt, agent=agent, admitted=admitted,
                   networks=networks, held=image_agents(config, [agent.name]),
                   secret_env=secret_env, credentials=credentials, policy=policy,
                   timeout=timeout, budget=budget, base_commit=base_commit,
                   base_branch=base_branch, placement=placement, loop=loop)


def _base(repo: Repo, request: ExecuteRequest, prompt: Prompt) -> tuple[str, str | None]:
    """The commit a run starts from (hex) and the branch it was named by: the result of
    ``--reuse RUN``, else ``--branch``, the prompt's ``branch`` or HEAD.

    Raises:
        UserError: it names no commit.
        OperationFailed: the run to reuse has no result, or left work uncommitted.
    """
    if request.base is not None:
        return request.base
    if request.reuse:
        from git_iterare.runs.store import RunStore

        previous = RunStore(repo).resolve(request.reuse)
        if previous.extra.get("unfinished"):
            raise UserError(f"run {previous.id} has work that was never committed; starting "
                            "from its result would leave it out",
                            hint=f"commit it first with `git iterare finish {previous.id}`")
        if not previous.head:
            raise UserError(f"run {previous.id} has no result to start from "
                            f"(status {previous.status})")
        return previous.head, previous.branch
    branch = request.branch or prompt.branch
    commit = _base_commit(repo, request.branch, prompt)
    return commit, branch if branch is not None else current_branch(repo)


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


def configured_limits(config: Config) -> Limits:
    """``[docker]`` cpus, memory and pids as :class:`~git_iterare.sandbox.Limits`, checked
    for form and range only (the engine is not asked).

    Raises:
        UserError: a limit out of range.
    """
    from git_iterare.sandbox import Limits

    return Limits(cpus=config["docker.cpus"], memory=config["docker.memory"],
                  pids=config["docker.pids"])


def sandbox_limits(config: Config) -> Limits:
    """The run's :class:`~git_iterare.sandbox.Limits` from ``[docker]`` cpus, memory, pids.

    Checked before anything is created, including the CPU count against the engine's
    (Docker would refuse it only when starting the sandbox).

    Raises:
        UserError: a limit out of range.
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare.sandbox import engine_cpus

    limits = configured_limits(config)
    if limits.cpus > 1:  # every engine has one CPU; more are asked for (or remembered)
        try:
            limits.check_engine_cpus(engine_cpus())
        except UserError:  # the remembered count may be old: the engine's word decides
            limits.check_engine_cpus(engine_cpus(fresh=True))
    return limits


def run_budget(config: Config, prompt: Prompt, request: ExecuteRequest) -> RunExtra:
    """The run's spend and turn limits for its record's ``extra``: ``max_budget_usd``
    (US dollars) and ``max_turns``, each from the request (flags), else the prompt's
    frontmatter, else ``run.max_budget_usd`` / ``run.max_turns``; 0 means no limit, and
    a terminal session (``request.tty``) has none.

    Raises:
        UserError: a negative or non-finite limit.
    """
    import math

    budget = float(within_limit(request.max_budget_usd, prompt.max_budget_usd,
                                config["run.max_budget_usd"], "max_budget_usd",
                                "run.max_budget_usd"))
    turns = int(within_limit(request.max_turns, prompt.max_turns, config["run.max_turns"],
                             "max_turns", "run.max_turns"))
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


def run_loop(config: Config, prompt: Prompt, request: ExecuteRequest) -> Loop | None:
    """The loop the run is asked for: its check from ``--until``, else the prompt's
    ``until``, else ``run.until``; ``max_rounds`` and ``stall_after`` from the flags, else
    the configuration. None when no check is given (a run of one round). A repository's
    check (frontmatter or its config) needs no approval: it runs in the sandbox only, as
    the agent does.

    Raises:
        UserError: an empty ``--until``; a check asked of a terminal session; rounds out
            of 1 to :data:`~git_iterare.limits.MAX_ROUNDS`; a negative ``stall_after``.
    """
    from git_iterare.limits import MAX_ROUNDS
    from git_iterare.runs.extra import Loop

    if request.until is not None and not request.until.strip():
        raise UserError("--until needs a check: a shell command that exits 0 when the work is "
                        "done", hint="for example --until 'make test'")
    until = request.until or prompt.until or config["run.until"]
    rounds = request.max_rounds if request.max_rounds is not None else config["run.max_rounds"]
    stall = request.stall_after if request.stall_after is not None else config["run.stall_after"]
    if not 1 <= rounds <= MAX_ROUNDS:
        raise UserError(f"--max-rounds must be 1 to {MAX_ROUNDS}, not {rounds}",
                        hint="fix --max-rounds or `git iterare config run.max_rounds`")
    if stall < 0:
        raise UserError(f"--stall-after must be 0 (never) or a number of rounds, not {stall}",
                        hint="fix --stall-after or `git iterare config run.stall_after`")
    if request.tty:
        if request.until:
            raise UserError("a terminal session has no rounds: --until runs with `execute` "
                            "only", hint="drop --until")
        return None  # run.until is for runs of prompts
    if not until:
        return None
    return Loop(until=until, max_rounds=rounds, stall_after=stall)


def within_limit(flag: float | None, front: float | None, configured: float, what: str,
                 key: str) -> float:
    """A run's limit (seconds, dollars, turns; 0 means none): the flag's (the user's own
    word), else the prompt's frontmatter as far as it lowers the configured one, else the
    configured one. A prompt is the repository's: asking for no limit, or more than the
    configuration gives, leaves the configured limit (one warning says so).

    Raises:
        UserError: a negative or non-finite limit (checked by the callers).
    """
    if flag is not None:
        return flag
    if front is None or front < 0:
        return configured if front is None else front  # a negative one is refused later
    if configured and (not front or front > configured):
        asked = "no limit" if not front else f"{front:g}"
        ui.warn(f"the prompt asks for {what} {asked}; the configured {key} = "
                f"{configured:g} holds (a flag sets it for one run)")
        return configured
    return front


def relative_path(repo: Repo, path: Path) -> str:
    """``path`` relative to the worktree the command runs in, as records name prompt
    files (as given when it is outside)."""
    top = repo.project_tree
    try:
        return str(path.resolve().relative_to(top)) if top else str(path)
    except ValueError:
        return str(path)


def _base_commit(repo: Repo, flag: str | None, prompt: Prompt) -> str:
    """The hex id of the commit a run starts from: ``--branch`` (``flag``), else the
    prompt's frontmatter ``branch``, else HEAD.

    Raises:
        UserError: it names no commit; one line naming where the name came from and what
            to do.
    """
    try:
        return commit_of(repo, flag or prompt.branch or "HEAD", here=True)
    except UserError:
        pass
    listing = "choose one `git branch -a` lists, or `git fetch` it from its remote first"
    if flag:
        raise UserError(f"--branch {flag}: no such branch or commit in this repository",
                        hint=listing)
    if prompt.branch:
        raise UserError(f"{relative_path(repo, prompt.path)}: branch {prompt.branch!r} "
                        "(frontmatter) does not exist in this repository",
                        hint=f"fix its `branch:` or give --branch; {listing}")
    raise UserError("HEAD is no commit yet: the current branch has no commits",
                    hint="make a first commit, or give --branch")
