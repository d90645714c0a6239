"""A sandbox's network sidecar: the container that holds the run's network namespace,
resolver and firewall (``container/sidecar``; invariant 3 of DESIGN.md).

It runs git-iterare's own image, never the project's, as the only container of a
sandbox with capabilities (:data:`SIDECAR_CAPABILITIES`), and the only one that sees the
run's output folder (status, DNS log) and, to give them to the agent and back, its trees:
those trees alone, each mounted by itself (:func:`tree_mounts`). Here: its Engine API
body (:func:`sidecar_config`), the policy it is handed (:func:`policy_lines`), and the
lines of its output the host waits for (:class:`SidecarLog`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from git_iterare.errors import OperationFailed, UserError
from git_iterare.sandbox.docker_errors import docker_errors
from git_iterare.sandbox.dockertypes import Container, Json
from git_iterare.sandbox.engine_client import client
from git_iterare.sandbox.exitcodes import describe
from git_iterare.sandbox.spec import (
    OUT_PATH,
    SIDECAR,
    SIDECAR_TREES_READY,
    TREES_PATH,
    SandboxSpec,
    VolumeTrees,
)

#: Where the sidecar sees the host folder of :meth:`SandboxSpec.signal_dir`.
SIGNAL_PATH = "/run/iterare/signal"
#: What the sidecar needs as root: firewall and ipsets (iptables asks ipset through a raw
#: socket), binding port 53 before dnsmasq drops to its own user, switching users for the
#: self-check, clearing the bounding set, and giving the trees to the agent and back.
SIDECAR_CAPABILITIES = ("NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE", "SETUID", "SETGID",
                        "SETPCAP", "CHOWN", "DAC_OVERRIDE", "FOWNER")
#: The sidecar's own limits (dnsmasq, iptables, a shell): small and fixed.
SIDECAR_MEMORY = 256 * 1024 * 1024  # bytes
SIDECAR_PIDS = 256
#: Kernel settings of the run's network namespace, which the agent's container shares.
#: Docker lowers ``ip_unprivileged_port_start`` to 0, which would let the agent's uid
#: bind 127.0.0.1:53 beside dnsmasq (both with SO_REUSEADDR) and answer its own lookups;
#: the kernel's default keeps ports below 1024 to NET_BIND_SERVICE (ip-sysctl.rst).
SIDECAR_SYSCTLS = {"net.ipv4.ip_unprivileged_port_start": "1024"}
#: Docker's json-file log of each container: at most this much is kept (the engine
#: rotates; git-iterare reads the log back into the record, within its own limit).
LOG_OPTIONS = {"max-size": "50m", "max-file": "2"}
LOG_CONFIG = {"type": "json-file", "config": LOG_OPTIONS}
#: Longest policy handed to the sidecar, in bytes: it goes in one environment variable,
#: which Linux caps at 128 KiB (MAX_ARG_STRLEN); about 5,000 names.
MAX_POLICY_BYTES = 120 * 1024
#: Seconds the sidecar may take to set up the firewall before the launch fails.
READY_TIMEOUT = 60.0
READY_LINE = b"iterare-sandbox: ready"
#: The sidecar's line once nothing gets in or out of the run's network namespace (see
#: container/sidecar): the agent's container may start from then on.
LOCKED_LINE = b"iterare-sandbox: locked"
#: How every line the sidecar prints begins.
SAYS = b"iterare-sandbox: "


def tree_mounts(trees: Sequence[Path]) -> tuple[list[Json], str]:
    """The sidecar's mounts for the host ``trees`` (which must exist) and its
    ``ITERARE_TREES`` value.

    Each tree is mounted by itself at ``/trees/<n>/<name>``, ``n`` numbering the folders
    the trees are in, so the sidecar sees the run's own trees and nothing beside them
    (other runs' trees share those folders).

    Returns:
        (mounts as the Engine API takes them, space-separated paths below ``/trees``).
    """
    parents: dict[Path, int] = {}
    mounts: list[Json] = []
    names = []
    for tree in trees:
        path = Path(tree).resolve()
        name = f"{parents.setdefault(path.parent, len(parents))}/{path.name}"
        names.append(name)
        mounts.append(bind(f"{TREES_PATH}/{name}", path, read_only=False))
    return mounts, " ".join(names)


def volume_mounts(trees: VolumeTrees) -> tuple[list[Json], str]:
    """The sidecar's mounts of trees in engine volumes and its ``ITERARE_TREES``: the
    worktree and gitdir volumes at ``/trees/0/workspace`` and ``/trees/0/run``."""
    mounts: list[Json] = [
        {"Target": f"{TREES_PATH}/0/workspace", "Source": trees.work, "Type": "volume"},
        {"Target": f"{TREES_PATH}/0/run", "Source": trees.git, "Type": "volume"}]
    return mounts, "0/workspace 0/run"


def policy_lines(spec: SandboxSpec) -> str:
    """The sidecar's policy text for ``spec`` (completed by
    :func:`git_iterare.sandbox.hostnet.with_dns` first).

    Raises:
        UserError: it is longer than :data:`MAX_POLICY_BYTES`.
    """
    policy = spec.policy.to_lines()
    if len(policy.encode()) > MAX_POLICY_BYTES:
        raise UserError(f"the sandbox's allowlist is too long: {len(spec.policy.domains)} "
                        f"names, {len(policy.encode()) // 1024} KiB (at most "
                        f"{MAX_POLICY_BYTES // 1024} KiB)",
                        hint="cover many names with wildcard entries such as "
                             "*.example.com")
    return policy


def sidecar_config(spec: SandboxSpec, environment: Mapping[str, str], *,
                   labels: Mapping[str, str], auto_remove: bool = False) -> Json:
    """The Engine API's container configuration (the body of ``POST /containers/create``,
    https://docs.docker.com/engine/api/) of a network sidecar for ``spec``.

    Its host folders (``spec.out_dir`` and the signal folder beside it) are made here.
    ``environment`` is the sidecar's own (container/sidecar says what it reads); the
    run's trees' names are added as ``ITERARE_TREES`` unless ``environment`` has them.
    """
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    (spec.out_dir / "status.json").unlink(missing_ok=True)
    environment = dict(environment)
    mounts: list[Json]
    if spec.volumes is not None:  # an engine that sees none of the client's files
        # Its output stays in the image's /run/iterare/out, fetched at the end.
        mounts, trees = volume_mounts(spec.volumes)
        environment["ITERARE_TREES_READY"] = SIDECAR_TREES_READY
    else:
        mounts, trees = tree_mounts(spec.owned)
        signal = spec.signal_dir()
        signal.mkdir(mode=0o700, exist_ok=True)
        (signal / "go").unlink(missing_ok=True)
        mounts[:0] = [bind(OUT_PATH, spec.out_dir, read_only=False),
                      bind(SIGNAL_PATH, signal, read_only=True)]
    environment.setdefault("ITERARE_TREES", trees)
    network = spec.network or "default"
    return {
        "Image": spec.sidecar_image, "Cmd": ["start"], "Entrypoint": [SIDECAR],
        "User": "0:0", "WorkingDir": "/", "Labels": dict(labels),
        "Env": [f"{key}={value}" for key, value in environment.items()],
        "HostConfig": {
            "Mounts": list(mounts), "NetworkMode": network,
            "CapDrop": ["ALL"], "CapAdd": list(SIDECAR_CAPABILITIES),
            "SecurityOpt": ["no-new-privileges:true"], "Memory": SIDECAR_MEMORY,
            "PidsLimit": SIDECAR_PIDS, "Sysctls": dict(SIDECAR_SYSCTLS),
            "LogConfig": {"Type": "json-file", "Config": dict(LOG_OPTIONS)},
            "AutoRemove": auto_remove},
        "NetworkingConfig": {"EndpointsConfig": {network: {}}} if spec.network else None,
    }


def bind(target: str, source: Path, read_only: bool) -> Json:
    """A bind mount as the Engine API's ``HostConfig.Mounts`` takes it."""
    return {"Target": target, "Source": str(source.resolve()), "Type": "bind",
            "ReadOnly": read_only}


