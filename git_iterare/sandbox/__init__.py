"""The sandbox: image, container lifecycle and egress policy (agent-agnostic).

Start a sandbox from a :class:`SandboxSpec` with :func:`launch`, follow it with
:func:`attach`, :func:`wait` for it (with a timeout in seconds), :func:`stop` and
:func:`remove` it. The engine is a :class:`~git_iterare.sandbox.backend.Backend`; the
default is Docker (:mod:`git_iterare.sandbox.docker_backend`), imported on first use so
importing this package does not import the docker SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from git_iterare.sandbox.backend import Backend
from git_iterare.sandbox.egress import EgressReport, RefusedConnections, read_egress_report
from git_iterare.sandbox.exitcodes import SandboxExit
from git_iterare.sandbox.policy import BASE_DOMAINS, EgressPolicy, policy_from_config
from git_iterare.sandbox.spec import (
    LABEL_REPO,
    LABEL_RUN,
    ContainerInfo,
    Limits,
    Mount,
    SandboxSpec,
    agent_ids,
)

__all__ = [
    "BASE_DOMAINS", "LABEL_REPO", "LABEL_RUN", "Backend", "ContainerInfo", "EgressPolicy",
    "EgressReport", "Limits", "Mount", "RefusedConnections", "SandboxExit", "SandboxSpec",
    "agent_ids", "attach", "begin", "claim_spare", "create_agent", "engine_cpus",
    "get_backend", "inspect", "launch", "list_sandboxes", "log_lines", "make_spare",
    "policy_from_config",
    "read_egress_report", "reclaim", "remove", "remove_sidecar", "start_sidecar",
    "stop", "wait",
]

_BACKEND: Backend | None = None


def get_backend() -> Backend:
    """The engine backend in use (Docker)."""
    global _BACKEND
    if _BACKEND is None:
        from git_iterare.sandbox.docker_backend import DockerBackend

        _BACKEND = DockerBackend()
    return _BACKEND


def engine_cpus(fresh: bool = False) -> int:
    """The Docker engine's CPU count (``NCPU`` of ``docker info``; one API call, then
    kept for a day: see :func:`git_iterare.sandbox.docker_errors.engine_facts`).

    Args:
        fresh: ask the engine even when a count is kept.

    Raises:
        OperationFailed: the engine cannot be reached or answered an error.
    """
    from git_iterare.sandbox.docker_errors import (
        client,
        docker_errors,
        engine_facts,
        remember_engine_facts,
    )
    from git_iterare.sandbox.engine import current

    engine = current()
    kept = None if fresh else engine_facts(engine).get("ncpu")
    if isinstance(kept, int) and kept > 0:
        return kept
    with docker_errors("ask the Docker engine for its CPU count"):
        ncpu = int(client().info()["NCPU"])
    remember_engine_facts(engine, ncpu=ncpu)
    return ncpu


def begin(spec: SandboxSpec, start: bool = True) -> str:
    """Make (and start) the sandbox's network sidecar while its trees are still being
    made; return its id for :func:`launch` (see Backend.begin)."""
    return get_backend().begin(spec, start)


def claim_spare(spec: SandboxSpec) -> str | None:
    """A spare sidecar claimed for ``spec`` in place of :func:`begin` (already started),
    or None (see :mod:`git_iterare.sandbox.spare`)."""
    return get_backend().claim_spare(spec)


def make_spare(spec: SandboxSpec, seconds: int) -> str | None:
    """Start a spare sidecar the next sandbox like ``spec`` may claim within ``seconds``;
    its id, or None when one waits already."""
    return get_backend().make_spare(spec, seconds)


def start_sidecar(sidecar_id: str) -> None:
    """Start a sidecar :func:`begin` made without starting it."""
    get_backend().start_sidecar(sidecar_id)


def remove_sidecar(sidecar_id: str) -> None:
    """Remove a sidecar from :func:`begin` that never got its agent."""
    get_backend().remove_sidecar(sidecar_id)


def create_agent(spec: SandboxSpec, sidecar_id: str) -> str:
    """Create the agent's container of a sandbox, not started, while its trees are still
    being filled; return its id for :func:`launch` (see Backend.create_agent)."""
    return get_backend().create_agent(spec, sidecar_id)


def launch(spec: SandboxSpec, sidecar_id: str | None = None,
           sidecar_started: Any = None, trees_ready: Callable[[], object] | None = None,
           agent_id: str | None = None) -> str:
    """Create and start a sandbox; return its container id (see Backend.launch)."""
    return get_backend().launch(spec, sidecar_id, sidecar_started, trees_ready, agent_id)


def attach(container_id: str) -> Iterator[bytes]:
    """Its stdout and stderr as lines (bytes), following until it exits."""
    return get_backend().attach(container_id)


def log_lines(container_id: str, *, follow: bool = False) -> Iterator[bytes]:
    """Its output as lines (bytes), streamed (see Backend.log_lines); memory stays bounded
    whatever the agent printed."""
    return get_backend().log_lines(container_id, follow=follow)


def wait(container_id: str, timeout: float | None = None) -> int | None:
    """Its exit status, or None when ``timeout`` seconds pass first."""
    return get_backend().wait(container_id, timeout)


def stop(container_id: str, grace_seconds: float = 10) -> None:
    """SIGTERM to the agent, SIGKILL after ``grace_seconds``."""
    get_backend().stop(container_id, grace_seconds)


def reclaim(container_id: str, trees: Sequence[Path], uid: int, gid: int,
            image: str, out_dir: Path | None = None) -> list[str]:
    """Make the trees the agent owned inert and ``uid``'s again (and the sidecar's
    ``out_dir``); notes for the user (see Backend.reclaim)."""
    return get_backend().reclaim(container_id, trees, uid, gid, image, out_dir)


def remove(container_id: str) -> None:
    """Remove the agent's container and its network sidecar; a missing one is not an
    error."""
    get_backend().remove(container_id)


def inspect(container_id: str) -> ContainerInfo | None:
    """State, exit status and labels; None when it does not exist."""
    return get_backend().inspect(container_id)


def list_sandboxes(repo_path: str | None = None) -> list[ContainerInfo]:
    """Every sandbox, or those labelled with the repository ``repo_path``."""
    return get_backend().list_sandboxes(repo_path)
