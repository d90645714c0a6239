"""Which Docker engine to talk to, chosen as the docker CLI chooses it.

Precedence, highest first:

1. ``DOCKER_HOST`` (``unix://``, ``ssh://user@host[:port]``, ``tcp://host:port``; TLS for
   ``tcp://`` from ``DOCKER_TLS_VERIFY`` / ``DOCKER_TLS`` and ``DOCKER_CERT_PATH``);
2. ``DOCKER_CONTEXT``;
3. ``[docker] context`` of the user's own configuration (global file, git config,
   ``ITERARE_DOCKER_CONTEXT``, ``git iterare --context``; never the repository's file);
4. ``currentContext`` of ``$DOCKER_CONFIG/config.json`` (``~/.docker``);
5. the default socket ``unix:///var/run/docker.sock``.

The context name ``default`` means that socket (or ``DOCKER_HOST``), as for the CLI.
Contexts are read from the CLI's store: ``contexts/meta/<sha256 of name>/meta.json`` for
the endpoint, ``contexts/tls/<sha256 of name>/docker/{ca,cert,key}.pem`` for TLS.

Nothing here talks to an engine; :mod:`git_iterare.sandbox.docker_errors` makes clients.
A run remembers its engine by name and endpoint (:meth:`Engine.describe`, no secrets) and
finds it again with :func:`engine_for`, only among the engines the user's own settings
name, so a record never chooses where git-iterare connects.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from git_iterare.errors import OperationFailed, UserError

if TYPE_CHECKING:
    from git_iterare.config import Config

#: The engine used when nothing names another one.
DEFAULT_URL = "unix:///var/run/docker.sock"

#: Name of the CLI's built-in context (the default socket or ``DOCKER_HOST``).
DEFAULT_CONTEXT = "default"

#: Largest ``config.json`` or ``meta.json`` read, in bytes.
MAX_METADATA_BYTES = 1024 * 1024


@dataclass(frozen=True)
class TLS:
    """TLS settings of a ``tcp://`` engine.

    Attributes:
        verify: check the engine's certificate (against ``ca`` when given, else the
            system's CAs); False for the CLI's ``SkipTLSVerify`` / ``DOCKER_TLS``.
        ca: path of the CA certificate (PEM) the engine's certificate must chain to, or None.
        cert: path of the client certificate (PEM), or None.
        key: path of the client certificate's key (PEM), or None.
    """

    verify: bool
    ca: str | None = None
    cert: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class SwarmTarget:
    """Where runs go when the engine is a Docker Swarm's manager (``[swarm]`` of the
    user's own configuration).

    Attributes:
        registry: ``HOST[:PORT]`` of the registry the swarm's nodes pull images from;
            empty for a run found again from its record (nothing is pushed then).
        constraints: placement constraints of the runs' services, as ``docker service
            create --constraint`` takes them (``node.labels.agents==yes``).
        snapshot_seconds: how often a run's task gives its work back while it runs (0:
            only when it ends).
    """

    registry: str
    constraints: tuple[str, ...] = ()
    snapshot_seconds: int = 60


@dataclass(frozen=True)
class Engine:
    """A Docker engine endpoint.

    Attributes:
        name: the docker context's name; ``default`` for the default socket or
            ``DOCKER_HOST``.
        url: the endpoint, as ``unix:///path``, ``ssh://[user@]host[:port]`` or
            ``tcp://host:port``.
        tls: TLS settings for ``tcp://``, or None for plain or non-TCP endpoints.
        source: what chose it, for messages: ``DOCKER_HOST``, ``DOCKER_CONTEXT``,
            ``docker.context`` (with its origin), ``currentContext`` or ``default``.
        swarm: runs go to the swarm this engine manages, or None (they run on it).
    """

    name: str
    url: str
    tls: TLS | None = None
    source: str = "default"
    swarm: SwarmTarget | None = None

    @property
    def label(self) -> str:
        """How messages name it: the endpoint, with the context's name when there is one
        (``tcp://box:2376 (context box)``), and for new runs to a swarm its registry
        (``tcp://box:2376, a swarm manager (registry reg:5000)``)."""
        text = self.url if self.name == DEFAULT_CONTEXT else f"{self.url} (context {self.name})"
        if self.swarm is not None and self.swarm.registry:
            text += f", a swarm manager (registry {self.swarm.registry})"
        return text

    @property
    def on_this_host(self) -> bool:
        """True for a ``unix://`` socket (Docker's default socket, Podman's, a context
        naming a local socket): the engine runs on this machine, sees its files and shares
        its network; False for ``ssh://`` and ``tcp://`` engines, which see nothing of it."""
        return self.url.startswith("unix://")

    @property
    def is_default_socket(self) -> bool:
        """True for the local default socket (the engine runs share files with)."""
        return self.url == DEFAULT_URL

    def network_addresses(self) -> tuple[str, ...]:
        """The addresses this client reaches an ``ssh://`` or ``tcp://`` engine's host at
        (its name resolved as the connection resolves it); empty for ``unix://`` and
        ``npipe://`` endpoints and when the name does not resolve.

        These are some of the engine host's own addresses, which its sandboxes must not
        reach; the client cannot learn the others (the host's other interfaces).
        """
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        if parts.scheme not in ("ssh", "tcp") or not parts.hostname:
            return ()
        import socket

        try:
            found = socket.getaddrinfo(parts.hostname, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):
            return ()
        return tuple(dict.fromkeys(str(info[4][0]).split("%")[0] for info in found))

    def describe(self) -> dict[str, str]:
        """What a run record keeps: ``{"name", "url"}`` (no key material, no paths)."""
        return {"name": self.name, "url": self.url}

    def cli_env(self) -> dict[str, str]:
        """Environment for the ``docker`` command to reach the same engine (for
        ``docker attach``): ``DOCKER_CONTEXT`` for a context, else ``DOCKER_HOST`` and the
        TLS variables."""
        if self.name != DEFAULT_CONTEXT:
            return {"DOCKER_CONTEXT": self.name, "DOCKER_HOST": ""}
        env = {"DOCKER_HOST": self.url, "DOCKER_CONTEXT": ""}
        if self.tls is not None:
            if self.tls.verify:
                env["DOCKER_TLS_VERIFY"] = "1"
            else:
                env["DOCKER_TLS"] = "1"
            if self.tls.ca:
                env["DOCKER_CERT_PATH"] = str(Path(self.tls.ca).parent)
        return env


def docker_config_dir(env: Mapping[str, str]) -> Path:
    """The docker CLI's configuration directory: ``$DOCKER_CONFIG`` or ``~/.docker``
    (``HOME`` from ``env``)."""
    if env.get("DOCKER_CONFIG"):
        return Path(env["DOCKER_CONFIG"])
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".docker"


def _read_json(path: Path) -> Any:
    """Parse a small JSON file; None when it does not exist.

    Raises:
        UserError: it cannot be read, is too large or is not JSON.
    """
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_METADATA_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_METADATA_BYTES:
        raise UserError(f"{path}: larger than {MAX_METADATA_BYTES // 1024} KiB")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})",
                        hint="fix it or recreate it with `docker context`") from None


