"""The Docker Swarm backend: a run's agent is a one-task service on any node.

A swarm has no pods: a service cannot join another container's network namespace, so
the network sidecar of :mod:`git_iterare.sandbox.docker_backend` cannot hold the agent's.
A sandbox on a swarm is instead, all of it labelled with its run:

* ``<name>-run``, an overlay network of its own, ``internal`` (no gateway, no way out)
  and attachable (plain containers of the manager join it);
* the egress ``<name>-net`` on the manager: git-iterare's own image running the network
  sidecar as an egress (``ITERARE_PROXY_PORT``: resolver, firewall, its self-check and
  :mod:`git_iterare.sandbox.egress_proxy`), on the engine's network and on the run's as
  ``egress``. It also hands the run's volumes to the agent's uid, as for remote engines;
* the tree server ``<name>-trees`` on the manager: git-iterare's image as the agent's uid,
  with no capabilities, over the run's volumes (``container/engine-checkout`` checks the
  base out first), on the run's network alone as ``trees``
  (:mod:`git_iterare.sandbox.tree_server`);
* the agent's service ``<name>``: one replica that is never restarted (a
  ``replicated-job`` would do the same, but Docker 20.10 leaves an ended job's container
  and volumes on its node after the service is removed, where a replicated service's go
  with it), one task of the agent's image, by digest from the
  registry the nodes pull from, as the agent's uid with no capabilities, its trees on
  tmpfs mounts it gets from the tree server and gives back (``container/swarm-start``),
  its files as swarm configs (root's, read-only) and its credentials as swarm secrets
  (the agent's, 0400), the run's limits as both reservations (a full swarm queues the
  run) and limits. It reaches the allowlist only through the egress, as a proxy's client.
  API 1.41 has no no-new-privileges for a task, so the task's first program is
  git-iterare's own ``iterare-nnp`` (``container/nnp.c``, read from git-iterare's image
  and given as a config): it sets the no_new_privs bit, which nothing started after it can
  clear, then runs the image's shell.

The client speaks to the manager's Engine API alone (API 1.41; ``endpoint_mode``
``dnsrr``, as no routing mesh is needed). The egress and the tree server join the run's
network as plain containers of the manager, so the manager's availability must not be
``drain`` (a drained node takes no network attachments); keep runs off it with
``swarm.constraints`` such as ``node.role==worker``. A run's handle is
its service's name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from git_iterare.errors import OperationFailed, UserError
from git_iterare.sandbox.docker_errors import docker_errors
from git_iterare.sandbox.dockertypes import Json, field, text
from git_iterare.sandbox.engine import SwarmTarget
from git_iterare.sandbox.engine_client import client
from git_iterare.sandbox.spec import (
    AGENT_HOME,
    CA_PATH,
    CACHE_PATH,
    GITDIR_PATH,
    LABEL_REPO,
    LABEL_ROLE,
    LABEL_RUN,
    WORK_PATH,
    ContainerInfo,
    SandboxSpec,
    memory_bytes,
)
from git_iterare.timings import phase

#: The egress's proxy port on the run's network.
PROXY_PORT = 3128
#: The tree server's port on the run's network.
TREES_PORT = 8080
#: Where git-iterare's image has ``iterare-nnp`` (``container/nnp.c``), and where the
#: agent's task has it (a config, root's, 0555).
NNP_IN_IMAGE = "/usr/local/lib/iterare/nnp"
NNP_PATH = "/run/iterare/nnp"
#: The only upstream resolver of the task's embedded DNS (127.0.0.11), an address of
#: TEST-NET-1 (RFC 5737) the task has no route to: names other than the run's own
#: (``egress``, ``trees``) then resolve nowhere. Without it, engines before 23.0.11,
#: 25.0.5 and 26.0.0 forward such queries from the node's own namespace when the node's
#: resolver is on loopback, a way out of an internal network (CVE-2024-29018).
NO_UPSTREAM_DNS = "192.0.2.53"
#: Where git-iterare's image has the tree server (:mod:`git_iterare.sandbox.tree_server`).
TREE_SERVER = "/usr/local/lib/iterare/tree-server"
#: In the tree server's container: ``git iterare stop`` writes the agent's grace seconds
#: there (:func:`git_iterare.sandbox.tree_server.stop_answer`).
STOP_FILE = "/tmp/iterare-stop"
#: Seconds a task the engine stops has to give its work back (swarm-start uploads it)
#: before the engine kills it.
STOP_GRACE_SECONDS = 60
#: Seconds beyond its grace a stopped agent's task has to upload its work and end.
ASKED_SLACK_SECONDS = 15
#: Task states of a task that has not started, and of one that ended (Docker's
#: ``TaskState``, https://docs.docker.com/engine/api/v1.41/#tag/Task).
WAITING = frozenset({"new", "allocated", "pending", "assigned", "accepted", "ready",
                     "preparing", "starting"})
ENDED = frozenset({"complete", "failed", "shutdown", "rejected", "orphaned", "remove"})
#: How often a task's state is asked for, in seconds.
POLL_SECONDS = 0.5
#: Longest name of a swarm service or network (swarmkit's rule for a DNS name component),
#: less the ``-run`` of the run's network.
MAX_SERVICE_NAME = 63 - len("-run")


def service_name(name: str) -> str:
    """The swarm service name of the sandbox ``name`` (``iterare-<run id>``): the same
    with each ``.`` as ``-`` (a service or network name is a DNS name component:
    letters, digits, ``-`` and ``_``), and a long one cut in its middle to
    :data:`MAX_SERVICE_NAME` characters, its end (the run id's 8 hex) kept. Idempotent, so
    the engine-neutral code may pass either the sandbox's name or the handle
    :meth:`SwarmBackend.start` returned."""
    name = name.replace(".", "-")
    if len(name) <= MAX_SERVICE_NAME:
        return name
    return name[:MAX_SERVICE_NAME - 9] + name[-9:]


@dataclass(frozen=True)
class TaskPlace:
    """Where a run's task is (:meth:`SwarmBackend.task_place`).

    Attributes:
        node_id: the swarm node id of the node it was given, or "".
        node: that node's host name, or "".
        state: its task state (``pending``, ``running``, ``complete``...), or "".
        error: the swarm's reason for its state (``Status.Err``), or "".
    """

    node_id: str = ""
    node: str = ""
    state: str = ""
    error: str = ""


def _api() -> Any:
    """The low-level client of the manager (swarm calls are not in the typed subset of
    :mod:`git_iterare.sandbox.dockertypes`)."""
    return client().api


def manager_problem() -> tuple[str, str] | None:
    """Why the current engine cannot take swarm runs and what to do (a hint), or None
    when it is a swarm's manager (``Swarm.ControlAvailable`` of ``GET /info``) that is
    not drained (a drained node takes no network attachments, and the egress and tree
    server need one).

    Raises:
        OperationFailed: the engine cannot be reached.
    """
    from git_iterare.sandbox.engine import current

    with docker_errors("ask the Docker engine about its swarm"):
        info = _api().info()
    swarm = info.get("Swarm") if isinstance(info, dict) else None
    state = text(swarm, "LocalNodeState") or "inactive"
    where = dataclasses.replace(current(), swarm=None).label
    if field(swarm, "ControlAvailable") is True:
        node = text(swarm, "NodeID")
        with docker_errors("ask the swarm about its manager"):
            availability = text(_api().inspect_node(node), "Spec", "Availability")
        if availability == "drain":
            return (f"the swarm manager at {where} is drained, and each run's egress and "
                    "tree server run on it",
                    "make it active (`docker node update --availability active`), and keep "
                    'runs on the workers with swarm.constraints = ["node.role==worker"]')
        return None
    hint = "select the manager's engine (DOCKER_HOST, --context), or set swarm.enabled = false"
    if state == "active":
        return f"the Docker engine at {where} is a swarm worker, not a manager", hint
    return f"the Docker engine at {where} is in no swarm (its swarm state: {state})", hint


def publish(image: str, registry: str, progress: Callable[[str], None] = lambda line: None
            ) -> str:
    """Push ``image`` (a name or id on the manager) to ``registry`` and return the
    reference the nodes pull it by, ``REGISTRY/git-iterare/run@sha256:...``.

    The push goes from the manager's engine (its ``--insecure-registry`` and
    credentials apply); layers the registry has are not sent again.

    Raises:
        OperationFailed: the engine refused or the registry cannot be reached or refused.
    """
    api = _api()
    with docker_errors(f"inspect the image {image}"):
        image_id = str(api.inspect_image(image)["Id"])
    repository, tag = f"{registry}/git-iterare/run", image_id.split(":")[-1][:20]
    with docker_errors(f"tag the image for {registry}"):
        api.tag(image_id, repository, tag)
    digest = ""
    error = ""
    with docker_errors(f"push the image to {registry}"):
        for event in api.push(repository, tag, stream=True, decode=True):
            if not isinstance(event, dict):
                continue
            if event.get("error"):
                error = str(event["error"])
            found = field(event, "aux", "Digest")
            if isinstance(found, str) and found.startswith("sha256:"):
                digest = found
            if event.get("status") == "Pushing" and event.get("progress"):
                progress(f"pushing to {registry}: {event['progress']}")
    if error or not digest:
        from git_iterare.ui import sanitize

        raise OperationFailed(f"cannot push the run's image to the registry {registry}: "
                              f"{sanitize(error or 'it gave no digest')}",
                              hint="check swarm.registry and that the manager's engine "
                                   "may push there (--insecure-registry for plain HTTP)")
    return f"{repository}@{digest}"


def _overlay(name: str, labels: Mapping[str, str]) -> str:
    """Make the run's internal overlay network; return its subnet (CIDR)."""
    api = _api()
    with docker_errors(f"create the network {name}"):
        made = api.create_network(name, driver="overlay", internal=True, attachable=True,
                                  labels=dict(labels), check_duplicate=True)
    # The manager may allocate the subnet a moment after it answered the creation.
    deadline = time.monotonic() + 20
    while True:
        with docker_errors(f"inspect the network {name}"):
            configs = field(api.inspect_network(made["Id"]), "IPAM", "Config")
        subnet = text(configs[0], "Subnet") if isinstance(configs, list) and configs else ""
        if subnet:
            return subnet
        if time.monotonic() > deadline:
            raise OperationFailed(f"the swarm gave the network {name} no subnet")
        time.sleep(POLL_SECONDS)


