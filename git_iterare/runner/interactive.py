"""``interactive``: a terminal session with the agent, or a shell, in the sandbox.

With ``worktree`` the session is a run like any other (its own branch, worktree and
record) and is finished the same way when it ends; detached, it goes on, and :func:`attach`
connects a terminal to it again. Without it the sandbox works on the current worktree
directly, with its ``.git`` hidden behind an empty read-only mount (the agent never sees
the repository's metadata; commit its changes yourself afterwards); nothing could find
such a session again, so detaching ends it.

The terminal is attached with ``docker attach`` (the Docker CLI), which handles raw mode,
window size and detaching (Ctrl-P Ctrl-Q) better than anything we would write.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare.config import Config
from git_iterare.errors import OperationFailed, UserError
from git_iterare.git.repo import Repo

if TYPE_CHECKING:
    from git_iterare.agents.base import Agent
    from git_iterare.runs.record import RunRecord
    from git_iterare.sandbox import SandboxSpec


@dataclass(frozen=True)
class InteractiveRequest:
    """What ``git iterare interactive`` was asked for.

    Attributes:
        worktree: make the session a run with its own branch and worktree.
        name: run name (``--workspace``), with ``worktree``.
        branch: base branch or commit, with ``worktree``.
        reuse: start from this run's result, with ``worktree``.
        env_names: host variables to pass through.
        shell: start ``session.shell`` instead of the agent.
        networks: Docker networks to attach to (``--docker-network``).
        compose: also the compose project's default network (``--docker-compose``).
    """

    worktree: bool = False
    name: str | None = None
    branch: str | None = None
    reuse: str | None = None
    env_names: tuple[str, ...] = ()
    shell: bool = False
    networks: tuple[str, ...] = ()
    compose: bool = False


@dataclass(frozen=True)
class SessionEnd:
    """How a terminal session ended (:func:`interactive`, :func:`attach`).

    Attributes:
        status: the exit status of the agent or shell (0 when detached from a run).
        detached: the user detached (Ctrl-P Ctrl-Q): a run goes on; a session on the
            checkout was ended.
        record: the session's run afterwards (finished when the session ended), or None
            for a session on the checkout.
    """

    status: int
    detached: bool = False
    record: RunRecord | None = None


#: Starts ``session.shell`` ($1) when the image has it, else bash (or sh) with a warning
#: naming the key: iterare's users may have set a shell (/bin/zsh) the image lacks.
SHELL_FALLBACK = (
    'if command -v "$1" >/dev/null 2>&1; then exec "$@"; fi; '
    'for s in bash sh; do if command -v "$s" >/dev/null 2>&1; then '
    'echo "warning: session.shell $1 is not in the sandbox image; starting $s instead" >&2; '
    'exec "$s"; fi; done; '
    'echo "error: session.shell $1 is not in the sandbox image" >&2; exit 127')


def shell_command(shell: str) -> tuple[str, ...]:
    """The argv that starts ``shell`` in the sandbox, or bash with a one-line warning
    naming ``session.shell`` when the image has no such program."""
    return ("/bin/sh", "-c", SHELL_FALLBACK, "sh", shell)


def _command(config: Config, shell: bool) -> tuple[str, ...]:
    from git_iterare.agents import get_agent

    if shell:
        return shell_command(config["session.shell"])
    argv = get_agent(config["run.agent"]).interactive_command(config)
    if argv is None:
        raise UserError(f"agent {config['run.agent']} has no interactive mode",
                        hint="use --shell")
    return tuple(argv)


def _attach(container: str) -> int | None:
    """Attach the terminal; the session's exit status, or None when the user detached.

    Raises:
        OperationFailed: the docker command is missing, or it ended without ever starting
            the sandbox (it cannot reach the engine: an ssh engine's host key or login,
            a TLS engine's certificates; the docker command printed why). The sandbox is
            left as it was.
    """
    from git_iterare import proc, sandbox
    from git_iterare.runner.finish import LIVE_STATES

    if shutil.which("docker") is None:
        raise OperationFailed("the docker command is needed to attach a terminal",
                              hint="install the Docker CLI")
    # A terminal sandbox is left created by launch: starting it attached loses nothing.
    before = sandbox.inspect(container)
    verb = ["start", "--attach", "--interactive"] if before and before.state == "created" \
        else ["attach"]
    from git_iterare.sandbox.engine import current

    # The docker command reaches the same engine (a context of the user's configuration
    # is not known to it otherwise).
    attached = proc.run(["docker", *verb, container], capture=False, check=False,
                        env=current().cli_env())
    info = sandbox.inspect(container)
    if attached.returncode and info is not None and info.state == "created":
        # Never started: the docker command failed, nobody detached.
        raise OperationFailed(f"the docker command could not attach the terminal to the "
                              f"sandbox on {current().label} (exit status "
                              f"{attached.returncode})",
                              hint="check that `docker version` reaches that engine from "
                                   "this shell")
    if info is not None and info.state in LIVE_STATES:
        return None
    code = sandbox.wait(container)
    return 0 if code is None else code


def interactive(repo: Repo, config: Config, request: InteractiveRequest,
                progress: Callable[[str], None] = lambda line: None) -> SessionEnd:
    """Run a terminal session; return how it ended.

    Raises:
        UserError: bad options, no credentials, no interactive mode for the agent.
        OperationFailed: Docker problems.
    """
    command = _command(config, request.shell)
    if request.worktree:
        from git_iterare.runner.launch import ExecuteRequest, execute

        record = execute(repo, config, ExecuteRequest(
            prompt=None, env_names=request.env_names, reuse=request.reuse,
            agent="shell" if request.shell else None, branch=request.branch,
            name=request.name, tty=True, command=command, networks=request.networks,
            compose=request.compose), progress=progress)
        return _attach_run(repo, record, progress)
    return _session_on_current_tree(repo, config, request, command, progress)


def _attach_run(repo: Repo, record: RunRecord, progress: Callable[[str], None]
                ) -> SessionEnd:
    """Connect the terminal to a terminal run's sandbox; finish the run when it ends."""
    from git_iterare.runner.finish import finish

    progress(f"run {record.id}: attaching (Ctrl-P Ctrl-Q detaches)")
    try:
        code = _attach(record.container or f"iterare-{record.id}")
    except OperationFailed as exc:
        raise OperationFailed(exc.message, hint=f"{exc.hint}; `git iterare stop "
                                                f"{record.id}` ends the run") from None
    if code is None:
        return SessionEnd(0, detached=True, record=record)
    return SessionEnd(code, record=finish(repo, record.id, wait=True))


def attach(repo: Repo, run: str | None,
           progress: Callable[[str], None] = lambda line: None) -> SessionEnd:
    """``git iterare attach``: connect the terminal again to a terminal run that was
    detached (``interactive --worktree``), and finish it when it ends.

    Args:
        repo: the repository.
        run: what names the run (as for every command taking RUN); None: the only
            terminal run of this repository still live.
        progress: receives progress lines.

    Raises:
        UserError: the run is no terminal session; or, without ``run``, several are live.
        OperationFailed: no such run, or none live; it has ended, runs on another machine,
            is still being launched, or Docker failed.
    """
    from git_iterare.runner.manage import settle
    from git_iterare.runner.ownership import container_of, engine_of, is_local
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore
    from git_iterare.sandbox.engine import using

    store = RunStore(repo)
    record = settle(repo, store.resolve(run)) if run is not None else _only_session(repo)
    if not record.extra.get("interactive"):
        raise UserError(f"run {record.id} is no terminal session",
                        hint=f"follow its log with `git iterare log -f {record.id}`")
    if record.status not in ACTIVE:
        raise OperationFailed(f"run {record.id} has ended ({record.status})",
                              hint=f"see `git iterare show {record.id}`")
    if not is_local(repo, record):
        raise OperationFailed(f"run {record.id} runs on another machine or repository",
                              hint="attach to it where it was started")
    if container_of(repo, record) is None:  # its execute has not launched it yet
        raise OperationFailed(f"run {record.id} is still being launched",
                              hint="try again in a moment")
    with using(engine_of(record)):
        return _attach_run(repo, record, progress)


def _only_session(repo: Repo) -> RunRecord:
    """The one terminal run of ``repo`` (started here) that is still live, after
    finishing those whose sandbox ended unobserved.

    Raises:
        OperationFailed: there is none. UserError: there are several.
    """
    from git_iterare.runner.manage import settle
    from git_iterare.runner.ownership import is_local
    from git_iterare.runs.status import ACTIVE
    from git_iterare.runs.store import RunStore

    live = []
    for record in RunStore(repo).list(statuses=ACTIVE):
        if record.extra.get("interactive") and is_local(repo, record):
            record = settle(repo, record)
            if record.status in ACTIVE:
                live.append(record)
    if not live:
        raise OperationFailed("no terminal session is running",
                              hint="start one with `git iterare interactive --worktree`")
    if len(live) > 1:
        raise UserError(f"{len(live)} terminal sessions are running: "
                        + ", ".join(sorted(r.id for r in live)),
                        hint="name one: `git iterare attach RUN`")
    return live[0]


def _session_on_current_tree(repo: Repo, config: Config, request: InteractiveRequest,
                             command: tuple[str, ...],
                             progress: Callable[[str], None]) -> SessionEnd:
    import secrets

    from git_iterare import sandbox
    from git_iterare.agents import get_agent, image_agents
    from git_iterare.runner.guard import (
        admit,
        check_network_on_engine,
        requested_networks,
        with_networks,
    )
    from git_iterare.runner.placement import placement_for
    from git_iterare.runner.request import passthrough_env, sandbox_limits
    from git_iterare.runner.spec import sandbox_spec
    from git_iterare.sandbox.engine import current
    from git_iterare.sandbox.image import ensure_image

    top = repo.work_tree
    if top is None:
        raise UserError("interactive needs a worktree; this repository is bare")
    try:  # the session would mount this checkout
        placement_for(current()).check_host_folder("a session on your checkout")
    except UserError as exc:
        raise UserError(exc.message, hint="use `git iterare interactive --worktree`, which "
                                          "ships a copy") from None
    admitted = admit(repo, config)
    networks = requested_networks(repo, request.networks, request.compose, os.environ)
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        raise UserError("as root, the agent (never root) could not write your files",
                        hint="use --worktree, which gives the agent a worktree of its own")
    agent = get_agent(config["run.agent"])
    credentials = agent.credentials(config, os.environ) if not request.shell else None
    policy = sandbox.policy_from_config(config, agent.required_domains(config))
    limits = sandbox_limits(config)
    check_network_on_engine(admitted.network)
    policy = with_networks(policy, networks)
    image = ensure_image(config, repo, progress,
                         **image_agents(config, [agent.name])._asdict())
    scratch = Path(tempfile.mkdtemp(prefix="iterare-session-"))
    empty = scratch / "empty"
    empty.mkdir()
    out_dir = scratch / "out"
    out_dir.mkdir()
    # Hide the repository's metadata: an empty read-only directory (or /dev/null for a
    # linked worktree's .git file) is mounted over it.
    dot_git = top / ".git"
    hide = empty if dot_git.is_dir() else Path(os.devnull)
    session = f"session-{secrets.token_hex(4)}"
    # The agent works on your own checkout as you (your choice to share it); runs, which
    # the agent owns alone, use a uid of their own.
    spec = sandbox_spec(
        config, session=session, repo=repo, image=image, agent=agent, command=command,
        policy=policy, out_dir=out_dir,
        mounts=(sandbox.Mount(top, "/workspace", False),
                sandbox.Mount(hide, "/workspace/.git", True), *admitted.mounts),
        agent_ids=(uid, gid), credentials=credentials,
        secret_env=passthrough_env(request.env_names, os.environ), limits=limits,
        networks=networks, tty=True)
    code, detached = _throwaway_session(spec, scratch, detached_status=0)
    return SessionEnd(code, detached=detached)


def _throwaway_session(spec: SandboxSpec, scratch: Path, *, detached_status: int
                       ) -> tuple[int, bool]:
    """Launch a sandbox that is no run, attach the terminal, and remove it afterwards
    with ``scratch``; return its exit status and whether the user detached. Detaching
    ends it (nothing could find it again): its status is then ``detached_status``."""
    from git_iterare import sandbox

    container = sandbox.start(spec)
    try:
        code = _attach(container)
        if code is None:
            sandbox.stop(container)
            sandbox.wait(container)
            return detached_status, True
        return code, False
    finally:
        try:
            if spec.owned:
                sandbox.reclaim(container, spec.owned, os.getuid(), os.getgid(),
                                spec.sidecar_image)
        finally:
            sandbox.remove(spec.run_id, spec.repo_path)
            shutil.rmtree(scratch, ignore_errors=True)


def login_launcher(repo: Repo | None, config: Config, agent: Agent,
                   progress: Callable[[str], None] = lambda line: None
                   ) -> Callable[[Sequence[str], Path], int]:
    """A launcher for :meth:`git_iterare.agents.credstore.CredentialStore.login_in_sandbox`.

    The returned ``launch(argv, home)`` runs ``argv`` on the user's terminal in the sandbox
    image (holding ``agent``), as the agent user (the caller's uid, or 1000 for root, never
    root), with ``home`` mounted as its home directory and egress limited to the agent's
    API domains and its store's ``login_domains``; it returns the exit status.
    """
    from git_iterare import sandbox
    from git_iterare.agents import image_agents
    from git_iterare.runner.guard import check_network_on_engine, checked_network
    from git_iterare.runner.spec import sandbox_spec
    from git_iterare.runner.trust import require_approval
    from git_iterare.sandbox.image import ensure_image

    def launch(argv: Sequence[str], home: Path) -> int:
        import secrets

        from git_iterare.runner.placement import placement_for
        from git_iterare.sandbox.engine import current

        try:  # the login writes into a folder of this machine
            placement_for(current()).check_host_folder("logging in inside the sandbox")
        except UserError as exc:
            raise UserError(exc.message, hint="log in against a local engine (`git iterare "
                            "--context default credentials ...` with DOCKER_HOST and "
                            "DOCKER_CONTEXT unset), or give the agent its API key "
                            "variable") from None
        network = checked_network(config)
        require_approval(repo, config)
        check_network_on_engine(network)
        store = agent.credential_store
        login_domains = store.login_domains if store is not None else ()
        policy = sandbox.policy_from_config(
            config, [*agent.required_domains(config), *login_domains])
        image = ensure_image(config, repo, progress,
                             **image_agents(config, [agent.name])._asdict())
        out_dir = Path(tempfile.mkdtemp(prefix="iterare-login-"))
        session = f"login-{secrets.token_hex(4)}"
        uid, gid = sandbox.agent_ids()
        spec = sandbox_spec(
            config, session=session, repo=repo, image=image, agent=agent, command=argv,
            policy=policy, out_dir=out_dir, mounts=(sandbox.Mount(home, "/home/agent", False),),
            agent_ids=(uid, gid), owned=(home,), tty=True, workdir="/home/agent")
        # Detached, a login nobody sees cannot finish: that is a failure.
        return _throwaway_session(spec, out_dir, detached_status=1)[0]

    return launch