def current_context(env: Mapping[str, str]) -> str | None:
    """``currentContext`` of the docker CLI's ``config.json``, or None when unset.

    Raises:
        UserError: the file cannot be read or parsed.
    """
    path = docker_config_dir(env) / "config.json"
    doc = _read_json(path)
    if not isinstance(doc, dict):
        return None
    name = doc.get("currentContext")
    return name if isinstance(name, str) and name else None


def _context_id(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


def context_names(env: Mapping[str, str]) -> list[str]:
    """Names of the contexts in the docker CLI's store (``default`` not included);
    unreadable entries are skipped."""
    meta = docker_config_dir(env) / "contexts" / "meta"
    names = []
    try:
        entries = sorted(meta.iterdir())
    except OSError:
        return []
    for entry in entries:
        try:
            doc = _read_json(entry / "meta.json")
        except UserError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("Name"), str):
            names.append(doc["Name"])
    return names


def load_context(name: str, env: Mapping[str, str], source: str) -> Engine:
    """The engine of the docker context ``name``.

    Args:
        name: the context's name; ``default`` gives :func:`from_docker_host` (or the
            default socket).
        env: the environment (``HOME``, ``DOCKER_CONFIG``, ``DOCKER_HOST``...).
        source: what named the context, for messages (``DOCKER_CONTEXT``...).

    Raises:
        UserError: no such context, or its metadata has no docker endpoint or cannot be read.
    """
    if name == DEFAULT_CONTEXT:
        engine = from_docker_host(env)
        return Engine(DEFAULT_CONTEXT, DEFAULT_URL, None, source) if engine is None else engine
    root = docker_config_dir(env) / "contexts"
    meta_path = root / "meta" / _context_id(name) / "meta.json"
    doc = _read_json(meta_path)
    if doc is None:
        raise UserError(f"docker context {name!r} (from {source}) does not exist",
                        hint="list them with `docker context ls`")
    endpoints = doc.get("Endpoints") if isinstance(doc, dict) else None
    endpoint = endpoints.get("docker") if isinstance(endpoints, dict) else None
    host = endpoint.get("Host") if isinstance(endpoint, dict) else None
    if not isinstance(endpoint, dict) or not isinstance(host, str) or not host:
        raise UserError(f"docker context {name!r}: {meta_path} names no docker endpoint",
                        hint="recreate it with `docker context create`")
    skip_verify = bool(endpoint.get("SkipTLSVerify"))
    tls_dir = root / "tls" / _context_id(name) / "docker"
    files = {part: tls_dir / f"{part}.pem" for part in ("ca", "cert", "key")}
    present = {part: str(path) for part, path in files.items() if path.is_file()}
    tls = None
    if host.startswith("tcp://") and (present or skip_verify):
        tls = TLS(verify=not skip_verify, ca=present.get("ca"), cert=present.get("cert"),
                  key=present.get("key"))
    return Engine(name, host, tls, source)