def _agent_env(spec: SandboxSpec, snapshot_seconds: int) -> dict[str, str]:
    """The agent task's environment: the spec's, the proxy, the tree server and how
    often ``swarm-start`` gives the work back."""
    from git_iterare.sandbox.sidecar import READY_TIMEOUT

    proxy = f"http://egress:{PROXY_PORT}"
    env = {**spec.env, "HOME": AGENT_HOME, "USER": "agent", "LOGNAME": "agent",
           "ITERARE_NETWORK": "egress", "ITERARE_TREES_HOST": "trees",
           "ITERARE_TREES_PORT": str(TREES_PORT),
           "ITERARE_SNAPSHOT_SECONDS": str(snapshot_seconds),
           # The tree server is ready once the egress is.
           "ITERARE_TREES_WAIT": str(int(READY_TIMEOUT) + 60),
           "NO_PROXY": "trees,localhost,127.0.0.1", "no_proxy": "trees,localhost,127.0.0.1"}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env[name] = proxy
    if spec.ca_bundle is not None:
        env.update(NODE_EXTRA_CA_CERTS=CA_PATH, GIT_SSL_CAINFO=CA_PATH, CURL_CA_BUNDLE=CA_PATH)
    return env


class _Objects:
    """The swarm configs and secrets of one run, made as the agent's files."""

    def __init__(self, labels: Mapping[str, str], prefix: str) -> None:
        self.labels = dict(labels)
        self.prefix = prefix
        self.configs: list[Json] = []
        self.secrets: list[Json] = []
        self.count = 0

    def add(self, path: str, data: bytes, uid: int, gid: int, mode: int, *,
            secret: bool) -> None:
        """One file at ``path`` in the agent's container (a secret or a config)."""
        self.count += 1
        name = f"{self.prefix}-{'s' if secret else 'c'}{self.count}"
        api = _api()
        with docker_errors(f"create the swarm {'secret' if secret else 'config'} {name}"):
            made = (api.create_secret(name, data, labels=self.labels) if secret
                    else api.create_config(name, data, labels=self.labels))
        ref = {"File": {"Name": path, "UID": str(uid), "GID": str(gid), "Mode": mode},
               ("SecretID" if secret else "ConfigID"): made["ID"],
               ("SecretName" if secret else "ConfigName"): name}
        (self.secrets if secret else self.configs).append(ref)


