"""The engine contract: what a sandbox backend must do.

:mod:`git_iterare.sandbox.docker_backend` implements it on a Docker engine; another engine
(Podman, Kubernetes) is another module with the same methods.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from git_iterare.sandbox.spec import ContainerInfo, SandboxSpec


class Backend(Protocol):
    """A container engine that runs sandboxes (every method may raise OperationFailed)."""

    def launch(self, spec: SandboxSpec) -> str:
        """Create and start a sandbox; return its container id."""
        ...

    def attach(self, container_id: str) -> Iterator[bytes]:
        """Yield its output (stdout and stderr) as lines, following until it exits."""
        ...

    def log_lines(self, container_id: str, *, follow: bool = False) -> Iterator[bytes]:
        """Yield its output as lines (bytes, newline kept; lines over
        :data:`~git_iterare.limits.MAX_LINE_BYTES` in pieces), streamed; with ``follow``
        until it exits, else what it printed so far."""
        ...

    def logs(self, container_id: str) -> bytes:
        """Everything it has printed so far (stdout and stderr), without following."""
        ...

    def wait(self, container_id: str, timeout: float | None = None) -> int | None:
        """Wait for the exit status; None when ``timeout`` seconds pass first."""
        ...

    def stop(self, container_id: str, grace_seconds: float = 10) -> None:
        """Ask it to stop (SIGTERM), then kill it after ``grace_seconds``."""
        ...

    def remove(self, container_id: str) -> None:
        """Remove it (and its secrets directory); a missing container is not an error."""
        ...

    def inspect(self, container_id: str) -> ContainerInfo | None:
        """Its state, or None when it does not exist."""
        ...

    def list_sandboxes(self, repo_path: str | None = None) -> list[ContainerInfo]:
        """Every sandbox (of one repository when ``repo_path`` is given)."""
        ...