def from_docker_host(env: Mapping[str, str]) -> Engine | None:
    """The engine ``DOCKER_HOST`` names, with TLS as the CLI reads it; None when unset.

    TLS applies to ``tcp://`` when ``DOCKER_TLS_VERIFY`` (verified) or ``DOCKER_TLS``
    (not verified) is set and not empty; ``ca.pem``, ``cert.pem`` and ``key.pem`` come from
    ``DOCKER_CERT_PATH`` (default: the docker configuration directory) when they exist.

    Raises:
        UserError: ``DOCKER_TLS_VERIFY`` is set but the CA file is missing.
    """
    url = env.get("DOCKER_HOST", "")
    if not url:
        return None
    tls = None
    verify = bool(env.get("DOCKER_TLS_VERIFY"))
    if url.startswith("tcp://") and (verify or env.get("DOCKER_TLS")):
        cert_dir = Path(env.get("DOCKER_CERT_PATH") or docker_config_dir(env))
        ca, cert, key = (cert_dir / f"{part}.pem" for part in ("ca", "cert", "key"))
        if verify and not ca.is_file():
            raise UserError(f"DOCKER_TLS_VERIFY is set but {ca} does not exist",
                            hint="set DOCKER_CERT_PATH to the folder of ca.pem, cert.pem "
                                 "and key.pem")
        both = cert.is_file() and key.is_file()
        tls = TLS(verify=verify, ca=str(ca) if ca.is_file() else None,
                  cert=str(cert) if both else None, key=str(key) if both else None)
    return Engine(DEFAULT_CONTEXT, url, tls, "DOCKER_HOST")


def select_engine(config: Config | None = None, env: Mapping[str, str] | None = None) -> Engine:
    """The engine the docker CLI would use, with ``[docker] context`` of the user's
    configuration between ``DOCKER_CONTEXT`` and ``currentContext`` (see the module
    docstring), sending runs to its swarm when ``swarm.enabled`` is on.

    Args:
        config: a :class:`git_iterare.config.Config` (its ``docker.context``), or None.
        env: the environment; ``os.environ`` when None.

    Returns:
        The :class:`Engine`.

    Raises:
        UserError: a named context does not exist or its metadata is unreadable; bad TLS
            settings in the environment; bad ``[swarm]`` settings (:func:`swarm_target`).
    """
    env = os.environ if env is None else env
    engine = _chosen(config, env)
    target = swarm_target(config)
    return engine if target is None else dataclasses.replace(engine, swarm=target)


#: ``HOST[:PORT]`` of a registry (a name or IPv4 address; no scheme, path or tag).
_REGISTRY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(:[0-9]{1,5})?")


def swarm_target(config: Config | None) -> SwarmTarget | None:
    """The ``[swarm]`` settings of ``config`` (user-only keys: a repository's file
    cannot set them), or None when ``swarm.enabled`` is off.

    Raises:
        UserError: ``swarm.enabled`` without a ``swarm.registry``, a registry that is
            not ``HOST[:PORT]``, or ``swarm.snapshot_seconds`` out of range.
    """
    if config is None or not config["swarm.enabled"]:
        return None
    registry = str(config["swarm.registry"]).strip()
    if not registry:
        raise UserError("swarm.enabled is on but swarm.registry is empty: the swarm's nodes "
                        "pull the runs' images from a registry",
                        hint="set it: git config --global iterare.swarm.registry HOST:PORT")
    if not _REGISTRY.fullmatch(registry):
        from git_iterare.ui import sanitize

        raise UserError(f"swarm.registry {sanitize(registry)!r} is not HOST[:PORT]",
                        hint="name the registry as the nodes reach it, such as "
                             "registry.lan:5000")
    constraints = tuple(str(c).strip() for c in config["swarm.constraints"] if str(c).strip())
    seconds = int(config["swarm.snapshot_seconds"])
    if not 0 <= seconds <= 86400:
        raise UserError(f"swarm.snapshot_seconds must be 0 (only at the end) to 86400, not "
                        f"{seconds}", hint="fix it with `git iterare config`")
    return SwarmTarget(registry, constraints, seconds)