def _agent_objects(spec: SandboxSpec, service: str, passwd: bytes, group: bytes
                   ) -> _Objects:
    """The agent's files as swarm objects (:func:`~git_iterare.sandbox.accounts.agent_file_list`):
    secrets for the credentials, configs for the rest."""
    from git_iterare.sandbox.accounts import agent_file_list

    made = _Objects(spec.all_labels(), service)
    for item in agent_file_list(spec, passwd, group):
        made.add(item.path, item.data, item.uid, item.gid, item.mode, secret=item.secret)
    return made


def _accounts(image: str) -> tuple[bytes, bytes]:
    """``/etc/passwd`` and ``/etc/group`` of ``image`` (on the manager: built there)."""
    from git_iterare.sandbox.accounts import image_accounts

    with docker_errors(f"read the accounts of {image}"):
        made = client().containers.create(image, command=["true"], entrypoint=[],
                                          network_mode="none")
    try:
        with docker_errors(f"read the accounts of {image}"):
            return image_accounts(made, image)
    finally:
        with contextlib.suppress(Exception):
            made.remove(force=True)


def _launcher(egress: Any) -> bytes:
    """``iterare-nnp`` of git-iterare's image, read from the run's egress container.

    Raises:
        OperationFailed: the image has none (one built before it had), or the engine
            cannot be reached.
    """
    from git_iterare.sandbox.accounts import read_created_file

    with docker_errors("read iterare-nnp from git-iterare's image"):
        found = read_created_file(egress, NNP_IN_IMAGE)
    if not found:
        raise OperationFailed(f"git-iterare's image on the swarm manager has no "
                              f"{NNP_IN_IMAGE}", hint="rebuild it: `git iterare image build`")
    return found


