"""The Docker engine backend (docker SDK, models layer).

Each sandbox gets a host directory of its own (mode 0700, under the system temp dir) for
its policy file and secrets; it is named in the label ``dev.iterare.state`` and deleted
by :meth:`DockerBackend.remove`. Containers are never auto-removed, so the exit status
survives until the caller has read it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from git_iterare.sandbox.docker_errors import client, docker_errors
from git_iterare.sandbox.spec import (
    CA_PATH,
    ENTRYPOINT,
    LABEL_REPO,
    LABEL_RUN,
    OUT_PATH,
    POLICY_PATH,
    SECRETS_PATH,
    ContainerInfo,
    SandboxSpec,
)

LABEL_STATE = "dev.iterare.state"

#: What the entrypoint needs as root before it drops to the agent (which gets none):
#: firewall and ipsets (iptables asks ipset through a raw socket), binding port 53,
#: switching users, clearing the bounding set, reading the 0600 secret files, preparing
#: the agent's home, signalling the agent.
CAPABILITIES = ("NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE", "SETUID", "SETGID", "SETPCAP",
                "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL")


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def prepare_state(spec: SandboxSpec) -> Path:
    """Write the policy and secrets of ``spec`` into a new 0700 host directory.

    Layout: ``policy.json``, ``secrets/env/<NAME>`` and ``secrets/home/<relpath>`` (0600).

    Returns:
        The directory.
    """
    state = Path(tempfile.mkdtemp(prefix=f"iterare-{spec.name}-"))
    os.chmod(state, 0o700)
    (state / "policy.json").write_text(spec.policy.to_json())
    os.chmod(state / "policy.json", 0o644)
    for name, value in spec.secret_env.items():
        _write_private(state / "secrets" / "env" / name, value.encode())
    for rel, content in spec.secret_files.items():
        _write_private(state / "secrets" / "home" / rel, content)
    return state


def host_dns_servers(resolv_conf: Path = Path("/etc/resolv.conf"),
                     resolved_conf: Path = Path("/run/systemd/resolve/resolv.conf")
                     ) -> tuple[str, ...]:
    """The host's DNS servers, as Docker picks them for its default bridge.

    Read on the machine git-iterare runs on, which is the engine's host for a local engine
    (the usual case); with a remote ``DOCKER_HOST``, set ``[docker] dns``.

    Loopback servers are left out (they are not reachable from a container); when only
    systemd-resolved's stub (127.0.0.53) is listed, its upstream file is read instead.

    Returns:
        Addresses in file order; empty when none is found.
    """
    def servers(path: Path) -> list[str]:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return []
        found = []
        for line in lines:
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "nameserver":
                try:
                    found.append(ipaddress.ip_address(parts[1].split("%")[0]))
                except ValueError:
                    continue
        return [str(a) for a in found]

    listed = servers(resolv_conf)
    usable = [a for a in listed if not ipaddress.ip_address(a).is_loopback]
    if not usable and "127.0.0.53" in listed:
        usable = [a for a in servers(resolved_conf)
                  if not ipaddress.ip_address(a).is_loopback]
    return tuple(dict.fromkeys(usable))


def _info(container: Any) -> ContainerInfo:
    state = container.attrs.get("State", {})
    status = state.get("Status", "unknown")
    config = container.attrs.get("Config", {})
    return ContainerInfo(
        id=container.id,
        name=container.name,
        state=status,
        exit_code=state.get("ExitCode") if status in ("exited", "dead") else None,
        labels=dict(config.get("Labels") or {}),
        image=config.get("Image", ""),
    )


class DockerBackend:
    """Runs sandboxes on the Docker engine named by the environment (``DOCKER_HOST``)."""

    def launch(self, spec: SandboxSpec) -> str:
        """Create and start the sandbox described by ``spec``; return its container id.

        Raises:
            UserError: the image does not exist.
            OperationFailed: the engine is unreachable, the name is taken, or it refused.
        """
        from docker.types import Mount as DockerMount

        spec.out_dir.mkdir(parents=True, exist_ok=True)
        if not spec.policy.dns:
            # Docker's embedded DNS (user-defined networks) must not be the upstream: give
            # the resolver the servers Docker itself would use.
            spec = dataclasses.replace(spec, policy=dataclasses.replace(
                spec.policy, dns=host_dns_servers()))
        state = prepare_state(spec)
        mounts = [
            DockerMount(POLICY_PATH, str(state / "policy.json"), type="bind", read_only=True),
            DockerMount(OUT_PATH, str(spec.out_dir.resolve()), type="bind", read_only=False),
        ]
        if spec.secret_env or spec.secret_files:
            mounts.append(DockerMount(SECRETS_PATH, str(state / "secrets"), type="bind",
                                      read_only=True))
        if spec.ca_bundle is not None:
            mounts.append(DockerMount(CA_PATH, str(Path(spec.ca_bundle).resolve()),
                                      type="bind", read_only=True))
        mounts += [DockerMount(m.container_path, str(Path(m.host_path).resolve()), type="bind",
                               read_only=m.read_only) for m in spec.mounts]
        limits: dict[str, Any] = {}
        if spec.limits.cpus:
            limits["nano_cpus"] = int(spec.limits.cpus * 1e9)
        if spec.limits.memory:
            limits["mem_limit"] = spec.limits.memory
        if spec.limits.pids:
            limits["pids_limit"] = spec.limits.pids
        env = {**spec.env, "ITERARE_AGENT_UID": str(spec.agent_uid),
               "ITERARE_AGENT_GID": str(spec.agent_gid), "ITERARE_WORKDIR": spec.workdir}
        docker = client()
        try:
            with docker_errors(f"create the sandbox {spec.name}"):
                container = docker.containers.create(
                    spec.image, command=list(spec.command), name=spec.name,
                    entrypoint=[ENTRYPOINT], user="0:0", working_dir="/",
                    labels={**spec.all_labels(), LABEL_STATE: str(state)},
                    environment=env, mounts=mounts, network=spec.network or None,
                    cap_drop=["ALL"], cap_add=list(CAPABILITIES),
                    security_opt=["no-new-privileges:true"],
                    tty=spec.tty, stdin_open=spec.stdin, detach=True, **limits)
        except BaseException:
            shutil.rmtree(state, ignore_errors=True)
            raise
        try:
            with docker_errors(f"start the sandbox {spec.name}"):
                container.start()
        except BaseException:
            # Nobody learns the id of a sandbox that did not start: leave nothing behind.
            self.remove(str(container.id))
            raise
        return str(container.id)

    def attach(self, container_id: str) -> Iterator[bytes]:
        """Yield output lines (bytes, newline kept) of stdout and stderr until exit."""
        return self.log_lines(container_id, follow=True)

    def log_lines(self, container_id: str, *, follow: bool = False) -> Iterator[bytes]:
        """Yield its output as lines (bytes, newline kept), streamed: lines longer than
        :data:`~git_iterare.limits.MAX_LINE_BYTES` come in pieces of that size. With
        ``follow``, until it exits; else what it printed so far."""
        from git_iterare.loglimit import split_lines

        with docker_errors(f"read the output of the sandbox {container_id[:12]}"):
            container = client().containers.get(container_id)
            stream = container.logs(stream=True, follow=follow, stdout=True, stderr=True)
        yield from split_lines(stream)

    def logs(self, container_id: str) -> bytes:
        """Everything it printed so far, stdout and stderr interleaved as the engine kept them."""
        with docker_errors(f"read the output of the sandbox {container_id[:12]}"):
            data = client().containers.get(container_id).logs(stdout=True, stderr=True)
        return bytes(data)

    def wait(self, container_id: str, timeout: float | None = None) -> int | None:
        """Return the exit status, or None when ``timeout`` seconds pass first."""
        import requests.exceptions

        with docker_errors(f"wait for the sandbox {container_id[:12]}"):
            try:
                result = client().api.wait(container_id, timeout=timeout)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                return None
        return int(result.get("StatusCode", -1))

    def stop(self, container_id: str, grace_seconds: float = 10) -> None:
        """SIGTERM (forwarded to the agent), then SIGKILL after ``grace_seconds``."""
        with docker_errors(f"stop the sandbox {container_id[:12]}"):
            client().containers.get(container_id).stop(timeout=max(0, round(grace_seconds)))

    def remove(self, container_id: str) -> None:
        """Remove the container and its state directory; missing is not an error."""
        import docker.errors

        with docker_errors(f"remove the sandbox {container_id[:12]}"):
            try:
                container = client().containers.get(container_id)
            except docker.errors.NotFound:
                return
            state = (container.labels or {}).get(LABEL_STATE)
            container.remove(force=True)
        if state and Path(state).name.startswith("iterare-"):
            shutil.rmtree(state, ignore_errors=True)

    def inspect(self, container_id: str) -> ContainerInfo | None:
        """State, exit status and labels; None when there is no such container."""
        import docker.errors

        with docker_errors(f"inspect the sandbox {container_id[:12]}"):
            try:
                return _info(client().containers.get(container_id))
            except docker.errors.NotFound:
                return None

    def list_sandboxes(self, repo_path: str | None = None) -> list[ContainerInfo]:
        """Every git-iterare container, or those of the repository at ``repo_path``."""
        label = f"{LABEL_REPO}={repo_path}" if repo_path is not None else LABEL_RUN
        with docker_errors("list sandboxes"):
            found = client().containers.list(all=True, filters={"label": label})
        return [_info(c) for c in found]
