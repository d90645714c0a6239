"""Docker networks a run is attached to at the user's request (``--docker-network``,
``--docker-compose``), as iterare (iterare-llm) attached them.

The sandbox's network sidecar joins each network besides its own, and the firewall lets
through only those networks' subnets (CIDR entries of the run's policy), so an agent can
reach a project's compose services (a database, a cache) while the rest stays closed.

Compose's default network is ``<project>_default``, the project name being what Docker
Compose takes: ``COMPOSE_PROJECT_NAME`` from the environment, else from the project's
``.env`` file, else the compose file's top-level ``name:``, else the directory's name;
lower-cased, keeping ``a-z``, ``0-9``, ``_`` and ``-``, leading ``_``/``-`` dropped.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from git_iterare.errors import UserError

#: Compose files looked for, in this order (as iterare and Compose do).
COMPOSE_FILES = ("compose.yaml", "compose.yml", "docker-compose.yml", "docker-compose.yaml")

#: Largest compose or ``.env`` file read, in bytes.
MAX_FILE_BYTES = 1024 * 1024


def normalize_project_name(raw: str) -> str:
    """Compose's project-name normalization: lower case, only ``[a-z0-9_-]``, no leading
    ``_`` or ``-``."""
    return re.sub(r"[^a-z0-9_-]+", "", raw.lower()).lstrip("_-")


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def compose_file(directory: Path) -> Path | None:
    """The compose file in ``directory``, or None."""
    for name in COMPOSE_FILES:
        if (directory / name).is_file():
            return directory / name
    return None


def _dotenv_name(directory: Path) -> str | None:
    text = _read(directory / ".env")
    for line in (text or "").splitlines():
        key, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and key.strip() == "COMPOSE_PROJECT_NAME":
            value = value.strip().strip("'\"")
            return normalize_project_name(value) or None
    return None


def _file_name(path: Path) -> str | None:
    import yaml

    from git_iterare.boundedyaml import top_level_scalar

    try:  # the repository wrote it: read as events, nothing built (no alias bombs)
        name = top_level_scalar(_read(path) or "", "name")
    except yaml.YAMLError:
        return None
    return normalize_project_name(name) or None if name is not None else None


def compose_network(directory: Path, env: Mapping[str, str]) -> str | None:
    """The default network a compose project in ``directory`` has, or None when there is
    no compose file (see the module docstring for the name)."""
    path = compose_file(directory)
    if path is None:
        return None
    from_env = normalize_project_name(env.get("COMPOSE_PROJECT_NAME", "").strip())
    name = (from_env or _dotenv_name(directory) or _file_name(path)
            or normalize_project_name(directory.name))
    return f"{name}_default" if name else None


#: The label Docker Compose (v1 and v2) puts on a project's networks, containers, volumes.
PROJECT_LABEL = "com.docker.compose.project"

#: The label naming the directory a compose project was started from. Compose puts it on
#: the project's containers (not on its networks); a network may carry it too.
WORKING_DIR_LABEL = "com.docker.compose.project.working_dir"


def compose_owner_dirs(name: str) -> tuple[str, ...] | None:
    """The directories the engine's network ``name`` belongs to, by Docker Compose's
    labels: the network's own ``com.docker.compose.project.working_dir`` label, and that
    label of every container (running or not) of the compose project the network's
    ``com.docker.compose.project`` label names.

    A repository names the project (``name:``, ``COMPOSE_PROJECT_NAME`` in ``.env``) but
    cannot set labels on the engine, so these directories tell whether a network of that
    name is this checkout's.

    Returns:
        The directories as the labels give them (absolute paths on the machine that ran
        Compose), sorted and without duplicates; empty when no label names one; None when
        the engine has no such network.

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    import docker.errors

    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    with docker_errors(f"inspect the network {name}"):
        try:
            network = client().networks.get(name)
        except docker.errors.NotFound:
            return None
        labels = network.attrs.get("Labels") or {}
        found = [labels.get(WORKING_DIR_LABEL)]
        project = labels.get(PROJECT_LABEL)
        if isinstance(project, str) and project:
            for container in client().containers.list(
                    all=True, filters={"label": f"{PROJECT_LABEL}={project}"},
                    ignore_removed=True):
                found.append((container.labels or {}).get(WORKING_DIR_LABEL))
    return tuple(sorted({d for d in found if isinstance(d, str) and d}))