def _max_result(spec: SandboxSpec) -> int:
    """The tree server's upload limit, in bytes: twice the task's tmpfs size (its memory
    limit), at most :data:`~git_iterare.sandbox.tree_server.DEFAULT_MAX_RESULT_BYTES`."""
    from git_iterare.sandbox.tree_server import DEFAULT_MAX_RESULT_BYTES

    size = memory_bytes(spec.limits.memory) if spec.limits.memory else 4 << 30
    return min(DEFAULT_MAX_RESULT_BYTES, 2 * size)


def _tree_server(spec: SandboxSpec, service: str, network: str, labels: Mapping[str, str]
                 ) -> Any:
    """Create and start the run's tree server ``<service>-trees`` on the manager (see the
    module docstring)."""
    from git_iterare.sandbox.accounts import container_file
    from git_iterare.sandbox.sidecar import SIDECAR_MEMORY, SIDECAR_PIDS

    assert spec.volumes is not None
    trees = spec.volumes
    script = container_file("engine-checkout").decode("utf-8")
    mounts = [{"Target": WORK_PATH, "Source": trees.work, "Type": "volume"},
              {"Target": GITDIR_PATH, "Source": trees.git, "Type": "volume"},
              {"Target": CACHE_PATH, "Source": trees.cache, "Type": "volume",
               "ReadOnly": True}]
    config = {
        "Image": spec.sidecar_image, "User": f"{spec.agent_uid}:{spec.agent_gid}",
        "Entrypoint": ["/bin/sh", "-c", script, "engine-checkout"],
        "Cmd": ["agent", "python3", TREE_SERVER, str(TREES_PORT)],
        "WorkingDir": WORK_PATH, "Labels": {**labels, LABEL_ROLE: "trees"},
        # What the task can hold (two trees on tmpfs as large as its memory) and no more
        # lands on the manager's disk.
        "Env": [f"ITERARE_MAX_RESULT_BYTES={_max_result(spec)}",
                f"ITERARE_TREES_AFTER=egress:{PROXY_PORT}"],
        "HostConfig": {"Mounts": mounts, "NetworkMode": network, "CapDrop": ["ALL"],
                       "SecurityOpt": ["no-new-privileges:true"],
                       "Memory": SIDECAR_MEMORY, "PidsLimit": SIDECAR_PIDS},
        "NetworkingConfig": {"EndpointsConfig": {network: {"Aliases": ["trees"]}}},
    }
    api = _api()
    name = f"{service}-trees"
    with docker_errors(f"create the tree server of {spec.name}"):
        made = api.create_container_from_config(config, name)
        api.start(made["Id"])
    return made["Id"]


