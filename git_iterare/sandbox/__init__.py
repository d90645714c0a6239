"""The sandbox: image, container lifecycle and egress policy (agent-agnostic).

Start a sandbox from a :class:`SandboxSpec` with :func:`start`, follow its
:func:`output`, :func:`wait` for it (with a timeout in seconds), :func:`stop`,
:func:`reclaim` its trees and :func:`remove` it. The engine is a
:class:`~git_iterare.sandbox.backend.Backend`; the default is Docker
(:mod:`git_iterare.sandbox.docker_backend`), imported on first use so importing this package
does not import the docker SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from git_iterare.sandbox.backend import Backend
from git_iterare.sandbox.egress import (
    EgressReport,
    RefusedConnections,
    drop_dns_log,
    read_egress_report,
)
from git_iterare.sandbox.exitcodes import SandboxExit
from git_iterare.sandbox.policy import BASE_DOMAINS, EgressPolicy, policy_from_config
from git_iterare.sandbox.spec import (
    LABEL_REPO,
    LABEL_RUN,
    ContainerInfo,
    Limits,
    Mount,
    SandboxSpec,
    VolumeTrees,
    agent_ids,
)

__all__ = [
    "BASE_DOMAINS",
    "LABEL_REPO",
    "LABEL_RUN",
    "Backend",
    "ContainerInfo",
    "EgressPolicy",
    "EgressReport",
    "Limits",
    "Mount",
    "RefusedConnections",
    "SandboxExit",
    "SandboxSpec",
    "VolumeTrees",
    "again",
    "agent_ids",
    "drop_dns_log",
    "engine_cpus",
    "get_backend",
    "inspect",
    "list_sandboxes",
    "output",
    "policy_from_config",
    "read_egress_report",
    "reclaim",
    "remove",
    "start",
    "stop",
    "wait",
]

_BACKENDS: dict[str, Backend] = {}


def get_backend() -> Backend:
    """The backend of the engine in use: Swarm services when runs go to its swarm
    (:attr:`~git_iterare.sandbox.engine.Engine.swarm`), else Docker containers."""
    from git_iterare.sandbox.engine import current

    kind = "swarm" if current().swarm is not None else "docker"
    backend = _BACKENDS.get(kind)
    if backend is None:
        if kind == "swarm":
            from git_iterare.sandbox.swarm_backend import SwarmBackend

            backend = SwarmBackend()
        else:
            from git_iterare.sandbox.docker_backend import DockerBackend

            backend = DockerBackend()
        _BACKENDS[kind] = backend
    return backend


def engine_cpus(fresh: bool = False) -> int:
    """The Docker engine's CPU count (``NCPU`` of ``docker info``; one API call, then
    kept for a day: see :func:`git_iterare.sandbox.engine_client.engine_facts`).

    Args:
        fresh: ask the engine even when a count is kept.

    Raises:
        OperationFailed: the engine cannot be reached or answered an error.
    """
    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine import current
    from git_iterare.sandbox.engine_client import client, engine_facts, remember_engine_facts

    engine = current()
    kept = None if fresh else engine_facts(engine).get("ncpu")
    if isinstance(kept, int) and kept > 0:
        return kept
    with docker_errors("ask the Docker engine for its CPU count"):
        ncpu = int(client().info()["NCPU"])
    remember_engine_facts(engine, ncpu=ncpu)
    return ncpu


def start(spec: SandboxSpec, fill: Callable[[], object] | None = None) -> str:
    """Start a sandbox; return its agent container's id (see :meth:`Backend.start`)."""
    return get_backend().start(spec, fill)


def output(container: str, *, follow: bool = False) -> Iterator[bytes]:
    """Its output as lines (bytes), streamed, following until it exits with ``follow``
    (see :meth:`Backend.output`); memory stays bounded whatever the agent printed."""
    return get_backend().output(container, follow=follow)


def wait(container: str, timeout: float | None = None) -> int | None:
    """Its exit status, or None when ``timeout`` seconds pass first."""
    return get_backend().wait(container, timeout)


def stop(container: str, grace_seconds: float = 10) -> None:
    """SIGTERM to the agent, SIGKILL after ``grace_seconds``."""
    get_backend().stop(container, grace_seconds)


def reclaim(container: str, trees: Sequence[Path], uid: int, gid: int,
            image: str, out_dir: Path | None = None) -> list[str]:
    """Make the trees the agent owned inert and ``uid``'s again (and the sidecar's
    ``out_dir``); notes for the user (see :meth:`Backend.reclaim`)."""
    return get_backend().reclaim(container, trees, uid, gid, image, out_dir)


def again(container: str, *, name: str, role: str, command: Sequence[str],
          env: Mapping[str, str], files: Mapping[str, bytes], pristine: bool = False) -> str:
    """Start another container in the sandbox of the exited ``container``; its id (see
    :meth:`Backend.again`)."""
    return get_backend().again(container, name=name, role=role, command=command, env=env,
                               files=files, pristine=pristine)


def remove(run_id: str, repo_path: str) -> None:
    """Remove every container of the run ``run_id`` of the repository at ``repo_path``;
    none is not an error."""
    get_backend().remove(run_id, repo_path)


def inspect(container: str) -> ContainerInfo | None:
    """State, exit status and labels; None when it does not exist."""
    return get_backend().inspect(container)


def list_sandboxes(repo_path: str | None = None) -> list[ContainerInfo]:
    """Every sandbox, or those labelled with the repository ``repo_path``."""
    return get_backend().list_sandboxes(repo_path)