def _chosen(config: Config | None, env: Mapping[str, str]) -> Engine:
    """The engine of :func:`select_engine`, before its ``[swarm]`` settings."""
    engine = from_docker_host(env)
    if engine is not None:
        return engine
    if env.get("DOCKER_CONTEXT"):
        return load_context(env["DOCKER_CONTEXT"], env, "DOCKER_CONTEXT")
    if config is not None and config["docker.context"]:
        return load_context(config["docker.context"], env,
                            f"docker.context ({config.origin('docker.context')})")
    name = current_context(env)
    if name:
        return load_context(name, env, f"currentContext of "
                                       f"{docker_config_dir(env) / 'config.json'}")
    return Engine(DEFAULT_CONTEXT, DEFAULT_URL, None, "default")


# The engine commands use when they name none: chosen on first use from the
# configuration the command loaded (:func:`configure`) and the environment.
_CONFIG: Any = None
_CONFIGURED: Engine | None = None
_ACTIVE: contextvars.ContextVar[Engine | None] = contextvars.ContextVar("iterare_engine",
                                                                       default=None)


def configure(config: Config | None) -> None:
    """Use ``config``'s ``docker.context`` when choosing the default engine (on first
    use, by :func:`current`); commands call this when they load their configuration."""
    global _CONFIG, _CONFIGURED
    _CONFIG, _CONFIGURED = config, None


def reset() -> None:
    """Forget the configuration and the default engine (chosen again on next use)."""
    configure(None)


def current() -> Engine:
    """The engine in use: the one :func:`using` set, else the default one chosen by
    :func:`select_engine` from the configuration given to :func:`configure` and the
    environment (once per process).

    Raises:
        UserError: see :func:`select_engine`.
    """
    global _CONFIGURED
    active = _ACTIVE.get()
    if active is not None:
        return active
    if _CONFIGURED is None:
        _CONFIGURED = select_engine(_CONFIG)
    return _CONFIGURED


@contextlib.contextmanager
def using(engine: Engine | None) -> Iterator[Engine]:
    """Make ``engine`` the one :func:`current` returns (and every sandbox call talks to)
    inside the block; None keeps the current one."""
    if engine is None:
        yield current()
        return
    token = _ACTIVE.set(engine)
    try:
        yield engine
    finally:
        _ACTIVE.reset(token)


def engine_for(described: object, env: Mapping[str, str] | None = None) -> Engine:
    """Find the engine a run record names (:meth:`Engine.describe`) again.

    Only engines the user's own settings name are candidates: the current engine, and
    the docker context of the recorded name; the endpoint must be the same. A record
    without an engine (older runs) gets the current engine.

    Args:
        described: the record's ``extra["engine"]``: a dict with ``name`` and ``url``, or
            None.
        env: the environment; ``os.environ`` when None.

    Raises:
        OperationFailed: no engine of the user's settings has that name and endpoint (the
            message names both and says what to set).
        UserError: see :func:`select_engine`.
    """
    here = current()
    if not isinstance(described, dict):
        return here
    name, url = described.get("name"), described.get("url")
    if not isinstance(name, str) or not isinstance(url, str):
        return here
    if here.url == url and (here.name == name or name == DEFAULT_CONTEXT
                            or here.name == DEFAULT_CONTEXT):
        return here
    if url == DEFAULT_URL:
        return Engine(DEFAULT_CONTEXT, DEFAULT_URL, None, "the run's record")
    env = os.environ if env is None else env
    if name != DEFAULT_CONTEXT:
        with contextlib.suppress(UserError):
            engine = load_context(name, env, "the run's record")
            if engine.url == url:
                return engine
    from git_iterare.ui import sanitize

    where = sanitize(url if name == DEFAULT_CONTEXT else f"{url} (context {name})")
    hint = (f"set DOCKER_HOST={url}" if name == DEFAULT_CONTEXT
            else f"set DOCKER_CONTEXT={name}")
    if name == DEFAULT_CONTEXT and url.startswith("tcp://"):
        hint += ", with DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH when it speaks TLS"
    raise OperationFailed(f"the run is on the Docker engine at {where}, which your settings "
                          f"do not select now", hint=sanitize(hint))