def _task_template(spec: SandboxSpec, image: str, objects: _Objects,
                   target: SwarmTarget, network: str) -> Json:
    """The agent service's ``TaskTemplate`` (Engine API 1.41). Ports below 1024 stay
    closed to the agent (:data:`~git_iterare.sandbox.sidecar.SIDECAR_SYSCTLS`, as in a
    sidecar's namespace: Docker opens them to every uid by default)."""
    from git_iterare.sandbox.sidecar import SIDECAR_SYSCTLS

    size = memory_bytes(spec.limits.memory) if spec.limits.memory else 4 << 30
    ids = f"uid={spec.agent_uid},gid={spec.agent_gid}"
    # The trees must allow programs to run: tmpfs volumes of the node's local driver,
    # the agent's and 0700 (a tmpfs mount is noexec, and swarm 20.10 sets no owner). The
    # node keeps such a volume's (empty) entry after the task's container went; the
    # agent's home and /tmp are plain tmpfs mounts (0777: Go's mode has no 0o1000 bit).
    mounts: list[Json] = [
        {"Target": target, "Type": "volume", "VolumeOptions": {"DriverConfig": {
            "Name": "local", "Options": {"type": "tmpfs", "device": "tmpfs",
                                         "o": f"size={size},{ids},mode=0700,nosuid,nodev"}}}}
        for target in (WORK_PATH, "/git")]
    mounts += [{"Target": target, "Type": "tmpfs",
                "TmpfsOptions": {"SizeBytes": size, "Mode": 0o777}}
               for target in ("/tmp", AGENT_HOME)]
    resources: Json = {}
    if spec.limits.cpus:
        resources["NanoCPUs"] = int(spec.limits.cpus * 1e9)
    if spec.limits.memory:
        resources["MemoryBytes"] = memory_bytes(spec.limits.memory)
    limits = dict(resources)
    if spec.limits.pids:
        limits["Pids"] = spec.limits.pids
    return {
        "ContainerSpec": {
            "Image": image, "Command": [NNP_PATH, "/bin/sh", "/run/iterare/agent-start"],
            "Args": list(spec.command), "User": f"{spec.agent_uid}:{spec.agent_gid}",
            "Dir": spec.workdir,
            "Env": [f"{k}={v}" for k, v in _agent_env(spec, target.snapshot_seconds).items()],
            "Labels": {**spec.all_labels(), LABEL_ROLE: "agent"},
            "Mounts": mounts, "Configs": objects.configs, "Secrets": objects.secrets,
            "DNSConfig": {"Nameservers": [NO_UPSTREAM_DNS]},
            "CapabilityDrop": ["ALL"], "Init": True, "Sysctls": dict(SIDECAR_SYSCTLS),
            "StopGracePeriod": STOP_GRACE_SECONDS * 10**9,
            "Isolation": "default"},
        "Resources": {"Limits": limits, "Reservations": resources},
        "RestartPolicy": {"Condition": "none", "MaxAttempts": 0},
        "Placement": {"Constraints": list(target.constraints)},
        "Networks": [{"Target": network}],
        "LogDriver": {"Name": "json-file", "Options": {"max-size": "50m", "max-file": "2"}},
    }


def _node(node_id: str) -> Json | None:
    """The swarm's inspect answer of the node ``node_id``, or None when it has none.

    Raises:
        OperationFailed: the manager cannot be reached.
    """
    import docker.errors

    with docker_errors("ask the swarm about its nodes"):
        try:
            found = _api().inspect_node(node_id)
        except docker.errors.NotFound:
            return None
    return found if isinstance(found, dict) else None


def _task_error(task: Json | None) -> str:
    """The swarm's error line of ``task`` (its ``Status.Err``, at most 300 characters), or
    "" when it has none."""
    return text(task, "Status", "Err")[:300]


def _node_down(task: Json | None) -> bool:
    """Whether the node ``task`` was given to is down or gone (a dead machine: the swarm
    then still says the task runs); False for a task with no node yet."""
    node = text(task, "NodeID")
    if not node:
        return False
    found = _node(node)
    return found is None or text(found, "Status", "State") in ("down", "unknown",
                                                               "disconnected")


def _labelled(kind: str, run_id: str, repo_path: str) -> list[Json]:
    """The run's swarm objects of ``kind`` (``services``, ``configs``, ``secrets``,
    ``networks``) by its labels."""
    api = _api()
    filters = {"label": [f"{LABEL_RUN}={run_id}", f"{LABEL_REPO}={repo_path}"]}
    found = getattr(api, kind)(filters=filters)
    return [item for item in found or () if isinstance(item, dict)]


