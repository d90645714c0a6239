"""The engine contract: what a sandbox backend must do.

A backend starts sandboxes from a :class:`~git_iterare.sandbox.spec.SandboxSpec` and
handles them by their agent container's id or name afterwards. How a sandbox is made of
containers (the network sidecar first, the agent's container in its namespace) is the
backend's own business: :mod:`git_iterare.sandbox.docker_backend` implements it on the
Docker Engine API (Docker and Podman); another orchestrator is another module with the
same nine methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from git_iterare.sandbox.spec import ContainerInfo, SandboxSpec


class Backend(Protocol):
    """A container engine that runs sandboxes (every method may raise OperationFailed)."""

    def start(self, spec: SandboxSpec, fill: Callable[[], object] | None = None) -> str:
        """Start a sandbox; return its agent container's id.

        The trees ``spec`` names must exist (host folders, or engine volumes); ``fill``,
        when given, puts their content in and is called once, while the sandbox is being
        made, before the agent starts (what it raises is raised). Nothing of a sandbox
        that did not start is left behind.

        Raises:
            UserError: an image does not exist; the policy cannot be handed over.
            OperationFailed: the engine refused or cannot be reached; the firewall could
                not be set up.
        """
        ...

    def output(self, container: str, *, follow: bool = False) -> Iterator[bytes]:
        """Its output (stdout and stderr) as lines (bytes, newline kept; lines over
        :data:`~git_iterare.limits.MAX_LINE_BYTES` in pieces), streamed; with ``follow``
        until it exits, else what it printed so far."""
        ...

    def wait(self, container: str, timeout: float | None = None) -> int | None:
        """Wait for its exit status; None when ``timeout`` seconds pass first."""
        ...

    def stop(self, container: str, grace_seconds: float = 10) -> None:
        """Ask it to stop (SIGTERM), then kill it after ``grace_seconds``."""
        ...

    def reclaim(self, container: str, trees: Sequence[Path], uid: int, gid: int,
                image: str, out_dir: Path | None = None) -> list[str]:
        """After the agent ended: strip set-uid/set-gid bits and special files from the
        host ``trees`` and give them (and the sandbox's ``out_dir``) to ``uid``:``gid``, as
        root in git-iterare's own ``image``; return notes for the user."""
        ...

    def again(self, container: str, *, name: str, role: str, command: Sequence[str],
              env: Mapping[str, str], files: Mapping[str, bytes],
              pristine: bool = False) -> str:
        """Start another container in the sandbox of the exited agent's container
        ``container`` (a loop's check, or its next round): with its user, environment
        plus ``env``, trees, limits and firewall, named ``name``, labelled with ``role``,
        running ``command``, with ``files`` (absolute path -> content, root's) put in;
        return its id. Its file system is the one the agent left or, with ``pristine``,
        the sandbox's image with only the agent's account put in again (nothing the
        agent left outside the run's trees, no secret). What it needs of the engine is
        removed with the run's containers (:meth:`remove`)."""
        ...

    def remove(self, run_id: str, repo_path: str) -> None:
        """Remove every container of the run ``run_id`` of the repository at
        ``repo_path`` (its labels), running or not; none is no error."""
        ...

    def inspect(self, container: str) -> ContainerInfo | None:
        """Its state, or None when it does not exist."""
        ...

    def list_sandboxes(self, repo_path: str | None = None) -> list[ContainerInfo]:
        """Every sandbox's agent container (of one repository when ``repo_path`` is
        given)."""
        ...