def create_sidecar(spec: SandboxSpec, environment: Mapping[str, str], *, name: str,
                   labels: Mapping[str, str], auto_remove: bool = False) -> Container:
    """Create (not start) a network sidecar for ``spec`` (:func:`sidecar_config`);
    return the docker SDK container.

    Raises:
        UserError: the image does not exist.
        OperationFailed: the engine is unreachable, the name is taken or it refused.
    """
    config = sidecar_config(spec, environment, labels=labels, auto_remove=auto_remove)
    with docker_errors(f"create the network sidecar of {spec.name}"):
        made = client().api.create_container_from_config(config, name)
    return client().containers.prepare_model({"Id": made["Id"], "Name": f"/{name}"})


def _close_stream(stream: object) -> None:
    """Close a followed log stream the caller stops reading: it holds a connection (an ssh
    channel on an ``ssh://`` engine, of which sshd allows 10 per connection) until closed.
    docker-py cannot cancel ssh streams (``close`` raises), so their response is closed."""
    close = getattr(stream, "close", None)
    try:
        if close is not None:
            close()
    except Exception:
        with contextlib.suppress(Exception):
            getattr(stream, "_response", None).close()  # type: ignore[union-attr]


class SidecarLog:
    """Follows a sidecar's output (in a thread) for the lines the host waits for.

    Args:
        container: the sidecar (a docker SDK container; only its id and name are used
            until something goes wrong).
    """

    def __init__(self, container: Container) -> None:
        self.container = container
        self.lines: list[bytes] = []  # the last 20
        self.seen: set[bytes] = set()
        self.changed = threading.Condition()
        self.ended = False
        threading.Thread(target=self._follow, daemon=True, name="sidecar-log").start()

    def _follow(self) -> None:
        pending = b""
        stream = None
        try:
            stream = self.container.logs(stream=True, follow=True, stdout=True,
                                         stderr=True)
            for chunk in stream:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                with self.changed:
                    self.lines = [*self.lines, *lines][-20:]
                    self.seen.update(line for line in lines if line.startswith(SAYS))
                    self.changed.notify_all()
                if READY_LINE in self.seen:
                    break  # nothing more to wait for: give the connection back
        except Exception:  # the container went away: the waiter finds out
            pass
        finally:
            if stream is not None:
                _close_stream(stream)
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def wait_for(self, line: bytes, deadline: float) -> None:
        """Return once the sidecar printed ``line``.

        Args:
            line: the whole line, as the sidecar prints it.
            deadline: ``time.monotonic()`` value after which to give up.

        Raises:
            OperationFailed: it exited first (with its own error line and exit status
                explained), or the deadline passed.
        """
        with self.changed:
            while line not in self.seen and not self.ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            if line in self.seen:
                return
            seen = list(self.lines)
        import docker.errors

        container = self.container
        errors = [text.decode("utf-8", "replace") for text in seen if b"error:" in text]
        detail = errors[-1].split("error:", 1)[1].strip() if errors else ""
        try:
            container.reload()
        except docker.errors.NotFound:  # a spare (auto-removed once it ended)
            raise OperationFailed("the sandbox's network sidecar failed: "
                                  f"{detail or 'it ended and is gone'}") from None
        if container.status in ("exited", "dead"):
            code = container.attrs.get("State", {}).get("ExitCode")
            why = detail or (describe(code) if code is not None else None) or f"status {code}"
            raise OperationFailed(f"the sandbox's network sidecar failed: {why}")
        raise OperationFailed(f"the sandbox's network sidecar was not ready after "
                              f"{READY_TIMEOUT:g} s" + (f": {detail}" if detail else ""))


