"""docker SDK exceptions as one-line git-iterare errors.

Every message about an unreachable engine names the endpoint actually used (the engine
chosen by :mod:`git_iterare.sandbox.engine`); clients are made by
:mod:`git_iterare.sandbox.engine_client`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from git_iterare.errors import OperationFailed, UserError
from git_iterare.sandbox.engine import Engine, current


def engine_url() -> str:
    """Where the engine in use is (its endpoint, with the context's name when there is
    one), for messages."""
    try:
        return current().label
    except UserError:
        return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _explanation(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    return str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__


def _ssl_reason(exc: BaseException) -> str | None:
    """A short reason when ``exc`` (or what caused it) is a TLS failure, else None."""
    import ssl

    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, ssl.SSLCertVerificationError):
            return (f"the engine's TLS certificate is not trusted "
                    f"({item.verify_message or 'verification failed'})")
        if isinstance(item, ssl.SSLError):
            reason = item.reason or str(item)
            return f"TLS handshake failed ({str(reason).lower().replace('_', ' ')})"
        todo += [item.__cause__, item.__context__, *[a for a in item.args
                                                    if isinstance(a, BaseException)]]
        wrapped = getattr(item, "reason", None)
        if isinstance(wrapped, BaseException):
            todo.append(wrapped)
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "the engine's TLS certificate is not trusted"
    if "SSLError" in text or "TLSV1_ALERT" in text or "SSLV3_ALERT" in text:
        return "TLS handshake failed"
    return None


def _unreachable(engine_label: str, exc: BaseException) -> OperationFailed:
    """The one line for an engine that cannot be reached or refused us."""
    reason = _ssl_reason(exc)
    if reason is not None:
        return OperationFailed(f"cannot connect to the Docker engine at {engine_label}: "
                               f"{reason}",
                               hint="check the context's or DOCKER_CERT_PATH's CA and "
                                    "client certificate")
    if engine_label.startswith("ssh://"):  # nothing answered ssh there
        return OperationFailed(f"cannot reach the Docker engine at {engine_label}: no ssh "
                               "server answered",
                               hint=f"{_ssh_check(engine_label)} must work")
    return OperationFailed(f"cannot reach the Docker engine at {engine_label} "
                           "(is dockerd running?)")


def _ssh_check(engine_label: str) -> str:
    """The ``ssh`` command a user runs to check an ``ssh://`` endpoint, with its own
    user, host and port (``ssh -p 2222 me@box docker info``)."""
    from urllib.parse import urlsplit

    from git_iterare.ui import sanitize

    parts = urlsplit(engine_label.split(" ", 1)[0])
    port = f"-p {parts.port} " if parts.port else ""
    who = f"{parts.username}@" if parts.username else ""
    return sanitize(f"`ssh {port}{who}{parts.hostname or 'HOST'} docker info`")


def _ssh_failure(engine_label: str, exc: BaseException) -> OperationFailed | None:
    """The one line for an ssh failure (paramiko's exceptions), or None when ``exc`` is
    not one."""
    try:
        import paramiko
    except ImportError:  # pragma: no cover - docker[ssh] depends on it
        return None
    if isinstance(exc, paramiko.AuthenticationException):
        return OperationFailed(f"cannot log in to the Docker engine at {engine_label}: ssh "
                               "authentication failed",
                               hint=f"check your ssh key or agent: {_ssh_check(engine_label)} "
                                    "must work")
    if isinstance(exc, paramiko.SSHException):
        if "banner" in str(exc):  # something answered, but not an ssh server
            return OperationFailed(f"cannot connect to the Docker engine at {engine_label} "
                                   "over ssh: no ssh server answered there "
                                   f"({_explanation(exc)})",
                                   hint=f"check the host and port: {_ssh_check(engine_label)} "
                                        "must work")
        return OperationFailed(f"cannot connect to the Docker engine at {engine_label} over "
                               f"ssh: {_explanation(exc)}",
                               hint=f"check the host key in ~/.ssh/known_hosts; "
                                    f"{_ssh_check(engine_label)} must work")
    return None


@contextlib.contextmanager
def docker_errors(what: str, engine: Engine | None = None) -> Iterator[None]:
    """Convert docker SDK errors raised inside the block.

    Args:
        what: what was being done ("start the sandbox itr-x"), for the message.
        engine: the engine talked to, for messages; the current one when None.

    Raises:
        UserError: a missing image (the hint names ``git iterare image build``).
        OperationFailed: engine unreachable, ssh or TLS authentication failed (naming the
            endpoint), a name already taken or a volume in use, any other API error; the daemon's
            explanation is kept.
    """
    import docker.errors
    import requests.exceptions

    def where() -> str:
        return engine.label if engine is not None else engine_url()

    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise UserError(f"cannot {what}: image not found ({_explanation(exc)})",
                        hint="run `git iterare image build`") from None
    except docker.errors.NotFound as exc:
        raise OperationFailed(f"cannot {what}: {_explanation(exc)}") from None
    except docker.errors.APIError as exc:
        if "HTTP request to an HTTPS server" in str(exc):  # plain tcp:// to a TLS engine
            raise OperationFailed(f"cannot talk to the Docker engine at {where()}: it "
                                  "expects TLS",
                                  hint="set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH (or use "
                                       "a docker context)") from None
        if exc.status_code == 409:  # a conflict: a name taken, or a volume still mounted
            text = str(exc)
            reason = ("it is in use by a container" if "volume is in use" in text
                      else "something else is removing it" if "already in progress" in text
                      or "marked for removal" in text
                      else "the name is already taken")
            raise OperationFailed(f"cannot {what}: {reason} ({_explanation(exc)})") from None
        raise OperationFailed(f"cannot {what}: {_explanation(exc)}") from None
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        if (isinstance(exc, requests.exceptions.ConnectionError) or "Connection" in str(exc)
                or "FileNotFound" in str(exc) or _ssl_reason(exc) is not None):
            raise _unreachable(where(), exc) from None
        raise OperationFailed(f"cannot {what}: {_explanation(exc)}") from None
    except Exception as exc:
        ssh = _ssh_failure(where(), exc)
        if ssh is not None:
            raise ssh from None
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
            raise _unreachable(where(), exc) from None
        if isinstance(exc, EOFError):  # paramiko: the ssh connection ended under us
            raise OperationFailed(f"lost the connection to the Docker engine at {where()} "
                                  f"while trying to {what}") from None
        raise