class SwarmBackend:
    """Runs sandboxes as services of the swarm the current engine manages
    (:attr:`git_iterare.sandbox.engine.Engine.swarm`)."""

    def start(self, spec: SandboxSpec, fill: Callable[[], object] | None = None) -> str:
        """Make the run's network, egress, tree server, files and service (see the module
        docstring); return the service's name. The service may wait in the swarm's queue
        until a node has room for its reservations.

        Raises:
            UserError: a terminal session (``spec.tty``, ``spec.stdin``), more networks
                (``spec.networks``), or the spec's trees are not in engine volumes.
            OperationFailed: the engine or the registry refused, or the egress could not
                set up the firewall (then nothing of the sandbox is left).
        """
        from git_iterare.sandbox.docker_backend import sidecar_environment
        from git_iterare.sandbox.engine import current
        from git_iterare.sandbox.sidecar import (
            LOCKED_LINE,
            READY_LINE,
            READY_TIMEOUT,
            SidecarLog,
            create_sidecar,
        )

        target = current().swarm
        if spec.tty or spec.stdin:
            raise UserError("interactive sessions do not run on a swarm (a service has no "
                            "terminal to attach to)",
                            hint="use a Docker engine for them: "
                                 "`git iterare --no-swarm interactive`")
        if spec.networks:
            raise UserError("--docker-network does not work on a swarm yet (the run's "
                            "egress joins the engine's network only)",
                            hint="drop it, or use a Docker engine: "
                                 "`git iterare --no-swarm execute`")
        if spec.volumes is None or target is None:
            raise UserError("a swarm run needs its trees in the manager's volumes")
        labels = spec.all_labels()
        name = service_name(spec.name)
        try:
            with phase("start.swarm.publish"):
                image = publish(spec.image, target.registry)
            network = f"{name}-run"
            with phase("start.swarm.overlay"):
                subnet = _overlay(network, labels)
            env = {**sidecar_environment(spec), "ITERARE_PROXY_PORT": str(PROXY_PORT),
                   "ITERARE_PROXY_FROM": subnet}
            with phase("start.swarm.egress"):
                egress = create_sidecar(spec, env, name=f"{spec.name}-net",
                                        labels={**labels, LABEL_ROLE: "sidecar"})
                with docker_errors(f"attach the egress of {spec.name} to {network}"):
                    _api().connect_container_to_network(egress.id, network,
                                                        aliases=["egress"])
                launcher = _launcher(egress)
            # The task is scheduled and its container started while the egress and the
            # tree server start: it waits for the tree server, whose GET /ready waits for
            # the egress's proxy (until then the task has no way out at all).
            with phase("start.swarm.files"):
                objects = _agent_objects(spec, name, *_accounts(spec.image))
                objects.add(NNP_PATH, launcher, 0, 0, 0o555, secret=False)
            with phase("start.swarm.service"), docker_errors(f"create the service {name}"):
                _api().create_service(
                    _task_template(spec, image, objects, target, network),
                    name=name, labels={**labels, LABEL_ROLE: "agent"},
                    mode={"Replicated": {"Replicas": 1}},
                    endpoint_spec={"Mode": "dnsrr"})
            with phase("start.swarm.egress-start"), \
                    docker_errors(f"start the egress of {spec.name}"):
                egress.start()
            if fill is not None:
                fill()
            with phase("start.swarm.tree-server"):
                _tree_server(spec, name, network, labels)
            with phase("start.swarm.egress-ready"):
                log, deadline = SidecarLog(egress), time.monotonic() + READY_TIMEOUT
                log.wait_for(LOCKED_LINE, deadline)
                log.wait_for(READY_LINE, deadline)
        except BaseException:
            with contextlib.suppress(Exception):
                self.remove(spec.run_id, spec.repo_path)
            raise
        return name

    def _task(self, service: str) -> Json | None:
        """The service's newest task, or None (none yet, or no such service)."""
        import docker.errors

        service = service_name(service)
        with docker_errors(f"ask the swarm about {service}"):
            try:
                tasks = _api().tasks(filters={"service": service})
            except docker.errors.NotFound:
                return None
        tasks = [t for t in tasks or () if isinstance(t, dict)]
        tasks.sort(key=lambda t: text(t, "CreatedAt"))
        return tasks[-1] if tasks else None

    def _service(self, service: str) -> Json | None:
        import docker.errors

        service = service_name(service)
        with docker_errors(f"ask the swarm about {service}"):
            try:
                found = _api().inspect_service(service)
            except docker.errors.NotFound:
                return None
        return found if isinstance(found, dict) else None

    def node_down(self, service: str) -> bool:
        """Whether the node the service's task was given to is down (a dead machine: the
        swarm then still says the task runs)."""
        return _node_down(self._task(service))

    def task_place(self, service: str) -> TaskPlace:
        """Where the service's task is: its node (none while it waits for one), its state
        and the swarm's reason (``no suitable node (...)`` while queued, a pull error).

        Raises:
            OperationFailed: the manager cannot be reached.
        """
        task = self._task(service)
        place = TaskPlace(state=text(task, "Status", "State"), error=_task_error(task))
        node = text(task, "NodeID")
        if not node:
            return place
        return dataclasses.replace(place, node_id=node,
                                   node=text(_node(node), "Description", "Hostname"))

    def inspect(self, container: str) -> ContainerInfo | None:
        """The run's state from its service and task: ``created`` while queued,
        ``running``, ``exited`` with the task's exit code once it ended (or its node is
        down); None when the service does not exist."""
        container = service_name(container)
        service = self._service(container)
        if service is None:
            return None
        task = self._task(container)
        state = text(task, "Status", "State") or "new"
        code = field(task, "Status", "ContainerStatus", "ExitCode")
        labels = field(service, "Spec", "Labels")
        image = text(service, "Spec", "TaskTemplate", "ContainerSpec", "Image")
        memory = field(service, "Spec", "TaskTemplate", "Resources", "Limits", "MemoryBytes")
        replicas = field(service, "Spec", "Mode", "Replicated", "Replicas")
        reason = None
        if replicas == 0 and (task is None or state in WAITING):  # stopped while queued
            shown, exit_code, started = "exited", -1, False
        elif state in WAITING:
            shown, exit_code, started = "created", None, False
        elif state in ENDED:
            shown, started = "exited", True
            if isinstance(code, int):
                exit_code = code
            else:
                exit_code = -1
                reason = _task_error(task) or f"the swarm marked its task {state}"
        elif _node_down(task):
            shown, exit_code, started = "exited", None, True
        else:
            shown, exit_code, started = "running", None, True
        return ContainerInfo(
            id=container, name=container, state=shown, exit_code=exit_code,
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict)
            else {}, image=image, ran_seconds=None,
            memory_bytes=memory if isinstance(memory, int) and memory > 0 else None,
            started=started, ended_at=None, reason=reason)

    def output(self, container: str, *, follow: bool = False) -> Iterator[bytes]:
        """The service's output as lines (bytes, newline kept), from the swarm's service
        logs; with ``follow`` until its task ended (a followed service log stays open
        after that)."""
        from git_iterare.loglimit import split_lines

        container = service_name(container)
        with docker_errors(f"read the output of {container}"):
            stream = _api().service_logs(container, stdout=True, stderr=True,
                                         follow=follow, details=False)
            if not follow:
                yield from split_lines(iter(stream))
                return
            yield from split_lines(self._until_ended(container, stream))

    def _until_ended(self, service: str, stream: Any) -> Iterator[bytes]:
        """Chunks of ``stream`` until the task ended and its last output came."""
        chunks: queue.Queue[bytes | None] = queue.Queue()

        def pump() -> None:
            with contextlib.suppress(Exception):
                for chunk in stream:
                    chunks.put(chunk)
            chunks.put(None)

        threading.Thread(target=pump, daemon=True, name="service-logs").start()
        ended_at: float | None = None
        while True:
            try:
                chunk = chunks.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if ended_at is None:
                    info = self.inspect(service)
                    if info is None or info.state == "exited":
                        ended_at = time.monotonic()
                elif time.monotonic() - ended_at > 2.0:  # its last lines came meanwhile
                    break
                continue
            if chunk is None:
                break
            yield chunk
        with contextlib.suppress(Exception):
            stream.close()

    def wait(self, container: str, timeout: float | None = None) -> int | None:
        """The task's exit status once it ended (-1 when the swarm says none, or its node
        is down); None when ``timeout`` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = self.inspect(container)
            if info is None:
                return -1
            if info.state == "exited":
                return info.exit_code if info.exit_code is not None else -1
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(POLL_SECONDS)

    def stop(self, container: str, grace_seconds: float = 10) -> None:
        """Stop the run's task and return once it ended. First the agent is asked: its
        task's ``swarm-start`` sees the tree server's stop file (it asks ``GET /stop``
        every 2 s), stops the agent (SIGTERM, SIGKILL after ``grace_seconds``), gives its
        work back and ends. A task that has not ended by then (the agent may have killed
        what was asking), or one still queued, is ended by the engine: its service is
        scaled to none, so the task gets SIGTERM (``swarm-start`` still gives the work
        back) and SIGKILL :data:`STOP_GRACE_SECONDS` later.

        Raises:
            OperationFailed: the manager cannot be reached or refused.
        """
        container = service_name(container)
        info = self.inspect(container)
        if info is None or info.state == "exited":
            return
        grace = min(3600, max(1, round(grace_seconds)))
        if (info.started and self._ask_to_stop(container, grace)
                and self.wait(container, grace + ASKED_SLACK_SECONDS) is not None):
            return
        from docker.types import ServiceMode

        service = self._service(container)
        version = field(service, "Version", "Index")
        with docker_errors(f"stop the service {container}"):
            _api().update_service(container, version=version,
                                  mode=ServiceMode("replicated", replicas=0),
                                  fetch_current_spec=True)
        self.wait(container, STOP_GRACE_SECONDS + ASKED_SLACK_SECONDS)

    def _ask_to_stop(self, service: str, grace: int) -> bool:
        """Write the stop file into the run's tree server; whether it could be."""
        from git_iterare.sandbox.volumes import exec_in, find_container

        trees = find_container(f"{service}-trees")
        if trees is None or trees.status != "running":
            return False
        code, _ = exec_in(trees, ["/bin/sh", "-c", f"echo {grace} > {STOP_FILE}"])
        return code == 0

    def reclaim(self, container: str, trees: Sequence[Path], uid: int, gid: int,
                image: str, out_dir: Path | None = None) -> list[str]:
        """Nothing: a swarm run's trees come back through its volumes (the placement
        fetches them inert)."""
        return []

    def again(self, container: str, *, name: str, role: str, command: Sequence[str],
              env: Mapping[str, str], files: Mapping[str, bytes],
              pristine: bool = False) -> str:
        """Refused: a loop's later rounds do not run on a swarm yet.

        Raises:
            OperationFailed: always.
        """
        raise OperationFailed("runs with --until do not run on a swarm yet",
                              hint="run the loop on a Docker engine (swarm.enabled = false)")

    def remove(self, run_id: str, repo_path: str) -> None:
        """Remove the run's service, then its containers on the manager (egress, tree
        server, porters), configs, secrets and network."""
        import docker.errors

        from git_iterare.sandbox.docker_backend import DockerBackend

        api = _api()
        with docker_errors(f"remove the swarm objects of {run_id}"):
            for service in _labelled("services", run_id, repo_path):
                with contextlib.suppress(docker.errors.NotFound):
                    api.remove_service(service["ID"])
        DockerBackend().remove(run_id, repo_path)
        with docker_errors(f"remove the swarm objects of {run_id}"):
            for kind, drop in (("configs", api.remove_config), ("secrets", api.remove_secret)):
                for item in _labelled(kind, run_id, repo_path):
                    _retry(functools.partial(drop, item["ID"]))
            for network in _labelled("networks", run_id, repo_path):
                _retry(functools.partial(api.remove_network, network["Id"]))

    def list_sandboxes(self, repo_path: str | None = None) -> list[ContainerInfo]:
        """Every run's service (of one repository when ``repo_path`` is given)."""
        filters = {"label": [f"{LABEL_REPO}={repo_path}"] if repo_path else [LABEL_RUN]}
        with docker_errors("list the swarm's services"):
            found = _api().services(filters=filters)
        infos = []
        for service in found or ():
            name = text(service, "Spec", "Name")
            info = self.inspect(name) if name else None
            if info is not None and info.labels.get(LABEL_ROLE) == "agent":
                infos.append(info)
        return infos


def _retry(call: Callable[[], object], seconds: float = STOP_GRACE_SECONDS + 30.0) -> None:
    """``call`` until the engine lets it through: a config, secret or network stays in
    use a while after its service is removed (the tasks end first)."""
    import docker.errors

    deadline = time.monotonic() + seconds
    while True:
        try:
            call()
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