def network_names(name: str) -> tuple[str, ...]:
    """The names the containers on the engine's network ``name`` answer to there: their
    container names and network aliases (compose's service names), as Docker's embedded
    DNS resolves them for containers on that network. git-iterare's own containers and
    names that are not host names are left out.

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    import re

    import docker.errors

    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    label = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*$")
    found: list[str] = []
    with docker_errors(f"inspect the network {name}"):
        try:
            network = client().networks.get(name)
        except docker.errors.NotFound:
            return ()
        for container_id in (network.attrs.get("Containers") or {}):
            try:
                container = client().containers.get(container_id)
            except docker.errors.NotFound:
                continue
            own = container.name
            if own.startswith("iterare-"):
                continue
            endpoint = ((container.attrs.get("NetworkSettings") or {}).get("Networks")
                        or {}).get(name) or {}
            for alias in (own, *(endpoint.get("Aliases") or ())):
                if (isinstance(alias, str) and label.fullmatch(alias) and len(alias) <= 253
                        and not container.id.startswith(alias)):
                    found.append(alias.lower())
    return tuple(dict.fromkeys(found))


#: Name endings kept for local use, never delegated on the public internet: names under
#: them (``db.local``, ``api.internal``) may stand for containers on an attached network.
PRIVATE_SUFFIXES = ("local", "internal", "test", "localhost", "lan", "home.arpa")


def _public_shaped(name: str) -> bool:
    """Whether ``name`` has a dot and ends in a label shaped like a public top-level
    domain (letters only, or an IDN ``xn--`` label), outside :data:`PRIVATE_SUFFIXES`."""
    if "." not in name or any(name.endswith("." + s) for s in PRIVATE_SUFFIXES):
        return False
    last = name.rsplit(".", 1)[1]
    return bool(re.fullmatch(r"[a-z]{2,63}|xn--[a-z0-9-]{1,59}", last))


def split_local_names(names: Sequence[str], domains: Sequence[str]
                      ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split names of containers on attached networks into those the sandbox's resolver
    may answer from Docker's DNS and those it must not.

    A container's name and aliases come from whoever runs it (a repository's compose file
    among them), and the resolver answers them before the allowlist: an alias
    ``api.anthropic.com`` would take the agent's requests, credentials included, to that
    container. Left out: names equal to, below or above an allowlisted name (``*.``
    wildcards and ``name:port`` entries by their name), and names with a dot that end in
    a public top-level-domain shape. Single labels (``db``, ``myproj-db-1``) and names
    under :data:`PRIVATE_SUFFIXES` are kept.

    Args:
        names: lower-case host names (:func:`network_names`).
        domains: the policy's allowlist entries (``name``, ``*.name``, ``name:port``).

    Returns:
        (kept, left out), each in the order given, without duplicates.
    """
    bases = set()
    for entry in domains:
        base = entry.strip().lower().removeprefix("*.").rstrip(".")
        base = base.rsplit(":", 1)[0] if re.search(r":[0-9]+$", base) else base
        if base:
            bases.add(base)

    def clashes(name: str) -> bool:
        return any(name == b or name.endswith("." + b) or b.endswith("." + name)
                   for b in bases)

    unique = [n.lower().rstrip(".") for n in dict.fromkeys(names)]
    dropped = tuple(dict.fromkeys(n for n in unique if clashes(n) or _public_shaped(n)))
    kept = tuple(dict.fromkeys(n for n in unique if n not in dropped))
    return kept, dropped


def _ipam_configs(name: str) -> list[dict[str, Any]]:
    """The ``IPAM.Config`` entries of the engine's network ``name`` (Docker's network
    inspect).

    Raises:
        UserError: the engine has no such network.
        OperationFailed: the engine cannot be reached.
    """
    import docker.errors

    from git_iterare.sandbox.docker_errors import docker_errors
    from git_iterare.sandbox.engine_client import client

    with docker_errors(f"inspect the network {name}"):
        try:
            network = client().networks.get(name)
        except docker.errors.NotFound:
            raise UserError(f"--docker-network {name}: no such Docker network",
                            hint="list them with `docker network ls`") from None
        configs = (network.attrs.get("IPAM") or {}).get("Config") or []
    return [c for c in configs if isinstance(c, dict)]


def network_subnets(name: str) -> tuple[str, ...]:
    """The subnets (CIDR) of the engine's network ``name``.

    Raises:
        UserError: the engine has no such network.
        OperationFailed: the engine cannot be reached.
    """
    return tuple(str(c["Subnet"]) for c in _ipam_configs(name) if c.get("Subnet"))


def network_gateways(name: str) -> tuple[str, ...]:
    """The gateway addresses of the engine's network ``name`` (the Docker host's address
    on it), one per subnet: as its IPAM configuration names them, else the subnet's
    first address, which Docker's default IPAM driver gives the gateway when none was
    asked for (and leaves out of the configuration).

    Raises:
        UserError: the engine has no such network.
        OperationFailed: the engine cannot be reached.
    """
    return tuple(dict.fromkeys(
        gateway for gateway in (_gateway(c) for c in _ipam_configs(name)) if gateway))


def _gateway(config: Mapping[str, Any]) -> str | None:
    """The gateway of one ``IPAM.Config`` entry (see :func:`network_gateways`)."""
    if config.get("Gateway"):
        return str(config["Gateway"]).split("/")[0]
    try:
        subnet = ipaddress.ip_network(str(config.get("Subnet") or ""), strict=False)
    except ValueError:
        return None
    return str(subnet.network_address + 1) if subnet.num_addresses > 2 else None
