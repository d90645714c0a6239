"""The engine contract: what a sandbox backend must do.

:mod:`git_iterare.sandbox.docker_backend` implements it on a Docker engine; another engine
(Podman, Kubernetes) is another module with the same methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from git_iterare.sandbox.spec import ContainerInfo, SandboxSpec


class Backend(Protocol):
    """A container engine that runs sandboxes (every method may raise OperationFailed)."""

    def begin(self, spec: SandboxSpec, start: bool = True) -> str:
        """Make (and start) a sandbox's network sidecar before its trees exist; return its
        id."""
        ...

    def claim_spare(self, spec: SandboxSpec) -> str | None:
        """A started spare sidecar given ``spec``'s run, in place of :meth:`begin`; its
        id, or None when none can serve."""
        ...

    def make_spare(self, spec: SandboxSpec, seconds: int) -> str | None:
        """Start a spare sidecar for the next sandbox like ``spec``; its id, or None."""
        ...

    def start_sidecar(self, sidecar_id: str) -> None:
        """Start a sidecar :meth:`begin` made without starting it."""
        ...

    def remove_sidecar(self, sidecar_id: str) -> None:
        """Remove a sidecar from :meth:`begin` that never got its agent."""
        ...

    def create_agent(self, spec: SandboxSpec, sidecar_id: str) -> str:
        """Create (not start) a sandbox's agent container in the sidecar's namespace,
        while its trees are still being filled; return its id."""
        ...

    def launch(self, spec: SandboxSpec, sidecar_id: str | None = None,
               sidecar_started: Any = None,
               trees_ready: Callable[[], object] | None = None,
               agent_id: str | None = None) -> str:
        """Start a sandbox (its network sidecar, unless :meth:`begin` started it, then the
        agent's container, unless :meth:`create_agent` made it); return the agent
        container's id. ``trees_ready`` is called before the agent's container starts (a
        remote run's files going in)."""
        ...

    def attach(self, container_id: str) -> Iterator[bytes]:
        """Yield its output (stdout and stderr) as lines, following until it exits."""
        ...

    def log_lines(self, container_id: str, *, follow: bool = False) -> Iterator[bytes]:
        """Yield its output as lines (bytes, newline kept; lines over
        :data:`~git_iterare.limits.MAX_LINE_BYTES` in pieces), streamed; with ``follow``
        until it exits, else what it printed so far."""
        ...

    def wait(self, container_id: str, timeout: float | None = None) -> int | None:
        """Wait for the exit status; None when ``timeout`` seconds pass first."""
        ...

    def stop(self, container_id: str, grace_seconds: float = 10) -> None:
        """Ask it to stop (SIGTERM), then kill it after ``grace_seconds``."""
        ...

    def reclaim(self, container_id: str, trees: Sequence[Path], uid: int, gid: int,
                image: str, out_dir: Path | None = None) -> list[str]:
        """After the agent ended: strip set-uid/set-gid bits and special files from
        ``trees`` and give them (and the sidecar's ``out_dir``) to ``uid``:``gid`` (as
        root, in a container of git-iterare's own ``image`` when the sandbox's sidecar is
        gone); return notes for the user."""
        ...

    def remove(self, container_id: str) -> None:
        """Remove it and its network sidecar; a missing container is not an error."""
        ...

    def inspect(self, container_id: str) -> ContainerInfo | None:
        """Its state, or None when it does not exist."""
        ...

    def list_sandboxes(self, repo_path: str | None = None) -> list[ContainerInfo]:
        """Every sandbox (of one repository when ``repo_path`` is given)."""
        ...
