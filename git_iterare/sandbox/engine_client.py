"""Docker clients, one per engine.

The engine is chosen by :mod:`git_iterare.sandbox.engine` (``DOCKER_HOST``,
``DOCKER_CONTEXT``, ``[docker] context``, the CLI's current context); :func:`client` gives
the shared client of the current one, typed as :class:`git_iterare.sandbox.dockertypes.Client`.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, cast

from git_iterare.sandbox.docker_errors import docker_errors
from git_iterare.sandbox.engine import Engine, current

if TYPE_CHECKING:
    from types import ModuleType

    from git_iterare.sandbox.dockertypes import Client


_CLIENTS: dict[Engine, Client] = {}
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

        class EngineAPIClient(docker.APIClient):  # type: ignore[misc]  # untyped SDK
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


def import_docker(engine: Engine) -> ModuleType:
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
    module: ModuleType = docker
    return module


#: Connections kept open to an ``ssh://`` engine (see :func:`_connect`).
SSH_POOL_SIZE = 5


def _connect(engine: Engine) -> Client:
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

    class EngineClient(docker.DockerClient):  # type: ignore[misc]  # untyped SDK
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

    made = cast("Client", EngineClient())
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


def client(engine: Engine | None = None) -> Client:
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
