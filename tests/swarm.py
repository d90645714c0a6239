"""A real Docker Swarm for the tests: three Docker-in-Docker nodes (tests/engines.py) and
Debian's ``docker-registry`` on a Docker network of the lab's own.

Use the session fixture :func:`swarm` (listed in ``pytest_plugins`` by tests/conftest.py). It
starts once per session and everything it made (containers, their volumes, the network) is
removed at the end:

* the images ``ITERARE_TEST_DIND_IMAGE`` (tests/dind) and ``ITERARE_TEST_REGISTRY_IMAGE``
  (tests/registry, default ``iterare-test-registry:latest``) are built FROM
  ``ITERARE_TEST_BASE_IMAGE``; Docker's cache makes rebuilding quick;
* the registry serves plain HTTP on port 5000 of its address on the lab network; every node's
  dockerd has it as an ``--insecure-registry``;
* the manager stays active (a drained node takes no network attachments, which a run's
  egress and tree server need there); services keep to the workers with the constraint
  :data:`WORKERS_ONLY`;
* the kernel here has no IPVS and no ESP: services need ``endpoint_mode = dnsrr`` (no routing
  mesh, no published ports) and overlays cannot be encrypted.

The nodes are reached from this process over tcp+TLS on 127.0.0.1 (:class:`DindEngine`); the
nodes reach each other and the registry by their addresses on the lab network.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from tests import engines
from tests.engines import DindEngine

HERE = Path(__file__).parent
REGISTRY_DIR = HERE / "registry"
REGISTRY_IMAGE = os.environ.get("ITERARE_TEST_REGISTRY_IMAGE", "iterare-test-registry:latest")

#: Workers the session's swarm starts with.
WORKERS = 2
#: The Engine API version the swarm tests speak (Debian's docker.io 20.10).
API_VERSION = "1.41"
#: Longest wait for a node to join, be seen ``ready`` or ``down``, in seconds.
NODE_TIMEOUT = 90
#: The placement constraint that keeps a service off the manager.
WORKERS_ONLY = ("node.role==worker",)
#: Networks every node has of its own (not leftovers of a test).
DEFAULT_NETWORKS = frozenset({"bridge", "host", "none", "ingress", "docker_gwbridge"})

T = TypeVar("T")


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check,
                          env=engines.local_env())


def _address(container: str, network: str) -> str:
    """``container``'s IPv4 address on ``network`` (of the local engine)."""
    out = _docker("inspect", "-f",
                  f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}',
                  container).stdout.strip()
    if not out:
        raise RuntimeError(f"{container} has no address on {network}")
    return out


def _wait(what: str, done: Callable[[], T | None], timeout: float = NODE_TIMEOUT) -> T:
    """Poll ``done`` every 0.3 s until it returns something other than None or False.

    Raises:
        TimeoutError: not within ``timeout`` seconds (``what`` names it).
    """
    deadline = time.monotonic() + timeout
    while True:
        found = done()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"swarm lab: {what} not within {timeout:.0f} s")
        time.sleep(0.3)


def build_registry_image() -> str:
    """Build the registry image (cached by Docker); return its name."""
    _docker("build", "-q", "--build-arg", f"BASE={engines.BASE_IMAGE}", "-t", REGISTRY_IMAGE,
            str(REGISTRY_DIR))
    return REGISTRY_IMAGE


