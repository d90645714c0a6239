"""Docker clients per engine, and docker SDK exceptions as one-line git-iterare errors.

The engine is chosen by :mod:`git_iterare.sandbox.engine` (``DOCKER_HOST``,
``DOCKER_CONTEXT``, ``[docker] context``, the CLI's current context); every message about
an unreachable engine names the endpoint actually used.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from git_iterare.errors import OperationFailed, UserError
from git_iterare.sandbox.engine import Engine, current


def engine_url() -> str:
    """Where the engine in use is (its endpoint, with the context's name when there is
    one), for messages."""
    try:
        return current().label
    except UserError:
        return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _explanation(exc: Any) -> str:
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


_CLIENTS: dict[Engine, Any] = {}
_LOCK = threading.Lock()
_API_CLASS: Any = None


def _api_class() -> Any:
    """``docker.APIClient`` whose TLS verification always uses the engine's own CA.

    requests replaces a session's ``verify`` by ``REQUESTS_CA_BUNDLE`` or
    ``CURL_CA_BUNDLE`` when those are set (docker-py issue #2433); for this session only,
    the engine's CA (or its skip-verify choice) wins. Proxies and everything else from
    the environment still apply.
    """
    global _API_CLASS
    if _API_CLASS is None:
        import docker

        class EngineAPIClient(docker.APIClient):
            def merge_environment_settings(self, url: Any, proxies: Any, stream: Any,
                                           verify: Any, cert: Any) -> Any:
                settings = super().merge_environment_settings(url, proxies, stream, verify,
                                                              cert)
                if getattr(self, "engine_verify", None) is not None:
                    settings["verify"] = self.engine_verify
                return settings

        _API_CLASS = EngineAPIClient
    return _API_CLASS


def _tls_config(engine: Engine) -> Any:
    from docker.tls import TLSConfig

    tls = engine.tls
    assert tls is not None
    client_cert = (tls.cert, tls.key) if tls.cert and tls.key else None
    return TLSConfig(client_cert=client_cert, ca_cert=tls.ca, verify=tls.verify)


#: How long an engine's API version and CPU count are kept between commands (seconds).
ENGINE_FACTS_MAX_AGE = 24 * 3600


def engine_facts(engine: Engine) -> dict[str, Any]:
    """What was learnt about ``engine`` by earlier commands (``api_version``, ``ncpu``),
    kept for :data:`ENGINE_FACTS_MAX_AGE` seconds; empty when nothing is known."""
    from git_iterare.sandbox import cache

    return cache.read("engines", engine.url, ENGINE_FACTS_MAX_AGE) or {}


def remember_engine_facts(engine: Engine, **facts: Any) -> None:
    """Keep ``facts`` about ``engine`` for later commands (see :func:`engine_facts`)."""
    from git_iterare.sandbox import cache

    cache.write("engines", engine.url, {**engine_facts(engine), **facts})


def import_docker(engine: Engine) -> Any:
    """Import the docker SDK for talking to ``engine``; return the ``docker`` module.

    The SDK imports its ssh transport, and with it paramiko and invoke, whenever paramiko
    is installed: a third of its import time. Before the SDK is first imported for an
    engine that is not ``ssh://``, that transport is left out of this process; a later
    ``ssh://`` engine in the same process brings it in then, with one connection pool per
    engine (:mod:`git_iterare.sandbox.sshpool`).
    """
    import sys

    ssh = engine.url.startswith("ssh://")
    if "docker" not in sys.modules and not ssh:
        sys.modules.setdefault("docker.transport.sshconn", None)  # type: ignore[arg-type]
    import docker
    import docker.transport

    if ssh and not getattr(docker.transport, "iterare_one_pool", False):
        if sys.modules.get("docker.transport.sshconn", False) is None:
            del sys.modules["docker.transport.sshconn"]
        import docker.api.client
        from docker.transport.sshconn import SSHHTTPAdapter

        from git_iterare.sandbox.sshpool import adapter_class

        docker.transport.SSHHTTPAdapter = SSHHTTPAdapter
        docker.api.client.SSHHTTPAdapter = adapter_class(SSHHTTPAdapter)
        docker.transport.iterare_one_pool = True
    return docker


#: Connections kept open to an ``ssh://`` engine (see :func:`_connect`).
SSH_POOL_SIZE = 5


def _connect(engine: Engine) -> Any:
    """A new ``docker.DockerClient`` for ``engine`` (ssh through paramiko with
    ``~/.ssh/config`` and known hosts). The API version is negotiated with the engine
    once and then kept (:func:`engine_facts`), which saves a round trip per command."""
    import logging

    import_docker(engine)
    import docker

    # paramiko's transport thread logs its failures (with a traceback) to stderr when
    # nothing handles its logger; they reach the user as one line from docker_errors.
    logging.getLogger("paramiko").addHandler(logging.NullHandler())

    version = engine_facts(engine).get("api_version")
    known = isinstance(version, str) and bool(version)
    kwargs: dict[str, Any] = {"base_url": engine.url, "version": version if known else "auto",
                              "timeout": 300}
    if engine.tls is not None:
        kwargs["tls"] = _tls_config(engine)
    if engine.url.startswith("ssh://"):
        # Each pooled connection is an ssh channel, idle ones included, and sshd allows
        # 10 a connection (MaxSessions); all calls share one pool (sandbox.sshpool). A
        # launch makes up to 4 at once (the sidecar's start, its log, shipping the
        # trees, the agent's container): connections over the pool's size are closed
        # after use (urllib3 says so at warning level), and sshd frees their sessions
        # only a while later, so a pool smaller than that churns through them.
        kwargs["max_pool_size"] = SSH_POOL_SIZE
        logging.getLogger("urllib3.connectionpool").addHandler(logging.NullHandler())
    api_class = _api_class()

    class EngineClient(docker.DockerClient):
        def __init__(self) -> None:  # docker.DockerClient only makes its APIClient
            api = api_class.__new__(api_class)
            if engine.tls is not None:
                # Set before __init__, which already asks the engine for its version.
                # Its own CA, or no verification; verified against the system's CAs
                # (no CA file), the environment's bundle may stand for those.
                api.engine_verify = (engine.tls.ca if engine.tls.verify and engine.tls.ca
                                     else None if engine.tls.verify else False)
            api.__init__(**kwargs)
            self.api = api

    made = EngineClient()
    if not known:
        remember_engine_facts(engine, api_version=made.api.api_version)
    return made


def forget_client(engine: Engine | None = None) -> None:
    """Drop the shared client of ``engine`` (the current one when None), closing its
    connections: the next :func:`client` connects again (after Ctrl-C cut an ssh session
    short, say)."""
    engine = engine if engine is not None else current()
    with _LOCK:
        found = _CLIENTS.pop(engine, None)
    if found is not None:
        with contextlib.suppress(Exception):
            found.close()


def client(engine: Engine | None = None) -> Any:
    """A shared ``docker.DockerClient`` for ``engine`` (the current one when None; see
    :func:`git_iterare.sandbox.engine.current`), made once per engine.

    Args:
        engine: the engine to talk to, or None.

    Raises:
        OperationFailed: the engine cannot be reached, or ssh/TLS authentication failed
            (one line naming the endpoint).
        UserError: the engine settings are wrong (a context that does not exist).
    """
    engine = engine if engine is not None else current()
    with _LOCK:
        found = _CLIENTS.get(engine)
    if found is not None:
        return found
    with docker_errors("connect to the Docker engine", engine):
        made = _connect(engine)
    with _LOCK:
        return _CLIENTS.setdefault(engine, made)
