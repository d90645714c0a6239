"""Turn docker SDK exceptions into one-line git-iterare errors."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from git_iterare.errors import OperationFailed, UserError


def engine_url() -> str:
    """Where the engine is expected (``DOCKER_HOST`` or the default socket)."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _explanation(exc: Any) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    return str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__


@contextlib.contextmanager
def docker_errors(what: str) -> Iterator[None]:
    """Convert docker SDK errors raised inside the block.

    Args:
        what: what was being done ("start the sandbox itr-x"), for the message.

    Raises:
        UserError: a missing image (the hint names ``git iterare image build``).
        OperationFailed: engine unreachable, a name already taken, any other API error;
            the daemon's explanation is kept.
    """
    import docker.errors
    import requests.exceptions

    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise UserError(f"cannot {what}: image not found ({_explanation(exc)})",
                        hint="run `git iterare image build`") from None
    except docker.errors.NotFound as exc:
        raise OperationFailed(f"cannot {what}: {_explanation(exc)}") from None
    except docker.errors.APIError as exc:
        if exc.status_code == 409:
            raise OperationFailed(f"cannot {what}: the name is already taken "
                                  f"({_explanation(exc)})") from None
        raise OperationFailed(f"cannot {what}: {_explanation(exc)}") from None
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        if "Connection" in str(exc) or "FileNotFound" in str(exc) or isinstance(
                exc, requests.exceptions.ConnectionError):
            raise OperationFailed(f"cannot reach the Docker engine at {engine_url()} "
                                  "(is dockerd running?)") from None
        raise OperationFailed(f"cannot {what}: {_explanation(exc)}") from None


_CLIENT: Any = None


def client() -> Any:
    """A shared ``docker.DockerClient`` from the environment (API version negotiated).

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    global _CLIENT
    if _CLIENT is None:
        import docker

        with docker_errors("connect to the Docker engine"):
            _CLIENT = docker.from_env(version="auto", timeout=300)
    return _CLIENT