@dataclass
class SwarmLab:
    """A running swarm (see the module docstring).

    Attributes:
        manager: the manager node; its ``client()`` talks to the swarm's API.
        workers: the worker nodes still alive, in the order they joined.
        registry: ``HOST:PORT`` of the registry as the nodes reach it (plain HTTP).
        network: the lab's Docker network (of the local engine) the nodes and registry share.
        registry_container: the registry's container on the local engine.
        seed: the keys and certificates every node was started from (copied per node).
        dead: nodes ended by :meth:`kill_node` (their containers stay until the session ends).
        node_ids: each node's swarm node id, by container name.
        startup_seconds: the fixture's start-up, from the first build to all nodes ready.
        phases: the seconds of each part of the start-up (``images``, ``nodes``, ``swarm``:
            builds and seed, the nodes started in parallel, init and joins).
    """

    manager: DindEngine
    workers: list[DindEngine]
    registry: str
    network: str
    registry_container: str
    seed: Path
    dead: list[DindEngine] = field(default_factory=list)
    node_ids: dict[str, str] = field(default_factory=dict)
    startup_seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def nodes(self) -> list[DindEngine]:
        """Every live node, the manager first."""
        return [self.manager, *self.workers]

    def address(self, engine: DindEngine) -> str:
        """``engine``'s address on the lab network (what the other nodes reach it at)."""
        return _address(engine.container, self.network)

    def node_id(self, engine: DindEngine) -> str:
        """``engine``'s swarm node id (use it in ``node.id==`` constraints)."""
        return self.node_ids[engine.container]

    def node_state(self, engine: DindEngine) -> str:
        """``engine``'s node state as the manager sees it (``ready``, ``down``, ...)."""
        return str(self.manager.client().nodes.get(self.node_id(engine))
                   .attrs["Status"]["State"])

    def engine_of(self, node_id: str) -> DindEngine:
        """The node (live or dead) whose swarm node id is ``node_id``.

        Raises:
            KeyError: no node of this lab has it.
        """
        for engine in [*self.nodes, *self.dead]:
            if self.node_ids.get(engine.container) == node_id:
                return engine
        raise KeyError(node_id)

    def join(self, engine: DindEngine) -> None:
        """Join ``engine`` to the swarm as a worker; return when the manager sees it ready.

        Raises:
            TimeoutError: not seen ``ready`` within :data:`NODE_TIMEOUT` seconds.
        """
        token = self.manager.client().swarm.attrs["JoinTokens"]["Worker"]
        here = self.address(engine)
        engine.client().swarm.join(remote_addrs=[f"{self.address(self.manager)}:2377"],
                                   join_token=token, listen_addr=f"{here}:2377",
                                   advertise_addr=here)
        self.node_ids[engine.container] = _own_node_id(engine)
        _wait(f"{engine.container} ready", lambda: self.node_state(engine) == "ready")

    def add_worker(self) -> DindEngine:
        """Start a new node, join it as a worker and return it (it is in :attr:`workers`)."""
        engine = start_node(self.seed, self.network, self.registry)
        try:
            self.join(engine)
        except BaseException:
            engines.stop(engine.container)
            raise
        self.workers.append(engine)
        return engine

    def kill_node(self, engine: DindEngine) -> None:
        """End ``engine`` for good, as a machine that dies: its container is killed at once
        (SIGKILL: dockerd, containerd and every task with it; its address is gone from the
        network). It leaves :attr:`workers` for :attr:`dead`; the manager cannot be killed.
        The manager marks it ``down`` about 11-14 s later and keeps it in its node list; a
        task it ran stays ``running`` there (measured in tests/test_swarm_facts_e2e.py).

        Raises:
            ValueError: ``engine`` is the manager or not a live node of this lab.
        """
        if engine is self.manager or engine not in self.workers:
            raise ValueError(f"{engine.container} is not a live worker of this lab")
        _docker("kill", engine.container)
        self.workers.remove(engine)
        self.dead.append(engine)

    def push(self, local_image: str) -> str:
        """Copy ``local_image`` from the local engine into the registry, through the
        manager (``docker save | load`` into it, then a push from it); return the digest
        reference ``REGISTRY/NAME@sha256:...`` the nodes pull.

        Raises:
            RuntimeError: the registry refused the push (its message).
        """
        repository, _, tag = local_image.rsplit("/", 1)[-1].partition(":")
        tag = tag or "latest"
        inner = self.manager.client()
        self.manager.load_image(local_image)
        target = f"{self.registry}/{repository}"
        inner.images.get(local_image).tag(target, tag)
        digest = ""
        for line in inner.images.push(target, tag, stream=True, decode=True):
            if "error" in line:
                raise RuntimeError(f"push of {local_image} to {target}: {line['error']}")
            digest = line.get("aux", {}).get("Digest", digest)
        if not digest.startswith("sha256:"):
            raise RuntimeError(f"push of {local_image} to {target} gave no digest")
        return f"{target}@{digest}"

    def leftovers(self) -> list[str]:
        """What tests left behind, one readable line each: the swarm's services, secrets and
        configs, and on every live node its containers, volumes and networks other than
        :data:`DEFAULT_NETWORKS`. Empty when all is clean. The manager's records of tasks
        are not listed: those of removed replicated jobs stay for good (see :meth:`sweep`);
        nor are the nodes' tmpfs volumes of the local driver: a swarm run's task mounts its
        trees on two, and Docker 20.10 keeps their entries (empty: a tmpfs holds nothing
        once unmounted) after the task's container went, where the manager's API cannot
        reach them (a known limit of swarm runs, see :func:`tmpfs_volumes`)."""
        api = self.manager.client().api
        found = [f"service {s['Spec']['Name']}" for s in api.services()]
        found += [f"secret {s['Spec']['Name']}" for s in api.secrets()]
        found += [f"config {c['Spec']['Name']}" for c in api.configs()]
        for engine in self.nodes:
            node = engine.client().api
            where = engine.container
            found += [f"{where}: container {','.join(c['Names'])} ({c['State']})"
                      for c in node.containers(all=True)]
            found += [f"{where}: volume {v['Name']}"
                      for v in node.volumes().get("Volumes") or []
                      if not _tmpfs_volume(v)]
            found += [f"{where}: network {n['Name']}" for n in node.networks()
                      if n["Name"] not in DEFAULT_NETWORKS]
        return found

    def sweep(self) -> list[str]:
        """Remove, on every live node, the containers of services the swarm no longer has;
        return their names. Needed between tests: Debian's 20.10 keeps a removed
        replicated-job's task, and its exited container on the node, for good
        (moby/moby#42789, #44312), and only the node's own API removes that container."""
        services = {s["ID"] for s in self.manager.client().api.services()}
        swept: list[str] = []
        for engine in self.nodes:
            node = engine.client().api
            for container in node.containers(all=True):
                owner = container["Labels"].get("com.docker.swarm.service.id")
                if owner and owner not in services:
                    node.remove_container(container["Id"], force=True)
                    swept.append(container["Names"][0].lstrip("/"))
        return swept

    def remove(self) -> None:
        """Remove every container and volume of the lab, and its network."""
        for engine in [*self.nodes, *self.dead]:
            engines.stop(engine.container)
        _docker("rm", "-f", self.registry_container, check=False)
        _docker("network", "rm", self.network, check=False)


