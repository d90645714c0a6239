"""The Docker engine backend (docker SDK, models layer).

A sandbox is two containers (invariant 3 of DESIGN.md):

* the network sidecar ``<name>-net``, from git-iterare's own image (``container/sidecar``),
  holds the run's network namespace, resolver and firewall. It is the only container with
  capabilities (:data:`SIDECAR_CAPABILITIES`), and the only one that sees the run's
  output directory (status, DNS log) and, to give them to the agent and back, its trees;
* the agent's container ``<name>``, from the agent's image (possibly a project's), joins
  the sidecar's namespace (``network_mode: container:<sidecar>``) with no capabilities,
  no-new-privileges and Docker's init as PID 1, as the agent's uid from the start. Nothing
  in it runs as root, so no layer of its image and nothing the agent runs can change the
  firewall. Its secrets, home directory, ``/etc/passwd`` entry and start script are put in
  through the engine API before it starts (:func:`agent_files`).

The agent's container is started only after the sidecar printed ``iterare-sandbox:
ready``. Containers are never auto-removed, so the exit status survives until the caller
has read it; :meth:`DockerBackend.remove` removes both.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import itertools
import re
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from git_iterare.errors import OperationFailed, UserError
from git_iterare.sandbox.docker_errors import client, docker_errors
from git_iterare.sandbox.exitcodes import describe
from git_iterare.sandbox.spec import (
    AGENT_HOME,
    AGENT_START,
    CA_PATH,
    LABEL_REPO,
    LABEL_ROLE,
    LABEL_RUN,
    LABEL_SIDECAR,
    OUT_PATH,
    SECRETS_PATH,
    SIDECAR,
    TREES_PATH,
    ContainerInfo,
    SandboxSpec,
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
LOG_CONFIG: dict[str, Any] = {"type": "json-file", "config": {"max-size": "50m", "max-file": "2"}}

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
        ran_seconds=_ran_seconds(state) if status in ("exited", "dead") else None,
        oom_killed=state.get("OOMKilled") is True,
        memory_bytes=(container.attrs.get("HostConfig") or {}).get("Memory") or None,
    )


def _ran_seconds(state: Mapping[str, Any]) -> float | None:
    """``FinishedAt - StartedAt`` of a container's state, in seconds; None when unknown
    (Docker writes ``0001-01-01T00:00:00Z`` for a time that never was)."""
    import datetime as dt

    def parse(text: Any) -> dt.datetime | None:
        if not isinstance(text, str) or text.startswith("0001-"):
            return None
        match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", text)
        if not match:
            return None
        fraction = (match[2] or ".0")[:7]  # Docker gives nanoseconds; Python takes micro
        zone = "+00:00" if match[3] == "Z" else match[3]
        return dt.datetime.fromisoformat(match[1] + fraction + zone)

    started, finished = parse(state.get("StartedAt")), parse(state.get("FinishedAt"))
    if started is None or finished is None or finished < started:
        return None
    return (finished - started).total_seconds()


class _Tar:
    """A tar archive built in memory, for ``put_archive`` (entries keep their owners)."""

    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        # Closed by data(), when the archive is complete.
        self.tar = tarfile.open(fileobj=self.buffer, mode="w",  # noqa: SIM115
                                format=tarfile.PAX_FORMAT)
        self.dirs: set[str] = set()

    def dir(self, path: str, uid: int, gid: int, mode: int) -> None:
        if path in self.dirs:
            return
        self.dirs.add(path)
        info = tarfile.TarInfo(path.strip("/"))
        info.type, info.uid, info.gid, info.mode = tarfile.DIRTYPE, uid, gid, mode
        self.tar.addfile(info)

    def file(self, path: str, data: bytes, uid: int, gid: int, mode: int) -> None:
        info = tarfile.TarInfo(path.strip("/"))
        info.size, info.uid, info.gid, info.mode = len(data), uid, gid, mode
        self.tar.addfile(info, io.BytesIO(data))

    def data(self) -> bytes:
        self.tar.close()
        return self.buffer.getvalue()


def container_file(name: str) -> bytes:
    """A file of ``container/`` as shipped in the package (``agent-start``, ``sidecar``)."""
    return (resources.files("git_iterare") / "data" / "container" / name).read_bytes()


def _read_file(container: Any, path: str, limit: int = 1 << 20) -> bytes:
    """A regular file of a created container (b"" when missing), at most ``limit`` bytes."""
    import docker.errors

    try:
        stream, _ = container.get_archive(path)
    except docker.errors.NotFound:
        return b""
    raw = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        member = tar.next()
        if member is None or not member.isfile() or member.size > limit:
            return b""
        handle = tar.extractfile(member)
        return handle.read() if handle else b""


def _image_accounts(container: Any, image: str) -> tuple[bytes, bytes]:
    """``/etc/passwd`` and ``/etc/group`` of the image a created container runs, read
    once per image id and kept in the user's cache (an image's files never change;
    reading them costs two engine calls per run)."""
    from git_iterare.sandbox import cache

    image_id = str(container.attrs.get("Image") or image)
    kept = cache.read("accounts", image_id)
    if kept is not None and isinstance(kept.get("passwd"), str) \
            and isinstance(kept.get("group"), str):
        return kept["passwd"].encode(), kept["group"].encode()
    passwd, group = _read_file(container, "/etc/passwd"), _read_file(container, "/etc/group")
    cache.write("accounts", image_id, {"passwd": passwd.decode("utf-8", "replace"),
                                       "group": group.decode("utf-8", "replace")})
    return passwd, group


def _accounts(passwd: bytes, group: bytes, uid: int, gid: int) -> tuple[bytes, bytes]:
    """``/etc/passwd`` and ``/etc/group`` of the image with the agent as ``agent``.

    Programs ask who they are (Node's ``os.userInfo()`` fails without an entry); earlier
    ``agent`` entries and entries with the agent's numbers are replaced.
    """
    def keep(text: bytes, number: int) -> list[str]:
        lines = []
        for line in text.decode("utf-8", "replace").splitlines():
            fields = line.split(":")
            if line and fields[0] != "agent" and (len(fields) < 3 or fields[2] != str(number)):
                lines.append(line)
        return lines

    users = [*keep(passwd, uid), f"agent:x:{uid}:{gid}:git-iterare agent:{AGENT_HOME}:/bin/sh"]
    groups = [*keep(group, gid), f"agent:x:{gid}:"]
    return ("\n".join(users) + "\n").encode(), ("\n".join(groups) + "\n").encode()


def agent_files(spec: SandboxSpec, passwd: bytes, group: bytes) -> bytes:
    """The archive put into the agent's container at ``/`` before it starts.

    Holds ``/etc/passwd`` and ``/etc/group`` with the agent's entry, its home directory
    (0700) with the secret files (0600), ``/run/iterare/agent-start`` (root, 0755), the
    secret variables as files ``/run/iterare/secrets/env/NAME`` (0400, in a 0500 dir), and
    the CA bundle (0644) when the spec names one, and on a remote engine the run's files
    (``spec.remote.files``: root's, 0644). Everything the agent may read is owned by its
    uid; nothing is written on the host.

    Raises:
        OSError: the CA bundle cannot be read.
    """
    uid, gid = spec.agent_uid, spec.agent_gid
    tar = _Tar()
    users, groups = _accounts(passwd, group, uid, gid)
    tar.dir("etc", 0, 0, 0o755)
    tar.file("etc/passwd", users, 0, 0, 0o644)
    tar.file("etc/group", groups, 0, 0, 0o644)
    tar.dir("home", 0, 0, 0o755)
    tar.dir(AGENT_HOME, uid, gid, 0o700)
    for rel, content in sorted(spec.secret_files.items()):
        parts = Path(rel).parts
        for depth in range(1, len(parts)):
            tar.dir(f"{AGENT_HOME}/{'/'.join(parts[:depth])}", uid, gid, 0o700)
        tar.file(f"{AGENT_HOME}/{rel}", content, uid, gid, 0o600)
    tar.dir("run", 0, 0, 0o755)
    tar.dir("run/iterare", 0, 0, 0o755)
    tar.file(AGENT_START, container_file("agent-start"), 0, 0, 0o755)
    if spec.secret_env:
        tar.dir(SECRETS_PATH, uid, gid, 0o500)
        tar.dir(f"{SECRETS_PATH}/env", uid, gid, 0o500)
        for name, value in sorted(spec.secret_env.items()):
            tar.file(f"{SECRETS_PATH}/env/{name}", value.encode(), uid, gid, 0o400)
    if spec.ca_bundle is not None:
        tar.file(CA_PATH, Path(spec.ca_bundle).read_bytes(), 0, 0, 0o644)
    if spec.remote is not None:  # what a remote engine cannot mount (the prompt): root's
        for path, data in sorted(spec.remote.files.items()):
            parts = path.strip("/").split("/")
            for depth in range(1, len(parts)):
                tar.dir("/".join(parts[:depth]), 0, 0, 0o755)
            tar.file(path, data, 0, 0, 0o644)
    return tar.data()


def tree_mounts(trees: Sequence[Path]) -> tuple[list[Any], str]:
    """The sidecar's mounts for ``trees`` and its ``ITERARE_TREES`` value.

    Each tree's parent directory is mounted (at ``/trees/<n>``), so the sidecar can start
    before the trees exist (they are made while it sets up the firewall); the trees
    themselves are named relative to ``/trees``.

    Returns:
        (mounts as the Engine API takes them, space-separated paths below ``/trees``).
    """
    parents: dict[Path, int] = {}
    names = []
    for tree in trees:
        parent = Path(tree).parent.resolve()
        number = parents.setdefault(parent, len(parents))
        names.append(f"{number}/{Path(tree).name}")
    mounts = [_bind(f"{TREES_PATH}/{n}", p, read_only=False) for p, n in parents.items()]
    return mounts, " ".join(names)


def policy_lines(spec: SandboxSpec) -> str:
    """The sidecar's policy text for ``spec`` (completed by :func:`_with_dns` first).

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
                   labels: Mapping[str, str], auto_remove: bool = False) -> dict[str, Any]:
    """The Engine API's container configuration (the body of ``POST /containers/create``,
    https://docs.docker.com/engine/api/) of a network sidecar for ``spec``.

    Its host folders (``spec.out_dir`` and the signal folder beside it) are made here.
    ``environment`` is the sidecar's own (container/sidecar says what it reads); the
    run's trees' names are added as ``ITERARE_TREES`` unless ``environment`` has them.
    """
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    (spec.out_dir / "status.json").unlink(missing_ok=True)
    environment = dict(environment)
    if spec.remote is not None:  # an engine that sees none of the client's files
        # Its output stays in the image's /run/iterare/out, fetched at the end.
        from git_iterare.sandbox.remote import SIDECAR_TREES_READY, sidecar_mounts

        mounts, trees = sidecar_mounts(spec.remote)
        environment["ITERARE_TREES_READY"] = SIDECAR_TREES_READY
    else:
        mounts, trees = tree_mounts(spec.owned)
        signal = spec.signal_dir()
        signal.mkdir(mode=0o700, exist_ok=True)
        (signal / "go").unlink(missing_ok=True)
        mounts[:0] = [_bind(OUT_PATH, spec.out_dir, read_only=False),
                      _bind(SIGNAL_PATH, signal, read_only=True)]
    environment.setdefault("ITERARE_TREES", trees)
    network = spec.network or "default"
    return {
        "Image": spec.sidecar_image, "Cmd": ["start"], "Entrypoint": [SIDECAR],
        "User": "0:0", "WorkingDir": "/", "Labels": dict(labels),
        "Env": [f"{key}={value}" for key, value in environment.items()],
        "HostConfig": {
            "Mounts": [dict(m) for m in mounts], "NetworkMode": network,
            "CapDrop": ["ALL"], "CapAdd": list(SIDECAR_CAPABILITIES),
            "SecurityOpt": ["no-new-privileges:true"], "Memory": SIDECAR_MEMORY,
            "PidsLimit": SIDECAR_PIDS, "Sysctls": dict(SIDECAR_SYSCTLS),
            "LogConfig": {"Type": LOG_CONFIG["type"], "Config": dict(LOG_CONFIG["config"])},
            "AutoRemove": auto_remove},
        "NetworkingConfig": {"EndpointsConfig": {network: {}}} if spec.network else None,
    }


def _bind(target: str, source: Path, read_only: bool) -> dict[str, Any]:
    """A bind mount as the Engine API's ``HostConfig.Mounts`` takes it."""
    return {"Target": target, "Source": str(source.resolve()), "Type": "bind",
            "ReadOnly": read_only}


def claim_texts(spec: SandboxSpec) -> tuple[str, str]:
    """What a run that claims a spare sidecar for ``spec`` hands it (see
    :func:`git_iterare.sandbox.spare.give`): the policy text (DNS servers and host
    addresses completed) and ``ITERARE_TREES``.

    Raises:
        UserError: the policy is too long (:data:`MAX_POLICY_BYTES`).
    """
    return policy_lines(_with_dns(spec)), tree_mounts(spec.owned)[1]


def create_sidecar(spec: SandboxSpec, environment: Mapping[str, str], *, name: str,
                   labels: Mapping[str, str], auto_remove: bool = False) -> Any:
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


def _drop(container: Any) -> None:
    """Remove a container a launch that failed made (a docker SDK container). What went
    wrong matters more than a failed removal (the run's launch removes what is left:
    :func:`git_iterare.runner.launch._discard_on_engine`), and one gone already (a
    claimed spare removes itself) is no error."""
    from docker.errors import NotFound

    with contextlib.suppress(OperationFailed), docker_errors(f"remove {container.name}"), \
            contextlib.suppress(NotFound):
        container.remove(force=True, v=True)


def _limits(spec: SandboxSpec) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if spec.limits.cpus:
        limits["nano_cpus"] = int(spec.limits.cpus * 1e9)
    if spec.limits.memory:
        limits["mem_limit"] = spec.limits.memory
    if spec.limits.pids:
        limits["pids_limit"] = spec.limits.pids
    return limits


def host_addresses(fib_trie: Path = Path("/proc/net/fib_trie"),
                   if_inet6: Path = Path("/proc/net/if_inet6")) -> tuple[str, ...]:
    """This machine's own IPv4 and IPv6 addresses (loopback left out), from the kernel's
    tables: the local routes of ``fib_trie`` (``/32 host LOCAL``) and ``if_inet6``.

    Returns:
        Addresses, IPv4 first; empty when the tables cannot be read.
    """
    found: list[str] = []
    try:
        lines = fib_trie.read_text().splitlines()
    except OSError:
        lines = []
    for previous, line in itertools.pairwise(lines):
        if line.strip() == "/32 host LOCAL":
            try:
                local = ipaddress.ip_address(previous.split()[-1])
            except ValueError:
                continue
            if not (local.is_loopback or local in ipaddress.ip_network("0.0.0.0/8")):
                found.append(str(local))
    try:
        for line in if_inet6.read_text().splitlines():
            raw = line.split()[0] if line.split() else ""
            if len(raw) == 32:
                address = ipaddress.IPv6Address(int(raw, 16))
                if not address.is_loopback and not address.is_link_local:
                    found.append(str(address))
    except (OSError, ValueError):
        pass
    return tuple(dict.fromkeys(found))


def _with_dns(spec: SandboxSpec) -> SandboxSpec:
    """``spec`` with upstream DNS servers (Docker's embedded DNS on user-defined networks
    must not be the upstream, so the resolver gets the servers Docker itself would use)
    and the engine host's addresses to close: all of this machine's for an engine on it,
    those its name resolves to for an ``ssh://`` or ``tcp://`` engine (loopback ones
    are closed anyway)."""
    import dataclasses

    from git_iterare.sandbox.engine import current

    policy = spec.policy
    if not policy.dns:
        policy = dataclasses.replace(policy, dns=host_dns_servers())
    engine = current()
    own = host_addresses() if engine.url.startswith("unix://") else tuple(
        a for a in engine.network_addresses() if not ipaddress.ip_address(a).is_loopback)
    if own:
        policy = dataclasses.replace(policy, hosts=tuple(dict.fromkeys((*policy.hosts, *own))))
    return dataclasses.replace(spec, policy=policy)


def _close_stream(stream: Any) -> None:
    """Close a followed log stream the caller stops reading: it holds a connection (an ssh
    channel on an ``ssh://`` engine, of which sshd allows 10 per connection) until closed.
    docker-py cannot cancel ssh streams (``close`` raises), so their response is closed."""
    try:
        stream.close()
    except Exception:
        with contextlib.suppress(Exception):
            stream._response.close()


class _SidecarLog:
    """Follows a sidecar's output (in a thread) for the lines the host waits for.

    Args:
        container: the sidecar (a docker SDK container; only its id and name are used
            until something goes wrong).
    """

    def __init__(self, container: Any) -> None:
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


class DockerBackend:
    """Runs sandboxes on the Docker engine named by the environment (``DOCKER_HOST``)."""

    def begin(self, spec: SandboxSpec, start: bool = True) -> str:
        """Create (and with ``start``, start) the sandbox's network sidecar; return its id.

        The sidecar sets up the firewall as soon as it starts, and waits to give the run's
        trees (``spec.owned``, which need not exist yet) to the agent until :meth:`launch`
        says they are ready. Without ``start`` the caller starts it with
        :meth:`start_sidecar` (for instance while the worktree is made). A caller that
        gets no further removes it with :meth:`remove_sidecar`.

        Raises:
            UserError: the image does not exist, or the policy is too long to hand over
                (:data:`MAX_POLICY_BYTES`).
            OperationFailed: the engine is unreachable, the name is taken or it refused
                (then nothing is left behind).
        """
        spec = _with_dns(spec)
        environment = {"ITERARE_AGENT_UID": str(spec.agent_uid),
                       "ITERARE_AGENT_GID": str(spec.agent_gid),
                       # Not a secret (the record keeps it too); in the configuration it
                       # needs no call before the start.
                       "ITERARE_POLICY": policy_lines(spec)}
        sidecar = create_sidecar(spec, environment, name=f"{spec.name}-net",
                                 labels={**spec.all_labels(), LABEL_ROLE: "sidecar"})
        try:
            for extra in spec.networks:
                with docker_errors(f"attach the sandbox {spec.name} to {extra}"):
                    client().networks.get(extra).connect(sidecar)
            if start:
                with docker_errors(f"start the network sidecar of {spec.name}"):
                    sidecar.start()
        except BaseException:
            with docker_errors(f"remove {sidecar.name}"):
                sidecar.remove(force=True, v=True)
            raise
        return str(sidecar.id)

    def claim_spare(self, spec: SandboxSpec) -> str | None:
        """A spare sidecar (:mod:`git_iterare.sandbox.spare`), running, given ``spec``'s
        policy, trees and agent ids and named as its sidecar; its id, or None when none
        can serve ``spec``. Then it stands for :meth:`begin` and :meth:`start_sidecar`.

        Raises:
            UserError: the policy is too long to hand over (:data:`MAX_POLICY_BYTES`).
        """
        from git_iterare.sandbox import spare

        if not spare.usable(spec):
            return None
        return spare.claim(spec, lambda: claim_texts(spec),
                           lambda found: self.rename(found, f"{spec.name}-net"))

    def make_spare(self, spec: SandboxSpec, seconds: int) -> str | None:
        """Start a spare sidecar for sandboxes like ``spec`` (see
        :func:`git_iterare.sandbox.spare.make`)."""
        from git_iterare.sandbox import spare

        return spare.make(spec, seconds, create_sidecar) if spare.usable(spec) else None

    def rename(self, container_id: str, name: str) -> None:
        """Give a container a new name (a claimed spare its run's); best effort."""
        import docker.errors

        with contextlib.suppress(docker.errors.DockerException, OSError):
            client().api.rename(container_id, name)

    def start_sidecar(self, sidecar_id: str) -> None:
        """Start a sidecar :meth:`begin` made without starting it.

        Raises:
            OperationFailed: the engine refused (a missing network, say).
        """
        with docker_errors(f"start the network sidecar {sidecar_id[:12]}"):
            client().api.start(sidecar_id)

    def remove_sidecar(self, sidecar_id: str) -> None:
        """Remove a sidecar made by :meth:`begin` that never got its agent."""
        import docker.errors

        with docker_errors(f"remove the network sidecar {sidecar_id[:12]}"), \
                contextlib.suppress(docker.errors.NotFound):
            client().containers.get(sidecar_id).remove(force=True, v=True)

    def create_agent(self, spec: SandboxSpec, sidecar_id: str) -> str:
        """Create the agent's container (not started) in the namespace of the sidecar
        ``sidecar_id``, with its files put in (:func:`agent_files`); return its id.

        Its mounts' sources must exist (Docker checks them when it creates a container),
        but the trees need not be checked out yet: the container starts only in
        :meth:`launch`. Made this way while the worktree is checked out.

        Raises:
            UserError: the image does not exist.
            OperationFailed: the engine is unreachable, the name is taken or it refused
                (then nothing is left behind).
        """
        from docker.types import LogConfig
        from docker.types import Mount as DockerMount

        if spec.remote is not None:
            from git_iterare.sandbox.remote import agent_mounts

            mounts = agent_mounts(spec.remote)
        else:
            mounts = [DockerMount(m.container_path, str(Path(m.host_path).resolve()),
                                  type="bind", read_only=m.read_only)
                      for m in spec.mounts]
        env = {**spec.env, "HOME": AGENT_HOME, "USER": "agent", "LOGNAME": "agent"}
        if spec.ca_bundle is not None:
            env.update(NODE_EXTRA_CA_CERTS=CA_PATH, GIT_SSL_CAINFO=CA_PATH,
                       CURL_CA_BUNDLE=CA_PATH)
        with docker_errors(f"create the sandbox {spec.name}"):
            agent = client().containers.create(
                spec.image, command=list(spec.command), name=spec.name,
                entrypoint=["/bin/sh", AGENT_START],
                user=f"{spec.agent_uid}:{spec.agent_gid}", working_dir=spec.workdir,
                labels={**spec.all_labels(), LABEL_ROLE: "agent", LABEL_SIDECAR: sidecar_id},
                environment=env, mounts=mounts, network_mode=f"container:{sidecar_id}",
                cap_drop=["ALL"], security_opt=["no-new-privileges:true"], init=True,
                tty=spec.tty, stdin_open=spec.stdin, log_config=LogConfig(**LOG_CONFIG),
                detach=True, **_limits(spec))
        try:
            with docker_errors(f"prepare the sandbox {spec.name}"):
                passwd, group = _image_accounts(agent, spec.image)
                agent.put_archive("/", agent_files(spec, passwd, group))
        except BaseException:
            _drop(agent)
            raise
        return str(agent.id)

    def launch(self, spec: SandboxSpec, sidecar_id: str | None = None,
               sidecar_started: Any = None,
               trees_ready: Callable[[], object] | None = None,
               agent_id: str | None = None) -> str:
        """Start the sandbox described by ``spec``; return the id of the agent's container.

        Args:
            spec: the sandbox; its trees (``owned``) and mounts must exist now, except a
                remote run's, whose content may still be going in (``trees_ready``).
            sidecar_id: the sidecar :meth:`begin` made for it; None to make it here.
            sidecar_started: when the sidecar is being started elsewhere, a
                ``concurrent.futures.Future`` of that start; the agent's container is
                prepared meanwhile, and started only after it (and the sidecar's firewall).
            trees_ready: called once the agent's container is made, before it starts:
                returns when a remote run's files are in its volumes, raises when they
                cannot be.
            agent_id: the agent's container :meth:`create_agent` made in ``sidecar_id``'s
                namespace; None to make it here. Removed, as all this makes, when the
                sandbox does not start.

        With ``spec.tty`` the agent's container is left created, for the caller to start
        with the terminal attached (``docker start --attach --interactive``), so none of
        its first output is lost.

        Raises:
            UserError: an image does not exist.
            OperationFailed: the engine is unreachable, a name is taken, it refused, or the
                sidecar could not set up the firewall (then nothing is left behind, the
                sidecar included).
        """
        # The policy matters to the sidecar only: begin() completes it (_with_dns).
        docker = client()
        created: list[Any] = []
        try:
            if sidecar_id is None:
                sidecar_id = self.begin(spec)
            # No inspect: while the sidecar is starting the engine would answer only
            # after its start.
            sidecar = docker.containers.prepare_model({"Id": sidecar_id,
                                                       "Name": f"/{spec.name}-net"})
            created.append(sidecar)
            if agent_id is None:
                agent_id = self.create_agent(spec, sidecar.id)
            agent = docker.containers.prepare_model({"Id": agent_id, "Name": f"/{spec.name}"})
            created.append(agent)
            if trees_ready is not None:
                trees_ready()
            if sidecar_started is not None:
                sidecar_started.result()  # a spare's signal folder is the run's once claimed
            # The trees are ready: the sidecar may hand them to the agent's uid (a remote
            # one sees that in them: remote.SHIPPED).
            if spec.remote is None:
                (spec.signal_dir() / "go").touch(mode=0o600)
            # The agent's container starts once the sidecar has locked the namespace,
            # while it still sets up the firewall and hands over the trees: nothing gets
            # in or out until then, the trees are not yet the agent's uid's, and the
            # container waits for the sandbox to be ready before it runs the agent's
            # command (container/agent-start). Its working folder is entered as root
            # by the engine, so it may start before the trees are its own.
            log, deadline = _SidecarLog(sidecar), time.monotonic() + READY_TIMEOUT
            log.wait_for(LOCKED_LINE, deadline)
            if not spec.tty:
                with docker_errors(f"start the sandbox {spec.name}"):
                    agent.start()
            log.wait_for(READY_LINE, deadline)
        except BaseException:
            # Nobody learns the id of a sandbox that did not start: leave nothing behind.
            for container in reversed(created):
                _drop(container)
            raise
        return str(agent.id)

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
            # Inside: a connection that drops while following is one line too.
            yield from split_lines(stream)

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
        """SIGTERM to the agent (Docker's init passes it on), SIGKILL after
        ``grace_seconds``. The sidecar stays until :meth:`remove`."""
        with docker_errors(f"stop the sandbox {container_id[:12]}"):
            client().containers.get(container_id).stop(timeout=max(0, round(grace_seconds)))

    def _sidecar(self, container_id: str) -> Any:
        """The sidecar of an agent's container (by label, else by name), or None."""
        import docker.errors

        engine = client()
        try:
            agent = engine.containers.get(container_id)
            ref = (agent.labels or {}).get(LABEL_SIDECAR) or f"{agent.name}-net"
        except docker.errors.NotFound:
            ref = f"{container_id}-net"
        try:
            sidecar = engine.containers.get(ref)
        except docker.errors.NotFound:
            return None
        return sidecar if (sidecar.labels or {}).get(LABEL_ROLE) == "sidecar" else None

    def reclaim(self, container_id: str, trees: Sequence[Path], uid: int, gid: int,
                image: str, out_dir: Path | None = None) -> list[str]:
        """After the agent ended: record the refused connections, then strip set-uid and
        set-gid bits and special files from ``trees`` and give them to ``uid``:``gid``.

        Runs in the sandbox's sidecar while it is up; otherwise in a new container from
        ``image`` (git-iterare's own) that mounts ``trees`` and is removed afterwards.

        Args:
            container_id: the agent's container id or name.
            trees: host paths the agent owned (worktree, run gitdir, gitfile); missing
                ones are skipped.
            uid: owner to give them to (the user running git iterare).
            gid: its group.
            image: git-iterare's own image, for when the sidecar is gone.
            out_dir: the sidecar's host output folder (which it made root's), given back
                too when the sidecar is gone; None to leave it.

        Returns:
            Notes to show the user (special files removed), at most 100.

        Raises:
            OperationFailed: the engine refused, or the trees could not be given back.
        """

        sidecar = self._sidecar(container_id)
        argv = [SIDECAR, "reclaim", str(uid), str(gid)]
        with docker_errors(f"give the trees of {container_id[:24]} back"):
            if sidecar is not None and sidecar.status == "running":
                sidecar.exec_run([SIDECAR, "report"], user="0:0")
                code, output = sidecar.exec_run(argv, user="0:0")
            else:
                present = [p for p in trees if Path(p).exists()]
                out_dir = out_dir if out_dir is not None and out_dir.is_dir() else None
                if not present and out_dir is None:
                    return []
                mounts, names = tree_mounts(present)
                if out_dir is not None:
                    mounts.append(_bind(OUT_PATH, out_dir, read_only=False))
                helper = client().containers.create(
                    image, command=argv[1:], entrypoint=[SIDECAR], user="0:0",
                    environment={"ITERARE_TREES": names},
                    mounts=mounts, network_mode="none", cap_drop=["ALL"],
                    cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER"],
                    security_opt=["no-new-privileges:true"], labels={LABEL_ROLE: "reclaim"},
                    detach=True)
                try:
                    helper.start()
                    code = int(helper.wait(timeout=600).get("StatusCode", -1))
                    output = helper.logs(stdout=True, stderr=True)
                finally:
                    helper.remove(force=True, v=True)
        text = bytes(output or b"").decode("utf-8", "replace")
        if code != 0:
            raise OperationFailed(f"could not give the run's files back to uid {uid} "
                                  f"(status {code}): {text.strip()[-300:]}")
        return [line for line in text.splitlines() if line.strip()][:100]

    def remove(self, container_id: str) -> None:
        """Remove the agent's container and its sidecar (the sidecar is stopped first so
        it records the refused connections); missing is not an error."""
        import docker.errors

        sidecar = self._sidecar(container_id)
        with docker_errors(f"remove the sandbox {container_id[:12]}"):
            with contextlib.suppress(docker.errors.NotFound):
                client().containers.get(container_id).remove(force=True, v=True)
            if sidecar is not None:
                if sidecar.status == "running":
                    sidecar.exec_run([SIDECAR, "report"], user="0:0")
                sidecar.remove(force=True, v=True)

    def inspect(self, container_id: str) -> ContainerInfo | None:
        """State, exit status and labels; None when there is no such container."""
        import docker.errors

        with docker_errors(f"inspect the sandbox {container_id[:12]}"):
            try:
                return _info(client().containers.get(container_id))
            except docker.errors.NotFound:
                return None

    def list_sandboxes(self, repo_path: str | None = None) -> list[ContainerInfo]:
        """Every git-iterare agent container, or those of the repository at ``repo_path``."""
        label = f"{LABEL_REPO}={repo_path}" if repo_path is not None else LABEL_RUN
        with docker_errors("list sandboxes"):
            found = client().containers.list(all=True, filters={"label": label})
        return [_info(c) for c in found
                if (c.labels or {}).get(LABEL_ROLE, "agent") == "agent"]

