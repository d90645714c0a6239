"""The one builder of a :class:`~git_iterare.sandbox.SandboxSpec`, for a run, an
interactive session on the user's checkout, and a login.

What every sandbox gets the same way comes from here: names and labels from the session
id, the images, the agent's environment and credentials, the user's network and CA bundle.
Callers choose the command, policy, mounts, limits and who the agent runs as.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from git_iterare.config import Config
from git_iterare.errors import UserError
from git_iterare.git.repo import Repo
from git_iterare.runner.workspace import CONTAINER_WORKTREE

if TYPE_CHECKING:
    from git_iterare.agents.base import Agent, Credentials
    from git_iterare.sandbox.image import ImageRef
    from git_iterare.sandbox.policy import EgressPolicy
    from git_iterare.sandbox.spec import Limits, Mount, SandboxSpec, VolumeTrees


def ca_bundle_path(config: Config) -> Path | None:
    """``docker.ca_bundle`` as a path (``~`` expanded), or None when unset.

    Raises:
        UserError: it names no file.
    """
    ca = config["docker.ca_bundle"]
    if not ca:
        return None
    path = Path(ca).expanduser()
    if not path.is_file():
        raise UserError(f"docker.ca_bundle: {path} is not a file",
                        hint="point it at a PEM bundle or unset it")
    return path


def sandbox_spec(config: Config, *, session: str, repo: Repo | None, image: ImageRef,
                 agent: Agent, command: Sequence[str], policy: EgressPolicy, out_dir: Path,
                 mounts: Sequence[Mount], agent_ids: tuple[int, int],
                 credentials: Credentials | None = None,
                 secret_env: Mapping[str, str] | None = None, owned: Sequence[Path] = (),
                 limits: Limits | None = None, networks: Sequence[str] = (),
                 tty: bool = False, workdir: str = CONTAINER_WORKTREE,
                 volumes: VolumeTrees | None = None) -> SandboxSpec:
    """The spec of one sandbox.

    Args:
        config: the effective configuration (``docker.network``, ``docker.ca_bundle``).
        session: the run id, or a session's own id: the containers are named
            ``iterare-<session>`` (and ``-net``) and labelled with it.
        repo: the repository (its top directory labels the containers), or None.
        image: the agent's image and git-iterare's own for the sidecar.
        agent: the agent (its non-secret environment).
        command: the argv the agent's container runs.
        policy: the egress policy.
        out_dir: host directory for the sidecar's reports.
        mounts: bind mounts of the agent's container, parents first.
        agent_ids: ``(uid, gid)`` the agent runs as (never 0).
        credentials: the agent's secrets (environment and home files), or None.
        secret_env: more secret variables (``--env``), after the credentials'.
        owned: trees the agent owns while it runs (given back at the end).
        limits: CPU, memory and process limits; the defaults when None.
        networks: more Docker networks the sidecar joins.
        tty: a terminal, and stdin kept open.
        workdir: the agent's working directory (the run's worktree as mounted).
        volumes: the run's trees in its engine's volumes (a remote placement's), or None
            for host trees (``owned``, bind mounts).

    Raises:
        UserError: ``docker.ca_bundle`` names no file; an invalid spec (see
            :class:`~git_iterare.sandbox.SandboxSpec`).
    """
    from git_iterare.sandbox.spec import Limits, SandboxSpec

    uid, gid = agent_ids
    from git_iterare.sandbox.spec import sandbox_name

    return SandboxSpec(
        image=image.name, sidecar_image=image.sidecar, name=sandbox_name(session),
        command=tuple(command), policy=policy, out_dir=out_dir, run_id=session,
        repo_path=str(repo.main_work_tree) if repo is not None else "",
        env=agent.environment(config),
        secret_env={**(credentials.env if credentials else {}), **(secret_env or {})},
        secret_files=dict(credentials.files) if credentials else {},
        mounts=tuple(mounts), owned=tuple(owned), limits=limits or Limits(),
        network=config["docker.network"], networks=tuple(networks), agent_uid=uid,
        agent_gid=gid, tty=tty, stdin=tty, ca_bundle=ca_bundle_path(config), workdir=workdir,
        volumes=volumes)


def with_timeout(command: list[str], seconds: float) -> list[str]:
    """``command`` under ``timeout --kill-after=10 SECONDS`` (coreutils), inside the
    sandbox: :data:`~git_iterare.runner.finish.TIMEOUT_EXIT` on SIGTERM,
    :data:`~git_iterare.runner.finish.TIMEOUT_KILLED` 10 s later."""
    return ["timeout", "--kill-after=10", str(max(int(seconds), 1)), *command]