def _tmpfs_volume(volume: dict[str, object]) -> bool:
    options = volume.get("Options")
    return isinstance(options, dict) and options.get("type") == "tmpfs"


def tmpfs_volumes(lab: SwarmLab) -> list[str]:
    """The tmpfs volume entries :meth:`SwarmLab.leftovers` leaves out, by node."""
    return [f"{engine.container}: volume {v['Name']}" for engine in lab.nodes
            for v in engine.client().api.volumes().get("Volumes") or [] if _tmpfs_volume(v)]


def _own_node_id(engine: DindEngine) -> str:
    """``engine``'s swarm node id, asked of the node itself."""
    return str(engine.client().info()["Swarm"]["NodeID"])


def start_node(seed: Path, network: str, registry: str) -> DindEngine:
    """Start one DinD engine on ``network`` (not yet in a swarm) from a copy of ``seed``
    (each node writes its own ``known_hosts``), with ``registry`` (``HOST:PORT``) as an
    insecure registry; its container is ``iterare-swarmlab-node-<8 hex>``, its name on the
    network and hostname ``node-<6 hex>``."""
    tag = uuid.uuid4().hex[:6]
    own = seed.parent / f"{seed.name}-{tag}"
    shutil.copytree(seed, own)
    return engines.start(own, prefix="iterare-swarmlab-node", network=network,
                         alias=f"node-{tag}", dockerd_args=("--insecure-registry", registry))


def _parallel(*calls: Callable[[], T]) -> list[T]:
    """Run ``calls`` in threads; their results in order (the first failure is raised after
    all ended)."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error
        return [f.result() for f in futures]


def start_lab(seed: Path, workers: int = WORKERS) -> SwarmLab:
    """Build the images, start the network, registry and nodes, and form the swarm.

    Args:
        seed: an empty folder for the keys and certificates (see :func:`engines.make_seed`).
        workers: how many workers join.

    Raises:
        RuntimeError, TimeoutError: a part did not start; what started is removed then.
    """
    began = time.monotonic()
    _parallel(lambda: engines.make_seed(seed), engines.build_image, build_registry_image)
    built = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    network = f"iterare-swarmlab-{tag}"
    registry_container = f"iterare-swarmlab-registry-{tag}"
    _docker("network", "create", "--label", "dev.iterare.test=swarmlab", network)
    started: list[DindEngine] = []
    try:
        _docker("run", "-d", "--name", registry_container, "--label",
                "dev.iterare.test=swarmlab", "--network", network, "--network-alias",
                "registry", REGISTRY_IMAGE)
        registry = f"{_address(registry_container, network)}:5000"

        def node() -> DindEngine:
            made = start_node(seed, network, registry)
            started.append(made)
            return made

        manager, *rest = _parallel(*[node] * (1 + workers))
        up = time.monotonic()
        here = _address(manager.container, network)
        manager.client().swarm.init(advertise_addr=here, listen_addr=f"{here}:2377")
        lab = SwarmLab(manager=manager, workers=[], registry=registry, network=network,
                       registry_container=registry_container, seed=seed,
                       node_ids={manager.container: _own_node_id(manager)})
        _parallel(*[functools.partial(lab.join, worker) for worker in rest])
        lab.workers = list(rest)
    except BaseException:
        for engine in started:
            engines.stop(engine.container)
        _docker("rm", "-f", registry_container, check=False)
        _docker("network", "rm", network, check=False)
        raise
    now = time.monotonic()
    lab.startup_seconds = now - began
    lab.phases = {"images": built - began, "nodes": up - built, "swarm": now - up}
    return lab


@pytest.fixture(scope="session")
def swarm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwarmLab]:
    """The session's swarm lab (see the module docstring); its start-up time is printed
    (``-s`` or ``-rA``)."""
    seed = tmp_path_factory.mktemp("swarm-seed")
    seed.rmdir()  # make_seed makes it
    lab = start_lab(seed)
    print(f"\nswarm lab: manager + {len(lab.workers)} workers, registry {lab.registry}, "
          f"up in {lab.startup_seconds:.1f} s ("
          + ", ".join(f"{k} {v:.1f} s" for k, v in lab.phases.items()) + ")")
    try:
        yield lab
    finally:
        with contextlib.suppress(Exception):
            lab.remove()
